"""Row checks between parsing and the lake: every failing row gets one reason.

Checks, in order (the first failure names the row's reason and field):

* ids (``unit_id``; inventory also ``node``, ``rack``) match ``contract.ID_PATTERN``: no
  shell metacharacters, spaces or path separators ever reach a file path or a command;
* timestamps are present, not before 2000 (an unset clock) and not later than
  ``now + [ingest] max_future``;
* units are in the inventory when one exists (DIMMs: their host is a known node);
* samples: the metric is in the catalog, the value is finite, a counter is not negative,
  the value lies within the catalog's ``min``/``max`` (an absurd value is a broken reading),
  and a counter does not grow faster than the catalog's ``max_rate`` from the unit's
  previous reading (this batch's, or the last one stored the day before or on the same
  days; :mod:`~foreshock.ingest.counter_steps`); the rate is taken over at least
  ``MIN_RATE_INTERVAL`` so that two sources' readings a few milliseconds apart do not look
  like a storm;
* events: a non-negative code and count, a valid source name.

A counter that goes *down* is not an error: resets happen on driver reload and reboot, so
raw values are stored and features take increases.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import polars as pl

from foreshock.contract import ID_PATTERN, TIME_COLUMN
from foreshock.durations import format_duration
from foreshock.ingest.context import IngestContext
from foreshock.ingest.counter_steps import MetricPositions, distinct_of, step_check, with_counter_steps

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)


BOUND_COLUMNS = ("_low", "_high", "_counter")  # each sample's catalog bounds, while it is checked
ID_RUST_PATTERN = "^(?:" + ID_PATTERN.pattern.removesuffix("\\Z") + ")$"  # Rust regex: $ is the end of text
ID_RULE = "letters, digits and . _ : - only: no spaces, shell metacharacters or path separators"


def _bad_id(frame: pl.DataFrame, column: str, distinct: list[str] | None = None) -> tuple[pl.Expr, pl.Expr, str]:
    # Ids repeat on every row: check each distinct value once (``distinct``: the column's
    # distinct values without null, when the caller has them).
    if distinct is None:
        distinct = frame.get_column(column).unique().drop_nulls().to_list()
    bad = [v for v in distinct if not ID_PATTERN.fullmatch(v)]
    value = pl.col(column)
    return (
        value.is_in(pl.Series(bad, dtype=pl.String).implode()) if bad else pl.lit(False),
        pl.format("{} '{}' is not a valid id ({})", pl.lit(column), value.str.slice(0, 80), pl.lit(ID_RULE)),
        column,
    )


def validate(
    table: str, frame: pl.DataFrame, ctx: IngestContext, distinct: dict[str, pl.Series] | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split staged rows into ``(good, bad)``; bad rows carry ``_reason`` and ``_field``.

    Rows the parser already rejected stay bad with the parser's reason.  ``distinct``: the
    distinct values (no null) of ``unit_id`` or ``metric`` when known: every value of the
    column is among them (more do no harm: each check looks for the values it names).
    """
    distinct = distinct or {}
    units = distinct_of(frame, "unit_id", distinct)  # used by two checks
    checks: list[tuple[pl.Expr, pl.Expr, str]] = [
        (pl.col("unit_id").is_null(), pl.lit("missing unit_id"), "unit_id"),
        _bad_id(frame, "unit_id", units),
    ]
    if table == "inventory":
        checks += [_bad_id(frame, "node"), _bad_id(frame, "rack")]
    time_col = TIME_COLUMN[table] or ("installed_at" if table == "inventory" else None)
    if time_col:
        limit = ctx.now + ctx.max_future
        ts = pl.col(time_col)
        checks += [
            (ts.is_null(), pl.lit(f"missing {time_col}"), time_col),
            (
                ts < pl.lit(EARLIEST),
                pl.format("timestamp {} is before 2000 (clock not set?)", ts.cast(pl.String)),
                time_col,
            ),
            (
                ts > pl.lit(limit),
                pl.format(
                    "timestamp {} is in the future (later than now + {})",
                    ts.cast(pl.String),
                    pl.lit(format_duration(ctx.max_future)),
                ),
                time_col,
            ),
        ]
    if table != "inventory" and ctx.has_inventory:
        checks.append(_unknown_unit(frame, ctx, units))
    if table == "samples":
        metrics = MetricPositions.of(frame, distinct_of(frame, "metric", distinct))
        extremes = metrics.extremes(frame.get_column("value"))  # each metric's smallest and largest value
        frame = with_counter_steps(frame, ctx, metrics, extremes)
        frame, sample_checks = _sample_checks(frame, ctx, metrics, extremes)
        checks += sample_checks
    if table == "events":
        checks += _event_checks()
    if table == "inventory":
        for name in ("node", "rack", "model"):
            checks.append((pl.col(name).is_null(), pl.lit(f"missing {name}"), name))
    good, bad = _apply(frame, checks)
    if table == "samples":
        good, bad = good.drop(BOUND_COLUMNS, strict=False), bad.drop(BOUND_COLUMNS, strict=False)
    if table == "inventory" and "uuid" in good.columns:
        good, shared = _shared_uuids(good, ctx)
        bad = pl.concat([bad, shared], how="diagonal_relaxed")
    return good, bad


