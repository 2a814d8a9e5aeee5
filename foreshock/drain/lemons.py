"""Repeat offenders ("lemon" units and nodes): hardware that keeps coming back.

An **incident** is a recorded failure, drain or replacement of a unit (the lake's
``failures`` and ``drains`` tables; in a replay, the drains the policy granted).  A failure
during a recorded drain of the same unit is the same incident as the drain (the drain found
it), so it is not counted twice.  Within ``[lemon] window`` before a decision:

- a unit with at least ``[lemon] count`` incidents is a repeat offender (``lemon = "unit"``);
  a replacement starts its count again (new hardware), so only incidents since its latest
  replacement count;
- a node whose units add up to at least ``[lemon] node_count`` incidents is one too
  (``lemon = "node"`` for each of its units): the baseboard, power or cooling they share
  is the suspect, and replacements of single GPUs do not clear it.

The drain policy recommends ``replace`` (hardware replacement / RMA) instead of another
drain and return for a repeat offender it would drain (same guards and budgets); the risk
list carries ``repeat_offender`` and ``node_repeat_offender`` for every unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from foreshock.config import builtin_field, section_values
from foreshock.contract import UTC_TS
from foreshock.durations import format_duration
from foreshock.models.evaluation.caught import split_drained

REPLACE = "replace"

INCIDENT_SCHEMA: dict[str, pl.DataType] = {
    "unit_id": pl.String(),
    "at": UTC_TS,
    "kind": pl.String(),  # failure, drain or replace
    "detail": pl.String(),  # failure mode, or the drain's action / source
}

LEMON_SCHEMA: dict[str, pl.DataType] = {
    "unit_id": pl.String(),
    "node": pl.String(),
    "repeat_offender": pl.Int32(),
    "node_repeat_offender": pl.Int32(),
    "lemon": pl.String(),  # "unit", "node" or null
}


def _lemon_default(key: str, kind: Any) -> Any:
    return builtin_field("lemon", key, kind)


@dataclass(frozen=True)
class LemonSettings:
    """``[lemon]``: what makes a repeat offender, and what the policy does about it.

    Parameters
    ----------
    count, node_count
        Incidents within ``window`` that make a unit, or a node (its units together), a
        repeat offender.
    window
        How far back incidents count.
    replace
        Recommend ``replace`` instead of a drain for a repeat offender the policy would drain.
    replace_turnaround
        How long a replaced unit is out (the replay prices a replacement with it).
    """

    count: int = _lemon_default("count", int)
    node_count: int = _lemon_default("node_count", int)
    window: timedelta = _lemon_default("window", timedelta)
    replace: bool = _lemon_default("replace", bool)
    replace_turnaround: timedelta = _lemon_default("replace_turnaround", timedelta)

    @classmethod
    def from_config(cls, config: Any) -> LemonSettings:
        return cls(**section_values(cls, "lemon", config.section("lemon")))

    def describe(self) -> str:
        return (
            f"{self.count} incidents of a unit, or {self.node_count} of a node's units, "
            f"within {format_duration(self.window)}"
        )


def incidents(
    failures: pl.DataFrame | None, drains: pl.DataFrame | None, now: datetime, window: timedelta
) -> pl.DataFrame:
    """Every incident of the ``window`` before ``now`` (``unit_id, at, kind, detail``), oldest first.

    Parameters
    ----------
    failures
        ``unit_id, failed_at`` (``mode`` optional), or None.
    drains
        The ``drains`` table (``unit_id, drained_at``; ``returned_at``, ``action``,
        ``source`` optional), or None.  ``action = "replace"`` marks a replacement.
    """
    start = now - window
    parts = []
    if drains is not None and drains.height:
        d = _with_optional(drains, ("returned_at", "action", "source"))
        d = d.filter((pl.col("drained_at") > start) & (pl.col("drained_at") <= now))
        parts.append(
            d.select(
                pl.col("unit_id").cast(pl.String),
                pl.col("drained_at").cast(UTC_TS).alias("at"),
                pl.when(pl.col("action") == REPLACE).then(pl.lit(REPLACE)).otherwise(pl.lit("drain")).alias("kind"),
                pl.coalesce(pl.col("action").cast(pl.String), pl.col("source").cast(pl.String)).alias("detail"),
            )
        )
    if failures is not None and failures.height:
        f = _with_optional(failures, ("mode",))
        f = f.filter((pl.col("failed_at") > start) & (pl.col("failed_at") <= now))
        # a failure inside a recorded drain is the incident the drain already counts
        in_service, _ = split_drained(f, drains if drains is not None and drains.height else None)
        parts.append(
            in_service.select(
                pl.col("unit_id").cast(pl.String),
                pl.col("failed_at").cast(UTC_TS).alias("at"),
                pl.lit("failure").alias("kind"),
                pl.col("mode").cast(pl.String).alias("detail"),
            )
        )
    if not parts:
        return pl.DataFrame(schema=INCIDENT_SCHEMA)
    return pl.concat(parts).select(list(INCIDENT_SCHEMA)).sort("at", "unit_id")


def _with_optional(frame: pl.DataFrame, columns: tuple[str, ...]) -> pl.DataFrame:
    missing = [pl.lit(None, dtype=pl.String).alias(c) for c in columns if c not in frame.columns]
    return frame.with_columns(missing) if missing else frame


def lemon_table(events: pl.DataFrame, node_of: dict[str, str | None], settings: LemonSettings) -> pl.DataFrame:
    """Per unit with an incident, or on a node with one: its counts and whether it is a lemon.

    Parameters
    ----------
    events
        :func:`incidents` output.
    node_of
        Unit id -> node (the inventory and the scored units).
    settings
        The thresholds.

    Returns
    -------
    polars.DataFrame
        :data:`LEMON_SCHEMA`: ``repeat_offender`` counts the unit's incidents since its
        latest replacement, ``node_repeat_offender`` all incidents of its node's units;
        ``lemon`` is ``"unit"``, ``"node"`` or null.
    """
    if events.height == 0:
        return pl.DataFrame(schema=LEMON_SCHEMA)
    nodes = pl.DataFrame(
        {"unit_id": list(node_of), "node": list(node_of.values())}, schema={"unit_id": pl.String, "node": pl.String}
    )
    events = events.join(nodes, on="unit_id", how="left")
    last_replace = events.filter(pl.col("kind") == REPLACE).group_by("unit_id").agg(pl.col("at").max().alias("_new"))
    since = events.join(last_replace, on="unit_id", how="left").filter(
        pl.col("_new").is_null() | (pl.col("at") >= pl.col("_new"))
    )
    per_unit = since.group_by("unit_id").agg(pl.len().cast(pl.Int32).alias("repeat_offender"))
    per_node = events.drop_nulls("node").group_by("node").agg(pl.len().cast(pl.Int32).alias("node_repeat_offender"))
    on_nodes = nodes.join(per_node, on="node", how="inner")
    units = pl.concat([on_nodes.select("unit_id"), per_unit.select("unit_id")], how="vertical").unique()
    table = (
        units.join(nodes, on="unit_id", how="left")
        .join(per_unit, on="unit_id", how="left")
        .join(per_node, on="node", how="left")
        .with_columns(pl.col("repeat_offender", "node_repeat_offender").fill_null(0))
    )
    return (
        table.with_columns(
            pl.when(pl.col("repeat_offender") >= settings.count)
            .then(pl.lit("unit"))
            .when(pl.col("node_repeat_offender") >= settings.node_count)
            .then(pl.lit("node"))
            .otherwise(None)
            .alias("lemon")
        )
        .select(list(LEMON_SCHEMA))
        .cast(LEMON_SCHEMA)
        .sort("unit_id")
    )


def lemons_at(
    now: datetime,
    failures: pl.DataFrame | None,
    drains: pl.DataFrame | None,
    node_of: dict[str, str | None],
    settings: LemonSettings,
) -> pl.DataFrame:
    """:func:`lemon_table` of the incidents in the window before ``now``."""
    return lemon_table(incidents(failures, drains, now, settings.window), node_of, settings)


def lemon_reason(row: dict, settings: LemonSettings) -> str:
    """Why a unit is a repeat offender, in words (the risk list's reason, the page)."""
    window = format_duration(settings.window)
    if row.get("lemon") == "node":
        return (
            f"repeat offender: node {row.get('node')} had {row['node_repeat_offender']} incidents "
            f"(failures, drains, replacements) in {window}: RMA the node (baseboard, power, cooling)"
        )
    return (
        f"repeat offender: {row['repeat_offender']} incidents (failures, drains, replacements) in {window}: "
        "replace the GPU (RMA) rather than drain and return it"
    )


def lemon_history(events: pl.DataFrame, lemons: pl.DataFrame) -> pl.DataFrame:
    """The incidents behind each repeat offender (``unit_id, node, lemon, at, kind, detail``),
    grouped by node then unit, oldest first: the fleet page's history table."""
    flagged = lemons.filter(pl.col("lemon").is_not_null())
    if flagged.height == 0 or events.height == 0:
        return pl.DataFrame(schema={"unit_id": pl.String, "node": pl.String, "lemon": pl.String, **INCIDENT_SCHEMA})
    by_node = flagged.filter(pl.col("lemon") == "node").get_column("node").unique()
    all_units = lemons.select("unit_id", "node")
    node_events = events.join(all_units, on="unit_id", how="inner").filter(pl.col("node").is_in(by_node.implode()))
    unit_events = events.join(flagged.filter(pl.col("lemon") == "unit").select("unit_id", "node"), on="unit_id")
    out = pl.concat(
        [
            unit_events.with_columns(pl.lit("unit").alias("lemon")),
            node_events.with_columns(pl.lit("node").alias("lemon")),
        ],
        how="diagonal_relaxed",
    )
    return out.select("unit_id", "node", "lemon", "at", "kind", "detail").unique().sort("node", "unit_id", "at")


def node_map(fleet: pl.DataFrame) -> dict[str, str | None]:
    """Unit id -> node of a fleet table (:func:`foreshock.drain.risk_table.fleet_table`)."""
    if "node" not in fleet.columns:
        return dict.fromkeys(fleet.get_column("unit_id").to_list())
    return dict(zip(fleet.get_column("unit_id").to_list(), fleet.get_column("node").to_list()))


def lake_lemons(config: Any, now: datetime) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Repeat offenders from the lake (``failures``, ``drains``, ``inventory``) in the
    ``[lemon] window`` before ``now``: the lemon table and the incidents behind each
    (:func:`lemon_history`), for ``foreshock status`` and the fleet page."""
    from foreshock.lake.read import read_table  # the lake is read only here

    settings = LemonSettings.from_config(config)
    inventory = read_table(config.lake_dir, "inventory")
    failures, drains = read_table(config.lake_dir, "failures"), read_table(config.lake_dir, "drains")
    nodes = node_map(inventory) if inventory.height else {}
    events = incidents(failures, drains, now, settings.window)
    table = lemon_table(events, nodes, settings)
    return table, lemon_history(events, table)


def offender_counts(table: pl.DataFrame) -> tuple[int, int]:
    """Units that are repeat offenders themselves, and nodes that are (:func:`lemon_table`)."""
    units = table.filter(pl.col("lemon") == "unit").height
    nodes = table.filter(pl.col("lemon") == "node").get_column("node").n_unique()
    return units, nodes


def lemon_summary(table: pl.DataFrame, settings: LemonSettings) -> str:
    """One line: how many units and nodes are repeat offenders, by what rule."""
    units, nodes = offender_counts(table)
    return f"repeat offenders ({settings.describe()}): {units} unit(s), {nodes} node(s)"


def offender_lines(table: pl.DataFrame, settings: LemonSettings) -> str:
    """:func:`lemon_summary` and below it each repeat offender, units then nodes
    (``foreshock status``)."""
    lines = [lemon_summary(table, settings)]
    for r in table.filter(pl.col("lemon") == "unit").to_dicts():
        lines.append(
            f"  unit {r['unit_id']}: {r['repeat_offender']} incidents (node {r['node']}: {r['node_repeat_offender']})"
        )
    nodes = table.filter(pl.col("lemon") == "node").unique("node").sort("node")
    lines += [f"  node {r['node']}: {r['node_repeat_offender']} incidents over its units" for r in nodes.to_dicts()]
    return "\n".join(lines)


def listed_offenders(risk_list: pl.DataFrame, settings: LemonSettings) -> str:
    """One line: how many units of a published risk list are repeat offenders, on how many
    nodes, and how many it says to replace."""
    if "repeat_offender" not in risk_list.columns:
        return "repeat offenders: not in this list (published before [lemon])"
    units = risk_list.filter(pl.col("repeat_offender") >= settings.count).height
    on_nodes = risk_list.filter(pl.col("node_repeat_offender") >= settings.node_count)
    replace = risk_list.filter(pl.col("action") == REPLACE).height
    return (
        f"repeat offenders ({settings.describe()}): {units} unit(s), "
        f"{on_nodes.get_column('node').n_unique()} node(s); replace: {replace}"
    )
