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


def _scrapes_and_logs(root):
    """Scrapes and kernel logs whose per-file rules differ: declared units, ``_created``
    families, OpenMetrics and its ``# EOF``, timestamp units, an XID gauge held across
    files, undecodable lines, files rejected for several reasons."""
    ms, s = 1793491800000, 1793491800
    labels = 'gpu="0",UUID="GPU-x",Hostname="gpu-node001"'
    files = {
        "a.prom": "# HELP DCGM_FI_DEV_POWER_VIOLATION Throttling (in ns).\n"
        f"DCGM_FI_DEV_POWER_VIOLATION{{{labels}}} 5000 {ms}\n"
        f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 40 {s}\n"  # seconds in the Prometheus text format
        f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} 0 {ms}\nDCGM_FI_DEV_XID_ERRORS{{{labels}}} 79 {ms + 1000}\n"
        f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL_created{{{labels}}} 5 {ms}\n"  # no such family here: unknown
        "garbage here\n",
        "b.om": "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter\n"
        f"DCGM_FI_DEV_POWER_VIOLATION{{{labels}}} 7000 {s}\n"
        f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL_total{{{labels}}} 3 {s}\n"
        f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL_created{{{labels}}} 1700000000 {s}\n"
        f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} 79 {s + 60}\n# EOF\n"
        f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 41 {s}\n",
        "c.prom": "# HELP DCGM_FI_DEV_GPU_TEMP only comments\n\n",
        "d.prom": f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 42\n",
        "e.prom": f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 43 {ms}\n".encode() + b"DCGM_FI_DEV_GPU_TEMP \xff 1\n",
        "k1.log": "2026-11-01T12:00:03+00:00 gpu-node001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1\n"
        "2026-11-01T12:00:04+00:00 gpu-node001 systemd[1]: noise\n"
        "2026-11-01T12:00:05+00:00 gpu-node001 kernel: NVRM: Xid (PCI:zz): 48, pid=1\n",
        "k2.log": "2026-11-01T12:00:04+00:00 gpu-node001 systemd[1]: noise only\n",
        "k3.log": "\n",
        "k4.log": b"2026-11-01T12:00:03+00:00 gpu-node002 kernel: NVRM: Xid (PCI:0000:3b:00): 7\xff\n"
        b"2026-11-01T13:00:03+00:00 gpu-node002 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1\n",
        "k5.log": b"\x00\x01\x02\n\x00\x00\n",
    }
    root.mkdir()
    for name, text in files.items():
        (root / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return sorted(root / name for name in files)


def test_scrapes_and_kernel_logs_parsed_together_give_each_file_what_its_own_parse_gives(tmp_path, config):
    from foreshock.ingest.context import IngestContext
    from foreshock.ingest.parsers import prometheus_text, xid_log

    paths = _scrapes_and_logs(tmp_path / "raw")
    ctx = IngestContext.from_config(config)
    seen = {}
    for parser, suffixes in ((prometheus_text, (".prom", ".om")), (xid_log, (".log",))):
        mine = [p for p in paths if p.suffix in suffixes]
        together, shared = parser.parse_files(mine, list(range(len(mine))), ctx)
        for index, path in enumerate(mine):
            try:
                alone = parser.parse(path, ctx)
            except Exception as exc:  # noqa: BLE001 - the same rejection expected
                assert type(together[index]) is type(exc) and str(together[index]) == str(exc)
                seen[path.name] = str(exc)
                continue
            assert together[index].notes == alone.notes and together[index].rows == alone.rows
            for table, frames in shared.items():
                rows = pl.concat([f.filter(pl.col("_file") == index).drop("_file") for f in frames])
                own = alone.tables.get(table)  # none when the file alone stages no such rows
                assert rows.equals(own) if own is not None else rows.height == 0, (path.name, table)
            seen[path.name] = (alone.notes, {t: f.get_column("_reason").to_list() for t, f in alone.tables.items()})
    # each file's own rules held (not those of the file next to it)
    assert "seconds" in seen["a.prom"][0][0] and "_created" in seen["b.om"][0][0]
    assert any(r and "unknown metric" in r for r in seen["a.prom"][1]["samples"])
    assert any(r and "after '# EOF'" in r for r in seen["b.om"][1]["samples"])
    assert len(seen["b.om"][1]["events"]) == 1  # the code held from a.prom is b.om's own first reading
    assert "--scrape-time" in seen["d.prom"] and "no samples" in seen["c.prom"]
    assert any(r and "undecodable" in r for r in seen["e.prom"][1]["samples"])
    assert seen["k2.log"][0] == ["no NVRM Xid lines"] and "empty" in seen["k3.log"] and "binary" in seen["k5.log"]
    assert any(r and "undecodable" in r for r in seen["k4.log"][1]["events"])
