"""Telemetry health from the values themselves: counters and gauges that stopped moving
while their peers' move, values pinned at a placeholder, counters a repair did not
restart.  Part of :mod:`foreshock.health.telemetry` (its kinds and checks are listed there).
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from foreshock.catalog import Catalog
from foreshock.contract import UTC_TS
from foreshock.durations import format_duration
from foreshock.health.settings import HealthSettings

PAIR = ["unit_id", "metric"]
# Gauges whose maximum is an ordinary reading (a busy GPU sits at 100 %, a flag at 1).
FULL_SCALE_UNITS = frozenset({"bool", "percent"})
# What each check returns; the report adds each unit's node and what to check.
CHECK_SCHEMA = {"kind": pl.String, "unit_id": pl.String, "metric": pl.String, "since": UTC_TS, "detail": pl.String}


def no_findings() -> pl.DataFrame:
    """A check's answer when it finds nothing (:data:`CHECK_SCHEMA`)."""
    return pl.DataFrame(schema=CHECK_SCHEMA)


def catalog_frame(catalog: Catalog) -> pl.DataFrame:
    """``metric, counter, family, unit, max`` of every catalog metric."""
    return pl.DataFrame(
        {
            "metric": [m.name for m in catalog],
            "counter": [m.is_counter for m in catalog],
            "family": [m.family for m in catalog],
            "unit": [m.unit for m in catalog],
            "max": [m.max for m in catalog],
        },
        schema={"metric": pl.String, "counter": pl.Boolean, "family": pl.String, "unit": pl.String, "max": pl.Float64},
    )


