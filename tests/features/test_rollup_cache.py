"""The rollup cache ``features/_rollups`` keeps only the dates a later run can read.

After a run it holds the dates within the lookback plus ``[features] rollup_cache_late``
before the newest stored snapshot, never the whole history; a later incremental run (new
days, a late slice inside the allowance) still equals a full rebuild; a prune never runs
under a first pass, and one killed midway leaves a usable cache.
"""

from __future__ import annotations

from datetime import date, timedelta

import polars as pl
from fleet_helpers import T0, Fleet, make_fleet
from polars.testing import assert_frame_equal

from foreshock.config import load_config
from foreshock.features.build import build_features, update_features
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
