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
from foreshock.models.estimators.training import snapshot_step
from foreshock.models.evaluation.alert_replay import Period, RiskReplay, mean_allowance, policy_alerts
from foreshock.models.evaluation.alerts import AlertWindow
from foreshock.models.evaluation.metrics import judge_alerts, snapshot_metrics
from foreshock.models.evaluation.operating_points import (
    RULES_MODEL,
    ChosenPoint,
    OperatingPoints,
    choose_thresholds,
    rules_point,
)
from foreshock.models.evaluation.verdict import against_rules


def _judge_point(
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
    judged = point.judged
    in_judged = pl.any_horizontal(
        [
            pl.col("ts").is_between(pl.lit(p.start).cast(UTC_TS), pl.lit(p.end).cast(UTC_TS), closed="left")
            for p in judged
        ]
    )
    alerts = policy_alerts(replay or series, point.periods, point.rule, step)
    result = judge_alerts(
        series.filter(in_judged),
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
            "judged_periods": len(judged),
        }
    )
    return result


def judge_scores(
    scores: pl.DataFrame,
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
    step = step or snapshot_step(scores.filter(pl.col("model") == scores.get_column("model").first()))
    if not periods:
        ts = scores.get_column("ts")
        periods = [Period(ts.min(), ts.max() + step)] if scores.height else []
    report: dict = {
        "settings": {
            "alert_window": format_duration(window.alert_window),
            "min_lead_time": format_duration(window.min_lead_time),
            "drain_budget_per_day": settings.alerts_per_day,
            "target_precision": settings.target_precision,
            "enter_risk": settings.enter_risk,
            "exit_risk": settings.exit_risk,
        },
        "scored": {
            "snapshots": scores.select("unit_id", "ts").unique().height,
            "units": scores.get_column("unit_id").n_unique(),
            "start": scores.get_column("ts").min().isoformat() if scores.height else None,
            "end": scores.get_column("ts").max().isoformat() if scores.height else None,
            "periods": [{"start": p.start.isoformat(), "end": p.end.isoformat()} for p in periods],
        },
        "models": {},
    }
    context = {"window": window, "ground_truth": ground_truth, "costs": costs, "step": step, "drains": drains}
    context["weights"] = weights
    for (model, horizon), series in scores.group_by(["model", "horizon"], maintain_order=True):
        series = series.select("unit_id", "ts", "risk", *(["margin"] if "margin" in series.columns else []))
        context["replay"] = RiskReplay.of(series, weights)  # prepared once: thresholds and judging replay it
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
            chosen = choose_thresholds(series, failures, horizon, periods, settings, step, context["replay"])
        points = {}
        for name, point in chosen.items():
            if not point.judged:
                points[name] = None
            elif point.hindsight:
                # The upper bound: the alternative that did best on the test period itself.
                tried = [_judge_point(series, p, failures, horizon, **context) for p in point.hindsight]
                points[name] = max(tried, key=lambda r: (r["caught"], -r["alerts"]))
            else:
                points[name] = _judge_point(series, point, failures, horizon, **context)
        report["models"].setdefault(model, {})[horizon] = {
            "snapshot": snapshot_metrics(series, failures, horizon, step=step),
            "operating_points": points,
        }
    if settings.daily_share is not None:
        report["settings"]["daily_budget_share"] = settings.daily_share
    if weights is not None:
        report["settings"]["reweighted"] = "by the inventory's fleet_weight (subsampled healthy units)"
    report["against_rules"] = against_rules(report)
    return report