def since_last_change(samples: pl.DataFrame | pl.LazyFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    """For each ``unit_id, metric`` of ``pairs``: the first sample at the value it still
    holds (``since``), and ``at_least`` when it held it through the whole of ``samples``."""
    chosen = samples.lazy().join(pairs.select(PAIR).lazy(), on=PAIR).sort("unit_id", "metric", "ts").collect()
    chosen = chosen.with_columns(pl.col("value").last().over(PAIR).alias("_final"))
    last_other = chosen.filter(pl.col("value") != pl.col("_final")).group_by(PAIR).agg(pl.col("ts").max().alias("_ld"))
    return (
        chosen.join(last_other, on=PAIR, how="left")
        .filter(pl.col("_ld").is_null() | (pl.col("ts") > pl.col("_ld")))
        .group_by(PAIR)
        .agg(pl.col("ts").min().alias("since"), pl.col("_ld").is_null().all().alias("at_least"))
    )


def pinned_values(
    samples: pl.DataFrame | pl.LazyFrame,
    peers: pl.DataFrame,
    catalog: Catalog,
    now: datetime,
    settings: HealthSettings,
) -> pl.DataFrame:
    """``stuck_counter``, ``frozen_gauge`` and ``sentinel`` findings over the last ``stuck_after``.

    A metric is judged on a unit only when its samples span at least half the window (a
    unit that just appeared has not had time to move).  Stuck and frozen need the peers
    (same model, judged the same way) to have moved in at least ``peer_share`` of cases;
    a sentinel needs no peer.  A value pinned at a sentinel is reported as that, not
    also as frozen.
    """
    start = now - settings.stuck_after
    recent = samples.lazy().filter(pl.col("ts") > start)
    stats = (
        recent.group_by(PAIR)
        .agg(
            pl.len().alias("n"),
            pl.col("value").min().alias("lo"),
            pl.col("value").max().alias("hi"),
            pl.col("ts").min().alias("first"),
            pl.col("ts").max().alias("last"),
        )
        .collect()
        .filter((pl.col("n") >= 2) & ((pl.col("last") - pl.col("first")) >= settings.stuck_after / 2))
        .join(catalog_frame(catalog), on="metric", how="inner")
        .join(peers.select("unit_id", "model"), on="unit_id", how="left")
        .with_columns((pl.col("hi") > pl.col("lo")).alias("moved"))
    )
    pinned = stats.filter(~pl.col("moved"))
    at_sentinel = pl.col("lo").is_in(list(settings.sentinels)) | (
        (pl.col("lo") == pl.col("max")) & ~pl.col("unit").is_in(list(FULL_SCALE_UNITS))
    )
    sentinel = pinned.filter(at_sentinel)
    share = stats.group_by("model", "metric").agg(pl.col("moved").mean().alias("_share"), pl.len().alias("_units"))
    still = (
        pinned.filter(~at_sentinel & (pl.col("counter") | ~pl.col("unit").is_in(["bool"])))
        .join(share, on=["model", "metric"], nulls_equal=True)
        .filter((pl.col("_share") >= settings.peer_share) & (pl.col("_units") >= 2))
    )
    flagged = pl.concat(
        [
            sentinel.select(*PAIR, "lo", pl.lit("sentinel").alias("kind"), pl.lit(None, pl.Float64).alias("_share")),
            still.select(
                *PAIR,
                "lo",
                pl.when(pl.col("counter"))
                .then(pl.lit("stuck_counter"))
                .otherwise(pl.lit("frozen_gauge"))
                .alias("kind"),
                "_share",
            ),
        ]
    )
    if flagged.height == 0:
        return no_findings()
    since = since_last_change(samples, flagged)
    value = pl.col("lo").cast(pl.String)
    held = pl.format(
        "{}{} h",
        pl.when(pl.col("at_least")).then(pl.lit("at least ")).otherwise(pl.lit("")),
        ((pl.lit(now, UTC_TS) - pl.col("since")).dt.total_seconds() / 3600.0).round(1),
    )
    peers_moved = pl.format(
        "{} % of peers changed it in {}",
        (100 * pl.col("_share")).round(0),
        pl.lit(format_duration(settings.stuck_after)),
    )
    detail = (
        pl.when(pl.col("kind") == "sentinel")
        .then(pl.format("pinned at {} for {}", value, held))
        .otherwise(pl.format("at {} for {}; {}", value, held, peers_moved))
    )
    return flagged.join(since, on=PAIR).select("kind", *PAIR, "since", detail.alias("detail"))


def unreset_counters(
    samples: pl.DataFrame | pl.LazyFrame,
    catalog: Catalog,
    settings: HealthSettings,
    *,
    failures: pl.DataFrame | None = None,
    drains: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """``no_reset_after_repair``: a counter whose first value ``scrape_gap`` or more after a
    repair is not below its last value before it (and was not zero).

    Repairs are drains returned within the samples (the counters of ``reset_on_return``
    should restart) and failures (the replacement GPU's error counters start from zero).
    """
    cat = catalog_frame(catalog).filter(pl.col("counter"))
    events = []
    if drains is not None and drains.height:
        metrics = cat.filter(pl.col("metric").is_in(list(settings.reset_on_return))).select("metric")
        returned = drains.filter(pl.col("returned_at").is_not_null()).select(
            "unit_id",
            pl.col("drained_at").cast(UTC_TS).alias("before_at"),
            pl.col("returned_at").cast(UTC_TS).alias("after_at"),
            pl.lit("drain and return").alias("repair"),
        )
        events.append(returned.join(metrics, how="cross"))
    if failures is not None and failures.height:
        metrics = cat.filter(pl.col("family") == "error").select("metric")
        replaced = failures.select(
            "unit_id",
            pl.col("failed_at").cast(UTC_TS).alias("before_at"),
            pl.col("failed_at").cast(UTC_TS).alias("after_at"),
            pl.lit("replacement").alias("repair"),
        )
        events.append(replaced.join(metrics, how="cross"))
    empty = no_findings()
    if not events:
        return empty
    rows = samples.lazy()
    first, last = rows.select(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last")).collect().row(0)
    if first is None:
        return empty
    repairs = pl.concat(events).filter((pl.col("before_at") >= first) & (pl.col("after_at") < last))
    if repairs.height == 0:
        return empty
    series = rows.join(repairs.select(PAIR).unique().lazy(), on=PAIR).select(*PAIR, "ts", "value").sort("ts").collect()
    before = repairs.sort("before_at").join_asof(
        series.rename({"ts": "_bts", "value": "before"}),
        left_on="before_at",
        right_on="_bts",
        by=PAIR,
        strategy="backward",
        check_sortedness=False,  # sorted within each unit and metric, which Polars cannot check
    )
    # The first sample a scrape gap after the repair: a failed GPU may still report once
    # after its failure time (the sample with the double-bit error), the new one later.
    after = before.with_columns((pl.col("after_at") + settings.scrape_gap).alias("_after")).sort("_after")
    after = after.join_asof(
        series.rename({"ts": "_ats", "value": "after"}),
        left_on="_after",
        right_on="_ats",
        by=PAIR,
        strategy="forward",
        check_sortedness=False,
    )
    kept = after.filter((pl.col("before") > 0) & (pl.col("after") >= pl.col("before")))
    return kept.select(
        pl.lit("no_reset_after_repair").alias("kind"),
        *PAIR,
        pl.col("after_at").alias("since"),
        pl.format(
            "{} before the {} at {}, {} after it",
            pl.col("before"),
            pl.col("repair"),
            pl.col("before_at").dt.strftime("%Y-%m-%d %H:%M"),
            pl.col("after"),
        ).alias("detail"),
    )
