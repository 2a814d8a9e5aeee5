"""Judging a scores table: every model and horizon at each operating point.

The one judging of out-of-sample scores, used by the walk-forward backtest
(:func:`foreshock.models.evaluation.backtest.walk_forward`) and by the registry's
champion/challenger review on its window: each operating point's thresholds chosen from
the past only (:mod:`foreshock.models.evaluation.operating_points`), its alerts judged by
the lead-time metrics (:mod:`foreshock.models.evaluation.metrics`).  The result is the
JSON-ready report that :mod:`foreshock.models.evaluation.backtest_report` renders.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from foreshock.config import Config
from foreshock.contract import UTC_TS
from foreshock.costs import DrainCosts
from foreshock.durations import format_duration
from foreshock.hold import entry_series
from foreshock.models.estimators.base import decision_horizon
from foreshock.models.estimators.training import snapshot_step
from foreshock.models.evaluation.alert_replay import Period, RiskReplay, mean_allowance, policy_alerts
from foreshock.models.evaluation.alerts import AlertWindow, observed_span
from foreshock.models.evaluation.metrics import classify_alerts, judge_alerts, snapshot_metrics
from foreshock.models.evaluation.operating_points import (
    RULES_MODEL,
    ChosenPoint,
    OperatingPoints,
    choose_thresholds,
    rules_point,
)
from foreshock.models.evaluation.verdict import against_rules


def judge_point(
    series: pl.DataFrame,
    point: ChosenPoint,
    failures: pl.DataFrame,
    horizon: str,
    *,
    window: AlertWindow,
    ground_truth: pl.DataFrame | None,
    costs: DrainCosts,
    step: timedelta,
    drains: pl.DataFrame | None,
    replay: RiskReplay | None = None,
    weights: pl.DataFrame | None = None,
) -> dict:
    """The metrics of one model's series at one operating point (its judged periods only);
    ``replay``: ``series`` prepared once for the alert replays of all its points."""
    alerts = policy_alerts(replay or series, point.periods, point.rule, step)
    result = judge_alerts(
        _in_judged(series, point),
        alerts,
        failures,
        horizon,
        window,
        ground_truth=ground_truth,
        costs=costs,
        step=step,
        drains=drains,
        weights=weights,
    ).to_dict()
    thresholds = point.thresholds()
    result["threshold"] = thresholds[0] if len(set(thresholds)) == 1 else None
    result.update(
        {
            "thresholds": thresholds,
            "chosen_on": point.chosen_on,
            "daily_cap": point.rule.daily_cap,
            "exit_ratio": point.rule.exit_ratio,
            "hold_h": point.rule.hold.total_seconds() / 3600.0,
            "judged_periods": len(point.judged),
        }
    )
    return result


def _in_judged(series: pl.DataFrame, point: ChosenPoint) -> pl.DataFrame:
    """The rows of ``series`` in the periods ``point`` judges."""
    spans = [
        pl.col("ts").is_between(pl.lit(p.start).cast(UTC_TS), pl.lit(p.end).cast(UTC_TS), closed="left")
        for p in point.judged
    ]
    return series.filter(pl.any_horizontal(spans))


def _series_columns(lazy: pl.LazyFrame) -> list[str]:
    """The columns of a scores table one model's series is judged on (``margin`` breaks ties)."""
    return ["unit_id", "ts", "risk", *(["margin"] if "margin" in lazy.collect_schema().names() else [])]


def _model_series(lazy: pl.LazyFrame, model: str, horizon: str, columns: list[str]) -> pl.DataFrame:
    """One model's series at one horizon, read from the scores table."""
    return lazy.filter((pl.col("model") == model) & (pl.col("horizon") == horizon)).select(columns).collect()


