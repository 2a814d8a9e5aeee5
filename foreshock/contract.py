"""The canonical data contract ("bring your own telemetry").

Every source parser produces these tables; everything downstream reads only them.

=========  ===========================================================  ==================
table      columns                                                      natural key
=========  ===========================================================  ==================
inventory  unit_id, node, rack, model, lot (nullable), installed_at,    unit_id
           + any extra fault-domain columns
samples    unit_id, ts (UTC), metric, value (f64)                       unit_id, ts, metric
events     unit_id, ts (UTC), source, code, count                       unit_id, ts, source, code
failures   unit_id, failed_at (UTC), mode (nullable),                   unit_id, failed_at
           detected_at (UTC, nullable: when the ticket made it known)
drains     unit_id, drained_at (UTC), returned_at (UTC, nullable),      unit_id, drained_at
           action (nullable), source (nullable)
=========  ===========================================================  ==================

A failure is known from ``detected_at`` (default ``failed_at``): features and training
labels only see it from then.  A drain censors the unit's outcome: a unit drained and then
repaired never failed on its own, so it is not a negative (``features.labels``).

Counters are stored as the raw cumulative values the source reported; features take
increases (with reset handling).

Feature snapshots (what the features stage writes and every model reads) are keyed
``unit_id, ts`` (:data:`SNAPSHOT_KEY`) and carry, besides the model features, the
unit's inventory context (:data:`INVENTORY_CONTEXT_COLUMNS`) and its life
(:data:`LIFE_COLUMNS`); labelled snapshots add ``fails_within_<h>`` per horizon
(:func:`label_column`) and ``time_to_failure_h`` (:data:`TIME_TO_FAILURE`); labels at a
cutoff may add ``label_weight_<h>`` (:func:`weight_column`).
"""

from __future__ import annotations

import re
from datetime import timedelta

import polars as pl

from foreshock.durations import format_duration, parse_duration

UTC_TS = pl.Datetime("us", "UTC")

SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "inventory": {
        "unit_id": pl.String(),
        "node": pl.String(),
        "rack": pl.String(),
        "model": pl.String(),
        "lot": pl.String(),
        "installed_at": UTC_TS,
    },
    "samples": {"unit_id": pl.String(), "ts": UTC_TS, "metric": pl.String(), "value": pl.Float64()},
    "events": {
        "unit_id": pl.String(),
        "ts": UTC_TS,
        "source": pl.String(),
        "code": pl.Int64(),
        "count": pl.Int64(),
    },
    "failures": {"unit_id": pl.String(), "failed_at": UTC_TS, "mode": pl.String(), "detected_at": UTC_TS},
    "drains": {
        "unit_id": pl.String(),
        "drained_at": UTC_TS,
        "returned_at": UTC_TS,
        "action": pl.String(),
        "source": pl.String(),
    },
}

KEYS: dict[str, tuple[str, ...]] = {
    "inventory": ("unit_id",),
    "samples": ("unit_id", "ts", "metric"),
    "events": ("unit_id", "ts", "source", "code"),
    "failures": ("unit_id", "failed_at"),
    "drains": ("unit_id", "drained_at"),
}

# The time column that partitions a table by date (inventory is not time-partitioned).
TIME_COLUMN: dict[str, str | None] = {
    "inventory": None,
    "samples": "ts",
    "events": "ts",
    "failures": "failed_at",
    "drains": "drained_at",
}

TABLES = tuple(SCHEMAS)
REQUIRED_INVENTORY = ("unit_id", "node", "rack", "model", "installed_at")
# Columns a table may lack (read as null).
OPTIONAL: dict[str, tuple[str, ...]] = {
    "inventory": ("lot",),
    "failures": ("mode", "detected_at"),
    "drains": ("returned_at", "action", "source"),
}

# Unit, node and rack ids end up in file paths, shell commands (scontrol, kubectl) and
# Prometheus selectors: allow what real hostnames, GPU UUIDs and PCI ids use, nothing else.
# Checked with a full match (``re.fullmatch``): ``$`` alone also matches before a trailing
# newline, which would let ``"n1\n"`` through.  ``\Z`` keeps ``ID_PATTERN.match`` safe too.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}\Z")


def is_valid_id(value: object) -> bool:
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def empty(table: str) -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMAS[table])


def conform(df: pl.DataFrame, table: str) -> pl.DataFrame:
    """Cast to the contract's types and order (extra inventory columns kept as strings)."""
    schema = SCHEMAS[table]
    missing = [c for c in schema if c not in df.columns and c not in OPTIONAL.get(table, ())]
    if missing:
        raise ValueError(f"{table}: missing column(s) {missing}")
    exprs = []
    for name, dtype in schema.items():
        if name in df.columns:
            exprs.append(pl.col(name).cast(dtype))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    extra = [pl.col(c).cast(pl.String) for c in df.columns if c not in schema] if table == "inventory" else []
    return df.select(exprs + extra)


# --------------------------------------------------------------------------------------
# Feature snapshots and their labels
# --------------------------------------------------------------------------------------

SNAPSHOT_KEY = ("unit_id", "ts")
# Where a unit sits: its fault domains (live scores and drain decisions carry them).
LOCATION_COLUMNS = ("node", "rack")
# Inventory columns copied onto every snapshot (strings, null when the inventory lacks them).
INVENTORY_CONTEXT_COLUMNS = (*LOCATION_COLUMNS, "model", "lot")
# Which life of its slot a snapshot belongs to: a replaced GPU starts life k+1 at the failure.
LIFE_COLUMNS = ("life", "life_start")
# Everything on a snapshot that describes it rather than measures it: never a model input.
SNAPSHOT_CONTEXT_COLUMNS = (*INVENTORY_CONTEXT_COLUMNS, *LIFE_COLUMNS)

LABEL_PREFIX = "fails_within_"
# How much of a snapshot's label is observed at a cutoff (foreshock.features.labels).
WEIGHT_PREFIX = "label_weight_"
TIME_TO_FAILURE = "time_to_failure_h"  # hours to the failure that ends the life (null: none known)


def is_label_column(name: str) -> bool:
    """A label, its weight or the time to failure: outcome columns, never model inputs."""
    return name.startswith((LABEL_PREFIX, WEIGHT_PREFIX)) or name == TIME_TO_FAILURE


def label_column(horizon: str | timedelta) -> str:
    """The label column of a horizon: does the unit fail within it.

    The horizon is spelled with ``format_duration``, whatever spelling the user chose:
    ``"72h"`` -> ``fails_within_3d``.
    """
    return f"{LABEL_PREFIX}{format_duration(parse_duration(horizon))}"


def weight_column(horizon: str | timedelta) -> str:
    """The label-weight column of a horizon (``label_weight_<h>``, spelled like :func:`label_column`)."""
    return f"{WEIGHT_PREFIX}{format_duration(parse_duration(horizon))}"
