"""``power_w_jitter_max_<w>``: the power's swings its load does not explain, the largest of
one snapshot interval in the window (a failing power supply at a steady load, hours before
the GPU falls off the bus), from a real Parquet lake."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from fleet_helpers import T0, one_unit, snapshot_row, with_test_windows

from foreshock.config import load_config
from foreshock.features.build import build_features, spec_feature_columns
from foreshock.features.spec import feature_spec

EVERY = timedelta(minutes=10)


def _hour(start_hour: int, utils: list[float], powers: list[float]) -> list[tuple]:
    """Six samples of the hour after ``start_hour`` (its snapshot at ``start_hour + 1``)."""
    times = [T0 + timedelta(hours=start_hour) + EVERY * (i + 1) for i in range(6)]
    return [(t, "gpu_util_pct", u) for t, u in zip(times, utils, strict=True)] + [
        (t, "power_w", p) for t, p in zip(times, powers, strict=True)
    ]


def test_a_noisy_hour_at_a_steady_load_stands_out_where_the_window_spread_does_not(tmp_path):
    config = with_test_windows(load_config(None, data_dir=tmp_path))  # windows 1h, 6h, 1d; hourly snapshots
    swings = [20.0, 90.0] * 3
    rows = []
    for h in range(3):  # a job starting and stopping: the draw follows the load
        rows += _hour(h, swings, [100 + 5 * u for u in swings])
    noisy = [550 + 80.0 * (-1) ** i for i in range(6)]
    rows += _hour(3, [90.0] * 6, noisy)  # a steady load, the draw jumping by 160 W
    for h in range(4, 12):
        rows += _hour(h, [90.0] * 6, [550.0] * 6)
    one_unit(rows).write(config.lake_dir)
    out = build_features(config.lake_dir, config)

    swing_jitter = np.std([100 + 5 * u for u in swings], ddof=1) / (np.std(swings, ddof=1) + 1)
    noisy_jitter = np.std(noisy, ddof=1) / (0 + 1)
    at = {h: snapshot_row(out, T0 + timedelta(hours=h)) for h in (3, 4, 9, 10)}
    # Three hours of swings: the window's power spread is high, its jitter is not.
    assert at[3]["power_w_std_6h"] > 150
    assert at[3]["power_w_jitter_max_6h"] == pytest.approx(swing_jitter)
    assert swing_jitter < 5
    # The noisy hour: a jitter of 88 W a point, kept for as long as the window holds that hour.
    assert at[4]["power_w_jitter_max_6h"] == pytest.approx(noisy_jitter)
    assert at[9]["power_w_jitter_max_6h"] == pytest.approx(noisy_jitter)
    assert at[10]["power_w_jitter_max_6h"] == pytest.approx(0.0)
    assert at[10]["power_w_jitter_max_1d"] == pytest.approx(noisy_jitter)
    # Over a window of one interval it would be that interval's own spread: not written.
    assert "power_w_jitter_max_1h" not in out.columns
    assert [c for c in spec_feature_columns(feature_spec(config)) if "jitter" in c] == [
        "power_w_jitter_max_6h",
        "power_w_jitter_max_1d",
    ]


def test_power_without_a_load_reading_has_no_jitter(tmp_path):
    config = with_test_windows(load_config(None, data_dir=tmp_path))
    times = [T0 + EVERY * (i + 1) for i in range(36)]
    one_unit([(t, "power_w", 500.0 + 50 * (i % 2)) for i, t in enumerate(times)]).write(config.lake_dir)
    out = build_features(config.lake_dir, config)

    six = snapshot_row(out, T0 + timedelta(hours=6))
    assert six["power_w_std_6h"] > 0
    assert six["power_w_jitter_max_6h"] is None
