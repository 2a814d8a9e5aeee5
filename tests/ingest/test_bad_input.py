"""Bad input: every kind is quarantined (with file, line, field, reason, raw text) or the
file is rejected with a clear reason, and every good row next to it is still stored."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl
import pytest
from landing_files import SMI_FIELDS, START, smi_line, write_landing

from foreshock.config import load_config
from foreshock.ingest import ingest_path
from foreshock.lake.read import read_table

GOOD = [
    "gpu-node001-gpu0,2026-11-01T00:00:00Z,gpu_temp_c,41",
    "gpu-node001-gpu0,2026-11-01T00:10:00Z,gpu_temp_c,42",
    "gpu-node001-gpu1,2026-11-01T00:10:00Z,ecc_sbe_volatile_total,7",
]


def canonical(*bad: str) -> bytes:
    return ("unit_id,ts,metric,value\n" + "\n".join([*GOOD, *bad]) + "\n").encode()


def smi(*bad: str) -> bytes:
    lines = [SMI_FIELDS, smi_line(START, 0, 0, 1), *bad]
    return ("\n".join(lines) + "\n").encode()


def prom_json(value: str, t: float = START.timestamp()) -> bytes:
    good = [[START.timestamp(), "3"], [START.timestamp() + 600, "4"]]
    return json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [
                    {
                        "metric": {
                            "__name__": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                            "gpu": "0",
                            "Hostname": "gpu-node001",
                        },
                        "values": [*good, [t, value]],
                    }
                ],
            },
        }
    ).encode()


def truncated_parquet() -> bytes:
    buffer = io.BytesIO()
    pl.DataFrame(
        {
            "unit_id": ["gpu-node001-gpu0"] * 100,
            "ts": [START] * 100,
            "metric": ["gpu_temp_c"] * 100,
            "value": [1.0] * 100,
        }
    ).write_parquet(buffer)
    return buffer.getvalue()[:200]


@dataclass
class Case:
    name: str
    file: str
    content: bytes
    reason: str
    good_samples: int = 3
    field: str | None = None
    rejected: bool = False


CASES = [
    Case(
        "malformed line",
        "gpu-node001/2026-11-01.csv",
        smi("2026/11/01 00:20:00.000, 0, 00000000:3B:00.0"),
        "malformed line: expected 20 fields, got 3",
        13,
        "line",
    ),
    Case(
        "wrong type",
        "gpu-node001/2026-11-01.csv",
        smi(smi_line(START, 1, 0, 1).replace(", 41, 48,", ", hot, 48,")),
        "not a number: 'hot'",
        25,
        "temperature.gpu",
    ),
    Case(
        "reported error",
        "gpu-node001/2026-11-01.csv",
        smi(smi_line(START, 1, 0, 1).replace("251.00 W", "[Unknown Error]")),
        "nvidia-smi reported [Unknown Error]",
        25,
        "power.draw",
    ),
    Case("NaN", "replay.json", prom_json("NaN", START.timestamp() + 1200), "value is NaN", 2, "value"),
    Case("infinite", "replay.json", prom_json("+Inf", START.timestamp() + 1200), "value is infinite", 2, "value"),
    Case(
        "negative counter",
        "samples.csv",
        canonical("gpu-node001-gpu1,2026-11-01T00:20:00Z,ecc_sbe_volatile_total,-5"),
        "negative counter value -5",
        field="value",
    ),
    Case(
        "absurd value",
        "samples.csv",
        canonical("gpu-node001-gpu0,2026-11-01T00:20:00Z,gpu_temp_c,900"),
        "absurd value 900",
        field="value",
    ),
    Case(
        "future timestamp",
        "samples.csv",
        canonical("gpu-node001-gpu0,2099-01-01T00:00:00Z,gpu_temp_c,40"),
        "is in the future",
        field="ts",
    ),
    Case("clock not set", "replay.json", prom_json("5", 0.0), "before 2000", 2, "ts"),
    Case(
        "naive timestamp",
        "samples.csv",
        canonical("gpu-node001-gpu0,2026-11-01T00:20:00,gpu_temp_c,40"),
        "naive timestamp",
        field="ts",
    ),
    Case(
        "bad timestamp",
        "samples.csv",
        canonical("gpu-node001-gpu0,yesterday,gpu_temp_c,40"),
        "bad timestamp 'yesterday'",
        field="ts",
    ),
    Case(
        "conflicting duplicate key",
        "samples.csv",
        canonical("gpu-node001-gpu0,2026-11-01T00:10:00Z,gpu_temp_c,77"),
        "duplicate key with a different value",
        field="value",
    ),
    Case(
        "unknown unit",
        "samples.csv",
        canonical("gpu-node999-gpu0,2026-11-01T00:20:00Z,gpu_temp_c,40"),
        "unknown unit 'gpu-node999-gpu0'",
        field="unit_id",
    ),
    Case(
        "shell metacharacters in unit id",
        "samples.csv",
        canonical('"gpu-node001-gpu0;reboot",2026-11-01T00:20:00Z,gpu_temp_c,40'),
        "'gpu-node001-gpu0;reboot' is not a valid id",
        field="unit_id",
    ),
    Case(
        "command substitution in unit id",
        "samples.csv",
        canonical("$(touch pwned),2026-11-01T00:20:00Z,gpu_temp_c,40"),
        "is not a valid id",
        field="unit_id",
    ),
    Case(
        "path separators in unit id",
        "samples.csv",
        canonical("../../etc/passwd,2026-11-01T00:20:00Z,gpu_temp_c,40"),
        "'../../etc/passwd' is not a valid id",
        field="unit_id",
    ),
    Case(
        "unknown metric",
        "samples.csv",
        canonical("gpu-node001-gpu0,2026-11-01T00:20:00Z,fan_speed_pct,40"),
        "unknown metric 'fan_speed_pct'",
        field="metric",
    ),
    Case(
        "ragged CSV row",
        "samples.csv",
        canonical("gpu-node001-gpu0,2026-11-01T00:20:00Z,gpu_temp_c"),
        "malformed line: expected 4 fields, got 3",
        field="line",
    ),
    Case(
        "malformed scrape line",
        "node.prom",
        b'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="gpu-node001"} 41 1793491200000\nDCGM_FI_DEV_GPU_TEMP{gpu="0" 41\n',
        "malformed line",
        1,
        "line",
    ),
    Case(
        "Xid on an unknown GPU",
        "kern.log",
        b"2026-11-01T12:00:03+00:00 gpu-node001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n2026-11-01T12:00:04+00:00 gpu-node001 kernel: NVRM: Xid (PCI:0000:d8:00): 79, pid=1, GPU has fallen off the bus.\n",
        "unknown unit: no inventory GPU on host 'gpu-node001' at PCI 0000:d8:00",
        0,
        "pci",
    ),
    Case("empty file", "samples-empty.csv", b"", "empty file", rejected=True),
    Case(
        "non-UTF-8 bytes",
        "gpu-node001/2026-11-01.csv",
        smi() + b"2026/11/01 00:20:00.000, 0, \xff\xfe\n",
        "undecodable bytes (not UTF-8): byte 0xff",
        13,
        "line",
    ),
    Case(
        "NUL byte in a scrape",
        "node.prom",
        b'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="gpu-node001"} 41 1793491200000\nDCGM_FI_DEV_GPU_TEMP{gpu="1",Hostname="gpu-node001"} 4\x001 1793491200000\n',
        "NUL byte at column",
        1,
        "line",
    ),
    Case(
        "non-UTF-8 label in Prometheus JSON",
        "replay.json",
        prom_json("5").replace(b'"gpu-node001"', b'"gpu-node\xff01"'),
        "undecodable bytes (not UTF-8) in this series",
        0,
        "timestamp",
    ),
    Case("truncated Parquet", "samples-broken.parquet", truncated_parquet(), "cannot read Parquet", rejected=True),
    Case("binary junk", "blob.bin", bytes(range(256)) * 4, "binary content", rejected=True),
    Case("one line, all bytes bad", "samples-bad.csv", b"\xff\xfe\x00\x01", "binary content", rejected=True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_quarantined_or_rejected_and_good_rows_stored(case, tmp_path):
    timezone_name = None if case.name == "naive timestamp" else "UTC"
    config = load_config(data_dir=tmp_path / "data").with_overrides({"ingest": {"timezone": timezone_name or ""}})
    landing = write_landing(tmp_path / "raw", nodes=1, gpus=2, days=1)
    ingest_path(landing.root / "inventory.csv", config)
    inbox = tmp_path / "inbox"
    target = inbox / case.file
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(case.content)
    if case.rejected:  # a good file next to it must still be read
        (inbox / "samples.csv").write_bytes(canonical())

    report = ingest_path(inbox, config)

    assert report.adds_up
    samples = read_table(config.lake_dir, "samples")
    events = read_table(config.lake_dir, "events")
    assert samples.height + events.height == case.good_samples + (1 if case.name == "Xid on an unknown GPU" else 0)
    bad = next(f for f in report.files if f.path == str(target))
    if case.rejected:
        assert bad.status == "rejected"
        assert case.reason in bad.reason
        assert bad.rows_stored == 0
        assert read_table(config.lake_dir, "samples").height == 3
        return
    assert bad.status == "ingested" and bad.rows_quarantined >= 1
    quarantine = pl.concat([pl.read_parquet(q) for q in report.quarantine_files])
    hit = quarantine.filter(pl.col("reason").str.contains(case.reason, literal=True))
    assert hit.height >= 1, quarantine.to_dicts()
    row = hit.row(0, named=True)
    assert row["source_file"] == str(target)
    assert row["line"] >= 1 and row["raw"]
    assert case.field is None or row["field"] == case.field


def test_a_quarantined_prometheus_json_sample_shows_its_series_labels_and_the_sample(tmp_path, config):
    t = START.timestamp() + 1200
    landing = write_landing(tmp_path / "raw", nodes=1, gpus=2, days=1)
    ingest_path(landing.root / "inventory.csv", config)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "replay.json").write_bytes(prom_json("NaN", t))

    report = ingest_path(inbox, config)

    quarantine = pl.concat([pl.read_parquet(q) for q in report.quarantine_files])
    labels = '{"Hostname": "gpu-node001", "__name__": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "gpu": "0"}'
    assert quarantine.select("line", "raw").rows() == [(1, f'{labels} [{t}, "NaN"]')]


def test_exact_duplicates_are_dropped_and_counted_not_quarantined(tmp_path, config):
    path = tmp_path / "samples.csv"
    path.write_bytes(canonical(GOOD[0], GOOD[1]))
    report = ingest_path(path, config)
    assert report.totals == {
        "rows_read": 5,
        "rows_stored": 3,
        "rows_updated": 0,
        "rows_quarantined": 0,
        "duplicates_dropped": 2,
    }


def test_counter_decrease_is_a_reset_and_is_stored_raw(tmp_path, config):
    path = tmp_path / "samples.csv"
    path.write_text(
        "unit_id,ts,metric,value\n"
        "u1,2026-11-01T00:00:00Z,ecc_sbe_volatile_total,120\n"
        "u1,2026-11-01T00:10:00Z,ecc_sbe_volatile_total,3\n"  # driver reload
        "u1,2026-11-01T00:20:00Z,ecc_sbe_volatile_total,5\n"
    )
    report = ingest_path(path, config)
    assert report.totals["rows_quarantined"] == 0
    assert read_table(config.lake_dir, "samples").sort("ts")["value"].to_list() == [120.0, 3.0, 5.0]


def test_quarantine_never_reaches_the_lake_with_a_bad_id(tmp_path, config):
    path = tmp_path / "failures.csv"
    path.write_text("unit_id,failed_at,mode\nnode 1/gpu0,2026-11-01T00:00:00Z,memory\nok-gpu0,2026-11-01T00:00:00Z,\n")
    report = ingest_path(path, config)
    failures = read_table(config.lake_dir, "failures")
    assert failures["unit_id"].to_list() == ["ok-gpu0"]
    assert failures["mode"].to_list() == [None]
    assert report.totals["rows_quarantined"] == 1
    assert datetime(2026, 11, 1, tzinfo=UTC) == failures["failed_at"][0]


def test_stray_bytes_quarantine_only_their_lines(tmp_path, config):
    """A canonical CSV with a non-UTF-8 byte and a NUL on two lines keeps every other row."""
    good = [f"u{i % 7},2026-11-01T{i // 60:02d}:{i % 60:02d}:00Z,gpu_temp_c,{40 + i % 5}" for i in range(1440)]
    lines = ["unit_id,ts,metric,value", *good]
    lines.insert(700, "u1,2026-11-01T23:59:59Z,gpu_temp_c,4\udcff2")
    lines.insert(1200, "u2,2026-11-01T23:59:58Z,gpu_\x00temp_c,42")
    path = tmp_path / "samples.csv"
    path.write_bytes("\n".join(lines).encode("utf-8", errors="surrogateescape") + b"\n")

    report = ingest_path(path, config)

    assert report.adds_up
    assert read_table(config.lake_dir, "samples").height == 1440
    assert report.totals["rows_quarantined"] == 2
    quarantine = pl.concat([pl.read_parquet(q) for q in report.quarantine_files]).sort("line")
    assert quarantine["line"].to_list() == [701, 1201]
    assert "byte 0xff" in quarantine["reason"][0] and "NUL byte" in quarantine["reason"][1]
    assert quarantine["raw"].to_list() == [
        "u1,2026-11-01T23:59:59Z,gpu_temp_c,4\\xff2",
        "u2,2026-11-01T23:59:58Z,gpu_\\x00temp_c,42",
    ]
