"""Row checks between parsing and the lake: every failing row gets one reason.

Checks, in order (the first failure names the row's reason and field):

* ids (``unit_id``; inventory also ``node``, ``rack``) match ``contract.ID_PATTERN``: no
  shell metacharacters, spaces or path separators ever reach a file path or a command;
* timestamps are present, not before 2000 (an unset clock) and not later than
  ``now + [ingest] max_future``;
* units are in the inventory when one exists (DIMMs: their host is a known node);
* samples: the metric is in the catalog, the value is finite, a counter is not negative,
  the value lies within the catalog's ``min``/``max`` (an absurd value is a broken reading);
* events: a non-negative code and count, a valid source name.

A counter that goes *down* is not an error: resets happen on driver reload and reboot, so
raw values are stored and features take increases.
"""

from __future__ import annotations

from datetime import datetime, timezone

import polars as pl

from foreshock.contract import ID_PATTERN, TIME_COLUMN
from foreshock.durations import format_duration
from foreshock.ingest.context import IngestContext

EARLIEST = datetime(2000, 1, 1, tzinfo=timezone.utc)
ID_RULE = "letters, digits and . _ : - only: no spaces, shell metacharacters or path separators"


def _first(checks: list[tuple[pl.Expr, pl.Expr, str]]) -> tuple[pl.Expr, pl.Expr]:
    reason = pl.col("_reason")
    field = pl.col("_field")
    chain_reason = None
    chain_field = None
    for condition, text, name in checks:
        if chain_reason is None:
            chain_reason = pl.when(condition).then(text)
            chain_field = pl.when(condition).then(pl.lit(name))
        else:
            chain_reason = chain_reason.when(condition).then(text)
            chain_field = chain_field.when(condition).then(pl.lit(name))
    if chain_reason is None:
        return reason, field
    has = pl.col("_reason").is_not_null()
    return (
        pl.when(has).then(reason).otherwise(chain_reason.otherwise(pl.lit(None, dtype=pl.String))),
        pl.when(has).then(field).otherwise(chain_field.otherwise(pl.lit(None, dtype=pl.String))),
    )


def _bad_id(column: str) -> tuple[pl.Expr, pl.Expr, str]:
    value = pl.col(column)
    return (
        value.is_not_null() & ~value.str.contains(ID_PATTERN.pattern),
        pl.format("{} '{}' is not a valid id ({})", pl.lit(column), value.str.slice(0, 80), pl.lit(ID_RULE)),
        column,
    )


def validate(table: str, frame: pl.DataFrame, ctx: IngestContext) -> pl.DataFrame:
    """Fill ``_reason``/``_field`` for every row that fails a check (see module notes)."""
    checks: list[tuple[pl.Expr, pl.Expr, str]] = [
        (pl.col("unit_id").is_null(), pl.lit("missing unit_id"), "unit_id"),
        _bad_id("unit_id"),
    ]
    if table == "inventory":
        checks += [_bad_id("node"), _bad_id("rack")]
    time_col = TIME_COLUMN[table] or ("installed_at" if table == "inventory" else None)
    if time_col:
        limit = ctx.now + ctx.max_future
        ts = pl.col(time_col)
        checks += [
            (ts.is_null(), pl.lit(f"missing {time_col}"), time_col),
            (ts < pl.lit(EARLIEST), pl.format("timestamp {} is before 2000 (clock not set?)", ts.cast(pl.String)), time_col),
            (
                ts > pl.lit(limit),
                pl.format("timestamp {} is in the future (later than now + {})", ts.cast(pl.String), pl.lit(format_duration(ctx.max_future))),
                time_col,
            ),
        ]
    if table != "inventory" and ctx.has_inventory:
        units = ctx.known_units()
        unknown = ~pl.col("unit_id").is_in(units.implode())
        if "_node" in frame.columns:
            host_level = pl.col("_node").is_not_null()
            unknown = pl.when(host_level).then(~pl.col("_node").is_in(ctx.known_nodes().implode())).otherwise(unknown)
        checks.append((unknown, pl.format("unknown unit '{}' (not in the inventory)", pl.col("unit_id")), "unit_id"))
    if table == "samples":
        checks += _sample_checks(ctx)
    if table == "events":
        checks += [
            (pl.col("source").is_null() | ~pl.col("source").str.contains(ID_PATTERN.pattern), pl.lit("missing or invalid event source"), "source"),
            (pl.col("code").is_null() | (pl.col("code") < 0), pl.lit("event code must be a non-negative integer"), "code"),
            (pl.col("count").is_null() | (pl.col("count") < 0), pl.lit("event count must be a non-negative integer"), "count"),
        ]
    if table == "inventory":
        for name in ("node", "rack", "model"):
            checks.append((pl.col(name).is_null(), pl.lit(f"missing {name}"), name))
    reason, field = _first(checks)
    return frame.with_columns(_reason=reason, _field=field)


def _sample_checks(ctx: IngestContext) -> list[tuple[pl.Expr, pl.Expr, str]]:
    catalog = ctx.catalog
    names = catalog.names()
    metric = pl.col("metric")
    value = pl.col("value")
    counter = metric.is_in([m.name for m in catalog.by(kind="counter")])
    low = _lookup(metric, {m.name: m.min for m in catalog if m.min is not None})
    high = _lookup(metric, {m.name: m.max for m in catalog if m.max is not None})
    return [
        (metric.is_null(), pl.lit("missing metric"), "metric"),
        (~metric.is_in(names), pl.format("unknown metric '{}' (not in the metric catalog {})", metric, pl.lit(catalog.source)), "metric"),
        (value.is_null(), pl.lit("missing value"), "value"),
        (value.is_nan(), pl.lit("value is NaN"), "value"),
        (value.is_infinite(), pl.lit("value is infinite"), "value"),
        (counter & (value < 0), pl.format("negative counter value {} for {}", value, metric), "value"),
        (
            (value < low) | (value > high),
            pl.format("absurd value {} for {}: outside the catalog range [{}, {}]", value, metric, low, high),
            "value",
        ),
    ]


def _lookup(column: pl.Expr, mapping: dict[str, float]) -> pl.Expr:
    if not mapping:
        return pl.lit(None, dtype=pl.Float64)
    return column.replace_strict(mapping, default=None, return_dtype=pl.Float64)
