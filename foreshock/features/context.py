"""Context of a snapshot: the unit's lives, inventory columns, age, and what its cohort and
lot have been through (failure rates and the Nelson–Aalen baseline hazard).

Everything here reads only the inventory and past failures, so it is the same for a unit
whatever shard it is computed in.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from foreshock.contract import INVENTORY_CONTEXT_COLUMNS, UTC_TS
from foreshock.features.rollups import with_lives
from foreshock.features.spec import FeatureSpec

_HOUR_US = 3_600_000_000.0


def known_at(failures: pl.DataFrame) -> pl.Expr:
    """When a failure became known: its ticket's ``detected_at``, else ``failed_at``.

    Fleet-level features (lot and cohort failure rates) may only count a failure from
    then: a ticket filed two days after the failure is invisible for those two days.
    """
    failed = pl.col("failed_at").cast(UTC_TS)
    if "detected_at" in failures.columns:
        return pl.max_horizontal(pl.coalesce(pl.col("detected_at").cast(UTC_TS), failed), failed)
    return failed


def life_table(inventory: pl.DataFrame, failures: pl.DataFrame) -> pl.DataFrame:
    """Every life of every unit: ``unit_id, life, life_start, life_end, end_known_at``.

    Life 0 starts at the unit's ``installed_at``; life ``k`` starts at the unit's ``k``-th
    failure (the replacement GPU takes over the slot) and ends at the next failure (null
    while it is still running); ``end_known_at`` is when that failure became known
    (:func:`known_at`).
    """
    first = inventory.select(
        "unit_id",
        pl.lit(0, pl.Int32).alias("life"),
        pl.col("installed_at").cast(UTC_TS).alias("life_start"),
        pl.lit(None, UTC_TS).alias("_start_known_at"),
    )
    later = (
        failures.select("unit_id", pl.col("failed_at").cast(UTC_TS), known_at(failures).alias("_start_known_at"))
        .unique(["unit_id", "failed_at"])
        .sort("unit_id", "failed_at")
        .select(
            "unit_id",
            pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("unit_id").alias("life"),
            pl.col("failed_at").alias("life_start"),
            "_start_known_at",
        )
    )
    lives = pl.concat([first, later]).sort("unit_id", "life")
    return lives.with_columns(
        pl.col("life_start").shift(-1).over("unit_id").alias("life_end"),
        pl.col("_start_known_at").shift(-1).over("unit_id").alias("end_known_at"),
    ).drop("_start_known_at")


def snapshot_grid(
    units: list[str],
    first_bucket: datetime,
    last_bucket: datetime,
    every: timedelta,
    failures: pl.DataFrame,
    lives: pl.DataFrame,
) -> pl.DataFrame:
    """Dense ``unit_id, life, bucket, life_start`` rows, sorted by unit and time."""
    buckets = pl.datetime_range(first_bucket, last_bucket, every, eager=True, time_zone="UTC").cast(UTC_TS)
    grid = (
        pl.DataFrame({"unit_id": sorted(units)}, schema={"unit_id": pl.String})
        .join(pl.DataFrame({"bucket": buckets}), how="cross")
        .sort("unit_id", "bucket")
    )
    grid = with_lives(grid, failures, at="bucket")
    return grid.join(
        lives.select("unit_id", "life", "life_start"), on=["unit_id", "life"], how="left", maintain_order="left"
    )


def add_inventory_context(frame: pl.DataFrame, inventory: pl.DataFrame) -> pl.DataFrame:
    """Add ``node, rack, model, lot`` and ``age_days`` (days since the life started)."""
    context = inventory.select(
        "unit_id",
        *[
            pl.col(c).cast(pl.String) if c in inventory.columns else pl.lit(None, pl.String).alias(c)
            for c in INVENTORY_CONTEXT_COLUMNS
        ],
    )
    out = frame.join(context, on="unit_id", how="left", maintain_order="left")
    age = (pl.col("ts") - pl.col("life_start")).dt.total_microseconds().cast(pl.Float64) / (24 * _HOUR_US)
    return out.with_columns(age.alias("age_days"))


def add_lot_failure_rates(
    frame: pl.DataFrame, inventory: pl.DataFrame, failures: pl.DataFrame, spec: FeatureSpec
) -> pl.DataFrame:
    """Add ``lot_failure_rate_<w>``: failures of the lot's units known in ``(ts - w, ts]``
    (:func:`known_at`) per unit of the lot (a bad manufacturing lot fails together).  Null
    when the lot is unknown."""
    lots = inventory.select("unit_id", pl.col("lot").cast(pl.String)).drop_nulls("lot")
    lot_size = lots.group_by("lot").agg(pl.len().cast(pl.Float64).alias("_lot_units"))
    lot_failures = (
        failures.with_columns(known_at(failures).alias("failed_at")).join(lots, on="unit_id").select("lot", "failed_at")
    )
    asked = frame.select("lot", "ts").drop_nulls("lot").unique()
    names = [f"lot_failure_rate_{spec.name(w)}" for w in spec.windows]
    if asked.height:
        # Only failures within the longest window of these snapshots can count: the pairs
        # below grow with the snapshots' span, not with the failures of the whole history.
        lo, hi = asked.get_column("ts").min(), asked.get_column("ts").max()
        lot_failures = lot_failures.filter((pl.col("failed_at") > lo - spec.longest) & (pl.col("failed_at") <= hi))
    pairs = asked.join(lot_failures, on="lot", how="inner")
    counts = pairs.group_by("lot", "ts").agg(
        *[
            ((pl.col("failed_at") > pl.col("ts") - w) & (pl.col("failed_at") <= pl.col("ts"))).sum().alias(n)
            for w, n in zip(spec.windows, names)
        ]
    )
    rates = (
        asked.join(counts, on=["lot", "ts"], how="left")
        .join(lot_size, on="lot", how="left")
        .select(
            "lot", "ts", *[(pl.col(n).fill_null(0).cast(pl.Float64) / pl.col("_lot_units")).alias(n) for n in names]
        )
    )
    return frame.join(rates, on=["lot", "ts"], how="left", maintain_order="left")


def _cohort_key() -> pl.Expr:
    return pl.concat_str([pl.col("model").fill_null(""), pl.col("lot").fill_null("")], separator="\x1f")


def cohort_hazard_increments(lives: pl.DataFrame, inventory: pl.DataFrame, as_of: datetime) -> pl.DataFrame:
    """Nelson–Aalen increments per cohort (model, lot) from failures known before ``as_of``.

    The time scale is the age of a life (hours since it started).  A life is at risk at age
    ``a`` when, by ``as_of``, it had run at least ``a`` hours without failing first.  Each
    failure at age ``a_i`` adds ``1 / n(a_i)``.  The failures table is taken as complete
    since installation (no left truncation).

    Returns
    -------
    pl.DataFrame
        ``cohort, age_h, cum_hazard`` sorted by cohort and age.
    """
    return cohort_hazard_curves(lives, inventory, [as_of]).drop("_as_of")


def cohort_hazard_curves(lives: pl.DataFrame, inventory: pl.DataFrame, as_of: list[datetime]) -> pl.DataFrame:
    """:func:`cohort_hazard_increments` for several moments at once: ``_as_of, cohort,
    age_h, cum_hazard`` sorted by moment, cohort and age."""
    cohorts = inventory.select("unit_id", "model", pl.col("lot").cast(pl.String)).with_columns(
        _cohort_key().alias("cohort")
    )
    moments = pl.DataFrame({"_as_of": as_of}).with_columns(pl.col("_as_of").cast(UTC_TS))
    at = pl.col("_as_of")
    seen = (
        lives.join(moments, how="cross")
        .filter(pl.col("life_start") < at)
        .join(cohorts.select("unit_id", "cohort"), on="unit_id")
        .with_columns(
            (
                (
                    pl.when(pl.col("end_known_at") < at)
                    .then(pl.col("life_end"))
                    .otherwise(at)  # a failure not yet known: still running
                    - pl.col("life_start")
                )
                .dt.total_microseconds()
                .cast(pl.Float64)
                / _HOUR_US
            ).alias("observed_h"),
            (pl.col("life_end").is_not_null() & (pl.col("end_known_at") < at)).alias("failed"),
        )
    )
    if seen.filter("failed").height == 0:
        return pl.DataFrame(
            schema={"_as_of": UTC_TS, "cohort": pl.String, "age_h": pl.Float64, "cum_hazard": pl.Float64}
        )
    # At risk at age a: the lives observed at least a hours.  Counted over the lives sorted
    # by observed age, oldest first (a running count per moment and cohort), not by pairing
    # every failure with every life: that pairing grew with the square of the failures
    # known, i.e. with the history kept.
    by_age = (
        seen.group_by("_as_of", "cohort", "observed_h")
        .agg(pl.len().alias("_lives"), pl.col("failed").sum().alias("d"))
        .sort("_as_of", "cohort", "observed_h", descending=[False, False, True])
        .with_columns(pl.col("_lives").cum_sum().over("_as_of", "cohort").alias("n_at_risk"))
    )
    return (
        by_age.filter(pl.col("d") > 0)
        .sort("_as_of", "cohort", "observed_h")
        .select(
            "_as_of",
            "cohort",
            pl.col("observed_h").alias("age_h"),
            (pl.col("d") / pl.col("n_at_risk")).cum_sum().over("_as_of", "cohort").alias("cum_hazard"),
        )
    )


def add_cohort_hazard(frame: pl.DataFrame, inventory: pl.DataFrame, failures: pl.DataFrame) -> pl.DataFrame:
    """Add ``cohort_cum_hazard``: the cohort's (model, lot) Nelson–Aalen cumulative hazard
    at the unit's current age, estimated from failures before the snapshot's day.

    Refitting once per day keeps it cheap; the estimate for a day uses only failures
    before that day started, so it is point-in-time correct.
    """
    lives = life_table(inventory, failures)
    keyed = frame.with_row_index("_row").with_columns(
        _cohort_key().alias("_cohort"),
        ((pl.col("ts") - pl.col("life_start")).dt.total_microseconds().cast(pl.Float64) / _HOUR_US).alias("_age_h"),
        pl.col("ts").dt.truncate("1d").alias("_as_of"),
    )
    if keyed.height == 0:
        return frame.with_columns(pl.lit(None, pl.Float64).alias("cohort_cum_hazard"))
    rows = keyed.select("_row", "_cohort", "_age_h", "_as_of")
    curves = cohort_hazard_curves(lives, inventory, rows.get_column("_as_of").unique().sort().to_list())
    hit = (
        rows.drop_nulls("_age_h")
        .sort("_age_h")
        .join_asof(
            curves.rename({"cohort": "_cohort"}).sort("age_h"),
            left_on="_age_h",
            right_on="age_h",
            by=["_as_of", "_cohort"],
            strategy="backward",
            check_sortedness=False,
        )
    )
    # A day with no failure known yet has no curve: hazard 0 (null only without an age).
    hazard = hit.select("_row", pl.col("cum_hazard").fill_null(0.0).alias("cohort_cum_hazard"))
    return keyed.join(hazard, on="_row", how="left").sort("_row").drop("_row", "_cohort", "_age_h", "_as_of")
