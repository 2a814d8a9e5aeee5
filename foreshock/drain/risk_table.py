"""What the drain policy decides from: one row per unit with its risk at every horizon, and
the fleet with its fault-domain columns."""

from __future__ import annotations

import polars as pl

from foreshock.contract import UTC_TS
from foreshock.durations import parse_duration
from foreshock.hold import HELD_COLUMN

# Columns of the table the policy returns (the risk list adds schema/version columns).
DECISION_META = ("model_name", "model_version", "run_id")


def risk_column(horizon: str) -> str:
    """Name of the column holding P(fail within ``horizon``): ``risk_72h``."""
    return f"risk_{horizon}"


def unit_risk_table(scores: pl.DataFrame, horizon: str, *, latest_only: bool = True) -> pl.DataFrame:
    """One row per unit (and snapshot) from long scores (a row per unit, snapshot, horizon).

    Keeps each unit's latest snapshot (all snapshots with ``latest_only=False``, for a
    replay), spreads the horizons into ``risk_<h>`` columns, adds ``risk`` (the decision
    horizon's; with its held risk ``risk_held`` when the scores carry one, see
    :mod:`foreshock.hold`) and ``lead_time_h`` (expected time to failure), and carries
    ``node``, ``rack``, model identity and ``top_signals`` from the decision horizon's row
    when present.

    Raises
    ------
    ValueError
        When required columns are missing or no row has the decision horizon.
    """
    missing = [c for c in ("unit_id", "ts", "horizon", "risk") if c not in scores.columns]
    if missing:
        raise ValueError(f"scores: missing column(s) {missing}")
    if scores.height == 0:
        return _empty_risk_table(horizon)
    latest = scores.filter(pl.col("ts") == pl.col("ts").max().over("unit_id")) if latest_only else scores
    horizons = sorted(latest.get_column("horizon").unique().to_list(), key=lambda h: parse_duration(h))
    if horizon not in horizons:
        raise ValueError(f"scores: no rows for the decision horizon {horizon!r} (have {horizons})")
    keys = ["unit_id", "ts"]
    decision = pl.col("horizon") == horizon
    held = [pl.col(HELD_COLUMN).filter(decision).max()] if HELD_COLUMN in latest.columns else []
    wide = (
        latest.group_by(keys)
        .agg([pl.col("risk").filter(pl.col("horizon") == h).max().alias(risk_column(h)) for h in horizons] + held)
        .sort(keys)
    )
    carried = [c for c in ("node", "rack", *DECISION_META, "top_signals") if c in latest.columns]
    if carried:
        meta = latest.filter(pl.col("horizon") == horizon).unique(keys, keep="first").select(*keys, *carried)
        wide = wide.join(meta, on=keys, how="left")
    # A constant hazard per horizon: P = 1 - exp(-rate * h).  The largest rate over the
    # horizons is the most imminent reading (a 24h risk close to the 72h risk means soon).
    rates = [
        (-(1.0 - pl.col(risk_column(h)).clip(0.0, 1.0 - 1e-9)).log() / (parse_duration(h).total_seconds() / 3600))
        for h in horizons
    ]
    rate = pl.max_horizontal(rates)
    return wide.with_columns(
        pl.col(risk_column(horizon)).alias("risk"),
        pl.when(rate > 0).then(1.0 / rate).otherwise(None).alias("lead_time_h"),
    )


def _empty_risk_table(horizon: str) -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "unit_id": pl.String,
            risk_column(horizon): pl.Float64,
            "ts": UTC_TS,
            "risk": pl.Float64,
            "lead_time_h": pl.Float64,
        }
    )


def fleet_table(risks: pl.DataFrame, inventory: pl.DataFrame | None) -> pl.DataFrame:
    """Every unit with its fault-domain columns: the inventory plus the scored units it lacks.

    Without an inventory the scored units stand in for the fleet.  The guards are sized
    from this table (cluster size, units per rack, node, lot...).
    """
    scored = risks.select([c for c in ("unit_id", "node", "rack") if c in risks.columns]).unique(
        "unit_id", keep="first"
    )
    if inventory is None or inventory.height == 0:
        return scored.sort("unit_id")
    inv = inventory.unique("unit_id", keep="first")
    extra = scored.join(inv.select("unit_id"), on="unit_id", how="anti")
    return pl.concat([inv, extra], how="diagonal_relaxed").sort("unit_id")
