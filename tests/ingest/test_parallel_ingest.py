"""A batch parsed on threads and checked and merged shard by shard on threads gives the lake, the quarantine and
the accounting of the same batch in one piece, on messy input, and reruns change nothing."""

from __future__ import annotations

import threading

import polars as pl
import pytest
from landing_files import assert_same_lake, write_messy_landing

import foreshock.ingest.parsing as parsing
import foreshock.ingest.store as run
from foreshock.config import load_config
from foreshock.ingest import ingest_path
from foreshock.ingest.manifest import read_manifest
from foreshock.ingest.parsers import BATCH_PARSERS, PARSERS
from foreshock.ingest.planning import plan_ingest
from foreshock.lake.changes import read_changes


def _ingest(landing_root, data_dir, *, workers: int, monkeypatch, force: bool = False):
    config = load_config(data_dir=data_dir).with_overrides(
        {"ingest": {"timezone": "UTC"}, "runner": {"local_workers": workers}}
    )
    with monkeypatch.context() as patch:
        patch.setattr(run, "SPLIT_MIN_ROWS", 0)  # split every batch, however small
        patch.setattr(parsing, "BATCH_PARSE_MIN_FILES", 1)  # and parse nvidia-smi files in two runs
        report = ingest_path(landing_root, config, force=force)
    return config, report


def _quarantine(config) -> pl.DataFrame:
    files = sorted(config.quarantine_dir.rglob("*.parquet"))
    frame = pl.concat([pl.read_parquet(f) for f in files]) if files else pl.DataFrame()
    return frame.drop("run_id").sort(pl.all()) if files else frame


def _per_file(report) -> list[tuple]:
    return sorted(
        (f.path, f.status, f.rows_read, f.rows_stored, f.rows_quarantined, f.duplicates_dropped) for f in report.files
    )


def test_shards_on_threads_store_and_quarantine_what_one_piece_does(tmp_path, monkeypatch):
    landing = write_messy_landing(tmp_path / "raw")
    whole_config, whole = _ingest(landing.root, tmp_path / "whole", workers=1, monkeypatch=monkeypatch)
    split_config, split = _ingest(landing.root, tmp_path / "split", workers=2, monkeypatch=monkeypatch)

    assert whole.totals["rows_quarantined"] >= 4 and whole.totals["duplicates_dropped"] >= 2  # the input is messy
    assert split.adds_up and split.totals == whole.totals
    assert _per_file(split) == _per_file(whole)
    assert_same_lake(split_config.lake_dir, whole_config.lake_dir)
    assert _quarantine(split_config).equals(_quarantine(whole_config))
    assert read_changes(split_config.lake_dir) == read_changes(whole_config.lake_dir)

    # A rerun of every file on threads stores nothing and changes nothing.
    _, again = _ingest(landing.root, tmp_path / "split", workers=2, monkeypatch=monkeypatch, force=True)
    assert again.totals["rows_stored"] == 0 and again.adds_up
    assert again.totals["rows_read"] == whole.totals["rows_read"]
    assert_same_lake(split_config.lake_dir, whole_config.lake_dir)


def test_a_failed_shard_leaves_no_row_twice_and_the_retry_completes_the_lake(tmp_path, monkeypatch):
    landing = write_messy_landing(tmp_path / "raw")
    clean_config, clean = _ingest(landing.root, tmp_path / "clean", workers=1, monkeypatch=monkeypatch)
    real_merge = run.merge_split  # a shard group's telemetry merge
    calls = []
    stored_by_failed_batch = []
    counting = threading.Lock()  # shards merge on threads: count and test as one step

    def merge_then_fail(*args, **kwargs):
        with counting:
            calls.append(args[1].table)
            number = calls.count("samples") if args[1].table == "samples" else 0
        if number == 3:  # the first shard's merge of the second day: the other may be written
            raise OSError("disk went away")
        result = real_merge(*args, **kwargs)
        if number > 3:
            stored_by_failed_batch.append(result.rows_stored)
        return result

    monkeypatch.setattr(run, "merge_split", merge_then_fail)
    with pytest.raises(OSError, match="disk went away"):
        _ingest(landing.root, tmp_path / "data", workers=2, monkeypatch=monkeypatch)
    monkeypatch.setattr(run, "merge_split", real_merge)
    config, retry = _ingest(landing.root, tmp_path / "data", workers=2, monkeypatch=monkeypatch)
    assert retry.adds_up
    assert_same_lake(config.lake_dir, clean_config.lake_dir)
    # Rows the failed run had stored come back as duplicates (the lake above holds none twice).
    # Whether the other shard's merge ran depends on the threads (the pool cancels a merge
    # that has not started when one fails).
    extra = sum(stored_by_failed_batch)
    assert retry.totals["duplicates_dropped"] == clean.totals["duplicates_dropped"] + extra
    assert retry.totals["rows_quarantined"] == clean.totals["rows_quarantined"]
    recorded = read_manifest(config.lake_dir)
    assert recorded.height == recorded.select("sha256", "context").unique().height == len(clean.by_status("ingested"))


def test_files_parsed_one_by_one_take_one_thread_beside_the_batch_parsers_runs(tmp_path, monkeypatch):
    """A day's DCGM JSON exports (parsed one by one, in Python) are parsed in turn on one
    thread while the nvidia-smi files (one frame per run of files) are parsed in runs on
    the others, two runs per worker: the thread the exports free takes its share of runs."""
    landing = write_messy_landing(tmp_path / "raw")
    config = load_config(data_dir=tmp_path / "data").with_overrides(
        {"ingest": {"timezone": "UTC"}, "runner": {"local_workers": 2}}
    )
    batch = next(b for b in plan_ingest(landing.root, config).batches if "prometheus-json" in {f.format for f in b})
    json_threads, smi_runs = set(), []
    real_json, real_smi = PARSERS["prometheus-json"], BATCH_PARSERS["nvidia-smi"]

    def json_parse(*args):
        json_threads.add(threading.current_thread().name)
        return real_json(*args)

    def smi_parse(paths, *args):
        smi_runs.append(len(paths))
        return real_smi(paths, *args)

    monkeypatch.setitem(PARSERS, "prometheus-json", json_parse)
    monkeypatch.setitem(BATCH_PARSERS, "nvidia-smi", smi_parse)
    monkeypatch.setattr(parsing, "BATCH_PARSE_MIN_FILES", 1)
    parsed = parsing.parse_stage(batch, config, None, "UTC", None)
    smi_files = sum(f.format == "nvidia-smi" for f in batch)
    assert len(json_threads) == 1 and len([f for f in batch if f.format == "prometheus-json"]) > 1
    assert len(smi_runs) == min(4, smi_files) and sum(smi_runs) == smi_files
    assert all(r.status == "ingested" for r in parsed.reports)
