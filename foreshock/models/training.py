"""Training labels that never peek past a cutoff.

A model trained at time ``until`` may only know the failures that happened by then, and a
"fails within H" label is only known for snapshots whose horizon ended by then: a snapshot
at ``until - 1h`` with no failure yet is *not* a negative for a 72 h horizon, its outcome
is still open.  Every model builds its training labels here, so the rule lives in one
place (the walk-forward backtest relies on it).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl

from foreshock.contract import UTC_TS, label_column
from foreshock.models.base import horizon_hours, require_columns


def _as_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"cutoff {value!r} must be timezone-aware (UTC)")
    return value


def labelled_until(
    frame: pl.DataFrame,
    failures: pl.DataFrame,
    horizons: list[str],
    until: datetime | None = None,
) -> pl.DataFrame:
    """Add ``fails_within_<h>`` and ``time_to_failure_h`` using only what is known at ``until``.

    Parameters
    ----------
    frame
        Feature snapshots (``unit_id, ts, ...``); rows after ``until`` are dropped.
    failures
        Canonical failures (``unit_id, failed_at, mode``); those after ``until`` are ignored.
    horizons
        Horizon spellings, e.g. ``["24h", "72h"]``.
    until
        The training cutoff; default the last snapshot in ``frame``.

    Returns
    -------
    polars.DataFrame
        ``frame`` with one label column per horizon.  A label is null when the horizon of
        its snapshot ends after ``until`` without a known failure (its outcome is open);
        ``time_to_failure_h`` is null when no failure is known in the snapshot's life.
    """
    from foreshock.features.labels import add_labels  # the single definition of the labels

    require_columns(frame, ("unit_id", "ts"), "feature frame")
    require_columns(failures, ("unit_id", "failed_at"), "failures")
    if until is None:
        until = frame.get_column("ts").max() if frame.height else datetime.now().astimezone()
    until = _as_utc(until)
    cut = pl.lit(until).cast(UTC_TS)
    known_frame = frame.filter(pl.col("ts") <= cut)
    known_failures = failures.filter(pl.col("failed_at") <= cut)
    labelled = add_labels(known_frame, known_failures, horizons)
    masks = []
    for h in horizons:
        name = label_column(h)
        horizon_end = pl.col("ts") + pl.duration(seconds=int(horizon_hours(h) * 3600))
        # A positive is known as soon as the failure happened; a negative only once the
        # whole horizon has passed.
        masks.append(pl.when(pl.col(name) | (horizon_end <= cut)).then(pl.col(name)).otherwise(None).alias(name))
    return labelled.with_columns(masks)


def label_cutoff_violations(labelled: pl.DataFrame, horizons: list[str], until: datetime) -> int:
    """How many non-null labels claim knowledge past ``until`` (0 for a correct frame).

    A negative label whose horizon ends after ``until`` or a snapshot after ``until``
    is a violation; used by the backtest's self-check and by tests.
    """
    cut = pl.lit(until).cast(UTC_TS)
    bad = labelled.filter(pl.col("ts") > cut).height
    for h in horizons:
        name = label_column(h)
        horizon_end = pl.col("ts") + pl.duration(seconds=int(horizon_hours(h) * 3600))
        bad += labelled.filter((pl.col(name) == False) & (horizon_end > cut)).height  # noqa: E712
    return bad


def time_ordered_split(ts: np.ndarray, holdout_fraction: float) -> np.ndarray:
    """Boolean mask of the rows in the last ``holdout_fraction`` of the time span.

    Splitting on time (not rows) keeps every unit's later snapshots out of training, the
    way the model will be used.
    """
    if ts.size == 0:
        return np.zeros(0, dtype=bool)
    t = ts.astype("datetime64[us]").astype(np.int64)
    start, stop = t.min(), t.max()
    split = stop - (stop - start) * holdout_fraction
    return t > split


def snapshot_step(frame: pl.DataFrame) -> timedelta:
    """The snapshot interval of a feature frame (the most common gap between a unit's rows)."""
    if frame.height < 2:
        return timedelta(hours=1)
    diffs = (
        frame.select("unit_id", "ts")
        .sort("unit_id", "ts")
        .select(pl.col("ts").diff().over("unit_id").alias("d"))
        .drop_nulls()
        .filter(pl.col("d") > timedelta(0))
    )
    if diffs.height == 0:
        return timedelta(hours=1)
    return diffs.get_column("d").mode().sort().item(0)


def intervals_until(
    frame: pl.DataFrame,
    failures: pl.DataFrame,
    until: datetime,
    snapshot_every: timedelta | None = None,
) -> pl.DataFrame:
    """Survival intervals (``features.labels.survival_intervals``) known at ``until``.

    Failures after ``until`` are unknown; an interval running past ``until`` without a
    failure is censored at ``until`` (its last hours are not yet observed).

    Returns
    -------
    polars.DataFrame
        ``unit_id, life, start, stop, event`` + the covariates of ``frame``.
    """
    from foreshock.features.labels import add_labels, survival_intervals

    until = _as_utc(until)
    cut = pl.lit(until).cast(UTC_TS)
    every = snapshot_every or snapshot_step(frame)
    known_failures = failures.filter(pl.col("failed_at") <= cut)
    known = (
        add_labels(frame.filter(pl.col("ts") <= cut), known_failures, [])
        .with_columns(pl.col("ts").alias("_snapshot_ts"), pl.col("time_to_failure_h").alias("_ttf"))
        .drop("time_to_failure_h")
    )
    intervals = survival_intervals(known, known_failures, every)
    open_hours = (cut - pl.col("_snapshot_ts")).dt.total_microseconds().cast(pl.Float64) / 3.6e9
    censored_stop = pl.min_horizontal(pl.col("stop"), pl.col("start") + open_hours)
    # A life's last snapshot can precede its failure by more than one interval (telemetry
    # went silent first, a ticket filed late): that interval runs to the failure, so the
    # event is not lost.
    last_of_life = pl.col("start") == pl.col("start").max().over("unit_id", "life")
    ends_in_failure = last_of_life & pl.col("_ttf").is_not_null() & (pl.col("event") == 0)
    return (
        intervals.with_columns(
            pl.when(ends_in_failure)
            .then(pl.col("start") + pl.col("_ttf"))
            .when(pl.col("event") == 1)
            .then(pl.col("stop"))
            .otherwise(censored_stop)
            .alias("stop"),
            pl.when(ends_in_failure).then(1).otherwise(pl.col("event")).cast(pl.Int32).alias("event"),
        )
        .filter(pl.col("stop") > pl.col("start"))
        .drop("_snapshot_ts", "_ttf")
    )
