"""Temperature rise: how fast a GPU's heat beyond its load is climbing.

``temp_residual_c_<w>`` is a GPU's mean temperature over the window ``w`` minus what its
power draw predicts among the GPUs of its model at the same snapshot
(:mod:`foreshock.features.peers`): a failing cooler or thermal interface lifts it for days
before the GPU overheats.  Its level says how far the drift has gone, not how fast it is
going: a drift that will end in a day and one that will end in a week pass the same level
on the way, and the short one is the one to drain now.  The difference of two nested
windows is the slope (``temp_residual_c_rise_6h_1d`` = the last six hours' residual minus
the day's): trees splitting one column at a time need many splits, and more failures than
a real fleet has, to find that diagonal between ``temp_residual_c_6h`` and
``temp_residual_c_1d``; on the difference it is one split.

``temp_residual_c_rise_<a>_<b>`` is ``temp_residual_c_<a> - temp_residual_c_<b>`` for
consecutive windows ``a < b``.  The name says how to compute it, so a saved model needs no
other state to compute its inputs; a data set without the residual (the disks) gets none.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from foreshock.durations import parse_duration
from foreshock.models.estimators.base import ratio_columns

RESIDUAL = "temp_residual_c_"
_WINDOW = re.compile(rf"^{RESIDUAL}(?P<w>\d+(?:\.\d+)?[smhdw])$")
_RISE = re.compile(rf"^{RESIDUAL}rise_(?P<a>\d+(?:\.\d+)?[smhdw])_(?P<b>\d+(?:\.\d+)?[smhdw])$")


def rise_names(columns: list[str]) -> list[str]:
    """The rise of each consecutive pair of the residual's windows among ``columns``."""
    windows = sorted((m["w"] for c in columns if (m := _WINDOW.match(c))), key=parse_duration)
    return [f"{RESIDUAL}rise_{a}_{b}" for a, b in zip(windows, windows[1:])]


def rise_columns(frame: pl.DataFrame, names: list[str]) -> dict[str, np.ndarray]:
    """Values of the rise ``names`` (of :func:`rise_names`) whose two residuals ``frame``
    holds, Float32 (NaN where either is missing)."""
    return ratio_columns(frame, names, _RISE, lambda m: (f"{RESIDUAL}{m['a']}", f"{RESIDUAL}{m['b']}"), np.subtract)
