"""The rollup cache ``features/_rollups`` keeps only the dates a later run can read.

After a run it holds the dates within the lookback plus ``[features] rollup_cache_late``
before the newest stored snapshot, never the whole history; a later incremental run (new
days, a late slice inside the allowance) still equals a full rebuild; a prune never runs
under a first pass, and one killed midway leaves a usable cache.  The flow (served, on
Dask, in the demo) prunes between chunks as the command does: it runs the same chunk loop.
"""

from __future__ import annotations

from datetime import date, timedelta

import polars as pl
from fleet_helpers import T0, Fleet, make_fleet
from polars.testing import assert_frame_equal

from foreshock.config import load_config
from foreshock.features.build import build_features, plan_update, update_features
from foreshock.features.rollup_cache import PRUNED, cache_in_use, prune_cache, retained_from
from foreshock.features.spec import feature_spec
from foreshock.features.store import STAGING, last_snapshot, rollup_cache_dir, scan_features
from foreshock.lake.merge import merge_into_lake


def _config(data_dir):
    return load_config(None, data_dir=data_dir).with_overrides(
        {
            "features": {
                "windows": ["1h", "6h"],
                "baseline_window": "12h",
                "expected_sample_every": "30m",
                "block_days": 1,
                "max_task_rows": 0,  # a chunk per day: the cache is pruned during the run too
                "rollup_cache_late": "1d",
            },
            "lake": {"shards": 2},
        }
    )


def _cached_dates(config) -> set[date]:
    return {
        date.fromisoformat(p.name.removeprefix("date=")) for p in rollup_cache_dir(config.features_dir).glob("date=*")
    }


def _lake_dates(config) -> set[date]:
    return {date.fromisoformat(p.name.removeprefix("date=")) for p in (config.lake_dir / "samples").glob("date=*")}


def test_the_cache_keeps_only_what_a_later_run_reads_and_late_data_still_equals_a_rebuild(tmp_path):
    config = _config(tmp_path / "data")
    spec = feature_spec(config)
    fleet = make_fleet(5, units=4, days=6, every_min=30, failures=0)
    until = T0 + timedelta(days=4, hours=5)
    # one unit's 3 hours a day before `until` arrive only with the next days (within the allowance)
    late_unit = fleet.samples.get_column("unit_id").unique().sort()[1]
    is_late = (pl.col("unit_id") == late_unit) & pl.col("ts").is_between(
        until - timedelta(hours=20), until - timedelta(hours=17)
    )
    Fleet(fleet.inventory, fleet.samples.filter(~is_late), fleet.events).write(config.lake_dir, until=until)
    assert update_features(config) > 0

    kept_from = retained_from(config, spec, last_snapshot(config.features_dir))
    assert _cached_dates(config) == {d for d in _lake_dates(config) if d >= kept_from}
    assert min(_lake_dates(config)) < kept_from  # older dates were cached during the run, then removed
    assert not (config.features_dir / STAGING).exists()

    merge_into_lake(config.lake_dir, "samples", fleet.samples.filter(is_late | (pl.col("ts") > until)), config.shards)
    merge_into_lake(config.lake_dir, "events", fleet.events.filter(pl.col("ts") > until), config.shards)
    assert update_features(config) > 0
    stored = scan_features(config).collect().sort("unit_id", "ts")
    assert_frame_equal(stored, build_features(config.lake_dir, config), check_exact=False, rel_tol=1e-9, abs_tol=1e-9)
    kept_from = retained_from(config, spec, last_snapshot(config.features_dir))
    assert _cached_dates(config) == {d for d in _lake_dates(config) if d >= kept_from}
    assert not (config.features_dir / STAGING).exists()


def test_a_prune_skips_a_cache_in_use_and_finishes_one_killed_midway(tmp_path):
    cache = tmp_path / "_rollups"
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        (cache / f"date={day}" / "shard=00").mkdir(parents=True)
    killed = cache / f"{PRUNED}date=2026-10-31-999"  # renamed away, not yet removed, when killed
    (killed / "shard=00").mkdir(parents=True)

    with cache_in_use(cache):  # a first pass of another run is reading the cache
        assert prune_cache(cache, date(2026, 11, 3)) is None
    assert len(list(cache.glob("date=*"))) == 3

    assert prune_cache(cache, date(2026, 11, 3)) == 2
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".in-use")) == ["date=2026-11-03"]


def test_the_flow_keeps_the_cache_bounded_between_chunks(prefect_server, tmp_path, monkeypatch):
    """A run through the flow over several chunks never holds a cached date older than the
    next chunk's lookback or the late allowance (the bound :func:`prune_rollups` keeps),
    at any chunk's start, not only once the run ends."""
    from foreshock.pipelines import features_flow

    config = _config(tmp_path / "data")
    spec = feature_spec(config)
    make_fleet(9, units=4, days=5, every_min=60, failures=0).write(config.lake_dir)
    plan = plan_update(config)
    chunks = plan.chunks(spec)
    assert len(chunks) >= 4
    cached_at_start: dict = {}
    stage = features_flow.stage_shard

    def observing_stage(config, shard, blocks):
        cached_at_start.setdefault(blocks[0][0], _cached_dates(config))
        return stage(config, shard, blocks)

    monkeypatch.setattr(features_flow, "stage_shard", observing_stage)
    assert features_flow.features_flow(config.to_settings())["rows"] > 0

    assert sorted(cached_at_start) == [blocks[0][0] for blocks, _ in chunks]
    late_bound = retained_from(config, spec, plan.last)
    for first, cached in cached_at_start.items():
        bound = min(late_bound, (first - spec.lookback).date())
        assert not cached or min(cached) >= bound, (first, sorted(cached))
    assert all(cached_at_start[blocks[0][0]] for blocks, _ in chunks[1:])  # the cache was in use
    assert max(len(cached) for cached in cached_at_start.values()) <= 3
    stored = scan_features(config).collect().sort("unit_id", "ts")
    assert_frame_equal(stored, build_features(config.lake_dir, config), check_exact=False, rel_tol=1e-9, abs_tol=1e-9)
