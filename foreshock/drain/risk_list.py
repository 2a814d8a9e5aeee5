"""The risk list: the versioned table operations consume (Parquet, CSV, JSON Lines).

Schema version 1 (documented in ``docs/drain.md``), one row per scored unit, most severe
action first:

=====================  ==================  ===============================================
column                 type                meaning
=====================  ==================  ===============================================
schema_version         Int32               1
generated_at           Datetime(us, UTC)   when the list was written
score_ts               Datetime(us, UTC)   snapshot time of the unit's scores
unit_id, node, rack    String              the unit and where it sits
action                 String              none, watch, run_diagnostics,
                                           drain_at_checkpoint, drain_now
severity               Int32               0..4, the action's rank
horizon                String              decision horizon (``72h``)
risk                   Float64             P(fail within ``horizon``)
risk_<h>               Float64             P(fail within h), one column per scored horizon
risk_held              Float64             the lowest ``risk`` over the unit's last
                                           ``[policy] enter_for`` of snapshots (its own
                                           ``decision_enter_for`` beside a second way in;
                                           null: fewer consecutive ones); drains enter on it
expected_lead_time_h   Float64             expected hours to failure (null: no hazard)
expected_loss_gpu_h    Float64             expected GPU-hours lost by not draining
drain_cost_gpu_h       Float64             expected GPU-hours a drain costs
reason                 String              why, in words (thresholds, costs, signals)
guard                  String              the guard that held a drain back (nullable)
top_signals            List(Struct)        {signal, value, contribution}; in CSV a string
                                           ``signal=value (+contribution); ...``
model_name             String              registered model name
model_version          String              registered model version
run_id                 String              MLflow run id
model_uri              String              ``models:/<name>/<version>``
repeat_offender        Int32               the unit's incidents (failures, drains, replacements)
                                           within ``[lemon] window`` (drain/lemons.py)
node_repeat_offender   Int32               its node's incidents within that window
propensity             Float64             probability the policy gave the action (1 but for an
                                           exploratory drain of the learned chooser)
degradation_trend      String              the unit's most pressing ECC / row-remap trend in
                                           words (``accelerating: M 48/d (12/d the window
                                           before)``, ``rising: ...``, ``easing``, ``flat``,
                                           ``unknown``); null without ``[health]``
=====================  ==================  ===============================================
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl

from foreshock.contract import UTC_TS
from foreshock.drain.risk_table import horizon_columns
from foreshock.hold import HELD_COLUMN
from foreshock.lake.atomic import atomic_write_parquet, atomic_write_text

SCHEMA_VERSION = 1

SIGNAL_STRUCT = pl.Struct({"signal": pl.String, "value": pl.Float64, "contribution": pl.Float64})

# Columns before and after the per-horizon risk columns, with their types.
LEADING: dict[str, pl.DataType] = {
    "schema_version": pl.Int32(),
    "generated_at": UTC_TS,
    "score_ts": UTC_TS,
    "unit_id": pl.String(),
    "node": pl.String(),
    "rack": pl.String(),
    "action": pl.String(),
    "severity": pl.Int32(),
    "horizon": pl.String(),
    "risk": pl.Float64(),
}
TRAILING: dict[str, pl.DataType] = {
    "expected_lead_time_h": pl.Float64(),
    "expected_loss_gpu_h": pl.Float64(),
    "drain_cost_gpu_h": pl.Float64(),
    "reason": pl.String(),
    "guard": pl.String(),
    "top_signals": pl.List(SIGNAL_STRUCT),
    "model_name": pl.String(),
    "model_version": pl.String(),
    "run_id": pl.String(),
    "model_uri": pl.String(),
    "repeat_offender": pl.Int32(),  # foreshock.drain.lemons
    "node_repeat_offender": pl.Int32(),
    "propensity": pl.Float64(),  # foreshock.drain.learned
    "degradation_trend": pl.String(),  # filled by drain.health_files.publish_health
}

FILE_STEM = "risk_list"


def build_risk_list(recommendations: pl.DataFrame, generated_at: datetime) -> pl.DataFrame:
    """Shape a :class:`~foreshock.drain.policy.Decision`'s recommendations into schema v1."""
    frame = recommendations
    if "lead_time_h" in frame.columns:
        frame = frame.rename({"lead_time_h": "expected_lead_time_h"})
    horizons = [*horizon_columns(frame.columns).values(), *([HELD_COLUMN] if HELD_COLUMN in frame.columns else [])]
    exprs = []
    for name, dtype in {**LEADING, **{h: pl.Float64() for h in horizons}, **TRAILING}.items():
        if name == "schema_version":
            exprs.append(pl.lit(SCHEMA_VERSION, dtype=pl.Int32).alias(name))
        elif name == "generated_at":
            exprs.append(pl.lit(generated_at, dtype=UTC_TS).alias(name))
        elif name == "model_uri":
            exprs.append(_model_uri(frame).alias(name))
        elif name in frame.columns:
            exprs.append(pl.col(name).cast(dtype))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    return frame.select(exprs)


def _model_uri(frame: pl.DataFrame) -> pl.Expr:
    if "model_name" not in frame.columns or "model_version" not in frame.columns:
        return pl.lit(None, dtype=pl.String)
    return (
        pl.when(pl.col("model_name").is_not_null() & pl.col("model_version").is_not_null())
        .then(pl.format("models:/{}/{}", pl.col("model_name"), pl.col("model_version").cast(pl.String)))
        .otherwise(None)
    )


def signals_as_text(column: str = "top_signals") -> pl.Expr:
    """``signal=value (+contribution); ...`` for flat formats (CSV)."""
    item = pl.format(
        "{}={} ({})",
        pl.element().struct.field("signal"),
        pl.element().struct.field("value").round_sig_figs(4).cast(pl.String),
        pl.element().struct.field("contribution").round(4).cast(pl.String),
    )
    return pl.col(column).list.eval(item).list.join("; ").fill_null("")


def list_paths(directory: Path) -> dict[str, Path]:
    """The list's files in ``directory`` by format: ``parquet``, ``csv``, ``jsonl``."""
    return {fmt: Path(directory) / f"{FILE_STEM}.{fmt}" for fmt in ("parquet", "csv", "jsonl")}


def write_risk_list(frame: pl.DataFrame, directory: Path) -> dict[str, Path]:
    """Write the list as Parquet, CSV and JSON Lines; returns the paths by format."""
    paths = list_paths(directory)
    atomic_write_parquet(frame, paths["parquet"])
    flat = frame.with_columns(signals_as_text())
    atomic_write_text(paths["csv"], flat.write_csv())
    atomic_write_text(paths["jsonl"], frame.write_ndjson())
    return paths


def read_risk_list(path: Path) -> pl.DataFrame:
    """Read a risk list Parquet file, checking its schema version."""
    frame = pl.read_parquet(path)
    versions = frame.get_column("schema_version").unique().to_list() if "schema_version" in frame.columns else []
    if frame.height and versions != [SCHEMA_VERSION]:
        raise ValueError(f"{path}: risk list schema_version {versions}, expected {SCHEMA_VERSION}")
    return frame
