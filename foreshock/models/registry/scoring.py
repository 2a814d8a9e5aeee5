"""Live scoring of the fleet with a registered version (usually ``@champion``).

:func:`latest_snapshots` picks the newest snapshot of every unit; :func:`live_scores`
scores them with the primary model of a loaded bundle and attaches the top signals and
the provenance (model name, version, MLflow run) to every row.  Given each unit's last few
snapshots, it scores them all and keeps the newest with its held risk (the lowest risk over
the drain policy's hold ``[policy] enter_for``, or a horizon's own hold such as
``decision_enter_for``, :mod:`foreshock.hold`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import polars as pl

from foreshock.contract import LOCATION_COLUMNS
from foreshock.hold import HELD_COLUMN, with_held_risks
from foreshock.models.registry.registry import LoadedBundle


def latest_snapshots(features: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The most recent snapshot of every unit."""
    lazy = features.lazy() if isinstance(features, pl.DataFrame) else features
    return (
        lazy.filter(pl.col("ts") == pl.col("ts").max().over("unit_id"))
        .unique(["unit_id"], keep="last")
        .sort("unit_id")
        .collect()
    )


def live_scores(
    loaded: LoadedBundle,
    snapshots: pl.DataFrame,
    top: int = 3,
    *,
    hold: timedelta = timedelta(0),
    step: timedelta = timedelta(hours=1),
    holds: Mapping[str, timedelta] | None = None,
) -> pl.DataFrame:
    """Risk of the primary model per unit and horizon, with its top signals and provenance.

    Parameters
    ----------
    loaded
        A registered version (:func:`load_champion`).
    snapshots
        Feature snapshots to score: the newest of every unit (:func:`latest_snapshots`), or
        its last ``ceil(hold / step)`` (of the longest hold) for a held risk.
    top
        How many signals to keep per unit and horizon.
    hold, step
        ``[policy] enter_for`` and the snapshot interval.
    holds
        A horizon's own hold where it differs (:meth:`foreshock.hold.Entry.holds`).

    Returns
    -------
    pl.DataFrame
        ``unit_id, ts, node, rack, model, horizon, risk, risk_held, top_signals,
        model_name, model_version, run_id``, each unit's newest snapshot; ``top_signals`` is a list of
        ``{signal, value, contribution}`` structs, largest contribution first.  Sorted by
        horizon, then risk (highest first).
    """
    bundle = loaded.bundle
    # the primary model only: the held risks read every snapshot of the longest hold
    risk = with_held_risks(bundle.score(snapshots, models=[bundle.primary]), hold, step, holds).filter(
        pl.col("ts") == pl.col("ts").max().over("unit_id")
    )
    snapshots = latest_snapshots(snapshots)
    reasons = (
        bundle.explain(snapshots, top=top)
        .sort("contribution", descending=True)
        .group_by("unit_id", "ts", "horizon", maintain_order=True)
        .agg(pl.struct("signal", "value", "contribution").alias("top_signals"))
    )
    context = [c for c in LOCATION_COLUMNS if c in snapshots.columns]
    places = snapshots.select("unit_id", *context).unique("unit_id", keep="last")
    out = (
        risk.join(reasons, on=["unit_id", "ts", "horizon"], how="left")
        .join(places, on="unit_id", how="left")
        .with_columns(
            pl.lit(loaded.model_name).alias("model_name"),
            pl.lit(loaded.version).alias("model_version"),
            pl.lit(loaded.run_id).alias("run_id"),
            *(pl.lit(None, dtype=pl.String).alias(c) for c in LOCATION_COLUMNS if c not in context),
        )
    )
    return out.select(
        "unit_id",
        "ts",
        *LOCATION_COLUMNS,
        "model",
        "horizon",
        "risk",
        HELD_COLUMN,
        "top_signals",
        "model_name",
        "model_version",
        "run_id",
    ).sort(["horizon", "risk", "unit_id"], descending=[False, True, False])
