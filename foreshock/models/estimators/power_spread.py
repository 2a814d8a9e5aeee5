"""Power spread: how much a GPU's power draw varies beyond what its utilization explains.

A GPU's power follows its load: a job that starts, stops or changes phase swings the draw
by hundreds of watts, so ``power_w_std_1h`` of a busy, healthy GPU is as high as that of a
GPU whose power delivery is failing (a failing voltage regulator or power supply shows as
noise, spikes and dips at a steady load, hours before the GPU falls off the bus).  The two
differ in how the draw varies *at the same utilization*: one split on the ratio of the
power's spread to the utilization's spread, where trees splitting one column at a time need
many splits to find the diagonal.

``<power>_spread_<w>`` is ``power_w_std_<w> / (gpu_util_pct_std_<w> + 1)`` for each window
``w`` that has both columns (watts per percentage point of utilization; the ``+ 1`` keeps a
GPU at a perfectly steady load finite).  The name says how to compute it, so a saved model
needs no other state.  A data set without both columns (the disks) gets none.

The feature store writes the same ratio per snapshot interval and keeps a window's largest
(``power_w_jitter_max_<w>``, :mod:`foreshock.features.windows`); the default recipe does not read
it (``models/lightgbm.toml`` ``exclude``).
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from foreshock.models.estimators.base import ratio_columns

POWER_STD = "power_w_std_"
UTIL_STD = "gpu_util_pct_std_"
_SPREAD = re.compile(r"^power_w_spread_(?P<w>\d+(?:\.\d+)?[smhdw])$")


def spread_names(columns: list[str]) -> list[str]:
    """The power spread of each window whose power and utilization spreads ``columns`` hold."""
    have = set(columns)
    windows = [c.removeprefix(POWER_STD) for c in columns if c.startswith(POWER_STD)]
    return [f"power_w_spread_{w}" for w in windows if f"{UTIL_STD}{w}" in have]


def spread_columns(frame: pl.DataFrame, names: list[str]) -> dict[str, np.ndarray]:
    """Values of the spread ``names`` (of :func:`spread_names`) whose inputs ``frame`` holds,
    Float32 (NaN where either input is missing)."""
    return ratio_columns(
        frame,
        names,
        _SPREAD,
        lambda m: (f"{POWER_STD}{m['w']}", f"{UTIL_STD}{m['w']}"),
        lambda power, util: power / (np.maximum(util, 0.0) + 1.0),
    )
