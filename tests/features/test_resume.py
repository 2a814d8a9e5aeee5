"""A features run that dies halfway is resumed by a plain rerun, not redone.

The run records, after each chunk it stores, what it still has to compute
(``features/_progress.json``) and drops the lake's change-log entries only when it ends; the
rerun computes the chunks not stored, plus what rows merged in between reach, and the store
ends byte for byte as a clean run's over the same lake.
"""

from __future__ import annotations

import hashlib
import shutil
from datetime import timedelta

import polars as pl
import pytest
from fleet_helpers import T0, Fleet, make_fleet

from foreshock.config import load_config
from foreshock.features import build
from foreshock.features.build import plan_update, update_features
from foreshock.features.resume import Pending, changes_digest, progress_path, read_pending, record_pending
from foreshock.features.spec import feature_spec
from foreshock.features.store import feature_files
from foreshock.lake.changes import read_changes
from foreshock.lake.merge import merge_into_lake


def _config(data_dir):
    return load_config(None, data_dir=data_dir).with_overrides(
        {
            "features": {
                "windows": ["1h", "6h"],
                "baseline_window": "12h",
                "expected_sample_every": "1h",
                "block_days": 1,
                "max_task_rows": 0,  # a chunk per day
            },
            "lake": {"shards": 2},
        }
    )


def _digests(config) -> dict[str, str]:
    root = config.features_dir
    return {str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest() for p in feature_files(root)}


def test_a_rerun_after_a_failure_resumes_at_the_first_chunk_not_stored(tmp_path, monkeypatch):
    config, clean = _config(tmp_path / "run" / "data"), _config(tmp_path / "clean" / "data")
    fleet = make_fleet(13, units=8, days=5, every_min=60, failures=1)
    # one unit's first 4 hours of the second day arrive only after the first run
    late_unit = fleet.samples.get_column("unit_id").unique().sort()[0]
    is_late = (pl.col("unit_id") == late_unit) & pl.col("ts").is_between(
        T0 + timedelta(days=1), T0 + timedelta(days=1, hours=3)
    )
    Fleet(fleet.inventory, fleet.samples.filter(~is_late), fleet.events, fleet.failures).write(config.lake_dir)
    shutil.copytree(config.lake_dir, clean.lake_dir)
    chunks = plan_update(config).chunks(feature_spec(config))
    assert len(chunks) == 4  # a day each, the last day's hours with the fourth

    write = build.finalize_days

    def failing_write(config, days):
        if days[0][0] == chunks[2][1][0][0]:
            raise OSError("disk gone")  # the third chunk's dates are never written
        return write(config, days)

    monkeypatch.setattr(build, "finalize_days", failing_write)
    with pytest.raises(OSError, match="disk gone"):
        update_features(config)
    monkeypatch.setattr(build, "finalize_days", write)
    assert progress_path(config.features_dir).exists()

    staged = []
    stage = build.stage_shard

    def spying_stage(config, shard, blocks):
        staged.extend(blocks)
        return stage(config, shard, blocks)

    merge_into_lake(config.lake_dir, "samples", fleet.samples.filter(is_late), config.shards)
    monkeypatch.setattr(build, "stage_shard", spying_stage)
    assert update_features(config) > 0
    # the second chunk from the late rows on, and the two chunks the failed run never stored
    assert sorted({lo for lo, _ in staged}) == [chunks[i][0][0][0] for i in (1, 2, 3)]
    assert not progress_path(config.features_dir).exists() and read_changes(config.lake_dir) == []
    assert update_features(config) == 0

    # The same arrivals without the failure: one run, the late rows, another run.
    monkeypatch.setattr(build, "stage_shard", stage)
    assert update_features(clean) > 0
    merge_into_lake(clean.lake_dir, "samples", fleet.samples.filter(is_late), clean.shards)
    assert update_features(clean) > 0
    assert _digests(config) == _digests(clean) and len(_digests(clean)) == 10


def test_a_record_stands_for_the_log_entries_only_while_they_lead_the_log():
    """A record left before the lake was rebuilt (a new change log) skips none of the new
    entries: its spans are recomputed and every entry of the new log is handled."""
    log = [{"table": "samples", "date": "2026-11-01", "shard": s, "first": "a", "last": "b"} for s in range(3)]
    pending = Pending(2, changes_digest(log[:2]), ())
    assert pending.covered(log) == 2
    assert pending.covered(log[1:]) == 0 and pending.covered(log[:1]) == 0


def test_a_record_that_does_not_read_is_ignored(tmp_path):
    """The log is still whole then: it says what to recompute, as before any record."""
    record_pending(tmp_path, Pending(1, "d", ((T0, T0 + timedelta(hours=1)),)))
    assert read_pending(tmp_path) == Pending(1, "d", ((T0, T0 + timedelta(hours=1)),))
    progress_path(tmp_path).write_text('{"changes": 1, "spans": [')
    assert read_pending(tmp_path) is None
