"""Lead-time metrics: the one implementation (definitions in ``docs/metrics.md``).

Every number a report, a backtest, an MLflow review or a notebook shows about how well
foreshock flags failures comes from here, under the names defined in ``docs/metrics.md``.

Vocabulary
----------
risk series
    One model's risk for one horizon: ``unit_id, ts, risk`` (a slice of the scores table).
alert
    A run of consecutive snapshots of a unit with risk at or above the threshold.  The
    alert *starts* at the first snapshot of the run (the rising edge).  A gap in a unit's
    snapshots longer than 1.5 snapshot intervals ends a run.
caught failure
    An alert of the failed unit, in the same life (the alert's next failure is this one),
    started within the window ``W`` before the failure and at least ``L_min`` before it:
    ``failed_at - W <= alert_start <= failed_at - L_min``.  One alert credits at most one
    failure.
lead time
    ``failed_at`` minus the first alert start inside that window.
true / false / late / unresolved alert
    An alert is *late* when its unit fails less than ``L_min`` after it starts (too late to
    drain: neither caught nor true).  Otherwise it is true when its unit fails within the
    horizon ``H`` after the alert starts, false when the horizon passed without a failure,
    and unresolved when the horizon reaches past the end of observation (then it counts in
    neither, whatever happened since: the censoring rule of the training labels).
resolved snapshot
    A snapshot whose whole horizon ended by the end of observation (:func:`resolved_labels`);
    only those are labelled, positives and negatives alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from foreshock.contract import UTC_TS, label_column
from foreshock.costs import DrainCosts
from foreshock.features.labels import drain_spans
from foreshock.models.estimators.base import horizon_hours, require_columns
from foreshock.models.estimators.training import labelled_until, snapshot_step

_US_PER_HOUR = 3.6e9
CALIBRATION_BINS = 10


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


def gpu_hours_saved(caught: int, drains: int, healthy_drains: int, costs: DrainCosts) -> float:
    """Estimated GPU-hours saved by acting on the alerts (or drains), against doing nothing.

    Each caught failure avoids the unplanned loss ``costs.failure_loss_gpu_hours`` (the job's
    work since its last checkpoint, half an interval on average, plus the restart); each
    alert acted on costs a planned drain, ``costs.drain_cost_gpu_hours``; each drain of a
    healthy unit also keeps that unit out for the repair turnaround,
    ``costs.idle_unit_gpu_hours`` (the same three terms the drain policy decides with).  The
    policy replay uses this same function, so a backtest's and a replay's GPU-hours mean the
    same thing.
    """
    return float(
        caught * costs.failure_loss_gpu_hours
        - drains * costs.drain_cost_gpu_hours
        - healthy_drains * costs.idle_unit_gpu_hours
    )


# -- alerts ------------------------------------------------------------------------------


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
    max_gap_us = 1.5 * step.total_seconds() * 1e6
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


def _observed_span(scores: pl.DataFrame, step: timedelta) -> tuple[datetime, datetime]:
    ts = scores.get_column("ts")
    return ts.min(), ts.max() + step


def _days(start: datetime, end: datetime) -> float:
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
    start, end = _observed_span(scores, s.step)
    candidates = np.unique(s.risk[s.risk > s.previous])
    counts = alerts_per_threshold(scores, candidates, s.step)
    per_day = counts / _days(start, end)
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


def _outcomes(scores: pl.DataFrame, failures: pl.DataFrame, horizon: str, until: datetime) -> pl.DataFrame:
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
    until = until or _observed_span(scores, s.step)[1]
    labels = _outcomes(scores, failures, horizon, until).sort("unit_id", "ts")
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


# -- failures caught ---------------------------------------------------------------------


def next_failure(alerts: pl.DataFrame, failures: pl.DataFrame) -> pl.DataFrame:
    """Each alert with ``failed_at``: the failure ending the life the alert started in.

    That is the unit's first failure at or after the alert start (null when none is
    known): the only failure the alert can credit, so one alert never counts for two
    failures, and an alert of a GPU that was replaced never counts for its successor.
    """
    fails = failures.select(pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS)).unique()
    return (
        alerts.with_row_index("_alert")
        .sort("alert_start")
        .join_asof(
            fails.sort("failed_at"),
            left_on="alert_start",
            right_on="failed_at",
            by="unit_id",
            strategy="forward",
            check_sortedness=False,
        )
        .sort("_alert")
        .drop("_alert")
    )


def match_failures(
    alerts: pl.DataFrame,
    failures: pl.DataFrame,
    window: AlertWindow,
) -> pl.DataFrame:
    """Which failures an alert caught, and with what lead time.

    An alert is credited to its unit's next failure only (:func:`next_failure`); the
    failure is caught when one of its alerts started in ``[failed_at - W, failed_at - L_min]``.

    Returns
    -------
    polars.DataFrame
        The failures (``unit_id, failed_at, mode`` and any other column) plus ``caught``
        (bool) and ``lead_time_h`` (hours from the first alert start in the window to the
        failure; null when not caught).
    """
    w_us = int(window.alert_window.total_seconds() * 1e6)
    l_us = int(window.min_lead_time.total_seconds() * 1e6)
    fails = failures.with_columns(pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS))
    pairs = next_failure(alerts.select("unit_id", "alert_start"), fails).drop_nulls("failed_at")
    lead_us = (pl.col("failed_at") - pl.col("alert_start")).dt.total_microseconds()
    first = (
        pairs.filter((lead_us >= l_us) & (lead_us <= w_us))
        .group_by("unit_id", "failed_at")
        .agg((lead_us.max() / _US_PER_HOUR).alias("lead_time_h"))
    )
    return (
        fails.with_row_index("_failure")
        .join(first, on=["unit_id", "failed_at"], how="left")
        .with_columns(pl.col("lead_time_h").is_not_null().alias("caught"))
        .sort("_failure")
        .drop("_failure")
    )


def split_drained(failures: pl.DataFrame, drains: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Failures in two: those of units in service, and those *drained then failed*.

    A failure is drained-then-failed when its unit was in a recorded drain at the time
    (``drained_at <= failed_at <= returned_at``, an open drain has no ``returned_at``):
    the unit was already out (found broken in diagnostics, or failed in the shop), so the
    failure is neither a catch nor a miss of any model and is reported apart.

    Parameters
    ----------
    failures
        ``unit_id, failed_at`` (+ any columns).
    drains
        The ``drains`` table (``unit_id, drained_at, returned_at``), or None.
    """
    if drains is None or drains.height == 0:
        return failures, failures.clear()
    spans = drain_spans(drains)
    keyed = failures.with_row_index("_failure")
    inside = (
        keyed.select("_failure", pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS))
        .join(spans, on="unit_id")
        .filter(
            (pl.col("drained_at") <= pl.col("failed_at"))
            & (pl.col("returned_at").is_null() | (pl.col("failed_at") <= pl.col("returned_at")))
        )
        .get_column("_failure")
        .unique()
        .implode()
    )
    drained = pl.col("_failure").is_in(inside)
    return keyed.filter(~drained).drop("_failure"), keyed.filter(drained).drop("_failure")


