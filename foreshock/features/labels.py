"""Labels for failure prediction: "fails within H" per snapshot and survival intervals.

Labels are computed when needed, not stored with the features, because failure tickets
arrive later than telemetry.  They are computed on the keys (``unit_id, ts`` and a few
key-like columns), never by joining or sorting the wide feature frame, and attached by row.

Lives
-----
A GPU slot keeps its ``unit_id`` when the GPU is replaced; the replacement starts a new
*life*.  The life of a snapshot is the number of failures of its unit strictly before the
snapshot (0 for the first life).  The failure that ends a life is the unit's first failure
at or after the snapshot.  A snapshot taken exactly at a failure is dropped: the failed
GPU cannot be drained any more and the replacement has not started yet.

Labels at a cutoff (one rule for both classes)
----------------------------------------------
At a cutoff ``until`` the outcome of a snapshot at ``ts`` is observed over
``(ts, end]`` with ``end = min(ts + H, until, censored_at)``:

* a failure is known once it is *detected* (``detected_at``, else ``failed_at``) by
  ``until``; it still happened at ``failed_at``;
* ``censored_at`` is where a drain cut the observation (:func:`drain_censoring`): a
  drained unit may have been saved by the drain, so what follows is not "no failure".

The label is positive when the life's failure falls in ``(ts, end]`` (weight 1); otherwise
it is negative with weight ``(end - ts) / H``, the observed share of the horizon (0: not
labelled at all, the label is null).  This is the third choice of the design notes: every
row before the cutoff is used, the newest failures included, and a negative counts only
as much as it was observed.  For a hazard that is roughly constant over the horizon the
weighted positive share of the last ``H`` before a cutoff equals the share far from it
(a positive there was observed with probability ``s p``, its negatives are weighted by
``s``), whereas keeping positives and dropping open negatives made that tail all-positive.
A fully resolved subset (weight 1) is simply ``label_weight == 1``.

Both functions recompute ``life`` (and move ``life_start`` forward to the last failure
before the snapshot) from the ``failures`` they are given, so labels stay consistent even
when a ticket arrived after the features were written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import polars as pl

from foreshock.contract import TIME_TO_FAILURE, UTC_TS, label_column, weight_column
from foreshock.durations import parse_duration

_HOUR_US = 3_600_000_000
# When a drain cuts a snapshot's observation (drain_censoring); carried with the keys.
CENSORED_AT = "censored_at"
# outcome_labels: the snapshot is at its life's failure (belongs to no life; add_labels drops it).
AT_FAILURE = "at_failure"


def _prepared_failures(failures: pl.DataFrame | pl.LazyFrame, until: datetime | None = None) -> pl.DataFrame:
    """Failures known at ``until`` (all when None), one row per unit and failure time.

    A failure is known from its ``detected_at`` (the ticket) when the table carries one,
    else from ``failed_at``; it still ends the life at ``failed_at``.
    """
    if isinstance(failures, pl.LazyFrame):
        failures = failures.collect()
    missing = {"unit_id", "failed_at"} - set(failures.columns)
    if missing:
        raise ValueError(f"failures: missing column(s) {sorted(missing)}")
    if until is not None:
        known_at = pl.col("failed_at").cast(UTC_TS)
        if "detected_at" in failures.columns:
            known_at = pl.coalesce(pl.col("detected_at").cast(UTC_TS), known_at)
        failures = failures.filter(known_at <= pl.lit(until).cast(UTC_TS))
    return (
        failures.select(pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS))
        .drop_nulls()
        .unique()
        .sort("unit_id", "failed_at")
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("unit_id").alias("_failures_so_far"))
        .sort("failed_at")
    )


def attach_lives(
    frame: pl.DataFrame, failures: pl.DataFrame | pl.LazyFrame, until: datetime | None = None
) -> pl.DataFrame:
    """Add ``life``, ``life_start`` and ``next_failure_at`` to a unit-snapshot frame.

    Parameters
    ----------
    frame : pl.DataFrame
        Needs ``unit_id`` and ``ts``; an existing ``life_start`` (e.g. the install time for
        life 0) is kept unless a later failure before the snapshot moves it forward.
    failures : pl.DataFrame or pl.LazyFrame
        Canonical failures (``unit_id, failed_at`` [, ``detected_at``]).
    until : datetime, optional
        Only failures known (detected) by then count; default all.

    Returns
    -------
    pl.DataFrame
        ``frame`` with ``life`` (Int32), ``life_start`` and ``next_failure_at`` (the failure
        ending this life, null while none is known), sorted by ``unit_id, ts``.
    """
    for column in ("unit_id", "ts"):
        if column not in frame.columns:
            raise ValueError(f"feature frame: missing column {column!r}")
    fails = _prepared_failures(failures, until)
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


def drain_spans(drains: pl.DataFrame) -> pl.DataFrame:
    """The ``drains`` table as ``unit_id, drained_at, returned_at`` (an open drain: null
    ``returned_at``, also when the column is absent), rows without a unit or start dropped."""
    return drains.select(
        pl.col("unit_id").cast(pl.String),
        pl.col("drained_at").cast(UTC_TS),
        pl.col("returned_at").cast(UTC_TS)
        if "returned_at" in drains.columns
        else pl.lit(None, UTC_TS).alias("returned_at"),
    ).drop_nulls(["unit_id", "drained_at"])


def drain_censoring(keys: pl.DataFrame, drains: pl.DataFrame | None) -> pl.Series:
    """``censored_at`` per row of ``keys`` (``unit_id, ts``): where a drain cuts its observation.

    A unit drained at ``drained_at`` is no longer observed failing on its own: the drain may
    have prevented the failure.  A snapshot before a drain is observed until the drain
    starts; a snapshot inside a drain (``drained_at <= ts < returned_at``, or no
    ``returned_at`` yet) is not observed at all (``censored_at = ts``).  Null: no drain
    after the snapshot.  Rows keep the order of ``keys``.
    """
    if drains is None or drains.height == 0:
        return pl.Series(CENSORED_AT, [None] * keys.height, dtype=UTC_TS)
    d = drain_spans(drains).sort("drained_at")
    k = keys.select("unit_id", pl.col("ts").cast(UTC_TS)).with_row_index("_row").sort("ts")
    nxt = d.select("unit_id", pl.col("drained_at").alias("_next_drain"))
    prev = d.rename({"drained_at": "_prev_drain", "returned_at": "_prev_return"})
    k = k.join_asof(nxt, left_on="ts", right_on="_next_drain", by="unit_id", strategy="forward", check_sortedness=False)
    k = k.join_asof(
        prev, left_on="ts", right_on="_prev_drain", by="unit_id", strategy="backward", check_sortedness=False
    )
    inside = pl.col("_prev_drain").is_not_null() & (
        pl.col("_prev_return").is_null() | (pl.col("_prev_return") > pl.col("ts"))
    )
    return (
        k.sort("_row")
        .select(pl.when(inside).then(pl.col("ts")).otherwise(pl.col("_next_drain")).alias(CENSORED_AT))
        .to_series()
    )


def outcome_labels(
    keys: pl.DataFrame,
    failures: pl.DataFrame | pl.LazyFrame,
    horizons: Sequence[str | timedelta],
    until: datetime | None = None,
) -> pl.DataFrame:
    """The labels of each snapshot as known at ``until``, computed on keys only.

    Parameters
    ----------
    keys : pl.DataFrame
        ``unit_id, ts`` [, ``life_start``] [, ``censored_at`` from :func:`drain_censoring`].
        Only these columns are read, so a wide feature frame is never copied.
    failures : pl.DataFrame or pl.LazyFrame
        Canonical failures; a failure counts once it is known (``detected_at``, else
        ``failed_at``) by ``until``.
    horizons : sequence of str or timedelta
        E.g. ``["24h", "72h"]``.
    until : datetime, optional
        The cutoff; None = full hindsight (every failure known, nothing censored by time).

    Returns
    -------
    pl.DataFrame
        One row per row of ``keys``, same order: ``life`` (Int32), ``life_start`` (when
        given), ``at_failure`` (the snapshot is at its life's failure: not part of any
        life, drop it), ``time_to_failure_h``, and per horizon ``fails_within_<h>``
        (Boolean; null when nothing of the horizon is observed) and ``label_weight_<h>``
        (Float32 in [0, 1]: 1 for a positive or a fully observed negative, the observed
        share of the horizon for a negative still open at ``until`` or cut by a drain).
    """
    for column in ("unit_id", "ts"):
        if column not in keys.columns:
            raise ValueError(f"feature frame: missing column {column!r}")
    wanted = ["unit_id", "ts", *[c for c in ("life_start", CENSORED_AT) if c in keys.columns]]
    k = keys.select(wanted).with_row_index("_row")
    lived = attach_lives(k, failures, until).sort("_row")
    fail = pl.col("next_failure_at")
    limits = []
    if until is not None:
        limits.append(pl.lit(until).cast(UTC_TS))
    if CENSORED_AT in k.columns:
        limits.append(pl.col(CENSORED_AT))  # null (no drain) is skipped by min_horizontal
    columns = [
        pl.col("life"),
        *([pl.col("life_start")] if "life_start" in k.columns else []),
        (fail.is_not_null() & (fail <= pl.col("ts"))).alias(AT_FAILURE),
        _hours(fail - pl.col("ts")).alias(TIME_TO_FAILURE),
    ]
    for horizon in horizons:
        length = parse_duration(horizon)
        end = pl.min_horizontal(pl.col("ts") + length, *limits) if limits else pl.col("ts") + length
        observed = (_hours(end - pl.col("ts")) / (length.total_seconds() / 3600)).clip(0.0, 1.0)
        positive = fail.is_not_null() & (fail > pl.col("ts")) & (fail <= end)
        weight = pl.when(positive).then(1.0).otherwise(observed)
        columns += [
            pl.when(weight > 0).then(positive).alias(label_column(horizon)),
            weight.cast(pl.Float32).alias(weight_column(horizon)),
        ]
    return lived.select(columns)


def add_labels(
    frame: pl.DataFrame,
    failures: pl.DataFrame | pl.LazyFrame,
    horizons: Sequence[str | timedelta],
    until: datetime | None = None,
    *,
    weights: bool = False,
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
    until : datetime, optional
        Labels as known at this cutoff (:func:`outcome_labels`); rows after it are
        dropped.  None: full hindsight.
    weights : bool
        Also add the ``label_weight_<h>`` columns.

    Returns
    -------
    pl.DataFrame
        ``frame`` (same row order) without snapshots at the failure of their life, with
        ``life`` and ``life_start`` recomputed from ``failures``, plus ``fails_within_<h>``
        for each horizon and ``time_to_failure_h`` (Float64 hours to the failure ending this
        life; null if none is known).  The labels are computed on the keys and attached,
        the wide frame is never sorted or joined.
    """
    if until is not None:
        frame = frame.filter(pl.col("ts") <= pl.lit(until).cast(UTC_TS))
    labels = outcome_labels(frame, failures, horizons, until)
    if not weights:
        labels = labels.drop([weight_column(h) for h in horizons])
    keep = ~labels.get_column(AT_FAILURE)
    out = frame.with_columns(labels.drop(AT_FAILURE))
    return out.filter(keep) if not keep.all() else out


