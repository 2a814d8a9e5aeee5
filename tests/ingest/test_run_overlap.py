"""Driver work done beside other work: a batch's records written while the next batch is
parsed (``run.BatchRecorder``), files hashed in runs while the next ones are recognised
(``planning._hashes``), a batch's shard numbers looked up in slices on threads
(``store._shard_numbers_side_by_side``): the same results as one after the other."""

from __future__ import annotations

import threading

import polars as pl
import pytest
from landing_files import write_landing

import foreshock.ingest.planning as planning
import foreshock.ingest.run as run
import foreshock.ingest.store as store
from foreshock.config import load_config
from foreshock.ingest import manifest
from foreshock.ingest.planning import plan_ingest
from foreshock.lake.layout import shard_numbers


def _config(data_dir):
    return load_config(data_dir=data_dir).with_overrides({"ingest": {"timezone": "UTC"}, "lake": {"shards": 4}})


def test_shard_numbers_in_slices_are_those_of_one_look_up(monkeypatch):
    monkeypatch.setattr(store, "SIDE_BY_SIDE_ROWS", 10)
    units = pl.Series("unit_id", [f"node{k % 7:02d}-gpu{k % 5}" if k % 11 else None for k in range(1001)])
    distinct = units.drop_nulls().unique()
    for known in (distinct, None):
        for workers in (2, 3):
            got = store._shard_numbers_side_by_side(units, 8, known, workers)
            assert got.equals(shard_numbers(units, 8, known)), (known is None, workers)
    assert got.null_count() == units.null_count() > 0


def test_files_hashed_in_runs_beside_the_recognition(tmp_path, monkeypatch):
    landing = write_landing(tmp_path / "raw", nodes=2, gpus=2, days=3)
    monkeypatch.setattr(planning, "HASH_RUN_FILES", 2)  # runs of 2 and a last shorter one
    plan = plan_ingest(landing.root, _config(tmp_path / "data"))
    planned = [f for batch in plan.batches for f in batch]
    assert len(planned) % 2 == 1 and len(planned) >= 5
    assert [f.sha256 for f in planned] == [manifest.file_sha256(f.open_path()) for f in planned]


def test_a_batch_s_records_are_written_beside_the_next_batch_and_their_error_raised(tmp_path, monkeypatch):
    landing = write_landing(tmp_path / "raw", nodes=2, gpus=2, days=3)
    report = run.ingest_path(landing.root, _config(tmp_path / "data"))
    assert report.adds_up
    recorded = manifest.read_manifest(_config(tmp_path / "data").lake_dir)
    assert sorted(recorded.get_column("path").to_list()) == sorted(
        f.path for f in report.files if f.status == "ingested"
    )

    threads, real = [], run._record_in_manifest

    def failing(files, reports, run_id, config):
        threads.append(threading.current_thread().name)
        if len(threads) == 2:
            raise OSError("disk full")
        return real(files, reports, run_id, config)

    monkeypatch.setattr(run, "_record_in_manifest", failing)
    config = _config(tmp_path / "again")
    first_batch = plan_ingest(landing.root, config).batches[0]
    with pytest.raises(OSError, match="disk full"):
        run.ingest_path(landing.root, config)
    # the first batch's records were written (on the recorder's thread), the second's failed:
    # the run raised its error
    assert len(threads) == 2 and all(name.startswith("ingest-record") for name in threads)
    assert manifest.read_manifest(config.lake_dir).get_column("path").to_list() == [f.path for f in first_batch]
