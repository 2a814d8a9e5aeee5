"""Lead-time metrics: the one implementation (definitions in ``docs/metrics.md``).

Every number a report, a backtest, an MLflow review or a notebook shows about how well
foreshock flags failures comes from here, under the names defined in ``docs/metrics.md``,
built on :mod:`foreshock.models.evaluation.alerts` (alert starts and the thresholds that
give them) and :mod:`foreshock.models.evaluation.caught` (which failures they caught).

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
    A snapshot whose whole horizon ended by the end of observation (:func:`~foreshock.models.evaluation.alerts.resolved_labels`);
    only those are labelled, positives and negatives alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from foreshock.contract import UTC_TS, label_column
from foreshock.costs import DrainCosts
from foreshock.models.estimators.base import horizon_hours
from foreshock.models.estimators.training import snapshot_step
from foreshock.models.evaluation.alerts import (
    US_PER_HOUR,
    AlertWindow,
    alert_starts,
    observed_span,
    series_outcomes,
    span_days,
)
from foreshock.models.evaluation.caught import (
    failures_in_scope,
    match_failures,
    next_failure,
    split_drained,
    with_precursor_flags,
)

CALIBRATION_BINS = 10


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
    early_alerts: int  # false alerts whose unit failed later than H but within W (each also catches it)
    precision: float | None
    alerted_units: int
    true_units: int
    precision_per_unit: float | None
    failures: int
    caught: int
    caught_within_horizon: int  # caught by an alert that started at most H before the failure (a true alert)
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
    horizon ended by ``until`` -- the censoring rule of :func:`~foreshock.models.evaluation.alerts.resolved_labels`.
    """
    h_us = int(horizon_hours(horizon) * US_PER_HOUR)
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
        ``unit_id, alert_start`` raised on ``scores`` (by :func:`~foreshock.models.evaluation.alerts.alert_starts` or an
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
        counted apart as ``drained_then_failed`` (:func:`~foreshock.models.evaluation.caught.split_drained`), not judged.
    weights
        ``unit_id, fleet_weight`` of a subsampled fleet: the figures in :data:`REWEIGHTED`
        count each unit by its weight (``reweighted`` names them); None: unweighted.
    """
    # Over 80 lines for its parameter list and docstring; the body is one pass: classify
    # the alerts, match the judged failures, assemble every figure of the set together.
    step = step or snapshot_step(scores)
    start, end = observed_span(scores, step)
    until = until or end
    costs = costs or DrainCosts()
    classified = _unit_weights(classify_alerts(alerts, failures, horizon, window, until), weights)
    outcome = classified.get_column("outcome")
    true_alerts = int((outcome == "true").sum())
    false_alerts = int((outcome == "false").sum())
    late_alerts = int((outcome == "late").sum())
    # W may be longer than H: a false alert whose unit failed within W anyway drained a failing unit early
    delay = classified.get_column("failed_at") - classified.get_column("alert_start")
    early_alerts = int(((outcome == "false") & (delay <= window.alert_window)).fill_null(False).sum())
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
    # W may be longer than H: an alert more than H ahead catches its failure but counts as
    # false in precision.  How many catches an alert that is also true made:
    caught_within_h = int((matched.get_column("nearest_lead_h") <= horizon_hours(horizon)).sum())
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
        alerts_per_day=weight.sum() / span_days(start, end),
        true_alerts=true_alerts,
        false_alerts=false_alerts,
        late_alerts=late_alerts,
        alerts_unresolved=unresolved,
        drained_then_failed=drained_then_failed.height,
        early_alerts=early_alerts,
        precision=_ratio(true_w, true_w + false_w),
        alerted_units=alerted_units,
        true_units=true_units,
        precision_per_unit=_ratio(true_units_w, alerted_w),
        failures=matched.height,
        caught=caught,
        caught_within_horizon=caught_within_h,
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
    """:func:`judge_alerts` of the plain alerts at ``threshold`` (:func:`~foreshock.models.evaluation.alerts.alert_starts`)."""
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

    Only resolved snapshots are judged (:func:`~foreshock.models.evaluation.alerts.resolved_labels`: the whole horizon ended
    by ``until``, whatever happened in it); ``unresolved_snapshots`` counts the others.
    Snapshots taken at a failure instant are left out.  ``largest_tie_share`` is the share
    of snapshots holding the most common risk value (a saturated model ties most of them).
    """
    step = step or snapshot_step(scores)
    until = until or observed_span(scores, step)[1]
    labelled = series_outcomes(scores, failures, horizon, until)
    label = labelled.get_column(label_column(horizon))
    known = label.is_not_null().to_numpy()
    risk = labelled.get_column("risk").to_numpy()
    outcome = label.to_numpy()[known].astype(np.float64)
    ttf = labelled.get_column("time_to_failure_h").to_numpy()
    observed = ~np.isnan(ttf.astype(np.float64))
    open_h = (
        labelled.select(((pl.lit(until).cast(UTC_TS) - pl.col("ts")).dt.total_microseconds() / US_PER_HOUR).alias("h"))
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