def survival_intervals(
    frame: pl.DataFrame,
    failures: pl.DataFrame | pl.LazyFrame,
    snapshot_every: str | timedelta,
    until: datetime | None = None,
    covariates: Sequence[str] | None = None,
    *,
    with_row: bool = False,
) -> pl.DataFrame:
    """Start/stop/event intervals for time-varying survival models (lifelines).

    Each snapshot's covariates hold from the snapshot until the next one:
    ``[ts, ts + snapshot_every)``, cut short by the failure that ends the life.  The last
    snapshot of a life whose failure is known runs to the failure (telemetry often goes
    silent first, or the ticket is filed late): the event is not lost.  Times are hours
    since the start of the life (the unit's age in this life), so a replaced GPU starts
    again from 0.  The same censoring as :func:`outcome_labels`: with ``until`` only failures
    known by then count and intervals stop at ``until``; an interval stops without an event
    at ``censored_at`` (a drain).

    Parameters
    ----------
    frame : pl.DataFrame
        Feature snapshots keyed ``unit_id, ts``.  ``life_start`` should be present (the
        feature store writes it); without it a life starts at its first snapshot.
    failures : pl.DataFrame or pl.LazyFrame
        Canonical failures table.
    snapshot_every : str or timedelta
        The snapshot spacing the features were built with (``config.snapshot_every``).
    until : datetime, optional
        The training cutoff (None: full hindsight).
    covariates : sequence of str, optional
        Columns of ``frame`` to carry (default: every column but keys and context).
    with_row : bool
        Add ``row``, the interval's row in ``frame`` (to gather covariates later).

    Returns
    -------
    pl.DataFrame
        ``unit_id, life, start, stop, event`` (start/stop Float64 hours, event Int32 1 on
        the interval in which the failure falls, else 0), [``row``,] then the covariates, sorted by ``unit_id, life, start``.
    """
    every = parse_duration(snapshot_every)
    if covariates is None:
        covariates = [c for c in frame.columns if c not in {"unit_id", "ts", "life", "life_start", CENSORED_AT}]
    wanted = ["unit_id", "ts", *[c for c in ("life_start", CENSORED_AT) if c in frame.columns]]
    keys = frame.select(wanted).with_row_index("row")
    lived = attach_lives(keys, failures, until)
    fail = pl.col("next_failure_at")
    lived = lived.filter(fail.is_null() | (fail > pl.col("ts")))
    first = pl.col("ts").min().over("unit_id", "life")
    life_start = pl.coalesce("life_start", first) if "life_start" in lived.columns else first
    lived = lived.with_columns(life_start.alias("life_start"))
    last_of_life = pl.col("ts") == pl.col("ts").max().over("unit_id", "life")
    fails_here = fail.is_not_null() & ((fail <= pl.col("ts") + every) | last_of_life)
    stop_at = pl.when(fails_here).then(fail).otherwise(pl.col("ts") + every)
    limits = []
    if until is not None:
        limits.append(pl.lit(until).cast(UTC_TS))
    if CENSORED_AT in lived.columns:
        limits.append(pl.col(CENSORED_AT))
    limit = pl.min_horizontal(*limits) if limits else pl.lit(None, UTC_TS)
    cut = limit.is_not_null() & (stop_at > limit)
    out = lived.with_columns(
        _hours(pl.col("ts") - pl.col("life_start")).alias("start"),
        _hours(pl.when(cut).then(limit).otherwise(stop_at) - pl.col("life_start")).alias("stop"),
        (fails_here & ~cut).cast(pl.Int32).alias("event"),
    ).filter(pl.col("stop") > pl.col("start"))
    out = out.select("unit_id", "life", "start", "stop", "event", pl.col("row").cast(pl.Int64)).sort(
        "unit_id", "life", "start"
    )
    if covariates:
        out = out.with_columns(frame.select(covariates).gather(out.get_column("row")))
    return out if with_row else out.drop("row")
