"""Alerts of a risk series, and the thresholds that give them.

An alert is a run of consecutive snapshots at or above a threshold, starting at its rising
edge (vocabulary: :mod:`foreshock.models.evaluation.metrics`, definitions:
``docs/metrics.md``).  Here: the alerting rules (``W``, ``L_min``), the alert starts of a
series, their count at many thresholds at once, the threshold that meets a drain budget
or a target precision, and the snapshot labels known at a time (the censoring rule every
metric shares).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from foreshock.contract import UTC_TS, label_column
from foreshock.hold import MAX_GAP_STEPS
from foreshock.models.estimators.base import require_columns
from foreshock.models.estimators.training import labelled_until, snapshot_step

US_PER_HOUR = 3.6e9


@dataclass(frozen=True)
class AlertWindow:
    """The alerting rules of ``[backtest]``.

    Attributes
    ----------
    alert_window
        ``W``: an alert that started more than ``W`` before a failure does not catch it.
    min_lead_time
        ``L_min``: an alert must start at least this long before the failure (time to drain).
    """

    alert_window: timedelta
    min_lead_time: timedelta

    @classmethod
    def from_config(cls, config) -> AlertWindow:
        return cls(config.duration("backtest", "alert_window"), config.duration("backtest", "min_lead_time"))


@dataclass
class _Series:
    """A risk series in arrays, sorted by unit and time, with each row's predecessor."""

    unit_id: np.ndarray
    ts_us: np.ndarray
    risk: np.ndarray
    previous: np.ndarray  # risk of the previous snapshot in the same run, -inf if none
    step: timedelta


def _series(scores: pl.DataFrame, step: timedelta | None = None) -> _Series:
    require_columns(scores, ("unit_id", "ts", "risk"), "risk series")
    frame = scores.select("unit_id", pl.col("ts").cast(UTC_TS), pl.col("risk").cast(pl.Float64)).sort("unit_id", "ts")
    step = step or snapshot_step(frame)
    max_gap_us = MAX_GAP_STEPS * step.total_seconds() * 1e6
    ts_us = frame.get_column("ts").dt.epoch("us").to_numpy()
    units = frame.get_column("unit_id").to_numpy()
    risk = np.nan_to_num(frame.get_column("risk").to_numpy(), nan=0.0)
    previous = np.full(risk.size, -np.inf)
    if risk.size > 1:
        same_run = (units[1:] == units[:-1]) & (np.diff(ts_us) <= max_gap_us)
        previous[1:] = np.where(same_run, risk[:-1], -np.inf)
    return _Series(units, ts_us, risk, previous, step)


def alert_starts(scores: pl.DataFrame, threshold: float, step: timedelta | None = None) -> pl.DataFrame:
    """Alert starts (rising edges) of a risk series at ``threshold``.

    Parameters
    ----------
    scores
        ``unit_id, ts, risk`` of one model and horizon.
    threshold
        An alert runs while risk >= threshold.
    step
        Snapshot interval (default: inferred from the series).

    Returns
    -------
    polars.DataFrame
        ``unit_id, alert_start, risk`` sorted by unit and time.
    """
    s = _series(scores, step)
    starts = (s.risk >= threshold) & (s.previous < threshold)
    return pl.DataFrame(
        {
            "unit_id": s.unit_id[starts].astype(str),
            "alert_start": pl.Series(s.ts_us[starts], dtype=pl.Int64)
            .cast(pl.Datetime("us"))
            .dt.replace_time_zone("UTC"),
            "risk": s.risk[starts],
        },
        schema={"unit_id": pl.String, "alert_start": UTC_TS, "risk": pl.Float64},
    )


def alerts_per_threshold(scores: pl.DataFrame, thresholds: np.ndarray, step: timedelta | None = None) -> np.ndarray:
    """Number of alert starts at each threshold, all at once.

    A row starts an alert at ``t`` exactly when ``previous < t <= risk``; counting those
    intervals for many ``t`` is two binary searches.
    """
    s = _series(scores, step)
    rising = s.risk > s.previous
    upper = np.sort(s.risk[rising])
    lower = np.sort(s.previous[rising])
    t = np.asarray(thresholds, dtype=np.float64)
    return (upper.size - np.searchsorted(upper, t, side="left")) - (lower.size - np.searchsorted(lower, t, side="left"))


def observed_span(scores: pl.DataFrame, step: timedelta) -> tuple[datetime, datetime]:
    """The scored period: the first snapshot to one interval after the last."""
    ts = scores.get_column("ts")
    return ts.min(), ts.max() + step


