"""A whole landing directory: recognition, accounting, idempotence, incremental runs."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest
from landing_files import lake_snapshot

from foreshock.ingest import detect_format, ingest_path
from foreshock.ingest.manifest import read_manifest
from foreshock.lake.read import read_table


def test_landing_directory_is_recognised_and_adds_up(landing, config):
    report = ingest_path(landing.root, config)
    formats = {f.path.split("/raw/")[1]: f.format for f in report.files}
    assert formats["inventory.csv"] == "canonical"
    assert formats["nvidia-smi/gpu-node001/2026-11-01.csv"] == "nvidia-smi"
    assert formats["dcgm/2026-11-01/DCGM_FI_DEV_XID_ERRORS.json"] == "prometheus-json"
    assert formats["scrape/gpu-node001.prom"] == "prometheus-text"
    assert formats["kernel/gpu-node001.log"] == "xid-log"
    assert formats["tickets.csv"] == "tickets"
    skipped = {f.path.split("/raw/")[1]: f.reason for f in report.by_status("skipped")}
    assert set(skipped) == {"ground_truth.parquet", "simulation.json"}
    assert not report.by_status("rejected")

    totals = report.totals
    assert report.adds_up
    assert totals["rows_quarantined"] == 0
    # The end-of-run scrape repeats the last nvidia-smi temperature of each GPU.
    assert totals["duplicates_dropped"] == landing.units
    samples = read_table(config.lake_dir, "samples")
    assert samples.height == landing.smi_samples + landing.dcgm_samples
    assert read_table(config.lake_dir, "inventory").height == landing.units
    assert read_table(config.lake_dir, "failures").height == 1
    events = read_table(config.lake_dir, "events")
    assert sorted(events["source"].to_list()) == ["dcgm-xid", "xid", "xid"]
    assert totals["rows_stored"] == samples.height + events.height + landing.units + 1

    record = json.loads((config.data_dir / "ingest_runs" / f"{report.run_id}.json").read_text())
    assert record["totals"] == totals and record["adds_up"]
    parts = list((config.lake_dir / "samples").glob("date=*/shard=*/part.parquet"))
    assert {p.parent.parent.name for p in parts} == {"date=2026-11-01", "date=2026-11-02"}


def test_reingest_is_a_no_op_and_only_changed_files_are_read(landing, config):
    ingest_path(landing.root, config)
    before = lake_snapshot(config.lake_dir)
    mtimes = {p: p.stat().st_mtime_ns for p in config.lake_dir.rglob("part.parquet")}

    again = ingest_path(landing.root, config)
    assert again.totals["rows_read"] == 0
    assert len(again.by_status("already ingested")) == len(again.files) - 2
    assert {p: p.stat().st_mtime_ns for p in config.lake_dir.rglob("part.parquet")} == mtimes
    after = lake_snapshot(config.lake_dir)
    assert all(before[t].equals(after[t]) for t in ("samples", "events", "failures", "inventory"))

    # One new line in one file: only that file is read; its old lines are duplicates.
    changed = landing.root / "tickets.csv"
    changed.write_text(changed.read_text() + "T-1002,2026-11-02T08:00:00Z,gpu-node002,1,,thermal,hot\n")
    third = ingest_path(landing.root, config)
    read = [f for f in third.files if f.status == "ingested"]
    assert [f.path for f in read] == [str(changed)]
    assert (read[0].rows_read, read[0].rows_stored, read[0].duplicates_dropped) == (2, 1, 0 + 1)
    assert read_table(config.lake_dir, "failures").height == 2
    assert len(read_manifest(config.lake_dir)) == len(again.files) - 2 + 1


def test_same_content_under_another_node_directory_is_not_skipped(landing, config):
    ingest_path(landing.root, config)
    source = landing.root / "nvidia-smi" / "gpu-node001" / "2026-11-01.csv"
    copy = landing.root / "nvidia-smi" / "gpu-node003" / "2026-11-01.csv"
    copy.parent.mkdir()
    shutil.copy(source, copy)
    report = ingest_path(landing.root, config)
    (copy_report,) = [f for f in report.files if f.status == "ingested"]
    # gpu-node003 is not in the inventory: the file is read, and its rows resolve by uuid
    # to gpu-node001 and are duplicates of what is stored.
    assert copy_report.path == str(copy)
    assert copy_report.rows_read == copy_report.duplicates_dropped > 0


def test_detect_format_by_content_not_only_by_name(tmp_path):
    (tmp_path / "a").write_text('DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 40 1793491200000\n')
    (tmp_path / "b").write_text("2026-11-01T12:00:03+00:00 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, x\n")
    (tmp_path / "c").write_text("unit_id,failed_at,mode\nn1-gpu0,2026-11-01T00:00:00Z,\n")
    (tmp_path / "d").write_text('{"status":"success","data":{"resultType":"matrix","result":[]}}')
    (tmp_path / "e").write_text("id,timestamp,err_count,err_type,label\n")
    assert [detect_format(tmp_path / n) for n in "abcde"] == [
        "prometheus-text",
        "xid-log",
        "canonical",
        "prometheus-json",
        "rasdaemon",
    ]


def test_simulator_output_ingests_with_row_accounting(tmp_path, config):
    simulate = pytest.importorskip("foreshock.simulate")
    summary = simulate.simulate_fleet(tmp_path / "raw", units=16, days=2, seed=7)
    report = ingest_path(tmp_path / "raw", config)
    assert report.adds_up
    assert not report.by_status("rejected"), [(f.path, f.reason) for f in report.by_status("rejected")]
    assert {f.path.rsplit("/", 1)[1] for f in report.by_status("skipped")} >= {
        "ground_truth.parquet",
        "simulation.json",
    }
    inventory = read_table(config.lake_dir, "inventory")
    samples = read_table(config.lake_dir, "samples")
    assert inventory.height == 16
    assert set(samples["unit_id"].unique()) <= set(inventory["unit_id"])
    assert samples.height > 16 * 2 * 144 * 10  # 10-minute nvidia-smi lines x metrics
    totals = report.totals
    stored = sum(read_table(config.lake_dir, t).height for t in ("inventory", "samples", "events", "failures"))
    assert totals["rows_stored"] == stored
    assert read_table(config.lake_dir, "failures").height == summary["failures"]["total"]
    # Kernel Xid lines all resolve to inventory GPUs through their PCI bus id.
    xid = read_table(config.lake_dir, "events").filter(pl.col("source") == "xid")
    assert xid.height == summary["rows"]["xid"]


def test_drain_history_and_ticket_detection_land_in_the_contract(tmp_path, config):
    """A drain history (e.g. exported from Slurm or Kubernetes as the canonical ``drains``
    CSV) and tickets filed after the failure reach the lake: the drains censor training
    labels, ``detected_at`` is when the failure became known."""
    root = tmp_path / "history"
    root.mkdir()
    (root / "drains.csv").write_text(
        "unit_id,drained_at,returned_at,action,source\n"
        "gpu-node001-gpu3,2026-11-03T10:00:00Z,2026-11-04T08:00:00Z,repair,slurm\n"
        "gpu-node002-gpu0,2026-11-05T00:00:00Z,,drain,kubernetes\n"
    )
    (root / "failures.csv").write_text(
        "unit_id,failed_at,mode,detected_at\ngpu-node001-gpu1,2026-11-02T03:00:00Z,hbm,2026-11-03T09:30:00Z\n"
    )
    report = ingest_path(root, config)
    assert report.total("rows_stored") == 3
    drains = read_table(config.lake_dir, "drains").sort("drained_at")
    assert drains.get_column("unit_id").to_list() == ["gpu-node001-gpu3", "gpu-node002-gpu0"]
    assert drains.get_column("returned_at").null_count() == 1
    assert drains.get_column("source").to_list() == ["slurm", "kubernetes"]
    failures = read_table(config.lake_dir, "failures")
    assert failures.get_column("detected_at").dt.hour().to_list() == [9]
