"""Prometheus JSON matrices read whole-document (``prometheus_json._plain_matrix``) stage
the same rows, reasons and raw texts as the series-by-series loop, for plain documents and
for the odd ones it hands on to the loop (times that are floats, texts or beyond 64 bits,
values that are numbers, labels that are not texts, malformed samples)."""

from __future__ import annotations

import copy
import json

import pytest

import foreshock.ingest.parsers.prometheus_json as pj
from foreshock.config import load_config
from foreshock.ingest.context import IngestContext

SERIES = [
    {
        "metric": {"__name__": name, "gpu": str(g), "Hostname": f"gpu-node00{n}", "UUID": f"GPU-{n}{g}"},
        "values": [[1793491200 + 3600 * k, str(k * (g + 1))] for k in range(4)],
    }
    for name in ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_XID_ERRORS", "NOT_A_METRIC")
    for n in range(2)
    for g in range(2)
]


def _odd(change) -> list:
    series = copy.deepcopy(SERIES)
    change(series)
    return series


CASES = {
    "plain": SERIES,
    "float time": _odd(lambda s: s[1]["values"][2].__setitem__(0, 1793498400.25)),
    "text time": _odd(lambda s: s[1]["values"][2].__setitem__(0, "1793498400")),
    "true time": _odd(lambda s: s[1]["values"][2].__setitem__(0, True)),
    "time beyond 64 bits": _odd(lambda s: s[1]["values"][2].__setitem__(0, 2**64)),
    "number value": _odd(lambda s: s[2]["values"][0].__setitem__(1, 7)),
    "gpu label a number": _odd(lambda s: s[3]["metric"].__setitem__("gpu", 1)),
    "no hostname": _odd(lambda s: s[3]["metric"].pop("Hostname")),
    "sample of three": _odd(lambda s: s[0]["values"].__setitem__(1, [1, "2", 3])),
    "no values": _odd(lambda s: s[0].pop("values")),
    "labels a list": _odd(lambda s: s[4].__setitem__("metric", ["x"])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_plain_matrix_read_whole_is_read_as_series_by_series(tmp_path, monkeypatch, case):
    config = load_config(data_dir=tmp_path / "data").with_overrides({"ingest": {"timezone": "UTC"}})
    ctx = IngestContext.from_config(config)
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": CASES[case]}}))
    whole = pj.parse(path, ctx)
    monkeypatch.setattr(pj, "_plain_matrix", lambda result: None)
    by_series = pj.parse(path, ctx)
    assert whole.tables.keys() == by_series.tables.keys() == {"samples", "events"}
    for table, frame in whole.tables.items():
        assert frame.equals(by_series.tables[table]), table
        assert whole.raw_text(frame).equals(by_series.raw_text(frame)), table
    assert whole.tables["samples"].get_column("_reason").null_count() < whole.tables["samples"].height