def _unknown_unit(frame: pl.DataFrame, ctx: IngestContext, units: list[str]) -> tuple[pl.Expr, pl.Expr, str]:
    """The check that a row's unit is in the inventory (a host-level row's node, for DIMMs).
    ``units``: the distinct units of ``frame``."""
    known = set(ctx.known_units().to_list())
    strangers = [u for u in units if u not in known]
    unknown = pl.col("unit_id").is_in(pl.Series(strangers, dtype=pl.String).implode()) if strangers else pl.lit(False)
    # Host-level rows (DIMMs) name their node; a frame without any (an all-null column,
    # as every GPU sample has) needs no look at it.
    if "_node" in frame.columns and frame.get_column("_node").null_count() < frame.height:
        host_level = pl.col("_node").is_not_null()
        nodes = set(ctx.known_nodes().to_list())
        strange_hosts = [n for n in frame.get_column("_node").unique().drop_nulls().to_list() if n not in nodes]
        host_unknown = (
            pl.col("_node").is_in(pl.Series(strange_hosts, dtype=pl.String).implode())
            if strange_hosts
            else pl.lit(False)
        )
        unknown = pl.when(host_level).then(host_unknown).otherwise(unknown)
    return unknown, pl.format("unknown unit '{}' (not in the inventory)", pl.col("unit_id")), "unit_id"


def _event_checks() -> list[tuple[pl.Expr, pl.Expr, str]]:
    """The checks of events: a valid source name, a non-negative code and count."""
    return [
        (
            pl.col("source").is_null() | ~pl.col("source").str.contains(ID_RUST_PATTERN),
            pl.lit("missing or invalid event source"),
            "source",
        ),
        (
            pl.col("code").is_null() | (pl.col("code") < 0),
            pl.lit("event code must be a non-negative integer"),
            "code",
        ),
        (
            pl.col("count").is_null() | (pl.col("count") < 0),
            pl.lit("event count must be a non-negative integer"),
            "count",
        ),
    ]


