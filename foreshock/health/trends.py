"""Degradation trends: for every unit, how fast its correctable ECC errors, row remaps and
pending remaps grow, and whether that is speeding up, reported below any drain threshold.

Read from the feature store, which already holds each counter's increase over every
``[features] windows`` window (``M_increase_<w>``) and each gauge's mean (``M_mean_<w>``)
at every snapshot, so the numbers are the ones the models see.  For each unit and metric
of ``[health] trend_metrics``, at the unit's newest snapshot ``T``:

- ``rate_<w>_per_day``: the increase over window ``w`` per day (a gauge: its mean over
  ``w``, e.g. the share of time a remap was pending), for every configured window;
- ``prev_rate_per_day``: the same over ``trend_window`` ending at ``T - trend_window``;
- ``accel_per_day2``: ``(rate - prev_rate) / trend_window`` in days, the acceleration;
- ``trend``: ``accelerating`` (the rate is at least ``watch_accel`` times the span
  before's and, for a counter, it rose at least ``watch_min_increase``), ``rising`` (it
  rose), ``easing`` (quiet now, not over the longest window), ``flat`` (nothing over the
  longest window), ``unknown`` (no data);
- ``sparkline``: the increase over ``trend_window`` (a gauge: its mean) at points
  ``trend_window / 4`` apart over ``sparkline_span``, oldest first.

The watch list is every unit and metric ``accelerating`` or ``rising``.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from foreshock.catalog import Catalog
from foreshock.contract import UTC_TS
from foreshock.durations import format_duration
from foreshock.errors import UserError
from foreshock.health.settings import HealthSettings

TRENDS = ("accelerating", "rising", "easing", "flat", "unknown")
WATCHED = ("accelerating", "rising")


def trend_column(metric: str, counter: bool, window: timedelta) -> str:
    """The feature column a metric's trend is read from at ``window``."""
    return f"{metric}_{'increase' if counter else 'mean'}_{format_duration(window)}"


def trend_metrics(catalog: Catalog, settings: HealthSettings) -> list[tuple[str, bool]]:
    """``(metric, is_counter)`` of the ``trend_metrics`` the catalog knows."""
    return [(m, catalog[m].is_counter) for m in settings.trend_metrics if m in catalog]


def needed_columns(catalog: Catalog, settings: HealthSettings, windows: list[timedelta]) -> list[str]:
    """Feature columns :func:`unit_trends` reads."""
    return [trend_column(m, c, w) for m, c in trend_metrics(catalog, settings) for w in windows]


def _days(span: timedelta) -> float:
    return span.total_seconds() / 86400.0


def unit_trends(
    features: pl.DataFrame, catalog: Catalog, settings: HealthSettings, windows: list[timedelta]
) -> pl.DataFrame:
    """One row per unit and trend metric with its rates, acceleration, trend and sparkline.

    Parameters
    ----------
    features : pl.DataFrame
        ``unit_id, ts`` and the :func:`needed_columns` over at least ``sparkline_span``
        (and ``trend_window`` more) up to each unit's newest snapshot.
    catalog : Catalog
        Which trend metrics exist and are counters.
    settings : HealthSettings
        ``[health]``: the metrics, ``trend_window`` and the watch thresholds.
    windows : list of timedelta
        ``[features] windows`` (``trend_window`` must be one of them).
    """
    w = settings.trend_window
    if w not in windows:
        raise UserError(
            f"[health] trend_window = {format_duration(w)} is not one of [features] windows "
            f"({', '.join(format_duration(x) for x in windows)})"
        )
    longest = max(windows)
    step = w / 4
    newest = features.group_by("unit_id").agg(pl.col("ts").max().alias("_T"))
    frame = features.join(newest, on="unit_id").with_columns(
        ((pl.col("_T") - pl.col("ts")).dt.total_seconds() / step.total_seconds()).alias("_k")
    )
    at_t = frame.filter(pl.col("ts") == pl.col("_T"))
    parts = []
    for metric, counter in trend_metrics(catalog, settings):
        col = trend_column(metric, counter, w)
        if col not in frame.columns:
            continue
        scale = 1.0 / _days(w) if counter else 1.0
        rates = [
            (pl.col(trend_column(metric, counter, x)) * ((1.0 / _days(x)) if counter else 1.0)).alias(
                f"rate_{format_duration(x)}_per_day"
            )
            for x in windows
            if trend_column(metric, counter, x) in frame.columns
        ]
        now = at_t.select(
            "unit_id",
            pl.col("_T").alias("ts"),
            pl.col(col).alias("_now"),
            pl.col(trend_column(metric, counter, longest)).alias("_long")
            if trend_column(metric, counter, longest) in frame.columns
            else pl.col(col).alias("_long"),
            *rates,
        )
        prev = frame.filter(pl.col("ts") == pl.col("_T") - w).select("unit_id", pl.col(col).alias("_prev"))
        spark = (
            frame.filter(
                (pl.col("_k") == pl.col("_k").floor()) & (pl.col("_T") - pl.col("ts") <= settings.sparkline_span)
            )
            .sort("ts")
            .group_by("unit_id")
            .agg(pl.col(col).fill_null(0.0).alias("sparkline"))
        )
        one = now.join(prev, on="unit_id", how="left").join(spark, on="unit_id", how="left")
        parts.append(_label(one, metric, counter, scale, settings, w / longest))
    if not parts:
        return empty_trends()
    return pl.concat(parts, how="diagonal_relaxed").sort("unit_id", "metric")


