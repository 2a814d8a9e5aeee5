"""Training labels that never peek past a cutoff, and the purged holdout.

A model trained at time ``until`` may only know the failures detected by then, and a
"fails within H" label is only partly known for snapshots whose horizon runs past it.
The rule (one for both classes, :mod:`foreshock.features.labels`): a snapshot is positive
when its failure falls in the observed part of its horizon, otherwise negative weighted by
the observed share of the horizon.  Training, early stopping, calibration and the
evaluation all take their labels from :func:`labelled_until`, so the rule lives in one
place (the walk-forward backtest relies on it).

The early-stopping and calibration holdout (:func:`purged_holdout`) is a block of time
ending at ``until - H`` (so its labels are fully observed), sized by the number of
distinct failures it holds, with an embargo of ``H`` before it: no fit row's horizon
reaches into the holdout (López de Prado, *Advances in Financial Machine Learning*, 2018,
ch. 7: purging and embargo).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from foreshock.contract import TIME_TO_FAILURE, UTC_TS, label_column, weight_column
from foreshock.durations import parse_duration
from foreshock.features.labels import CENSORED_AT, add_labels, survival_intervals
from foreshock.models.estimators.base import horizon_hours, require_columns

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _as_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"cutoff {value!r} must be timezone-aware (UTC)")
    return value


def labelled_until(
    frame: pl.DataFrame,
    failures: pl.DataFrame,
    horizons: list[str],
    until: datetime | None = None,
    *,
    weighted: bool = False,
) -> pl.DataFrame:
    """Add ``fails_within_<h>`` and ``time_to_failure_h`` as known at ``until``.

    Parameters
    ----------
    frame
        Feature snapshots (``unit_id, ts, ...``; an optional ``censored_at`` column from
        :func:`foreshock.features.labels.drain_censoring`); rows after ``until`` are dropped.
    failures
        Canonical failures (``unit_id, failed_at`` [, ``detected_at``]); those not detected
        by ``until`` are ignored.
    horizons
        Horizon spellings, e.g. ``["24h", "72h"]``.
    until
        The training cutoff; default the last snapshot in ``frame``.
    weighted
        True (training): every row with part of its horizon observed is labelled, a
        positive when the failure fell in the observed part, else a negative whose
        ``label_weight_<h>`` is the observed share.  False (evaluation, counting): only
        the resolved rows, whose whole horizon was observed, are labelled, both classes
        alike; the others are null (unresolved).  Both views come from the same rule
        (:func:`foreshock.features.labels.outcome_labels`): the resolved rows are its
        rows observed over the whole horizon.

    Returns
    -------
    polars.DataFrame
        ``frame`` (same order) with one label column per horizon (and one weight column
        with ``weighted``).
    """
    require_columns(frame, ("unit_id", "ts"), "feature frame")
    require_columns(failures, ("unit_id", "failed_at"), "failures")
    if until is None:
        until = frame.get_column("ts").max() if frame.height else datetime.now().astimezone()
    until = _as_utc(until)
    labelled = add_labels(frame, failures, horizons, until, weights=True)
    if weighted:
        return labelled
    limit = pl.lit(until).cast(UTC_TS)
    if CENSORED_AT in labelled.columns:
        limit = pl.min_horizontal(limit, pl.col(CENSORED_AT))
    resolved = [
        pl.when(pl.col("ts") + parse_duration(h) <= limit).then(pl.col(label_column(h))).alias(label_column(h))
        for h in horizons
    ]
    return labelled.with_columns(resolved).drop([weight_column(h) for h in horizons])


def known_failures(failures: pl.DataFrame, until: datetime) -> pl.DataFrame:
    """The failures known at ``until``: detected (``detected_at``, else ``failed_at``) by then."""
    known_at = pl.col("failed_at").cast(UTC_TS)
    if "detected_at" in failures.columns:
        known_at = pl.coalesce(pl.col("detected_at").cast(UTC_TS), known_at)
    return failures.filter(known_at <= pl.lit(_as_utc(until)).cast(UTC_TS))


def unresolved_rows(labelled: pl.DataFrame, horizons: list[str]) -> dict[str, int]:
    """Rows per horizon whose outcome is not fully known: a null label, or (weighted
    labels) a negative with weight below 1."""
    out = {}
    for h in horizons:
        open_ = pl.col(label_column(h)).is_null()
        if weight_column(h) in labelled.columns:
            open_ = open_ | (pl.col(weight_column(h)) < 1)
        out[h] = int(labelled.filter(open_).height)
    return out


def label_cutoff_violations(labelled: pl.DataFrame, horizons: list[str], until: datetime) -> int:
    """How many labels claim knowledge past ``until`` (0 for a correct frame).

    A snapshot after ``until``, a positive whose failure is after ``until``, or a negative
    weighted for more of its horizon than had passed by ``until`` is a violation; used by
    the backtest's self-check and by tests.
    """
    cut = pl.lit(until).cast(UTC_TS)
    bad = labelled.filter(pl.col("ts") > cut).height
    open_h = (cut - pl.col("ts")).dt.total_microseconds().cast(pl.Float64) / 3.6e9
    for h in horizons:
        name, hours = label_column(h), horizon_hours(h)
        bad += labelled.filter(pl.col(name) & (pl.col(TIME_TO_FAILURE) > open_h + 1e-9)).height
        if weight_column(h) in labelled.columns:
            claimed = pl.col(weight_column(h)).cast(pl.Float64) * hours
            bad += labelled.filter((pl.col(name) == False) & (claimed > open_h + 1e-3)).height  # noqa: E712
        else:
            horizon_end = pl.col("ts") + pl.duration(seconds=int(hours * 3600))
            bad += labelled.filter((pl.col(name) == False) & (horizon_end > cut)).height  # noqa: E712
    return bad


@dataclass(frozen=True)
class Holdout:
    """A purged time split: ``fit`` and ``holdout`` row masks and what the holdout holds."""

    fit: np.ndarray
    holdout: np.ndarray
    start: datetime
    end: datetime
    failures: int


def _micros(ts: np.ndarray) -> np.ndarray:
    return np.asarray(ts).astype("datetime64[us]").astype(np.int64)


def purged_holdout(
    ts: np.ndarray,
    positive: np.ndarray,
    failure_id: np.ndarray,
    until: datetime,
    horizon: str,
    min_failures: int,
    max_fraction: float = 0.5,
    min_fraction: float = 0.0,
) -> Holdout | None:
    """The latest block of time ending at ``until - H`` that holds ``min_failures`` failures.

    Parameters
    ----------
    ts
        Snapshot times of the labelled rows.
    positive
        Their labels for ``horizon``.
    failure_id
        Per row, an id of the failure it precedes (e.g. ``unit#life``); rows of one failure
        count once, so an hourly failure's 72 positive rows are one failure, not 72.
    until, horizon
        The training cutoff and the label horizon.
    min_failures
        Distinct failures the holdout must hold (for early stopping and calibration).
    max_fraction, min_fraction
        The holdout spans at most / at least this share of the labelled time before
        ``until - H`` (at least: a single day of a daily fleet would calibrate on a few
        hundred rows).

    Returns
    -------
    Holdout or None
        None when no such block exists (too few failures, or no failure left to fit on):
        the caller then trains without early stopping and leaves the model uncalibrated.
        ``fit`` rows end ``H`` before the holdout starts (embargo: their horizons do not
        reach into it); ``holdout`` rows lie in ``[start, until - H]``.
    """
    t = _micros(ts)
    if t.size == 0:
        return None
    h_us = int(horizon_hours(horizon) * 3.6e9)
    end = (_as_utc(until) - _EPOCH) // timedelta(microseconds=1) - h_us
    first = int(t.min())
    pos = np.asarray(positive, dtype=bool) & (t <= end)
    if not pos.any() or end <= first:
        return None
    ids = np.asarray(failure_id)[pos]
    # The latest positive row of each failure decides whether the failure is in the block.
    frame = pl.DataFrame({"id": ids, "t": t[pos]}).group_by("id").agg(pl.col("t").max()).sort("t", descending=True)
    if frame.height < min_failures:
        return None
    start = min(int(frame.get_column("t")[min_failures - 1]), end - int(min_fraction * (end - first)))
    if end - start > max_fraction * (end - first):
        return None
    holdout = (t >= start) & (t <= end)
    fit = t <= start - h_us
    if not (np.asarray(positive, dtype=bool) & fit).any() or not (~np.asarray(positive, dtype=bool) & holdout).any():
        return None  # both classes on both sides
    n_failures = int(pl.Series(ids[t[pos] >= start]).n_unique())
    return Holdout(
        fit=fit,
        holdout=holdout,
        start=_EPOCH + timedelta(microseconds=start),
        end=_EPOCH + timedelta(microseconds=end),
        failures=n_failures,
    )


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
    covariates: list[str] | None = None,
) -> pl.DataFrame:
    """Survival intervals (``features.labels.survival_intervals``) known at ``until``.

    Failures not detected by ``until`` are unknown; an interval running past ``until``
    (or a drain, ``censored_at``) without a failure is censored there.

    Returns
    -------
    polars.DataFrame
        ``unit_id, life, start, stop, event, row`` + ``covariates`` (default none: gather
        them from ``frame`` by ``row``).
    """
    every = snapshot_every or snapshot_step(frame)
    # Rows at or after ``until`` are cut to nothing by the censoring, so ``row`` indexes ``frame``.
    return survival_intervals(frame, failures, every, until=_as_utc(until), covariates=covariates or [], with_row=True)
