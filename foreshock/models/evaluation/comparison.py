"""Champion against challenger, out of sample, with the uncertainty the window really has.

The review of :mod:`foreshock.models.registry.review` asks whether a new model is at least as good
as the one in production.  Three things make that question honest:

1. **Out of sample.**  The challenger's recipe is refitted on data that ends one horizon
   before the review window (:func:`fit_before_window`: snapshots before
   ``window_start - H``, labels as known at ``window_start``), so none of its training
   labels looks into the window.  Both versions are then scored on the window only.
2. **Paired bootstrap over units.**  A window holds few failures, and a unit's snapshots,
   alerts and failure are not independent; :func:`bootstrap` resamples *units* with
   replacement (the same draw for both versions) and recomputes recall and precision at
   the drain budget and PR-AUC, giving percentile intervals of each version's value and
   of the difference challenger - champion.
3. **Guardrails against the intervals** (:func:`check_guardrails`): a drop counts only when
   the whole interval of the difference lies beyond the allowed drop; and the challenger's
   PR-AUC must beat the base rate: the lower end of its PR-AUC-to-base-rate ratio must be at
   least ``min_pr_auc_lift``.  A constant predictor has PR-AUC equal to the base rate in
   every resample (ratio 1), so it cannot pass, however well calibrated it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from foreshock.contract import UTC_TS, is_label_column, label_column
from foreshock.durations import parse_duration
from foreshock.models.estimators.dataset import FeatureSource, FrameSource, as_source
from foreshock.models.estimators.training import snapshot_step
from foreshock.models.evaluation.alert_replay import policy_alerts
from foreshock.models.evaluation.alerts import AlertWindow, resolved_labels
from foreshock.models.evaluation.caught import failures_in_scope, match_failures
from foreshock.models.evaluation.metrics import classify_alerts, pr_auc
from foreshock.models.evaluation.operating_points import NO_FLOOR, OperatingPoints


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap percentile interval (NaN where not measurable)."""

    estimate: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class ReviewSettings:
    """``[review]``: allowed drops, the calibration bound, the base-rate margin, the bootstrap."""

    max_recall_drop: float
    max_precision_drop: float
    max_calibration_error: float
    min_pr_auc_lift: float
    bootstrap: int
    confidence: float

    @classmethod
    def from_config(cls, config: Any) -> ReviewSettings:
        s = config.section("review")
        return cls(
            max_recall_drop=float(s["max_recall_drop"]),
            max_precision_drop=float(s["max_precision_drop"]),
            max_calibration_error=float(s["max_calibration_error"]),
            min_pr_auc_lift=float(s["min_pr_auc_lift"]),
            bootstrap=int(s["bootstrap"]),
            confidence=float(s["confidence"]),
        )


# -- the out-of-sample challenger --------------------------------------------------------


