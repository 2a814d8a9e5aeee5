"""Ingest under concurrency and hostile names: conflicts under one lock, lossless file
names, symlinks, bounded format detection, shared GPU uuids, full-match ids, DST."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from landing_files import SMI_FIELDS, smi_line

from foreshock.config import load_config
from foreshock.contract import is_valid_id
from foreshock.ingest import ingest_path
from foreshock.ingest.manifest import read_manifest
from foreshock.lake.read import read_table

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from foreshock.config import load_config
    from foreshock.ingest import ingest_path

    barrier = sys.argv[3]
    open(f"{barrier}.{os.getpid()}", "w").close()
    while not os.path.exists(barrier):
        time.sleep(0.005)
    config = load_config(data_dir=sys.argv[2])
    report = ingest_path(sys.argv[1], config)
    assert report.adds_up
    print(json.dumps(report.totals))
    """
)


def quarantine(report) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(q) for q in report.quarantine_files])


def test_two_concurrent_conflicting_ingests_quarantine_the_conflict(tmp_path):
    rows = 20_000
    start = datetime(2026, 11, 1, tzinfo=UTC)
    files = []
    for name, value in (("a", 40), ("b", 60)):
        frame = pl.DataFrame(
            {
                "unit_id": [f"u{i % 50}" for i in range(rows)],
                "ts": [start + timedelta(minutes=i // 50) for i in range(rows)],
                "metric": ["gpu_temp_c"] * rows,
                "value": [float(value)] * rows,
            }
        )
        path = tmp_path / name / "samples.parquet"
        path.parent.mkdir()
        frame.write_parquet(path)
        files.append(path)
    barrier = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(f), str(tmp_path / "data"), str(barrier)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for f in files
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    barrier.touch()
    outputs = [c.communicate(timeout=300) for c in children]
    assert all(c.returncode == 0 for c in children), [o[1][-2000:] for o in outputs]
    totals = [json.loads(out) for out, _ in outputs]

    stored = read_table(tmp_path / "data" / "lake", "samples")
    assert stored.height == rows
    assert stored["value"].n_unique() == 1  # one ingest won every key ...
    winner = 0 if stored["value"][0] == 40.0 else 1
    assert totals[winner]["rows_stored"] == rows
    loser = totals[1 - winner]
    # ... and the other's rows are conflicts, quarantined, never counted as duplicates.
    assert loser["rows_quarantined"] == rows and loser["duplicates_dropped"] == 0 and loser["rows_stored"] == 0


def test_a_file_name_that_is_not_utf8_is_ingested_and_recorded_losslessly(tmp_path, config):
    raw = bytes(tmp_path / "in") + b"/samples-\xff\xfe.csv"
    os.makedirs(tmp_path / "in")
    with open(raw, "wb") as handle:
        handle.write(
            b"unit_id,ts,metric,value\nu1,2026-11-01T00:00:00Z,gpu_temp_c,40\nu1,2026-11-01T00:00:00Z,gpu_temp_c,x\n"
        )

    report = ingest_path(tmp_path / "in", config)

    assert report.totals["rows_stored"] == 1 and report.totals["rows_quarantined"] == 1
    assert report.files[0].path.endswith("samples-\\xff\\xfe.csv")
    manifest = read_manifest(config.lake_dir)
    assert manifest["path_bytes"].to_list() == [raw]
    assert quarantine(report)["source_file"][0].endswith("samples-\\xff\\xfe.csv")
    again = ingest_path(tmp_path / "in", config)
    assert [f.status for f in again.files] == ["already ingested"]


def test_symlinks_are_not_followed_unless_asked(tmp_path, config):
    outside = tmp_path / "outside" / "samples.csv"
    outside.parent.mkdir()
    outside.write_text("unit_id,ts,metric,value\nu1,2026-11-01T00:00:00Z,gpu_temp_c,40\n")
    landing = tmp_path / "landing"
    (landing / "sub").mkdir(parents=True)
    (landing / "samples.csv").symlink_to(outside)
    (landing / "linked-dir").symlink_to(outside.parent, target_is_directory=True)
    (landing / "sub" / "loop").symlink_to(landing, target_is_directory=True)

    report = ingest_path(landing, config)
    assert report.totals["rows_read"] == 0
    assert {f.status for f in report.files} == {"skipped"}
    assert all("symbolic link" in f.reason for f in report.files)

    report = ingest_path(landing, config, follow_symlinks=True)
    assert read_table(config.lake_dir, "samples").height == 1
    assert report.adds_up


def test_format_detection_reads_a_bounded_prefix(tmp_path, config):
    big = tmp_path / "in" / "mystery.dat"
    big.parent.mkdir()
    with open(big, "wb") as handle:
        handle.write(b"hello, this is not telemetry\n")
        handle.truncate(3 * 1024**3)  # 3 GB, sparse: costs no disk
    tracemalloc.start()
    started = time.monotonic()
    report = ingest_path(big.parent, config)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert report.files[0].status == "rejected"
    assert peak < 64 * 1024**2 and time.monotonic() - started < 30


def test_a_gpu_uuid_on_two_units_is_quarantined_naming_both(tmp_path, config):
    header = "unit_id,node,rack,model,installed_at,uuid\n"
    first = tmp_path / "a" / "inventory.csv"
    first.parent.mkdir()
    first.write_text(header + "n1-gpu0,n1,r1,H100,2026-01-01T00:00:00Z,GPU-aaa\n")
    ingest_path(first, config)
    second = tmp_path / "b" / "inventory.csv"
    second.parent.mkdir()
    second.write_text(
        header + "n2-gpu0,n2,r1,H100,2026-01-01T00:00:00Z,GPU-aaa\n"  # the stored unit's uuid
        "n3-gpu0,n3,r1,H100,2026-01-01T00:00:00Z,GPU-bbb\n"
        "n4-gpu0,n4,r1,H100,2026-01-01T00:00:00Z,GPU-bbb\n"  # two new units, one uuid
        "n5-gpu0,n5,r1,H100,2026-01-01T00:00:00Z,GPU-ccc\n"
    )
    report = ingest_path(second, config)
    assert sorted(read_table(config.lake_dir, "inventory")["unit_id"]) == ["n1-gpu0", "n5-gpu0"]
    reasons = quarantine(report).sort("line")["reason"].to_list()
    assert len(reasons) == 3
    assert "'GPU-aaa' is on more than one unit (n1-gpu0, n2-gpu0)" in reasons[0]
    assert all("(n3-gpu0, n4-gpu0)" in r for r in reasons[1:])


def test_ids_are_checked_with_a_full_match(tmp_path, config):
    assert not is_valid_id("n1\n") and is_valid_id("n1")
    series = [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": "n1", "gpu": gpu}, "values": [[1793491200, "40"]]}
        for gpu in ("0\n", "1")
    ]
    path = tmp_path / "query.json"
    path.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}))
    report = ingest_path(path, config)
    assert read_table(config.lake_dir, "samples")["unit_id"].to_list() == ["n1-gpu1"]
    assert "'n1-gpu0\n' is not a valid id" in quarantine(report)["reason"][0]


