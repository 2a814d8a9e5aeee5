"""Window shares: how much of a counter's increase over a window came in its last part.

A counter's increases over nested windows (``<m>_increase_6h`` and ``<m>_increase_1d``)
tell a burst from a trend.  A healthy GPU's burst of corrected memory errors puts a day's
whole increase into a few hours (``6h / 1d`` near 1, then 0 once it stops); a failing
GPU's single-bit error rate rises steadily over days (``6h / 1d`` near a quarter).  At the
burst's peak its hour, six-hour and day increases reach those of a failing GPU two days
out, and its acceleration over the week is higher: trees splitting one column at a time
need many splits to find the diagonal ``increase_6h = increase_1d`` from a few dozen
failures, one split on the share.

``<m>_share_<a>_<b>`` is ``<m>_increase_<a> / <m>_increase_<b>`` for consecutive windows
``a < b`` of the same counter, null where the longer window saw no increase.  The name
says how to compute it, so a saved model needs no other state to compute its inputs.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from foreshock.models.estimators.base import ratio_columns, windowed_columns

_SHARE = re.compile(r"^(?P<metric>.+)_share_(?P<a>\d+(?:\.\d+)?[smhdw])_(?P<b>\d+(?:\.\d+)?[smhdw])$")


def share_names(columns: list[str]) -> list[str]:
    """The share of each counter's consecutive increase windows among ``columns``."""
    out = []
    for metric, windows in windowed_columns(columns, "increase").items():
        ordered = [windows[w].removeprefix(f"{metric}_increase_") for w in sorted(windows)]
        out += [f"{metric}_share_{a}_{b}" for a, b in zip(ordered, ordered[1:])]
    return out


def share_columns(frame: pl.DataFrame, names: list[str]) -> dict[str, np.ndarray]:
    """Values of the share ``names`` (of :func:`share_names`) whose increases ``frame``
    holds, Float32 with NaN where the longer window saw no increase."""

    def share(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, num / den, np.nan)

    def inputs(m: re.Match) -> tuple[str, str]:
        return f"{m['metric']}_increase_{m['a']}", f"{m['metric']}_increase_{m['b']}"

    return ratio_columns(frame, names, _SHARE, inputs, share)
