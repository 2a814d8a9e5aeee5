"""``detect_format`` remembers a CSV header's field names by line (a landing's nvidia-smi
files share one header): files with the same header and with others are told apart as
when each header was read on its own."""

from __future__ import annotations

import foreshock.ingest.detect as detect

SMI = (
    "timestamp, index, pci.bus_id, uuid, temperature.gpu, power.draw [W]\n2026/11/01 00:00:00.000, 0, x, y, 40, 100 W\n"
)


def test_headers_remembered_by_line_detect_as_read_alone(tmp_path):
    files = {
        "a/2026-11-01.csv": (SMI, "nvidia-smi"),
        "b/2026-11-01.csv": (SMI, "nvidia-smi"),
        "tickets.csv": ("ticket_id,unit_id,opened_at\nT1,u,2026-11-01T00:00:00Z\n", "tickets"),
        "samples.csv": ("unit_id,ts,metric,value\nu,2026-11-01T00:00:00Z,gpu_temp_c,40\n", "canonical"),
        "other.csv": ("a [x],b\n1,2\n", None),
    }
    detect._header_names.cache_clear()
    for name, (text, _) in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert {name: detect.detect_format(tmp_path / name) for name in files} == {n: f for n, (_, f) in files.items()}
    assert detect._header_names.cache_info().hits == 1  # the second nvidia-smi file's header
    assert detect._header_names("a [x], b [y] ,c") == ("a", "b", "c")