@pytest.mark.parametrize("repeat_order", ["in order", "interleaved GPUs"])
def test_dst_fall_back_hour_is_resolved_by_row_order(tmp_path, repeat_order):
    config = load_config(data_dir=tmp_path / "data").with_overrides({"ingest": {"timezone": "Europe/Berlin"}})
    # Clocks in Berlin fall back at 03:00 CEST on 2026-10-25 to 02:00 CET.
    local = [datetime(2026, 10, 25, 1, 40) + timedelta(minutes=10 * k) for k in range(8)]  # 01:40 .. 02:50
    local += [datetime(2026, 10, 25, 2, 0) + timedelta(minutes=10 * k) for k in range(8)]  # 02:00 .. 03:10
    gpus = [0, 1] if repeat_order == "interleaved GPUs" else [0]
    lines = [smi_line(ts, gpu, 0, k) for k, ts in enumerate(local) for gpu in gpus]
    path = tmp_path / "nvidia-smi" / "gpu-node001" / "2026-10-25.csv"
    path.parent.mkdir(parents=True)
    path.write_text(SMI_FIELDS + "\n" + "\n".join(lines) + "\n")

    report = ingest_path(path, config)

    assert report.totals["rows_quarantined"] == 0 and report.totals["duplicates_dropped"] == 0
    temps = read_table(config.lake_dir, "samples").filter(
        (pl.col("metric") == "gpu_temp_c") & (pl.col("unit_id") == "gpu-node001-gpu0")
    )
    stamps = sorted(temps["ts"].to_list())
    expected = [datetime(2026, 10, 24, 23, 40, tzinfo=UTC) + timedelta(minutes=10 * k) for k in range(16)]
    assert stamps == expected  # 16 readings, 10 minutes apart in UTC: the repeated hour kept


def test_a_lone_ambiguous_local_time_is_quarantined_with_a_reason(tmp_path):
    config = load_config(data_dir=tmp_path / "data").with_overrides({"ingest": {"timezone": "Europe/Berlin"}})
    path = tmp_path / "samples.csv"
    path.write_text(
        "unit_id,ts,metric,value\n"
        "u1,2026-10-25T02:30:00,gpu_temp_c,40\n"  # happened twice: which one?
        "u1,2026-10-25T04:00:00,gpu_temp_c,41\n"
        "u1,2026-10-25T02:30:00+01:00,power_w,300\n"  # an offset says which: stored
    )
    report = ingest_path(path, config)
    assert read_table(config.lake_dir, "samples").height == 2
    row = quarantine(report).row(0, named=True)
    assert "ambiguous local time '2026-10-25 02:30:00' in Europe/Berlin" in row["reason"] and row["field"] == "ts"
