"""What the drain policy decides from: one row per unit with its risk at every horizon, and
the fleet with its fault-domain columns."""

from __future__ import annotations

import polars as pl

from foreshock.contract import UTC_TS
from foreshock.durations import parse_duration
from foreshock.hold import ENTRY_COLUMN, ENTRY_HELD_COLUMN, HELD_COLUMN, Entry

# Columns of the table the policy returns (the risk list adds schema/version columns).
DECISION_META = ("model_name", "model_version", "run_id")


def risk_column(horizon: str) -> str:
    """Name of the column holding P(fail within ``horizon``): ``risk_72h``."""
    return f"risk_{horizon}"


def unit_risk_table(
    scores: pl.DataFrame, horizon: str, *, latest_only: bool = True, entry: Entry | None = None
) -> pl.DataFrame:
    """One row per unit (and snapshot) from long scores (a row per unit, snapshot, horizon).

    Keeps each unit's latest snapshot (all snapshots with ``latest_only=False``, for a
    replay), spreads the horizons into ``risk_<h>`` columns, adds ``risk`` (the decision
    horizon's; with its held risk ``risk_held`` when the scores carry one, see
    :mod:`foreshock.hold`), the drain level's ``entry_risk`` and ``entry_risk_held`` (the
    same, or with ``entry``'s second horizon the larger of the two on the decision scale)
    and ``lead_time_h`` (expected time to failure), and carries ``node``, ``rack``, model
    identity and ``top_signals`` from the decision horizon's row when present.

    Raises
    ------
    ValueError
        When required columns are missing, no row has the decision horizon, or ``entry``
        names a second horizon the scores lack.
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
    wanted = entry or Entry(horizon, 1.0)
    entry = wanted.on(horizon, horizons)
    if entry is None:
        raise ValueError(
            f"scores: no rows for [policy] second_horizon {wanted.second_horizon!r} (have {horizons}); "
            "it must be one of [labels] horizons"
        )
    keys = ["unit_id", "ts"]
    has_held = HELD_COLUMN in latest.columns
    held = [pl.col(HELD_COLUMN).filter(pl.col("horizon") == h).max().alias(f"_held_{h}") for h in entry.horizons]
    wide = (
        latest.group_by(keys)
        .agg(
            [pl.col("risk").filter(pl.col("horizon") == h).max().alias(risk_column(h)) for h in horizons]
            + (held if has_held else [])
        )
        .sort(keys)
    )
    wide = wide.with_columns(
        entry.risk(lambda h: pl.col(risk_column(h))).alias(ENTRY_COLUMN),
        entry.risk(lambda h: pl.col(f"_held_{h}" if has_held else risk_column(h))).alias(ENTRY_HELD_COLUMN),
        *([pl.col(f"_held_{horizon}").alias(HELD_COLUMN)] if has_held else []),
    ).drop([f"_held_{h}" for h in entry.horizons if has_held])
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


def horizon_columns(columns: list[str]) -> dict[str, str]:
    """The ``risk_<h>`` columns among ``columns`` by horizon (``{"72h": "risk_72h"}``):
    those whose suffix is a duration, so ``risk_held`` is not taken for a horizon."""
    out = {}
    for column in columns:
        if column.startswith("risk_"):
            try:
                parse_duration(column.removeprefix("risk_"))
            except ValueError:
                continue
            out[column.removeprefix("risk_")] = column
    return out


def entry_of(row: dict) -> float:
    """A risk-table row's entry risk (its decision risk in a table written without one)."""
    value = row.get(ENTRY_COLUMN)
    return row["risk"] if value is None else value


def entry_held_of(row: dict) -> float | None:
    """A row's held entry risk (its held risk, or its risk, in a table without one)."""
    if ENTRY_HELD_COLUMN in row:
        return row[ENTRY_HELD_COLUMN]
    return row.get(HELD_COLUMN, row["risk"])


def failure_risk(row: dict, entry: Entry) -> float:
    """P(fail within the decision horizon) for the costs: with a second horizon, at least
    its risk too (failing within 24 hours is failing within 72)."""
    second = row.get(risk_column(entry.second_horizon)) if entry.second_horizon else None
    return row["risk"] if second is None else max(row["risk"], second)


def _empty_risk_table(horizon: str) -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "unit_id": pl.String,
            risk_column(horizon): pl.Float64,
            "ts": UTC_TS,
            "risk": pl.Float64,
            ENTRY_COLUMN: pl.Float64,
            ENTRY_HELD_COLUMN: pl.Float64,
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
