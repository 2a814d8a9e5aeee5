"""``<error counter>_rising_share_<w>``: the share of a window's snapshot intervals in which an
error counter rose.  A burst of corrected errors over a few hours and errors rising hour after
hour can add up to the same increase; the share tells them apart, from a real Parquet lake."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fleet_helpers import T0, one_unit, snapshot_row, with_test_windows

from foreshock.config import load_config
from foreshock.features.build import build_features, spec_feature_columns
from foreshock.features.spec import feature_spec

EVERY = timedelta(minutes=10)


def _counter(metric: str, per_hour: list[float]) -> list[tuple]:
    """Samples every 10 minutes; the counter steps up by ``per_hour[h]`` at the last sample of
    hour ``h`` (so the step falls in the interval of the snapshot at ``h + 1``)."""
    rows, value = [], 0.0
    for h, step in enumerate(per_hour):
        for i in range(6):
            if i == 5:
                value += step
            rows.append((T0 + timedelta(hours=h) + EVERY * (i + 1), metric, value))
    return rows


def test_a_burst_and_a_ramp_of_the_same_increase_differ_in_their_rising_share(tmp_path):
    config = with_test_windows(load_config(None, data_dir=tmp_path))  # windows 1h, 6h, 1d; hourly snapshots
    config = config.with_overrides({"features": {"rising_share": True}})
    burst = [0.0] * 18 + [32.0] * 3 + [0.0] * 9  # three hours of a benign-looking burst, then quiet
    ramp = [0.0] * 6 + [4.0] * 24  # four errors every hour for a day
    rows = _counter("ecc_sbe_volatile_total", burst) + _counter("ecc_sbe_aggregate_total", ramp)
    rows += [(T0 + EVERY * (i + 1), "gpu_temp_c", 60.0) for i in range(6 * 30)]
    one_unit(rows).write(config.lake_dir)
    out = build_features(config.lake_dir, config)

    at = snapshot_row(out, T0 + timedelta(hours=30))
    # The same 96 errors over the last day...
    assert at["ecc_sbe_volatile_total_increase_1d"] == pytest.approx(96)
    assert at["ecc_sbe_aggregate_total_increase_1d"] == pytest.approx(96)
    # ... rose in 3 of the day's 24 hours for the burst, in every hour for the ramp.
    assert at["ecc_sbe_volatile_total_rising_share_1d"] == pytest.approx(3 / 24)
    assert at["ecc_sbe_aggregate_total_rising_share_1d"] == pytest.approx(1.0)
    # The burst ended 9 hours ago: nothing of it in the last 6 hours.
    assert at["ecc_sbe_volatile_total_rising_share_6h"] == pytest.approx(0.0)
    assert at["ecc_sbe_aggregate_total_rising_share_6h"] == pytest.approx(1.0)
    # During the burst the last 6 hours are half rising.
    assert snapshot_row(out, T0 + timedelta(hours=21))["ecc_sbe_volatile_total_rising_share_6h"] == pytest.approx(0.5)
    # A counter never read in the window has no share (null), not a share of 0.
    assert at["remapped_rows_correctable_rising_share_1d"] is None
    # Over one interval the share would be whether the increase is above 0: not written.
    assert "ecc_sbe_volatile_total_rising_share_1h" not in out.columns
    # Error counters only: a power violation counter (family power) has none.
    names = spec_feature_columns(feature_spec(config))
    assert "ecc_sbe_volatile_total_rising_share_6h" in names
    assert not [c for c in names if c.startswith("power_violation") and "rising_share" in c]


def test_the_default_feature_set_has_no_rising_share(tmp_path):
    config = with_test_windows(load_config(None, data_dir=tmp_path))
    one_unit(_counter("ecc_sbe_volatile_total", [0.0, 5.0, 5.0, 0.0])).write(config.lake_dir)
    out = build_features(config.lake_dir, config)

    assert snapshot_row(out, T0 + timedelta(hours=3))["ecc_sbe_volatile_total_increase_6h"] == pytest.approx(10)
    assert not [c for c in out.columns if "rising_share" in c]
    assert not [c for c in spec_feature_columns(feature_spec(config)) if "rising_share" in c]
