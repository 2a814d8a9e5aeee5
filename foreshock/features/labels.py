"""Labels for failure prediction: "fails within H" per snapshot and survival intervals.

Labels are computed when needed, not stored with the features, because failure tickets
arrive later than telemetry.  Both functions take a feature frame (one row per unit and
snapshot, keyed ``unit_id, ts``) and the canonical ``failures`` table
(``unit_id, failed_at, mode``).

Lives
-----
A GPU slot keeps its ``unit_id`` when the GPU is replaced; the replacement starts a new
*life*.  The life of a snapshot is the number of failures of its unit strictly before the
snapshot (0 for the first life).  The failure that ends a life is the unit's first failure
at or after the snapshot.  A snapshot taken exactly at a failure is dropped: the failed
GPU cannot be drained any more and the replacement has not started yet.

Both functions recompute ``life`` (and move ``life_start`` forward to the last failure
before the snapshot) from the ``failures`` they are given, so labels stay consistent even
when a ticket arrived after the features were written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import polars as pl

from foreshock.contract import TIME_TO_FAILURE, UTC_TS, label_column
from foreshock.durations import parse_duration

_HOUR_US = 3_600_000_000


def _prepared_failures(failures: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    if isinstance(failures, pl.LazyFrame):
        failures = failures.collect()
    missing = {"unit_id", "failed_at"} - set(failures.columns)
    if missing:
        raise ValueError(f"failures: missing column(s) {sorted(missing)}")
    return (
        failures.select(pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS))
        .drop_nulls()
        .unique()
        .sort("unit_id", "failed_at")
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("unit_id").alias("_failures_so_far"))
        .sort("failed_at")
    )


def attach_lives(frame: pl.DataFrame, failures: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Add ``life``, ``life_start`` and ``next_failure_at`` to a unit-snapshot frame.

    Parameters
    ----------
    frame : pl.DataFrame
        Needs ``unit_id`` and ``ts``; an existing ``life_start`` (e.g. the install time for
        life 0) is kept unless a later failure before the snapshot moves it forward.
    failures : pl.DataFrame or pl.LazyFrame
        Canonical failures (``unit_id, failed_at``).

    Returns
    -------
    pl.DataFrame
        ``frame`` with ``life`` (Int32), ``life_start`` and ``next_failure_at`` (the failure
        ending this life, null while none is known), sorted by ``unit_id, ts``.
    """
    for column in ("unit_id", "ts"):
        if column not in frame.columns:
            raise ValueError(f"feature frame: missing column {column!r}")
    fails = _prepared_failures(failures)
    had_start = "life_start" in frame.columns
    base = frame.drop([c for c in ("life", "next_failure_at") if c in frame.columns]).sort("ts")
    before = fails.rename({"failed_at": "_last_failure_at"})
    base = base.join_asof(
        before,
        left_on="ts",
        right_on="_last_failure_at",
        by="unit_id",
        strategy="backward",
        allow_exact_matches=False,  # a failure at the snapshot itself ends this life
        check_sortedness=False,
    )
    after = fails.select("unit_id", pl.col("failed_at").alias("next_failure_at"))
    base = base.join_asof(
        after,
        left_on="ts",
        right_on="next_failure_at",
        by="unit_id",
        strategy="forward",
        check_sortedness=False,
    )
    life_start = pl.col("_last_failure_at")
    if had_start:
        life_start = pl.max_horizontal(pl.col("life_start").cast(UTC_TS), pl.col("_last_failure_at"))
    return (
        base.with_columns(
            pl.col("_failures_so_far").fill_null(0).cast(pl.Int32).alias("life"),
            life_start.alias("life_start"),
        )
        .drop("_last_failure_at", "_failures_so_far")
        .sort("unit_id", "ts")
    )


def _hours(expr: pl.Expr) -> pl.Expr:
    return expr.dt.total_microseconds().cast(pl.Float64) / _HOUR_US