def unlabelled(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` without label columns (a labelled frame handed back to training)."""
    return frame.drop([c for c in frame.columns if is_label_column(c)])


def training_cut(window_start: datetime, horizon: str) -> datetime:
    """The last instant a challenger's training snapshot may have: one horizon before the window."""
    return window_start - parse_duration(horizon)


def fit_before_window(
    features: pl.DataFrame | FeatureSource | FrameSource,
    failures: pl.DataFrame,
    config: Any,
    window_start: datetime,
    horizon: str,
    *,
    drains: pl.DataFrame | None = None,
):
    """The challenger's recipe (``[models]`` of ``config``) fitted on data before the window:
    its primary model only, the one a review measures.

    Snapshots before ``window_start - H`` with the failures known at ``window_start``: every
    training label is resolved by the time the window opens, and none looks into it (the
    purge of one horizon).  Labels are the training's censoring-correct labels
    (:func:`foreshock.models.estimators.training.labelled_until` rule) with the cutoff at
    ``window_start``; ``drains`` censor them as in ``foreshock train``.  ``features`` is
    a frame (label columns are dropped) or the feature store, of which only the training
    sample before the purge is read.

    Returns
    -------
    foreshock.models.estimators.bundle.RiskBundle
        Its ``trained_range`` ends at ``window_start``.
    """
    from foreshock.models.estimators.bundle import train_bundle

    source = as_source(unlabelled(features) if isinstance(features, pl.DataFrame) else features)
    train = source.before(training_cut(window_start, horizon))
    if train.scan().head(1).collect().height == 0:
        raise ValueError(
            f"no snapshot before {training_cut(window_start, horizon)}: the review window leaves no history"
        )
    known = failures.filter(pl.col("failed_at").cast(UTC_TS) <= pl.lit(window_start).cast(UTC_TS))
    return train_bundle(train, known, config, until=window_start, drains=drains, primary_only=True)


# -- per-unit pieces for the bootstrap ---------------------------------------------------


@dataclass
class UnitTable:
    """Per unit: failures judged, caught, true and false alerts at the budget; resolved rows."""

    units: np.ndarray  # unit ids, sorted
    failures: np.ndarray
    caught: np.ndarray
    true_alerts: np.ndarray
    false_alerts: np.ndarray
    row_unit: np.ndarray  # per resolved snapshot: index into ``units``
    risk: np.ndarray
    outcome: np.ndarray


def unit_table(
    series: pl.DataFrame, failures: pl.DataFrame, horizon: str, config: Any, until: datetime | None = None
) -> UnitTable:
    """The per-unit counts of one risk series at the review's budget point (the day's top k,
    as in the backtest).

    The totals over all units are exactly what :func:`foreshock.models.evaluation.judging.judge_scores`
    reports for the same series; the bootstrap re-adds them over resampled units.
    """
    step = snapshot_step(series)
    window = AlertWindow.from_config(config)
    settings = OperatingPoints.from_config(config)
    ts = series.get_column("ts")
    until = until or ts.max() + step
    alerts = policy_alerts(series, NO_FLOOR, settings.budget_rule, step)
    classified = classify_alerts(alerts, failures, horizon, window, until)
    matched = match_failures(alerts, failures_in_scope(series, failures, step), window)
    labelled = resolved_labels(series.select("unit_id", "ts", "risk"), failures, horizon, until)
    label = label_column(horizon)
    resolved = labelled.filter(pl.col(label).is_not_null())
    units = np.sort(series.get_column("unit_id").unique().to_numpy().astype(str))

    def per_unit(frame: pl.DataFrame, value: pl.Expr) -> np.ndarray:
        counts = frame.group_by("unit_id").agg(value.alias("n"))
        out = np.zeros(units.size)
        if counts.height:
            idx = np.searchsorted(units, counts.get_column("unit_id").to_numpy().astype(str))
            out[idx] = counts.get_column("n").to_numpy()
        return out

    return UnitTable(
        units=units,
        failures=per_unit(matched, pl.len()),
        caught=per_unit(matched, pl.col("caught").sum()),
        true_alerts=per_unit(classified, (pl.col("outcome") == "true").sum()),
        false_alerts=per_unit(classified, (pl.col("outcome") == "false").sum()),
        row_unit=np.searchsorted(units, resolved.get_column("unit_id").to_numpy().astype(str)),
        risk=resolved.get_column("risk").to_numpy().astype(np.float64),
        outcome=resolved.get_column(label).cast(pl.Float64).to_numpy(),
    )


def _stats(table: UnitTable, weight: np.ndarray) -> dict[str, float]:
    """Recall, precision, PR-AUC and base rate with units counted ``weight`` times."""

    def ratio(num: np.ndarray, den: np.ndarray) -> float:
        d = float(weight @ den)
        return float(weight @ num) / d if d > 0 else math.nan

    rows = np.repeat(np.arange(table.risk.size), weight[table.row_unit].astype(int))
    outcome = table.outcome[rows]
    auc = pr_auc(table.risk[rows], outcome) if rows.size else None
    base = float(outcome.mean()) if outcome.size else math.nan
    return {
        "recall": ratio(table.caught, table.failures),
        "precision": ratio(table.true_alerts, table.true_alerts + table.false_alerts),
        "pr_auc": math.nan if auc is None else auc,
        "base_rate": base,
        "pr_auc_lift": (auc / base) if auc is not None and base > 0 else math.nan,
    }


METRICS = ("recall", "precision", "pr_auc", "base_rate", "pr_auc_lift")


def bootstrap(
    challenger: UnitTable,
    champion: UnitTable | None,
    replicates: int,
    confidence: float,
    seed: int = 0,
) -> dict[str, dict[str, Interval]]:
    """Percentile intervals of each version's metrics and of their differences.

    Units are resampled with replacement, the same draw for both versions (paired); both
    tables must cover the same units (the same window).

    Returns
    -------
    dict
        ``{"challenger": {metric: Interval}, "champion": {...}, "difference": {...}}``
        (difference = challenger - champion; the last two only with a champion).
    """
    if champion is not None and not np.array_equal(challenger.units, champion.units):
        raise ValueError("champion and challenger were scored on different units")
    n = challenger.units.size
    rng = np.random.default_rng(seed)
    ones = np.ones(n)
    point = {"challenger": _stats(challenger, ones)}
    if champion is not None:
        point["champion"] = _stats(champion, ones)
        point["difference"] = {m: point["challenger"][m] - point["champion"][m] for m in METRICS}
    draws: dict[str, list[dict[str, float]]] = {k: [] for k in point}
    for _ in range(replicates):
        weight = np.bincount(rng.integers(0, n, n), minlength=n).astype(np.float64)
        new = _stats(challenger, weight)
        draws["challenger"].append(new)
        if champion is not None:
            old = _stats(champion, weight)
            draws["champion"].append(old)
            draws["difference"].append({m: new[m] - old[m] for m in METRICS})
    alpha = (1.0 - confidence) / 2.0
    out: dict[str, dict[str, Interval]] = {}
    for role, estimates in point.items():
        out[role] = {}
        for metric in METRICS:
            values = np.array([d[metric] for d in draws[role]], dtype=np.float64)
            values = values[np.isfinite(values)]
            low, high = (
                (float(np.quantile(values, alpha)), float(np.quantile(values, 1.0 - alpha)))
                if values.size
                else (math.nan, math.nan)
            )
            out[role][metric] = Interval(float(estimates[metric]), low, high)
    return out


# -- guardrails --------------------------------------------------------------------------


@dataclass(frozen=True)
class GuardrailCheck:
    """One guardrail, the values it compared and whether it held."""

    name: str
    rule: str
    challenger: float
    champion: float | None
    passed: bool
    interval: Interval | None = None


def check_guardrails(
    intervals: Mapping[str, Mapping[str, Interval]],
    calibration_error: float,
    settings: ReviewSettings,
) -> list[GuardrailCheck]:
    """The guardrails of ``[review]`` against the bootstrap intervals (NaN never passes).

    * recall / precision at the drain budget: fail only when the whole interval of
      challenger - champion lies below ``-max_recall_drop`` / ``-max_precision_drop`` (the
      window shows a drop larger than allowed; a difference inside the noise is no drop);
    * calibration error of the challenger at most ``max_calibration_error``;
    * PR-AUC above the base rate: the lower end of the challenger's PR-AUC / base rate at
      least ``min_pr_auc_lift``.
    """

    def finite(*values: float | None) -> bool:
        return all(v is not None and math.isfinite(v) for v in values)

    checks = []
    own = intervals["challenger"]
    if "difference" in intervals:
        champion, difference = intervals["champion"], intervals["difference"]
        for metric, limit in (("recall", settings.max_recall_drop), ("precision", settings.max_precision_drop)):
            diff = difference[metric]
            checks.append(
                GuardrailCheck(
                    f"{metric} at drain budget",
                    f"interval of challenger - champion reaches -{limit:g} or above",
                    own[metric].estimate,
                    champion[metric].estimate,
                    finite(diff.estimate, diff.high) and diff.high >= -limit - 1e-12,
                    diff,
                )
            )
    checks.append(
        GuardrailCheck(
            "calibration error",
            f"challenger <= {settings.max_calibration_error:g}",
            calibration_error,
            None,
            finite(calibration_error) and calibration_error <= settings.max_calibration_error,
        )
    )
    lift = own["pr_auc_lift"]
    checks.append(
        GuardrailCheck(
            "PR-AUC above the base rate",
            f"lower end of PR-AUC / base rate >= {settings.min_pr_auc_lift:g}",
            lift.estimate,
            None,
            finite(lift.low) and lift.low >= settings.min_pr_auc_lift,
            lift,
        )
    )
    return checks


def rules_checks(intervals: Mapping[str, Mapping[str, Interval]], settings: ReviewSettings) -> list[GuardrailCheck]:
    """Never serve a model worse than the rules: the challenger against the severity-ranked
    threshold rules at the same drain budget on the same window.

    ``intervals`` is :func:`bootstrap` of the challenger (as ``challenger``) paired with the
    ranked rules (as ``champion``).  Catches (recall: the same failures for both) and
    precision fail, as against the champion, when the whole interval of challenger - rules
    lies below ``-max_recall_drop`` / ``-max_precision_drop``: the window shows the
    challenger below the rules by more than allowed.  NaN never passes.
    """
    checks = []
    own, rules, difference = intervals["challenger"], intervals["champion"], intervals["difference"]
    for metric, label, limit in (
        ("recall", "catches", settings.max_recall_drop),
        ("precision", "precision", settings.max_precision_drop),
    ):
        diff = difference[metric]
        passed = all(v is not None and math.isfinite(v) for v in (diff.estimate, diff.high))
        checks.append(
            GuardrailCheck(
                f"{label} at drain budget vs the ranked rules",
                f"interval of challenger - ranked rules reaches -{limit:g} or above",
                own[metric].estimate,
                rules[metric].estimate,
                passed and diff.high >= -limit - 1e-12,
                diff,
            )
        )
    return checks
