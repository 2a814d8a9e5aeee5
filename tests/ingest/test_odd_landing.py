"""What a landing directory holds that is not a plain file of plain lines: a name with a
newline, a FIFO, a time with second 60."""

from __future__ import annotations

import os
import threading

import polars as pl
import pytest
from landing_files import START, node_name, smi_line, write_landing

from foreshock.ingest import ingest_path
from foreshock.ingest.timestamps import naive_times, parse_utc
from foreshock.lake.read import read_table

XID = "kernel: [123456.789012] NVRM: Xid (PCI:0000:3b:00): 79, pid=2817, name=python3, GPU has fallen off the bus."


def _ingest(root, config):
    """Ingest in a thread: a FIFO opened by mistake would block the test forever."""
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("report", ingest_path(root, config)), daemon=True)
    worker.start()
    worker.join(timeout=300)
    assert not worker.is_alive(), "ingest blocked (a FIFO was opened?)"
    return out["report"]


def _quarantine(report) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(q) for q in report.quarantine_files])


def test_a_name_with_a_newline_is_reported_escaped_on_one_line(tmp_path, config):
    landing = write_landing(tmp_path / "raw", nodes=1, gpus=1, days=1)
    odd = landing.root / "kernel" / "late\nkernel.log"
    odd.write_text(f"2026-11-01T12:30:00.000000+00:00 {node_name(0)} {XID}\n")
    report = _ingest(landing.root, config)
    shown = next(f for f in report.files if "late" in f.path)
    assert shown.path.endswith("kernel/late\\nkernel.log") and "\n" not in shown.path
    assert shown.status == "ingested" and shown.rows_stored == 1
    text = report.render()
    assert sum("late\\nkernel.log" in line for line in text.splitlines()) == 1
    events = read_table(config.lake_dir, "events")
    assert events.filter(pl.col("ts") == START.replace(hour=12, minute=30)).height == 1
    again = _ingest(landing.root, config)  # the name's bytes are in the manifest: read once
    assert next(f for f in again.files if "late" in f.path).status == "already ingested"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_fifos_are_reported_as_skipped_and_never_opened(tmp_path, config):
    landing = write_landing(tmp_path / "raw", nodes=1, gpus=1, days=1)
    os.mkfifo(landing.root / "nvidia-smi" / node_name(0) / "2026-11-02.csv")
    report = _ingest(landing.root, config)
    fifo = next(f for f in report.files if f.path.endswith("2026-11-02.csv"))
    assert fifo.status == "skipped" and fifo.reason.startswith("FIFO (named pipe), not a regular file")
    assert report.adds_up and not report.by_status("rejected")
    assert "2026-11-02.csv  [skipped: FIFO" in report.render()


def test_second_60_on_a_day_without_a_leap_second_is_quarantined(tmp_path, config):
    landing = write_landing(tmp_path / "raw", nodes=1, gpus=1, days=1)
    last = START.replace(hour=23, minute=59, second=59)
    smi = landing.root / "nvidia-smi" / node_name(0) / "2026-11-01.csv"
    sixty = smi_line(last, 0, 0, 1).replace("23:59:59.000", "23:59:60.000")
    smi.write_text(smi.read_text() + sixty + "\n")
    kernel = landing.root / "kernel" / f"{node_name(0)}.log"
    kernel.write_text(kernel.read_text() + f"2026-11-01T23:59:60.000000+00:00 {node_name(0)} {XID}\n")
    report = _ingest(landing.root, config)
    assert report.adds_up
    quarantine = _quarantine(report)
    leap = quarantine.filter(pl.col("reason").str.contains("leap second", literal=True))
    assert sorted(leap["source_file"].unique().to_list()) == sorted([str(kernel), str(smi)])
    stored = pl.concat([read_table(config.lake_dir, t).select("ts") for t in ("samples", "events")])
    assert stored.filter(pl.col("ts") >= START.replace(day=2)).height == 0  # nothing at the next midnight


def test_a_real_leap_second_is_kept_within_its_day():
    frame = pl.DataFrame({"t": ["2016-12-31T23:59:60Z", "2017-01-01T00:59:60.5+01:00", "2026-12-31T23:59:60Z"]})
    ts, reason = parse_utc(pl.col("t"), None)
    got = frame.select(ts=ts, reason=reason)
    assert got["ts"].dt.to_string("%Y-%m-%d %H:%M:%S%.6f").to_list()[:2] == ["2016-12-31 23:59:59.999999"] * 2
    assert got["ts"][2] is None and "leap second" in got["reason"][2]


@pytest.mark.parametrize("odd", [None, "2026/11/01 00:00:00.5", "2026/11/01 00:00:00"])
def test_nvidia_smi_times_read_without_their_milliseconds_are_the_times_of_one_parse(odd):
    """Dates and times that exist and do not (Feb 29 of 2026, hour 24, second 61, month 13)
    with three digits of milliseconds, and a column with one text of another width."""
    texts = ["2026/11/01 00:10:00.123", "2024/02/29 23:59:59.999", "2026/02/29 00:00:00.001", "2026/11/01 24:00:00.000"]
    texts += [
        "2026/11/01 00:00:61.000",
        "2026/13/01 00:00:00.000",
        "0000/01/01 00:00:00.000",
        "2026/1x/01 00:00:00.000",
    ]
    column = pl.Series("timestamp", texts + ([odd] if odd else []))
    expected = column.str.to_datetime("%Y/%m/%d %H:%M:%S%.f", strict=False, time_unit="us")
    assert naive_times(column, "%Y/%m/%d %H:%M:%S%.f").equals(expected)
    assert expected.null_count() >= 4 and expected[0] is not None
