"""Many nvidia-smi files of one batch are parsed as one frame: the lake, the quarantine and
every file's accounting are exactly what parsing file by file gives, on input with bad
lines, repeated and conflicting keys, a second header, files that are rejected, another
format carrying the same keys, and reruns."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from landing_files import SMI_FIELDS, START, smi_line, uuid_of, write_landing

from foreshock.config import load_config
from foreshock.ingest import ingest_path
from foreshock.ingest import parsing as ingest_run
from foreshock.lake.read import read_table

SHORT_HEADER = "timestamp, index, pci.bus_id, uuid, temperature.gpu, ecc.errors.corrected.volatile.total"


def write_messy_landing(root):
    """The standard landing plus files that exercise every per-file rule of the parser."""
    write_landing(root, nodes=3, gpus=2, days=2, steps_per_day=6)
    smi = root / "nvidia-smi"
    later = START + timedelta(hours=2)
    # Same node and day as the regular file (same batch): a repeated line is a duplicate,
    # a changed temperature a conflict; plus a malformed line, a bad number, an nvidia-smi
    # error, a bad timestamp, a bad index and a counter storm.
    first = smi_line(START, 0, 0, 0)
    lines = [
        SMI_FIELDS,
        first,
        first.replace(", 40, 47,", ", 77, 47,").replace("2026/11/01 00:00:00.000", "2026/11/01 04:00:00.000"),
        smi_line(later, 1, 0, 3).replace(", 43, 50,", ", hot, 50,"),
        smi_line(later, 0, 0, 3).replace("253.00 W", "[Unknown Error]"),
        "2026/11/01 02:10:00.000, 0, 00000000:3B:00.0",
        smi_line(later, 0, 0, 3).replace("2026/11/01 02:00:00.000", "2026/13/01 02:00:00.000"),
        smi_line(later, 0, 0, 3).replace(", 0, 00000000", ", x9, 00000000"),
        smi_line(later + timedelta(minutes=1), 1, 0, 900_000),
        "",
        SMI_FIELDS,  # -l restarted: the header again
        smi_line(later + timedelta(minutes=5), 1, 0, 4),
    ]
    (smi / "gpu-node001" / "2026-11-01-restart.csv").write_text("\n".join(lines) + "\n")
    # A second header in the same batch (fewer columns), with a key the regular file has
    # and a conflicting value for another.
    short = [
        SHORT_HEADER,
        ", ".join(smi_line(START, 1, 1, 0).split(", ")[:5] + ["0"]),
        ", ".join(smi_line(START + timedelta(hours=4), 0, 1, 0).split(", ")[:4] + ["99", "0"]),
    ]
    (smi / "gpu-node002" / "2026-11-01-short.csv").write_text("\n".join(short) + "\n")
    # A directory that is not a node: the unit comes from the uuid (one unknown).
    by_uuid = [SMI_FIELDS, smi_line(START + timedelta(hours=5), 1, 2, 7)]
    by_uuid.append(smi_line(START + timedelta(hours=5), 0, 2, 7).replace(uuid_of(2, 0), "GPU-unknown"))
    (smi / "collector-a" / "2026-11-01.csv").parent.mkdir(parents=True)
    (smi / "collector-a" / "2026-11-01.csv").write_text("\n".join(by_uuid) + "\n")
    # Rejected files and a file with an undecodable line, in the middle of the batch.
    (smi / "gpu-node002" / "2026-11-01-noheader.csv").write_text(smi_line(START, 0, 1, 0) + "\n")
    (smi / "gpu-node002" / "2026-11-01-empty.csv").write_text("\n\n")
    undecodable = (SMI_FIELDS + "\n" + smi_line(later, 0, 1, 5) + "\n").encode() + b"\xff\xfe broken\n"
    (smi / "gpu-node002" / "2026-11-01-bytes.csv").write_bytes(undecodable)
    # Another format with keys nvidia-smi also gives, in the same day's batch.
    canonical = root / "canonical" / "2026-11-01"
    canonical.mkdir(parents=True)
    (canonical / "samples.csv").write_text(
        "unit_id,ts,metric,value\n"
        "gpu-node001-gpu0,2026-11-01T00:00:00Z,gpu_temp_c,40\n"
        "gpu-node001-gpu0,2026-11-01T04:00:00Z,gpu_temp_c,12\n"
    )


def lake_and_quarantine(config) -> tuple[pl.DataFrame, pl.DataFrame]:
    samples = read_table(config.lake_dir, "samples").sort("unit_id", "ts", "metric")
    files = sorted(config.quarantine_dir.rglob("*.parquet"))
    quarantine = pl.concat([pl.read_parquet(f) for f in files]) if files else pl.DataFrame()
    if quarantine.height:
        quarantine = quarantine.drop("run_id").sort("source_file", "line", "field", "reason")
    return samples, quarantine


def accounting(report) -> list[tuple]:
    return [
        (
            f.path,
            f.status,
            f.reason,
            f.rows_read,
            f.rows_stored,
            f.rows_quarantined,
            f.duplicates_dropped,
        )
        for f in report.files
    ]


@pytest.fixture
def messy(tmp_path):
    root = tmp_path / "raw"
    write_messy_landing(root)
    return root


def ingest_three_times(root, data_dir):
    """First run, rerun, forced rerun: the three reports."""
    config = load_config(data_dir=data_dir).with_overrides({"ingest": {"timezone": "UTC"}})
    reports = [ingest_path(root, config), ingest_path(root, config), ingest_path(root, config, force=True)]
    return config, reports


def test_files_parsed_together_store_and_quarantine_exactly_what_file_by_file_does(messy, tmp_path, monkeypatch):
    together_config, together = ingest_three_times(messy, tmp_path / "together")
    monkeypatch.setattr(ingest_run, "BATCH_PARSERS", {})
    alone_config, alone = ingest_three_times(messy, tmp_path / "alone")

    for a, b in zip(together, alone):
        assert accounting(a) == accounting(b)
        assert a.totals == b.totals and a.adds_up
    first = together[0]
    assert first.totals["rows_quarantined"] > 0 and first.totals["duplicates_dropped"] > 0
    assert {f.status for f in first.files} >= {"ingested", "rejected"}
    assert together[1].totals["rows_read"] == 0  # the rerun reads nothing new
    assert together[2].totals["rows_stored"] == 0  # the forced rerun stores nothing new

    samples, quarantine = lake_and_quarantine(together_config)
    samples_alone, quarantine_alone = lake_and_quarantine(alone_config)
    assert samples.equals(samples_alone)
    assert quarantine.equals(quarantine_alone)
    reasons = " | ".join(quarantine.get_column("reason").to_list())
    for expected in (
        "malformed line",
        "not a number: 'hot'",
        "nvidia-smi reported [Unknown Error]",
        "bad timestamp",
        "cannot tell the unit",
        "implausible counter step",
        "different value than an earlier row",
        "undecodable bytes",
    ):
        assert expected in reasons
