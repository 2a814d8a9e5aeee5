"""Late data: rows older than stored snapshots are featured by the next incremental run.

Ingest (``foreshock.lake.merge.merge_into_lake``) logs which partitions received rows and their
time span; ``update_features`` recomputes the stored snapshots those rows can change and
nothing else, and the store then equals a full rebuild whatever order the data came in.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from fleet_helpers import T0, Fleet, make_fleet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from foreshock.config import load_config
from foreshock.features.build import build_features, update_features
from foreshock.features.spec import feature_spec
from foreshock.features.store import scan_features
from foreshock.lake.changes import read_changes
from foreshock.lake.merge import merge_into_lake

SEED = 11


def _config(data_dir):
    return load_config(None, data_dir=data_dir).with_overrides(
        {
            "features": {"windows": ["1h", "6h"], "baseline_window": "12h", "expected_sample_every": "15m"},
            "lake": {"shards": 2},
        }
    )


def _stored(config) -> pl.DataFrame:
    return scan_features(config).collect().sort("unit_id", "ts")


def _assert_equals_full_rebuild(config) -> None:
    assert_frame_equal(
        _stored(config), build_features(config.lake_dir, config), check_exact=False, rel_tol=1e-9, abs_tol=1e-9
    )


def test_a_late_export_recomputes_only_the_snapshots_it_reaches(tmp_path):
    config = _config(tmp_path / "data")
    spec = feature_spec(config)
    fleet = make_fleet(SEED, units=6, days=2, every_min=15, failures=0)
    # One node's telemetry for 10:00-14:00 on the first day arrives a day late.
    late_unit = fleet.samples.get_column("unit_id").unique().sort()[2]
    late_lo, late_hi = T0 + timedelta(hours=10), T0 + timedelta(hours=14)
    is_late = (pl.col("unit_id") == late_unit) & pl.col("ts").is_between(late_lo, late_hi)
    Fleet(fleet.inventory, fleet.samples.filter(~is_late), fleet.events).write(config.lake_dir)
    assert update_features(config) > 0
    before = _stored(config)

    merge_into_lake(config.lake_dir, "samples", fleet.samples.filter(is_late), config.shards)
    assert [c["table"] for c in read_changes(config.lake_dir)] == ["samples"]
    rows = update_features(config)

    after = _stored(config)
    first_reached = late_lo.replace(minute=0) + (timedelta(hours=1) if late_lo.minute else timedelta(0))
    reached = pl.col("ts").is_between(first_reached, late_hi + spec.lookback - timedelta(microseconds=1))
    # Exactly the snapshots within the lookback after the late rows were recomputed ...
    assert rows == after.filter(reached).height > 0
    # ... the late unit's features changed there, and nothing before them was rewritten.
    changed = after.filter(reached & (pl.col("unit_id") == late_unit)).drop("ts", "unit_id")
    was = before.filter(reached & (pl.col("unit_id") == late_unit)).drop("ts", "unit_id")
    assert not changed.equals(was)
    assert_frame_equal(after.filter(pl.col("ts") < first_reached), before.filter(pl.col("ts") < first_reached))
    _assert_equals_full_rebuild(config)
    # The change log was consumed: a rerun computes nothing.
    assert read_changes(config.lake_dir) == []
    assert update_features(config) == 0


def test_a_late_failure_ticket_splits_the_unit_into_lives(tmp_path):
    config = _config(tmp_path / "data")
    fleet = make_fleet(SEED + 1, units=4, days=1.5, every_min=15, failures=1)
    Fleet(fleet.inventory, fleet.samples, fleet.events).write(config.lake_dir)
    update_features(config)
    merge_into_lake(config.lake_dir, "failures", fleet.failures, config.shards)
    assert update_features(config) > 0
    failed = fleet.failures.row(0, named=True)
    lives = _stored(config).filter(pl.col("unit_id") == failed["unit_id"]).get_column("life").unique().sort()
    assert lives.to_list() == [0, 1]
    _assert_equals_full_rebuild(config)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch_of=st.lists(st.integers(min_value=0, max_value=2), min_size=12, max_size=12),
    order=st.permutations([0, 1, 2]),
)
def test_any_arrival_order_gives_the_same_features(tmp_path_factory, batch_of, order):
    """The same telemetry arriving in three batches, each a random set of (node, 6-hour)
    blocks, in any order, with a features run after each batch, ends equal to a full
    rebuild of the complete lake."""
    fleet = _FLEET
    config = _config(tmp_path_factory.mktemp("order") / "data")
    block = (pl.col("ts") - pl.lit(T0)).dt.total_hours() // 6
    node = pl.col("unit_id").str.extract(r"node(\d+)").cast(pl.Int64)
    which = ((block * 3 + node) % len(batch_of)).alias("_block")
    samples = fleet.samples.with_columns(which)
    events = fleet.events.with_columns(which)
    merge_into_lake(config.lake_dir, "inventory", fleet.inventory, config.shards)
    for batch in order:
        chosen = [i for i, b in enumerate(batch_of) if b == batch]
        merge_into_lake(
            config.lake_dir, "samples", samples.filter(pl.col("_block").is_in(chosen)).drop("_block"), config.shards
        )
        merge_into_lake(
            config.lake_dir, "events", events.filter(pl.col("_block").is_in(chosen)).drop("_block"), config.shards
        )
        if batch == order[1]:
            merge_into_lake(config.lake_dir, "failures", fleet.failures, config.shards)
        update_features(config)
    _assert_equals_full_rebuild(config)


_FLEET = make_fleet(SEED + 2, units=8, days=1.5, every_min=20, failures=1)
