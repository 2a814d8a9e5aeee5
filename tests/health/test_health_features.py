"""The ``health_*`` model features (``[health] features``): a metric that stopped and a
gauge frozen at one value are counted on their units only; off by default, no column."""

from __future__ import annotations

import polars as pl
from health_fleet import AT_BOUND, END, VANISHED, inventory, raw_samples

from foreshock.features.build import build_features
from foreshock.lake.merge import merge_into_lake


def test_vanished_metric_and_frozen_gauge_are_counted(health_config):
    merge_into_lake(health_config.lake_dir, "inventory", inventory(), record_changes=False)
    merge_into_lake(health_config.lake_dir, "samples", raw_samples(), record_changes=False)
    assert not any(c.startswith("health_") for c in build_features(health_config.lake_dir, health_config).columns)

    config = health_config.with_overrides({"health": {"features": True}})
    frame = build_features(config.lake_dir, config)
    last = frame.filter(pl.col("ts") == frame["ts"].max())
    assert last["ts"].max() <= END
    vanished = dict(last.select("unit_id", "health_vanished_metrics").iter_rows())
    frozen = dict(last.select("unit_id", "health_frozen_gauges_1d").iter_rows())
    assert {u for u, n in vanished.items() if n} == {VANISHED} and vanished[VANISHED] == 1
    assert {u for u, n in frozen.items() if n} == {AT_BOUND} and frozen[AT_BOUND] == 1