def empty_trends() -> pl.DataFrame:
    """No unit's trend (no feature snapshot holds a trend metric)."""
    return pl.DataFrame(
        schema={
            "unit_id": pl.String,
            "ts": UTC_TS,
            "metric": pl.String,
            "rate_per_day": pl.Float64,
            "prev_rate_per_day": pl.Float64,
            "accel_per_day2": pl.Float64,
            "trend": pl.String,
            "sparkline": pl.List(pl.Float64),
        }
    )


def _label(
    one: pl.DataFrame, metric: str, counter: bool, scale: float, settings: HealthSettings, share: float
) -> pl.DataFrame:
    """Rates, acceleration and the trend word of one metric's rows (``share``: the trend
    window over the longest window)."""
    now, prev = pl.col("_now"), pl.col("_prev")
    # Without the snapshot one window back, the longest window's average stands in for it.
    base = pl.coalesce(prev, pl.col("_long") * share if counter else pl.col("_long"))
    enough = (now >= settings.watch_min_increase) if counter else (now > 0)
    trend = (
        pl.when(now.is_null())
        .then(pl.lit("unknown"))
        .when(enough & (now >= settings.watch_accel * base) & (now > base))
        .then(pl.lit("accelerating"))
        .when(now > 0)
        .then(pl.lit("rising"))
        .when(pl.col("_long").fill_null(0) > 0)
        .then(pl.lit("easing"))
        .otherwise(pl.lit("flat"))
    )
    return one.with_columns(
        pl.lit(metric).alias("metric"),
        (now * scale).alias("rate_per_day"),
        (prev * scale).alias("prev_rate_per_day"),
        ((now - prev) * scale / _days(settings.trend_window)).alias("accel_per_day2"),
        trend.alias("trend"),
    ).drop("_now", "_prev", "_long")


def watch_list(trends: pl.DataFrame) -> pl.DataFrame:
    """The trends worth watching (``accelerating`` first, then by rate)."""
    if trends.height == 0:
        return trends
    order = pl.DataFrame({"trend": list(TRENDS), "_order": list(range(len(TRENDS)))})
    return (
        trends.filter(pl.col("trend").is_in(list(WATCHED)))
        .join(order, on="trend")
        .sort(["_order", "rate_per_day", "unit_id"], descending=[False, True, False])
        .drop("_order")
    )


def trend_summary(trends: pl.DataFrame) -> pl.DataFrame:
    """``unit_id, degradation_trend``: each unit's most pressing trend in words, e.g.
    ``accelerating: ecc_sbe_aggregate_total 48/d (12/d the day before)``; ``flat`` when no
    trend metric moved."""
    if trends.height == 0:
        return pl.DataFrame(schema={"unit_id": pl.String, "degradation_trend": pl.String})
    order = pl.DataFrame({"trend": list(TRENDS), "_order": list(range(len(TRENDS)))})
    words = pl.format(
        "{}: {} {}/d{}",
        pl.col("trend"),
        pl.col("metric"),
        pl.col("rate_per_day").round_sig_figs(3),
        pl.when(pl.col("prev_rate_per_day").is_not_null())
        .then(pl.format(" ({}/d the window before)", pl.col("prev_rate_per_day").round_sig_figs(3)))
        .otherwise(pl.lit("")),
    )
    return (
        trends.join(order, on="trend")
        .sort(["unit_id", "_order", "rate_per_day"], descending=[False, False, True], nulls_last=True)
        .group_by("unit_id", maintain_order=True)
        .first()
        .select(
            "unit_id",
            pl.when(pl.col("trend").is_in(list(WATCHED)))
            .then(words)
            .otherwise(pl.col("trend"))
            .alias("degradation_trend"),
        )
    )