def failures_in_scope(scores: pl.DataFrame, failures: pl.DataFrame, step: timedelta | None = None) -> pl.DataFrame:
    """The failures a series is judged on: of its units, inside its scored period."""
    step = step or snapshot_step(scores)
    start, end = _observed_span(scores, step)
    units = scores.get_column("unit_id").unique().implode()
    return failures.filter(
        pl.col("unit_id").is_in(units)
        & (pl.col("failed_at") > pl.lit(start).cast(UTC_TS))
        & (pl.col("failed_at") <= pl.lit(end).cast(UTC_TS))
    )


def with_precursor_flags(failures: pl.DataFrame, ground_truth: pl.DataFrame | None) -> pl.DataFrame:
    """Add ``has_precursor`` (null when unknown) from ground truth, matched by unit and time.

    Ground truth gives ``has_precursor`` directly or a ``precursor_onset`` (null = none).
    """
    if ground_truth is None or ground_truth.height == 0:
        return failures.with_columns(pl.lit(None, dtype=pl.Boolean).alias("has_precursor"))
    truth = ground_truth
    if "has_precursor" not in truth.columns:
        if "precursor_onset" not in truth.columns:
            raise ValueError("ground truth needs has_precursor or precursor_onset")
        truth = truth.with_columns(pl.col("precursor_onset").is_not_null().alias("has_precursor"))
    truth = truth.select(
        pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS).alias("_truth_at"), "has_precursor"
    ).sort("_truth_at")
    # Tickets are filed a little after the failure the simulator recorded: nearest within 1 day.
    return (
        failures.sort("failed_at")
        .join_asof(
            truth,
            left_on="failed_at",
            right_on="_truth_at",
            by="unit_id",
            strategy="nearest",
            tolerance=timedelta(days=1),
            check_sortedness=False,
        )
        .drop("_truth_at")
    )