def add_labels(
    frame: pl.DataFrame,
    failures: pl.DataFrame | pl.LazyFrame,
    horizons: Sequence[str | timedelta],
) -> pl.DataFrame:
    """Label each snapshot with whether its unit fails within each horizon.

    Parameters
    ----------
    frame : pl.DataFrame
        Feature snapshots keyed ``unit_id, ts``.
    failures : pl.DataFrame or pl.LazyFrame
        Canonical failures table.
    horizons : sequence of str or timedelta
        E.g. ``["24h", "72h"]`` (``config.horizons`` works too).

    Returns
    -------
    pl.DataFrame
        ``frame`` without snapshots at or after the failure of their life, with ``life``
        and ``life_start`` recomputed from ``failures``, plus ``fails_within_<h>`` (bool:
        the life ends in ``(ts, ts + h]``) for each horizon and ``time_to_failure_h``
        (Float64 hours to the failure ending this life; null if none is known).
    """
    labelled = attach_lives(frame, failures)
    # Only a snapshot exactly at a failure can be at-or-after the failure of its own life.
    labelled = labelled.filter(pl.col("next_failure_at").is_null() | (pl.col("next_failure_at") > pl.col("ts")))
    ttf = _hours(pl.col("next_failure_at") - pl.col("ts"))
    columns = []
    for horizon in horizons:
        delta = parse_duration(horizon)
        columns.append((ttf <= delta.total_seconds() / 3600).fill_null(False).alias(label_column(delta)))
    columns.append(ttf.alias(TIME_TO_FAILURE))
    return labelled.with_columns(columns).drop("next_failure_at")


def survival_intervals(
    frame: pl.DataFrame,
    failures: pl.DataFrame | pl.LazyFrame,
    snapshot_every: str | timedelta,
) -> pl.DataFrame:
    """Start/stop/event intervals for time-varying survival models (lifelines).

    Each snapshot's covariates hold from the snapshot until the next one:
    ``[ts, ts + snapshot_every)``, cut short by the failure that ends the life.  Times are
    hours since the start of the life (the unit's age in this life), so a replaced GPU
    starts again from 0.

    Parameters
    ----------
    frame : pl.DataFrame
        Feature snapshots keyed ``unit_id, ts``.  ``life_start`` should be present (the
        feature store writes it); without it a life starts at its first snapshot.
    failures : pl.DataFrame or pl.LazyFrame
        Canonical failures table.
    snapshot_every : str or timedelta
        The snapshot spacing the features were built with (``config.snapshot_every``).

    Returns
    -------
    pl.DataFrame
        ``unit_id, life, start, stop, event`` (start/stop Float64 hours, event Int32 1 on
        the interval in which the failure falls, else 0) followed by the covariates (every
        other column of ``frame`` except ``ts`` and ``life_start``), sorted by
        ``unit_id, life, start``.  Snapshots at or after the failure are dropped.
    """
    every = parse_duration(snapshot_every)
    lived = attach_lives(frame, failures)
    lived = lived.filter(pl.col("next_failure_at").is_null() | (pl.col("next_failure_at") > pl.col("ts")))
    if "life_start" not in frame.columns:
        first = pl.col("ts").min().over("unit_id", "life")
        lived = lived.with_columns(pl.coalesce("life_start", first).alias("life_start"))
    else:
        lived = lived.with_columns(
            pl.coalesce("life_start", pl.col("ts").min().over("unit_id", "life")).alias("life_start")
        )
    interval_end = pl.col("ts") + every
    fails_here = pl.col("next_failure_at").is_not_null() & (pl.col("next_failure_at") <= interval_end)
    stop_at = pl.when(fails_here).then(pl.col("next_failure_at")).otherwise(interval_end)
    out = lived.with_columns(
        _hours(pl.col("ts") - pl.col("life_start")).alias("start"),
        _hours(stop_at - pl.col("life_start")).alias("stop"),
        fails_here.cast(pl.Int32).alias("event"),
    )
    covariates = [
        c for c in frame.columns if c not in {"unit_id", "ts", "life", "life_start", "start", "stop", "event"}
    ]
    return out.select("unit_id", "life", "start", "stop", "event", *covariates).sort("unit_id", "life", "start")