def policy_point_alerts(
    scores: pl.DataFrame | pl.LazyFrame,
    failures: pl.DataFrame,
    config: Config,
    model: str,
    periods: list[Period],
    *,
    step: timedelta | None = None,
    weights: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The alerts :func:`judge_scores` counts at the policy point of ``model`` at the
    decision horizon, one row each: ``unit_id, alert_start, risk, failed_at, outcome``.

    The same entry as the judge (the model's own ``[policy.models.<name>]`` where it has one,
    the second horizon's risk beside the decision risk where ``[policy] second_horizon`` is
    scored, the hold) over the same judged ``periods``, and ``outcome`` as it counts it:
    ``true``, ``false``, ``late`` or ``unresolved``
    (:func:`~foreshock.models.evaluation.metrics.classify_alerts`).  For reading why alerts
    were false; the figures are the report's.
    """
    horizon = decision_horizon(config)
    lazy = scores.lazy()
    pairs = lazy.select("model", "horizon").unique(maintain_order=True).collect().rows()
    series = _model_series(lazy, model, horizon, _series_columns(lazy))
    if series.height == 0:
        raise ValueError(f"no {model} scores at the decision horizon {horizon}")
    step = step or snapshot_step(series)
    replay = RiskReplay.of(series, weights)
    own = OperatingPoints.from_config(config).for_model(model)
    point = choose_thresholds(series, failures, horizon, periods, own, step, replay)["policy"]
    two = _two_horizon_entry(lazy, series, model, horizon, pairs, own, config, step)
    alerts = policy_alerts(two or replay, point.periods, point.rule, step)
    until = observed_span(_in_judged(series, point), step)[1]
    return classify_alerts(alerts, failures, horizon, AlertWindow.from_config(config), until)


def judge_scores(
    scores: pl.DataFrame | pl.LazyFrame,
    failures: pl.DataFrame,
    config: Config,
    *,
    ground_truth: pl.DataFrame | None = None,
    step: timedelta | None = None,
    periods: list[Period] | None = None,
    drains: pl.DataFrame | None = None,
    weights: pl.DataFrame | None = None,
) -> dict:
    """Metrics of every model and horizon of a scores table at each operating point.

    The same function judges backtests and the registry's challenger/champion review.

    Parameters
    ----------
    scores
        ``unit_id, ts, model, horizon, risk`` (+ optional ``margin``), each model and
        horizon's rows in the order they are judged in.  A lazy frame (the backtest's
        scores on disk) is read one model and horizon at a time, so memory holds one
        series, not the table.
    periods
        The test periods in time order (the walk-forward folds): each period's thresholds
        are chosen from the scores before it (:mod:`foreshock.models.evaluation.operating_points`).  Default:
        the whole table is one period (a review window), so the budget point runs the
        daily cap alone and the target-precision point is not reached.
    drains
        Recorded drains (the ``drains`` table): failures during a drain are reported as
        ``drained_then_failed``, apart from the judged failures.
    weights
        ``unit_id, fleet_weight`` of a subsampled fleet (:func:`foreshock.budget.fleet_weights`):
        the budget is spent and the fleet-level figures are counted by weight.
    """
    # Over 80 lines for its docstring and the report's settings block; the loop judges
    # each model and horizon at each of its operating points.
    window = AlertWindow.from_config(config)
    costs = DrainCosts.from_policy(config.section("policy"))
    settings = OperatingPoints.from_config(config)
    entry = settings.policy_entry.entry  # [policy]'s; a model with its own is judged at it (policy point)
    lazy = scores.lazy()
    pairs = lazy.select("model", "horizon").unique(maintain_order=True).collect().rows()
    if step is None:
        step = snapshot_step(lazy.filter(pl.col("model") == (pairs[0][0] if pairs else None)).collect())
    scored = lazy.select(
        pl.len().alias("rows"),
        pl.col("unit_id").n_unique().alias("units"),
        pl.col("ts").min().alias("start"),
        pl.col("ts").max().alias("end"),
    ).collect(engine="streaming")
    rows, units, start, end = scored.row(0)
    if not periods:
        periods = [Period(start, end + step)] if rows else []
    report: dict = {
        "settings": {
            "alert_window": format_duration(window.alert_window),
            "min_lead_time": format_duration(window.min_lead_time),
            "drain_budget_per_day": settings.alerts_per_day,
            "target_precision": settings.target_precision,
            "enter_risk": settings.enter_risk,
            "exit_risk": settings.exit_risk,
            "enter_for": format_duration(settings.hold) if settings.hold else None,
            "second_horizon": entry.second_horizon or None,
            "second_enter_risk": entry.second_enter_risk if entry.second_horizon else None,
            "second_only": entry.second_only if entry.second_horizon else None,
            "decision_enter_risk": entry.decision_enter_risk,
            "decision_enter_for": (
                None if entry.decision_enter_for is None else format_duration(entry.decision_enter_for)
            ),
        },
        "scored": {
            "snapshots": lazy.select("unit_id", "ts").unique().select(pl.len()).collect(engine="streaming").item(),
            "units": units,
            "start": start.isoformat() if rows else None,
            "end": end.isoformat() if rows else None,
            "periods": [{"start": p.start.isoformat(), "end": p.end.isoformat()} for p in periods],
        },
        "models": {},
    }
    context = {"window": window, "ground_truth": ground_truth, "costs": costs, "step": step, "drains": drains}
    context["weights"] = weights
    columns = _series_columns(lazy)
    for model, horizon in pairs:
        series = _model_series(lazy, model, horizon, columns)
        context["replay"] = RiskReplay.of(series, weights)  # prepared once: thresholds and judging replay it
        own = settings.for_model(model)  # the policy point enters at the model's own entry where it has one
        if settings.daily_share is not None or weights is not None:  # say which budget, and on what fleet
            report["settings"].setdefault(
                "budget",
                settings.budget.describe(
                    mean_allowance(context["replay"], settings.budget), weighted=weights is not None
                ),
            )
        if model == RULES_MODEL:
            chosen = rules_point(periods)
        else:
            chosen = choose_thresholds(series, failures, horizon, periods, own, step, context["replay"])
        points = {}
        two = None
        if model != RULES_MODEL:
            two = _two_horizon_entry(lazy, series, model, horizon, pairs, own, config, step)
        for name, point in chosen.items():
            if not point.judged:
                points[name] = None
            elif point.hindsight:
                # The upper bound: the alternative that did best on the test period itself.
                tried = [judge_point(series, p, failures, horizon, **context) for p in point.hindsight]
                points[name] = max(tried, key=lambda r: (r["caught"], -r["alerts"]))
            elif name == "policy" and two is not None:
                # The policy enters on either horizon: replay its entry series instead.
                points[name] = judge_point(series, point, failures, horizon, **{**context, "replay": two})
                points[name]["entry"] = own.entry(horizon).describe()
            else:
                points[name] = judge_point(series, point, failures, horizon, **context)
        report["models"].setdefault(model, {})[horizon] = {
            "snapshot": snapshot_metrics(series, failures, horizon, step=step),
            "operating_points": points,
        }
    if settings.daily_share is not None:
        report["settings"]["daily_budget_share"] = settings.daily_share
    if weights is not None:
        report["settings"]["reweighted"] = "by the inventory's fleet_weight (subsampled healthy units)"
    owners = sorted({m for m, _ in pairs if settings.entries is not None and m in settings.entries.own})
    if owners:  # the models judged at an entry of their own at the policy point, in words
        report["settings"]["model_entries"] = {m: settings.for_model(m).policy_entry.describe() for m in owners}
    report["against_rules"] = against_rules(report)
    if settings.entry_floor > 0:  # only then is there a budget_floor point
        report["settings"]["entry_floor"] = settings.entry_floor
        report["against_rules_at_floor"] = against_rules(report, "budget_floor")
    return report


def _two_horizon_entry(
    lazy: pl.LazyFrame,
    series: pl.DataFrame,
    model: str,
    horizon: str,
    pairs: list[tuple[str, str]],
    settings: OperatingPoints,
    config: Config,
    step: timedelta,
) -> RiskReplay | None:
    """The policy's entry series of ``model`` at the decision horizon (its ``series``, read
    already) when ``[policy] second_horizon`` is set and scored
    (:func:`foreshock.hold.entry_series`), prepared for the replay; None otherwise (the
    policy point replays the horizon's own risk)."""
    if not settings.policy_entry.entry.second_horizon or horizon != decision_horizon(config):
        return None
    entry = settings.entry(horizon).on(horizon, [h for m, h in pairs if m == model])
    if entry is None:
        return None
    second = (
        lazy.filter((pl.col("model") == model) & (pl.col("horizon") == entry.second_horizon))
        .select("unit_id", "ts", "horizon", "risk")
        .collect()
    )
    first = series.select("unit_id", "ts", pl.lit(horizon).alias("horizon"), "risk")
    return RiskReplay.of(entry_series(pl.concat([first, second], how="vertical_relaxed"), entry, settings.hold, step))
