"""Which failures the alerts caught, and which failures are judged at all.

An alert is credited to the failure ending the life it started in, and catches it when it
started within the window ``W`` before it and at least ``L_min`` before it (definitions:
``docs/metrics.md``).  Failures of units already in a recorded drain are set apart, the
failures judged are those of the series' units in its scored period, and ground truth
adds whether a failure had a precursor.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from foreshock.contract import UTC_TS
from foreshock.features.labels import drain_spans
from foreshock.models.estimators.training import snapshot_step
from foreshock.models.evaluation.alerts import US_PER_HOUR, AlertWindow, observed_span


def next_failure(alerts: pl.DataFrame, failures: pl.DataFrame) -> pl.DataFrame:
    """Each alert with ``failed_at``: the failure ending the life the alert started in.

    That is the unit's first failure at or after the alert start (null when none is
    known): the only failure the alert can credit, so one alert never counts for two
    failures, and an alert of a GPU that was replaced never counts for its successor.
    """
    fails = failures.select(pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS)).unique()
    return (
        alerts.with_row_index("_alert")
        .sort("alert_start")
        .join_asof(
            fails.sort("failed_at"),
            left_on="alert_start",
            right_on="failed_at",
            by="unit_id",
            strategy="forward",
            check_sortedness=False,
        )
        .sort("_alert")
        .drop("_alert")
    )


def match_failures(
    alerts: pl.DataFrame,
    failures: pl.DataFrame,
    window: AlertWindow,
) -> pl.DataFrame:
    """Which failures an alert caught, and with what lead time.

    An alert is credited to its unit's next failure only (:func:`next_failure`); the
    failure is caught when one of its alerts started in ``[failed_at - W, failed_at - L_min]``.

    Returns
    -------
    polars.DataFrame
        The failures (``unit_id, failed_at, mode`` and any other column) plus ``caught``
        (bool), ``lead_time_h`` (hours from the first alert start in the window to the
        failure; null when not caught) and ``nearest_lead_h`` (from the last one).
    """
    w_us = int(window.alert_window.total_seconds() * 1e6)
    l_us = int(window.min_lead_time.total_seconds() * 1e6)
    fails = failures.with_columns(pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS))
    pairs = next_failure(alerts.select("unit_id", "alert_start"), fails).drop_nulls("failed_at")
    lead_us = (pl.col("failed_at") - pl.col("alert_start")).dt.total_microseconds()
    first = (
        pairs.filter((lead_us >= l_us) & (lead_us <= w_us))
        .group_by("unit_id", "failed_at")
        .agg((lead_us.max() / US_PER_HOUR).alias("lead_time_h"), (lead_us.min() / US_PER_HOUR).alias("nearest_lead_h"))
    )
    return (
        fails.with_row_index("_failure")
        .join(first, on=["unit_id", "failed_at"], how="left")
        .with_columns(pl.col("lead_time_h").is_not_null().alias("caught"))
        .sort("_failure")
        .drop("_failure")
    )


def split_drained(failures: pl.DataFrame, drains: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Failures in two: those of units in service, and those *drained then failed*.

    A failure is drained-then-failed when its unit was in a recorded drain at the time
    (``drained_at <= failed_at <= returned_at``, an open drain has no ``returned_at``):
    the unit was already out (found broken in diagnostics, or failed in the shop), so the
    failure is neither a catch nor a miss of any model and is reported apart.

    Parameters
    ----------
    failures
        ``unit_id, failed_at`` (+ any columns).
    drains
        The ``drains`` table (``unit_id, drained_at, returned_at``), or None.
    """
    if drains is None or drains.height == 0:
        return failures, failures.clear()
    spans = drain_spans(drains)
    keyed = failures.with_row_index("_failure")
    inside = (
        keyed.select("_failure", pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS))
        .join(spans, on="unit_id")
        .filter(
            (pl.col("drained_at") <= pl.col("failed_at"))
            & (pl.col("returned_at").is_null() | (pl.col("failed_at") <= pl.col("returned_at")))
        )
        .get_column("_failure")
        .unique()
        .implode()
    )
    drained = pl.col("_failure").is_in(inside)
    return keyed.filter(~drained).drop("_failure"), keyed.filter(drained).drop("_failure")


def failures_in_scope(scores: pl.DataFrame, failures: pl.DataFrame, step: timedelta | None = None) -> pl.DataFrame:
    """The failures a series is judged on: of its units, inside its scored period."""
    step = step or snapshot_step(scores)
    start, end = observed_span(scores, step)
    units = scores.get_column("unit_id").unique().implode()
    return failures.filter(
        pl.col("unit_id").is_in(units)
        & (pl.col("failed_at") > pl.lit(start).cast(UTC_TS))
        & (pl.col("failed_at") <= pl.lit(end).cast(UTC_TS))
    )


def with_precursor_flags(failures: pl.DataFrame, ground_truth: pl.DataFrame | None) -> pl.DataFrame:
    """Add ``has_precursor`` (null when unknown) from ground truth, matched by unit and time.

    Ground truth gives ``has_precursor`` directly or a ``precursor_onset`` (null = none).
    """
    if ground_truth is None or ground_truth.height == 0:
        return failures.with_columns(pl.lit(None, dtype=pl.Boolean).alias("has_precursor"))
    truth = ground_truth
    if "has_precursor" not in truth.columns:
        if "precursor_onset" not in truth.columns:
            raise ValueError("ground truth needs has_precursor or precursor_onset")
        truth = truth.with_columns(pl.col("precursor_onset").is_not_null().alias("has_precursor"))
    truth = truth.select(
        pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS).alias("_truth_at"), "has_precursor"
    ).sort("_truth_at")
    # Tickets are filed a little after the failure the simulator recorded: nearest within 1 day.
    return (
        failures.sort("failed_at")
        .join_asof(
            truth,
            left_on="failed_at",
            right_on="_truth_at",
            by="unit_id",
            strategy="nearest",
            tolerance=timedelta(days=1),
            check_sortedness=False,
        )
        .drop("_truth_at")
    )
