"""The hold before a unit enters drain (``[policy] enter_for``): the ``for`` of an alert rule.

A risk that crosses the drain threshold for an hour or two should not drain a unit; one
that stays above it should.  A benign burst of corrected memory errors lifts a GPU's
short-window features for a few hours, and its risk with them, where a failing GPU's risk
stays up for days.  Prometheus alerting rules carry the same idea as ``for``: the condition
must hold at every evaluation for that long before the alert fires.

A unit's **held risk** at a snapshot is the lowest of its risks at its last
``k = ceil(enter_for / step)`` snapshots when they are consecutive (no gap over 1.5 snapshot
intervals), and null when it has fewer: the unit enters drain once its held risk reaches the
threshold, that is once its risk has been at or above it at each of its last ``k``
snapshots.  Each snapshot stands for its interval, so a hold no longer than one snapshot
interval changes nothing (``k = 1``: the held risk is the risk), and daily snapshots are
never delayed by an hours-long hold.

One function computes it for the three places that decide entry: the backtest's replay of
the policy (:mod:`foreshock.models.evaluation.alert_replay`), live scoring (which scores
each unit's last ``k`` snapshots) and the drain replay, so all three agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta

import polars as pl

HELD_COLUMN = "risk_held"
# A gap longer than this many snapshot intervals breaks a run (the replay's own rule for
# "the unit was out").
MAX_GAP_STEPS = 1.5


def hold_snapshots(hold: timedelta, step: timedelta) -> int:
    """How many consecutive snapshots a hold spans: ``ceil(hold / step)``, at least 1."""
    if step <= timedelta(0):
        raise ValueError(f"snapshot interval must be positive, got {step}")
    return max(1, math.ceil(hold / step - 1e-9))


def with_held_risk(
    frame: pl.DataFrame,
    hold: timedelta,
    step: timedelta,
    *,
    by: Sequence[str] = ("unit_id",),
    risk: str = "risk",
    ts: str = "ts",
) -> pl.DataFrame:
    """``frame`` with :data:`HELD_COLUMN` added (rows in their original order).

    Parameters
    ----------
    frame
        One row per series (``by``) and snapshot ``ts`` (a datetime), with its ``risk``.
    hold, step
        ``[policy] enter_for`` and the snapshot interval.
    by
        The columns naming one risk series (a unit; a unit and horizon for long scores).
    """
    k = hold_snapshots(hold, step)
    if k == 1:
        return frame.with_columns(pl.col(risk).alias(HELD_COLUMN))
    keys = list(by)
    lowest = pl.col(risk).rolling_min(window_size=k).over(keys)
    # the k snapshots are consecutive when none of their k - 1 gaps is over the limit
    widest_gap = pl.col("_gap").rolling_max(window_size=k - 1).over(keys)
    held = pl.when(widest_gap <= step * MAX_GAP_STEPS).then(lowest).otherwise(None)
    return (
        frame.with_row_index("_order")
        .sort([*keys, ts])
        .with_columns(pl.col(ts).diff().over(keys).alias("_gap"))
        .with_columns(held.alias(HELD_COLUMN))
        .sort("_order")
        .drop("_order", "_gap")
    )
