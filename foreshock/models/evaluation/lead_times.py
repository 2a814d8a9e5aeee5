"""Lead times of the failures caught at the drain budget.

What the training run's lead-time histogram and the review's measurement share:
the threshold that spends ``[backtest] drain_budget_per_day`` alerts a day, its alerts,
and the failures they caught (definitions in ``docs/metrics.md``).
"""

from __future__ import annotations

from typing import Any

import polars as pl


def lead_times_at_budget(scores: pl.DataFrame, failures: pl.DataFrame, config: Any) -> pl.DataFrame:
    """Lead times of the failures each model caught at the drain-budget threshold.

    Parameters
    ----------
    scores
        ``unit_id, ts, model, risk`` of one horizon (several models allowed).
    failures
        Canonical failures table.
    config
        ``[backtest] drain_budget_per_day`` (or ``daily_budget_share``: its mean allowance
        over the series' days), ``alert_window``, ``min_lead_time``.

    Returns
    -------
    pl.DataFrame
        ``model, lead_time_h``: one row per caught failure (definitions in ``docs/metrics.md``).
    """
    from foreshock.models.evaluation.alert_replay import RiskReplay, mean_allowance
    from foreshock.models.evaluation.alerts import AlertWindow, alert_starts, threshold_for_budget
    from foreshock.models.evaluation.caught import failures_in_scope, match_failures
    from foreshock.models.evaluation.operating_points import OperatingPoints

    window = AlertWindow.from_config(config)
    daily = OperatingPoints.from_config(config).budget
    parts = [pl.DataFrame(schema={"model": pl.String, "lead_time_h": pl.Float64})]
    for (model,), series in scores.group_by(["model"], maintain_order=True):
        series = series.select("unit_id", "ts", "risk")
        budget = daily.per_day if daily.per_day is not None else mean_allowance(RiskReplay.of(series), daily)
        threshold = threshold_for_budget(series, budget)
        alerts = alert_starts(series, threshold)
        matched = match_failures(alerts, failures_in_scope(series, failures), window)
        parts.append(
            matched.filter(pl.col("caught")).select(
                pl.lit(str(model)).alias("model"), pl.col("lead_time_h").cast(pl.Float64)
            )
        )
    return pl.concat(parts)