# -- threshold-free ----------------------------------------------------------------------


def pr_auc(risk: np.ndarray, outcome: np.ndarray) -> float | None:
    """Average precision of snapshot risks against snapshot outcomes (None if no positive).

    ``sum_n (R_n - R_{n-1}) P_n`` over the distinct risk values from the highest down
    (the step-wise area under the precision-recall curve, as scikit-learn computes it).
    """
    outcome = np.asarray(outcome, dtype=np.float64)
    if outcome.size == 0 or outcome.max() == outcome.min():
        return None
    order = np.argsort(-np.asarray(risk, dtype=np.float64), kind="stable")
    r, y = np.asarray(risk)[order], outcome[order]
    last_of_value = np.r_[np.flatnonzero(np.diff(r)), r.size - 1]  # ties move together
    tp = np.cumsum(y)[last_of_value]
    precision = tp / (last_of_value + 1)
    recall = tp / y.sum()
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def calibration_error(risk: np.ndarray, outcome: np.ndarray, bins: int = CALIBRATION_BINS) -> float | None:
    """Expected calibration error over ``bins`` equal-count bins of predicted risk.

    ``sum_b n_b / N * |mean risk_b - failure rate_b|``; equal-count bins, because risks
    of rare failures crowd near zero and equal-width bins would put almost all rows in one.
    """
    if outcome.size == 0:
        return None
    order = np.argsort(risk, kind="stable")
    total = 0.0
    for chunk in np.array_split(order, min(bins, outcome.size)):
        total += chunk.size * abs(risk[chunk].mean() - outcome[chunk].mean())
    return float(total / outcome.size)


def c_index(
    risk: np.ndarray, time_to_event_h: np.ndarray, observed: np.ndarray, max_rows: int = 50_000, seed: int = 0
) -> float | None:
    """Harrell's concordance of risk with time to failure (lifelines, minus the risk).

    Snapshots without a known failure are censored at the end of observation.  Above
    ``max_rows`` a seeded random sample keeps it fast.
    """
    from lifelines.utils import concordance_index

    if observed.sum() == 0 or observed.size < 2:
        return None
    if observed.size > max_rows:
        pick = np.random.default_rng(seed).choice(observed.size, max_rows, replace=False)
        risk, time_to_event_h, observed = risk[pick], time_to_event_h[pick], observed[pick]
    return float(concordance_index(time_to_event_h, -risk, observed))


# -- the whole set -----------------------------------------------------------------------


@dataclass
class LeadTimeReport:
    """Metrics of one risk series at one operating point (names as in ``docs/metrics.md``)."""

    threshold: float | None
    alerts: int
    alerts_per_day: float
    true_alerts: int
    false_alerts: int
    late_alerts: int
    alerts_unresolved: int
    drained_then_failed: int
    precision: float | None
    alerted_units: int
    true_units: int
    precision_per_unit: float | None
    failures: int
    caught: int
    recall: float | None
    failures_with_precursor: int | None
    recall_with_precursor: float | None
    recall_without_precursor: float | None
    lead_time_p10_h: float | None
    lead_time_p50_h: float | None
    lead_time_p90_h: float | None
    unit_days: float
    false_alerts_per_1000_unit_days: float
    gpu_hours_saved: float
    by_mode: dict
    reweighted: list[str] | None = None  # the figures counting units by fleet_weight (None: unweighted)

    def to_dict(self) -> dict:
        out = asdict(self)
        if self.reweighted is None:
            del out["reweighted"]  # an unweighted report is what it always was
        return out