def _shared_uuids(good: pl.DataFrame, ctx: IngestContext) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Move inventory rows whose GPU ``uuid`` another unit holds to the quarantine.

    A uuid names one GPU, so tickets and scrapes matched by uuid would silently go to
    whichever unit came last.  The fleet after this batch is the stored inventory with
    each incoming unit's last row over it; a uuid on two units there quarantines the
    incoming rows that carry it, naming every unit involved.
    """
    incoming = good.with_row_index("_row").filter(
        pl.col("uuid").is_not_null() & (pl.col("uuid").str.strip_chars() != "")
    )
    if incoming.height == 0:
        return good, good.head(0)
    latest = incoming.unique(subset=["unit_id"], keep="last", maintain_order=True).select("unit_id", "uuid")
    fleet = latest
    if ctx.has_inventory and "uuid" in ctx.inventory.columns:
        stored = ctx.inventory.select("unit_id", pl.col("uuid").cast(pl.String)).filter(pl.col("uuid").is_not_null())
        fleet = pl.concat([stored.join(latest, on="unit_id", how="anti"), latest])
    holders = fleet.group_by("uuid").agg(pl.col("unit_id").unique().sort().alias("_units"))
    shared = holders.filter(pl.col("_units").list.len() > 1)
    if shared.height == 0:
        return good, good.head(0)
    hits = incoming.join(shared, on="uuid", how="inner")
    rows = hits.get_column("_row")
    reasons = hits.select(
        "_row",
        _uuid_reason=pl.format(
            "uuid '{}' is on more than one unit ({}): a GPU uuid names one unit",
            pl.col("uuid").str.slice(0, 80),
            pl.col("_units").list.join(", "),
        ),
    )
    indexed = good.with_row_index("_row")
    moved = (
        indexed.join(reasons, on="_row", how="inner")
        .with_columns(_reason=pl.col("_uuid_reason"), _field=pl.lit("uuid"))
        .drop("_row", "_uuid_reason")
    )
    return indexed.filter(~pl.col("_row").is_in(rows.implode())).drop("_row"), moved


def _apply(frame: pl.DataFrame, checks: list[tuple[pl.Expr, pl.Expr, str]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    # Conditions are cheap; reason texts are not (polars builds a branch's strings for every
    # row).  So find the first failing check per row, then write texts for failing rows only.
    # And most rows pass: one boolean pass finds the failing rows, and only those are
    # numbered by their first failing check.
    conditions = [condition.fill_null(False) for condition, _, _ in checks]
    failing = pl.col("_reason").is_not_null() | (pl.any_horizontal(conditions) if conditions else pl.lit(False))
    marked = frame.with_columns(_failing=failing)
    if not marked.get_column("_failing").any():  # the common case: no copy of the rows
        return frame, frame.head(0)
    good = marked.filter(~pl.col("_failing")).drop("_failing")
    number = pl.lit(None, dtype=pl.Int16)
    for index in reversed(range(len(checks))):
        number = pl.when(conditions[index]).then(pl.lit(index, dtype=pl.Int16)).otherwise(number)
    bad = (
        marked.filter("_failing")
        .drop("_failing")
        .with_columns(_check=pl.when(pl.col("_reason").is_null()).then(number))
    )
    if bad.height and checks:
        reason = pl.col("_reason")
        field = pl.col("_field")
        for index, (_, text, name) in enumerate(checks):
            reason = pl.when(pl.col("_check") == index).then(text).otherwise(reason)
            field = pl.when(pl.col("_check") == index).then(pl.lit(name)).otherwise(field)
        bad = bad.with_columns(_reason=reason, _field=field)
    return good, bad.drop("_check")


def _sample_checks(
    frame: pl.DataFrame, ctx: IngestContext, metrics: MetricPositions, extremes: tuple[np.ndarray, np.ndarray]
) -> tuple[pl.DataFrame, list[tuple[pl.Expr, pl.Expr, str]]]:
    """``frame``, with each row's catalog bounds and counter flag (``BOUND_COLUMNS``: the
    caller drops them) when some metric has a value out of them, and the checks of
    samples.  ``metrics``: each row's metric as its position among the frame's metric names
    (:class:`MetricPositions`): the bounds are looked up by position, not by comparing
    every row's name with each metric; ``extremes``: :meth:`MetricPositions.extremes` of the values."""
    catalog = ctx.catalog
    metric = pl.col("metric")
    value = pl.col("value")
    present = metrics.present
    unknown = [m for m in present if m not in catalog]
    specs = [catalog[m] if m in catalog else None for m in present]
    lows = np.array([-np.inf if s is None or s.min is None else s.min for s in specs] or [-np.inf])
    highs = np.array([np.inf if s is None or s.max is None else s.max for s in specs] or [np.inf])
    counters = np.array([s is not None and s.is_counter for s in specs] or [False])
    # Most batches hold no absurd value: each metric's smallest and largest value say so
    # at once, and then no row needs its bounds.
    low_seen, high_seen = extremes
    if ((low_seen >= lows) & (high_seen <= highs) & ~(counters & (low_seen < 0))).all():
        negative, absurd = pl.lit(False), pl.lit(False)
    else:
        position = metrics.per_row
        frame = frame.with_columns(
            pl.Series("_low", lows[position]),
            pl.Series("_high", highs[position]),
            pl.Series("_counter", counters[position]),
        )
        negative, absurd = pl.col("_counter") & (value < 0), (value < pl.col("_low")) | (value > pl.col("_high"))
    low = _lookup(metric, {m.name: m.min for m in catalog if m.min is not None})
    high = _lookup(metric, {m.name: m.max for m in catalog if m.max is not None})
    return frame, [
        (metric.is_null(), pl.lit("missing metric"), "metric"),
        (
            metric.is_in(pl.Series(unknown, dtype=pl.String).implode()) if unknown else pl.lit(False),
            pl.format("unknown metric '{}' (not in the metric catalog {})", metric, pl.lit(catalog.source)),
            "metric",
        ),
        (value.is_null(), pl.lit("missing value"), "value"),
        (value.is_nan(), pl.lit("value is NaN"), "value"),
        (value.is_infinite(), pl.lit("value is infinite"), "value"),
        (negative, pl.format("negative counter value {} for {}", value, metric), "value"),
        (
            absurd,
            pl.format("absurd value {} for {}: outside the catalog range [{}, {}]", value, metric, low, high),
            "value",
        ),
        step_check(frame),
    ]


def _lookup(column: pl.Expr, mapping: dict[str, float]) -> pl.Expr:
    if not mapping:
        return pl.lit(None, dtype=pl.Float64)
    return column.replace_strict(mapping, default=None, return_dtype=pl.Float64)