def span_days(start: datetime, end: datetime) -> float:
    """Days between ``start`` and ``end`` (at least a tiny positive amount: a divisor)."""
    return max((end - start).total_seconds() / 86400.0, 1e-9)


def threshold_for_budget(
    scores: pl.DataFrame,
    alerts_per_day: float,
    step: timedelta | None = None,
) -> float:
    """The threshold whose alert starts per day come closest to the drain budget ``k``.

    Among thresholds equally close, the highest (fewest alerts) wins.  Alert counts are not
    monotone in the threshold (a lower one merges runs), so every candidate is checked.
    """
    s = _series(scores, step)
    if s.risk.size == 0:
        return 1.0
    start, end = observed_span(scores, s.step)
    candidates = np.unique(s.risk[s.risk > s.previous])
    counts = alerts_per_threshold(scores, candidates, s.step)
    per_day = counts / span_days(start, end)
    distance = np.abs(per_day - alerts_per_day)
    best = np.flatnonzero(distance == distance.min())
    return float(candidates[best.max()])


def resolved_labels(frame: pl.DataFrame, failures: pl.DataFrame, horizon: str, until: datetime) -> pl.DataFrame:
    """``fails_within_<H>`` of each row of ``frame`` as known at ``until``, by one rule for both classes.

    A row is labelled only when its whole horizon ended by ``until`` (``ts + H <= until``):
    a failure seen in the open part of a horizon does not make a positive, exactly as the
    missing rest of the horizon does not make a negative.  Everything else is null
    (unresolved).  This is the resolved view of the training labels
    (:func:`foreshock.models.estimators.training.labelled_until` without ``weighted``), so training
    and evaluation share one censoring rule and a metric never counts late positives while
    it drops late negatives.

    Returns
    -------
    polars.DataFrame
        ``frame`` (rows at a failure instant and after ``until`` dropped) with the label
        column and ``time_to_failure_h``.
    """
    frame = frame.with_columns(pl.col("ts").cast(UTC_TS))
    known = failures.filter(pl.col("unit_id").is_in(frame.get_column("unit_id").unique().implode()))
    return labelled_until(frame, known, [horizon], until)


def series_outcomes(scores: pl.DataFrame, failures: pl.DataFrame, horizon: str, until: datetime) -> pl.DataFrame:
    """Snapshot labels known at ``until`` for the series' rows (null = unresolved)."""
    return resolved_labels(scores.select("unit_id", "ts", "risk"), failures, horizon, until)


def threshold_for_precision(
    scores: pl.DataFrame,
    failures: pl.DataFrame,
    horizon: str,
    target: float,
    step: timedelta | None = None,
    until: datetime | None = None,
    candidates: int = 200,
    min_lead_time: timedelta = timedelta(0),
) -> float | None:
    """The lowest threshold whose alert precision reaches ``target`` (None if none does).

    Candidates are the ``candidates`` upper quantiles of the rising-edge risks; thresholds
    with fewer than 3 resolved alerts are not trusted.  Outcomes are those known at
    ``until`` (:func:`resolved_labels`); an alert less than ``min_lead_time`` before its
    failure is late and counts in neither class.
    """
    s = _series(scores, step)
    if s.risk.size == 0:
        return None
    until = until or observed_span(scores, s.step)[1]
    labels = series_outcomes(scores, failures, horizon, until).sort("unit_id", "ts")
    # Rows of ``labels`` align with the series except rows at a failure instant (dropped).
    outcome = _align(s, labels, label_column(horizon))
    late = _align(s, labels, "time_to_failure_h") < min_lead_time.total_seconds() / 3600.0
    outcome[late] = np.nan
    rising = s.risk > s.previous
    grid = np.unique(np.quantile(s.risk[rising], np.linspace(0.5, 1.0, candidates))) if rising.any() else np.array([])
    best = None
    for t in grid[::-1]:
        starts = (s.risk >= t) & (s.previous < t)
        resolved = starts & ~np.isnan(outcome)
        if resolved.sum() < 3:
            continue
        precision = np.nansum(outcome[resolved]) / resolved.sum()
        if precision >= target:
            best = float(t)
    return best


def _align(s: _Series, labels: pl.DataFrame, column: str) -> np.ndarray:
    """The label of each series row as float (NaN where unresolved or dropped)."""
    keyed = pl.DataFrame(
        {
            "unit_id": s.unit_id.astype(str),
            "ts": pl.Series(s.ts_us, dtype=pl.Int64).cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
        }
    ).with_row_index("_row")
    joined = keyed.join(labels.select("unit_id", "ts", column), on=["unit_id", "ts"], how="left").sort("_row")
    return joined.get_column(column).cast(pl.Float64).to_numpy()