# Figures of :func:`judge_alerts` that count each unit by its ``fleet_weight`` when the
# units carry one; recall, caught, lead times and the raw counts do not.
REWEIGHTED = (
    "alerts_per_day",
    "precision",
    "precision_per_unit",
    "unit_days",
    "false_alerts_per_1000_unit_days",
    "gpu_hours_saved",
)


def _ratio(num: float, den: float) -> float | None:
    return float(num / den) if den else None


def _percentiles(values: np.ndarray) -> tuple[float | None, float | None, float | None]:
    if values.size == 0:
        return None, None, None
    p10, p50, p90 = np.percentile(values, [10, 50, 90])
    return float(p10), float(p50), float(p90)


def classify_alerts(
    alerts: pl.DataFrame, failures: pl.DataFrame, horizon: str, window: AlertWindow, until: datetime
) -> pl.DataFrame:
    """Each alert with ``failed_at`` (its life's failure) and ``outcome``.

    ``outcome`` is ``late`` (the failure followed less than ``L_min`` after the start),
    ``true`` (it followed within ``H``), ``false`` (``H`` passed without one) or
    ``unresolved`` (``H`` reaches past ``until``); the last three only for alerts whose
    horizon ended by ``until`` -- the censoring rule of :func:`resolved_labels`.
    """
    h_us = int(horizon_hours(horizon) * _US_PER_HOUR)
    l_us = int(window.min_lead_time.total_seconds() * 1e6)
    cut = pl.lit(until).cast(UTC_TS)
    known = failures.filter(pl.col("failed_at").cast(UTC_TS) <= cut)
    delay = (pl.col("failed_at") - pl.col("alert_start")).dt.total_microseconds()
    within_h = pl.col("failed_at").is_not_null() & (delay <= h_us)
    resolved = (pl.col("alert_start") + pl.duration(microseconds=h_us)) <= cut
    return next_failure(alerts, known).with_columns(
        pl.when(pl.col("failed_at").is_not_null() & (delay < l_us))
        .then(pl.lit("late"))
        .when(~resolved)
        .then(pl.lit("unresolved"))
        .when(within_h)
        .then(pl.lit("true"))
        .otherwise(pl.lit("false"))
        .alias("outcome")
    )


def _alerted_units(classified: pl.DataFrame) -> tuple[int, int, float, float]:
    """Alerted and true unit-lives, as counts and by ``weight``: a unit-life whose resolved
    alerts include a true one is one true unit (precision per unit)."""
    lives = (
        classified.filter(pl.col("outcome").is_in(["true", "false"]))
        .group_by("unit_id", "failed_at")
        .agg((pl.col("outcome") == "true").any().alias("true"), pl.col("weight").first())
    )
    if lives.height == 0:
        return 0, 0, 0, 0
    true = lives.filter(pl.col("true"))
    return lives.height, true.height, lives.get_column("weight").sum(), true.get_column("weight").sum()


def _unit_weights(frame: pl.DataFrame, weights: pl.DataFrame | None) -> pl.DataFrame:
    """``frame`` with ``weight``: the unit's ``fleet_weight`` (1.0 without one)."""
    if weights is None:
        return frame.with_columns(pl.lit(1, dtype=pl.Int64).alias("weight"))
    keyed = weights.select(pl.col("unit_id").cast(pl.String), pl.col("fleet_weight").alias("weight"))
    return frame.join(keyed, on="unit_id", how="left").with_columns(pl.col("weight").fill_null(1.0))


def _by_mode(matched: pl.DataFrame) -> dict[str, dict]:
    """Failures, caught, recall and lead-time percentiles per failure mode."""
    by_mode = {}
    for (mode,), part in matched.group_by(["mode"], maintain_order=True):
        p10, p50, p90 = _percentiles(part.get_column("lead_time_h").drop_nulls().to_numpy())
        by_mode[str(mode)] = {
            "failures": part.height,
            "caught": int(part.get_column("caught").sum()),
            "recall": _ratio(part.get_column("caught").sum(), part.height),
            "lead_time_p10_h": p10,
            "lead_time_p50_h": p50,
            "lead_time_p90_h": p90,
        }
    return by_mode


