"""Degradation trends from feature snapshots: an accelerating ECC count is on the watch
list first, a steady one is "rising", a flat one is not listed."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from health_fleet import ACCEL, FLAT, STEADY, WINDOWS, trend_features

from foreshock.errors import UserError
from foreshock.health.trends import trend_summary, unit_trends, watch_list


def test_accelerating_steady_and_flat_trends(health_config, settings):
    trends = unit_trends(trend_features(), health_config.catalog, settings, WINDOWS)
    ecc = {r["unit_id"]: r for r in trends.filter(trends["metric"] == "ecc_sbe_aggregate_total").iter_rows(named=True)}
    assert ecc[ACCEL]["trend"] == "accelerating"
    assert ecc[ACCEL]["rate_per_day"] == 48.0 and ecc[ACCEL]["prev_rate_per_day"] == 6.0
    assert ecc[ACCEL]["accel_per_day2"] == 42.0
    assert ecc[STEADY]["trend"] == "rising" and ecc[STEADY]["rate_per_day"] == 4.0
    assert ecc[STEADY]["rate_7d_per_day"] == 4.0
    assert ecc[FLAT]["trend"] == "flat"
    # one point every 6 h over 7 days, oldest first, ending at the newest 24 h increase
    assert len(ecc[ACCEL]["sparkline"]) == 29 and ecc[ACCEL]["sparkline"][-1] == 48.0

    watch = watch_list(trends)
    assert watch["unit_id"].to_list() == [ACCEL, STEADY]
    summary = dict(trend_summary(trends).iter_rows())
    assert summary[ACCEL].startswith("accelerating: ecc_sbe_aggregate_total 48")
    assert summary[FLAT] == "flat"


def test_a_small_rise_is_not_accelerating(health_config, settings):
    """Below ``watch_min_increase`` in the window a jump from nothing is only "rising"."""
    strict = dataclasses.replace(settings, watch_min_increase=100.0)
    trends = unit_trends(trend_features(), health_config.catalog, strict, WINDOWS)
    assert "accelerating" not in trends["trend"].to_list()


def test_a_trend_window_that_is_not_a_feature_window_is_a_usage_error(health_config, settings):
    with pytest.raises(UserError, match=r"trend_window = 2d is not one of \[features\] windows"):
        unit_trends(
            trend_features(),
            health_config.catalog,
            dataclasses.replace(settings, trend_window=timedelta(days=2)),
            WINDOWS,
        )
