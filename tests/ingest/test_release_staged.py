"""A batch stored on threads lets go of its parsed telemetry rows once they are staged (the
memory of a day batch, held beside its checks and split), and its quarantine still shows
each bad row's text from the file."""

from __future__ import annotations

import polars as pl
from landing_files import write_messy_landing

import foreshock.ingest.run as run
from foreshock.config import load_config
from foreshock.ingest import ingest_path


def test_stored_batches_hold_no_telemetry_frames_and_quarantine_keeps_raw_text(tmp_path, monkeypatch):
    landing = write_messy_landing(tmp_path / "raw")
    config = load_config(data_dir=tmp_path / "data").with_overrides(
        {"ingest": {"timezone": "UTC"}, "runner": {"local_workers": 2}}
    )
    stored = []
    original = run.store_batch

    def store_and_keep(batch, config):
        bad = original(batch, config)
        stored.append(batch)
        return bad

    monkeypatch.setattr(run, "store_batch", store_and_keep)
    report = ingest_path(landing.root, config)

    assert report.adds_up and report.totals["rows_quarantined"] >= 4
    telemetry = [b for b in stored if any(f.format == "nvidia-smi" for f in b.reports)]
    assert telemetry
    for batch in telemetry:
        assert "samples" not in batch.shared
        assert all("samples" not in parsed.tables for parsed in batch.parsed.values())
    quarantine = pl.concat([pl.read_parquet(f) for f in sorted(config.quarantine_dir.rglob("*.parquet"))])
    smi = quarantine.filter(pl.col("source_file").str.contains("nvidia-smi"))
    assert smi.height and smi.get_column("raw").null_count() == 0
    assert smi.get_column("raw").str.contains("GPU-").all()  # each bad sample's whole nvidia-smi line