def judge_alerts(
    scores: pl.DataFrame,
    alerts: pl.DataFrame,
    failures: pl.DataFrame,
    horizon: str,
    window: AlertWindow,
    *,
    threshold: float | None = None,
    ground_truth: pl.DataFrame | None = None,
    costs: DrainCosts | None = None,
    step: timedelta | None = None,
    until: datetime | None = None,
    drains: pl.DataFrame | None = None,
    weights: pl.DataFrame | None = None,
) -> LeadTimeReport:
    """Every metric of a set of alerts raised on one risk series.

    Parameters
    ----------
    scores
        ``unit_id, ts, risk`` of one model and one horizon: the judged period and units.
    alerts
        ``unit_id, alert_start`` raised on ``scores`` (by :func:`alert_starts` or an
        operating point of :mod:`foreshock.models.evaluation.operating_points`).
    failures
        Canonical failures (``unit_id, failed_at, mode``); only those of the series' units
        within its scored period are judged.
    horizon
        ``H`` for alert precision (``"72h"``).
    window
        ``W`` and ``L_min``.
    threshold
        Reported as is (the operating point's threshold, if it has one).
    ground_truth
        Optional ``unit_id, failed_at`` + ``has_precursor`` or ``precursor_onset``.
    costs
        For ``gpu_hours_saved`` (default :class:`~foreshock.costs.DrainCosts`).
    step
        Snapshot interval (default: inferred).
    until
        End of observation of failures (default: last snapshot + one interval).
    drains
        Recorded drains (``unit_id, drained_at, returned_at``): failures during one are
        counted apart as ``drained_then_failed`` (:func:`split_drained`), not judged.
    weights
        ``unit_id, fleet_weight`` of a subsampled fleet: the figures in :data:`REWEIGHTED`
        count each unit by its weight (``reweighted`` names them); None: unweighted.
    """
    step = step or snapshot_step(scores)
    start, end = _observed_span(scores, step)
    until = until or end
    costs = costs or DrainCosts()
    classified = _unit_weights(classify_alerts(alerts, failures, horizon, window, until), weights)
    outcome = classified.get_column("outcome")
    true_alerts = int((outcome == "true").sum())
    false_alerts = int((outcome == "false").sum())
    late_alerts = int((outcome == "late").sum())
    unresolved = alerts.height - true_alerts - false_alerts - late_alerts
    alerted_units, true_units, alerted_w, true_units_w = _alerted_units(classified)
    weight = classified.get_column("weight")
    true_w, false_w = weight.filter(outcome == "true").sum(), weight.filter(outcome == "false").sum()

    judged, drained_then_failed = split_drained(failures_in_scope(scores, failures, step), drains)
    if "mode" not in judged.columns:
        judged = judged.with_columns(pl.lit(None, dtype=pl.String).alias("mode"))
    judged = with_precursor_flags(judged, ground_truth)
    matched = match_failures(alerts, judged, window)
    caught = int(matched.get_column("caught").sum())
    leads = matched.get_column("lead_time_h").drop_nulls().to_numpy()
    p10, p50, p90 = _percentiles(leads)
    flags = matched.get_column("has_precursor")
    with_p = matched.filter(pl.col("has_precursor") == True)  # noqa: E712
    without_p = matched.filter(pl.col("has_precursor") == False)  # noqa: E712
    known_precursor = flags.null_count() < matched.height
    by_mode = _by_mode(matched)
    snapshots = scores.height if weights is None else _unit_weights(scores.select("unit_id"), weights)["weight"].sum()
    unit_days = snapshots * step.total_seconds() / 86400.0
    return LeadTimeReport(
        threshold=None if threshold is None else float(threshold),
        alerts=alerts.height,
        alerts_per_day=weight.sum() / _days(start, end),
        true_alerts=true_alerts,
        false_alerts=false_alerts,
        late_alerts=late_alerts,
        alerts_unresolved=unresolved,
        drained_then_failed=drained_then_failed.height,
        precision=_ratio(true_w, true_w + false_w),
        alerted_units=alerted_units,
        true_units=true_units,
        precision_per_unit=_ratio(true_units_w, alerted_w),
        failures=matched.height,
        caught=caught,
        recall=_ratio(caught, matched.height),
        failures_with_precursor=with_p.height if known_precursor else None,
        recall_with_precursor=_ratio(with_p.get_column("caught").sum(), with_p.height) if known_precursor else None,
        recall_without_precursor=_ratio(without_p.get_column("caught").sum(), without_p.height)
        if known_precursor
        else None,
        lead_time_p10_h=p10,
        lead_time_p50_h=p50,
        lead_time_p90_h=p90,
        unit_days=unit_days,
        false_alerts_per_1000_unit_days=1000.0 * false_w / unit_days if unit_days else 0.0,
        gpu_hours_saved=gpu_hours_saved(caught, weight.sum(), false_w, costs),
        by_mode=by_mode,
        reweighted=None if weights is None else list(REWEIGHTED),
    )


