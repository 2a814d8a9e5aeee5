"""Temperature rise (``temp_residual_c_rise_<a>_<b>``): a thermal drift that will end in a
day told from one at the same level that takes a week (models/lightgbm.toml
``temperature_rise``)."""

from __future__ import annotations

import numpy as np
import polars as pl

from foreshock.models.estimators.temperature_rise import rise_columns, rise_names
from tests.models.synthetic_fleet import check_recipe_feature, within_a_day_of_failure


def test_rises_are_named_for_consecutive_windows_and_computed_from_them():
    names = ["temp_residual_c_1d", "temp_residual_c_1h", "temp_residual_c_6h", "gpu_temp_c_mean_1h"]
    assert rise_names(names) == ["temp_residual_c_rise_1h_6h", "temp_residual_c_rise_6h_1d"]
    assert rise_names(["gpu_temp_c_mean_1h", "power_w_std_1h"]) == []  # no residual (the disks): none
    frame = pl.DataFrame({"temp_residual_c_6h": [9.0, 2.0, None], "temp_residual_c_1d": [5.0, 2.5, 1.0]})
    rise = rise_columns(frame, ["temp_residual_c_rise_6h_1d", "temp_residual_c_rise_1h_6h"])
    assert list(rise) == ["temp_residual_c_rise_6h_1d"]  # no hour's residual in the frame
    assert np.allclose(rise["temp_residual_c_rise_6h_1d"], [4.0, -0.5, np.nan], equal_nan=True)


def _with_residuals(features: pl.DataFrame, failures: pl.DataFrame, rng: np.random.Generator) -> pl.DataFrame:
    """The fleet with a six-hour and a day's temperature residual, at any level (GPUs run
    cooler or hotter than their peers for many reasons): in the last day before a failure
    the six hours sit 3-6 °C above the day (a fast climb); everywhere else, healthy GPUs and
    slow drifts days ahead of a failure alike, the two windows agree within noise."""
    day = within_a_day_of_failure(features, failures)
    whole = rng.uniform(-5, 20, features.height)
    six = whole + rng.normal(0, 0.4, features.height)
    six[day] = whole[day] + rng.uniform(3, 6, day.sum())
    return features.with_columns(
        pl.Series("temp_residual_c_6h", six, dtype=pl.Float32),
        pl.Series("temp_residual_c_1d", whole, dtype=pl.Float32),
    )


def _climbing_and_drifting(probe: pl.DataFrame, rng: np.random.Generator) -> tuple[pl.DataFrame, pl.DataFrame]:
    level = pl.Series(rng.uniform(-3, 18, probe.height), dtype=pl.Float32)
    climbing = probe.with_columns(temp_residual_c_1d=level, temp_residual_c_6h=level + 4.5)
    return climbing, probe.with_columns(temp_residual_c_1d=level, temp_residual_c_6h=level)


def test_with_the_rise_a_fast_climb_ranks_above_a_slow_drift_at_the_same_level(tmp_path):
    check_recipe_feature(
        tmp_path, 5, _with_residuals, "temp_residual_c_rise_6h_1d", _climbing_and_drifting, temperature_rise=True
    )
