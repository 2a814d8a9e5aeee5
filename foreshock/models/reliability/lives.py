"""Unit lives from the inventory and the failures: the rows every reliability estimate reads.

A *life* runs from installation (or the previous failure of the same slot) to its
failure, or is censored at the unit's ``retired_at`` (an optional inventory column:
removed from service without failing) or at the end of observation; lives that began
before observation started enter the risk set late (left truncation).
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from foreshock.contract import UTC_TS

DAY_S = 86400.0


def unit_lives(
    inventory: pl.DataFrame,
    failures: pl.DataFrame,
    observed_until: datetime | None = None,
    mode: str | None = None,
    observed_from: datetime | None = None,
) -> pl.DataFrame:
    """One row per unit life: ``unit_id, life, start, stop, duration_days, event, mode`` plus
    the inventory's cohort columns.

    Parameters
    ----------
    inventory, failures
        Canonical tables (see :mod:`foreshock.contract`).
    observed_until
        End of observation for lives still running; default the latest failure time.
    mode
        Count only failures of this mode as events (others censor the life).
    observed_from
        Start of observation.  Lives that began before it enter the risk set late
        (``entry_days`` > 0: left truncation), so survivors of the unobserved years do
        not look immortal.  Default: observed since installation.
    """
    failures = failures.sort("unit_id", "failed_at")
    if observed_until is None:
        latest = failures["failed_at"].max() if failures.height else None
        if latest is None:
            raise ValueError("no failures and no observed_until: the end of observation is unknown")
        observed_until = latest
    ends = failures.with_columns(
        pl.int_range(pl.len()).over("unit_id").cast(pl.Int32).alias("life"),
        pl.col("failed_at").alias("stop"),
    )
    retired = (
        pl.col("retired_at").str.to_datetime(time_zone="UTC", strict=False).cast(UTC_TS)
        if "retired_at" in inventory.columns
        else pl.lit(None, dtype=UTC_TS)
    )
    inv = inventory.with_columns(retired.alias("_retired"))
    counts = ends.group_by("unit_id").agg(pl.len().cast(pl.Int32).alias("n_failures"))
    open_lives = (
        inv.select("unit_id", "_retired")
        .join(counts, on="unit_id", how="left")
        .with_columns(
            pl.col("n_failures").fill_null(0).alias("life"),
            pl.coalesce("_retired", pl.lit(observed_until).cast(UTC_TS)).alias("stop"),
            pl.lit(None, dtype=pl.String).alias("mode"),
        )
        .select("unit_id", "life", "stop", "mode")
    )
    lives = pl.concat([ends.select("unit_id", "life", "stop", "mode"), open_lives], how="vertical_relaxed")
    lives = lives.sort("unit_id", "life").with_columns(pl.col("stop").shift(1).over("unit_id").alias("_prev_stop"))
    lives = lives.join(inv.drop("_retired"), on="unit_id", how="inner")
    lives = lives.with_columns(
        pl.when(pl.col("life") == 0).then(pl.col("installed_at")).otherwise(pl.col("_prev_stop")).alias("start"),
        pl.col("mode").is_not_null().alias("_failed"),
    )
    is_event = pl.col("_failed") if mode is None else pl.col("_failed") & (pl.col("mode") == mode)
    lives = lives.with_columns(
        ((pl.col("stop") - pl.col("start")).dt.total_seconds() / DAY_S).alias("duration_days"),
        is_event.cast(pl.Int8).alias("event"),
    )
    entry = pl.lit(0.0)
    if observed_from is not None:
        entry = ((pl.lit(observed_from).cast(UTC_TS) - pl.col("start")).dt.total_seconds() / DAY_S).clip(
            lower_bound=0.0
        )
    lives = lives.with_columns(entry.alias("entry_days")).filter(
        (pl.col("duration_days") > 0) & (pl.col("duration_days") > pl.col("entry_days"))
    )
    cohort_cols = [c for c in inventory.columns if c not in ("unit_id", "installed_at", "retired_at")]
    return lives.select(
        "unit_id", "life", "start", "stop", "duration_days", "entry_days", "event", "mode", *cohort_cols
    )