def lead_time_report(
    scores: pl.DataFrame,
    failures: pl.DataFrame,
    threshold: float,
    horizon: str,
    window: AlertWindow,
    *,
    ground_truth: pl.DataFrame | None = None,
    costs: DrainCosts | None = None,
    step: timedelta | None = None,
    until: datetime | None = None,
) -> LeadTimeReport:
    """:func:`judge_alerts` of the plain alerts at ``threshold`` (:func:`alert_starts`)."""
    step = step or snapshot_step(scores)
    return judge_alerts(
        scores,
        alert_starts(scores, threshold, step),
        failures,
        horizon,
        window,
        threshold=threshold,
        ground_truth=ground_truth,
        costs=costs,
        step=step,
        until=until,
    )


def snapshot_metrics(
    scores: pl.DataFrame,
    failures: pl.DataFrame,
    horizon: str,
    *,
    until: datetime | None = None,
    step: timedelta | None = None,
) -> dict:
    """Threshold-free metrics of one risk series: ``pr_auc``, ``c_index``, ``calibration_error``.

    Only resolved snapshots are judged (:func:`resolved_labels`: the whole horizon ended
    by ``until``, whatever happened in it); ``unresolved_snapshots`` counts the others.
    Snapshots taken at a failure instant are left out.  ``largest_tie_share`` is the share
    of snapshots holding the most common risk value (a saturated model ties most of them).
    """
    step = step or snapshot_step(scores)
    until = until or _observed_span(scores, step)[1]
    labelled = _outcomes(scores, failures, horizon, until)
    label = labelled.get_column(label_column(horizon))
    known = label.is_not_null().to_numpy()
    risk = labelled.get_column("risk").to_numpy()
    outcome = label.to_numpy()[known].astype(np.float64)
    ttf = labelled.get_column("time_to_failure_h").to_numpy()
    observed = ~np.isnan(ttf.astype(np.float64))
    open_h = (
        labelled.select(((pl.lit(until).cast(UTC_TS) - pl.col("ts")).dt.total_microseconds() / _US_PER_HOUR).alias("h"))
        .get_column("h")
        .to_numpy()
    )
    duration = np.where(observed, np.nan_to_num(ttf.astype(np.float64)), open_h)
    _, counts = np.unique(risk, return_counts=True)
    return {
        "snapshots": int(known.sum()),
        "unresolved_snapshots": int((~known).sum()),
        "positive_snapshots": int(outcome.sum()),
        "largest_tie_share": float(counts.max() / risk.size) if risk.size else None,
        "pr_auc": pr_auc(risk[known], outcome),
        "c_index": c_index(risk, np.maximum(duration, 1e-6), observed),
        "calibration_error": calibration_error(risk[known], outcome),
        "mean_risk": float(risk[known].mean()) if known.any() else None,
        "failure_rate": float(outcome.mean()) if outcome.size else None,
    }
