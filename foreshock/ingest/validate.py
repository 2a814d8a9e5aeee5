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
  days); the rate is taken over at least ``MIN_RATE_INTERVAL`` so that two sources'
  readings a few milliseconds apart do not look like a storm;
* events: a non-negative code and count, a valid source name.

A counter that goes *down* is not an error: resets happen on driver reload and reboot, so
raw values are stored and features take increases.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from foreshock.contract import ID_PATTERN, SCHEMAS, TIME_COLUMN
from foreshock.durations import format_duration
from foreshock.ingest.context import IngestContext
from foreshock.lake import latest as lake_latest
from foreshock.lake.columns import distinct_values, in_order, long_runs, stable_order
from foreshock.lake.layout import lake_shards, partition_files, shard_of

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
MIN_RATE_INTERVAL = 60.0  # seconds
STEP_COLUMNS = ("_step_rate", "_max_rate", "_previous", "_seconds")
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
    units = _distinct(frame, "unit_id", distinct)  # used by two checks
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
        known = set(ctx.known_units().to_list())
        strangers = [u for u in units if u not in known]
        unknown = (
            pl.col("unit_id").is_in(pl.Series(strangers, dtype=pl.String).implode()) if strangers else pl.lit(False)
        )
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
        checks.append((unknown, pl.format("unknown unit '{}' (not in the inventory)", pl.col("unit_id")), "unit_id"))
    if table == "samples":
        metrics = MetricPositions.of(frame, _distinct(frame, "metric", distinct))
        frame = with_counter_steps(frame, ctx, metrics)
        frame, sample_checks = _sample_checks(frame, ctx, metrics)
        checks += sample_checks
    if table == "events":
        checks += [
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


def _distinct(frame: pl.DataFrame, column: str, known: dict[str, pl.Series]) -> list[str]:
    """The distinct values (no null) of ``column``: ``known[column]`` when given."""
    values = known.get(column)
    return (distinct_values(frame.get_column(column)) if values is None else values).drop_nulls().to_list()


@dataclass
class MetricPositions:
    """Each sample's metric as its position among ``present`` (the frame's metric names, or
    more): ``per_row``; and when the frame lists a metric's readings together (runs of
    ``lake.RUN_LOOKUP_MIN_LENGTH`` rows on average, as files do) the runs' first rows
    (``starts``) and positions (``per_run``), so that a check over a metric's values is a
    pass over runs, not a lookup of each row's name.  A row without a metric has position
    0 (it fails the missing-metric check before any check that reads its position)."""

    present: list[str]
    per_row: np.ndarray
    starts: np.ndarray | None = None
    per_run: np.ndarray | None = None

    @classmethod
    def of(cls, frame: pl.DataFrame, present: list[str]) -> MetricPositions:
        column = frame.get_column("metric")
        runs = long_runs(column)
        if runs is None:
            return cls(present, _positions(column, present))
        values, lengths = runs
        per_run = _positions(values, present)
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return cls(present, np.repeat(per_run, lengths), starts, per_run)

    def extremes(self, values: pl.Series) -> tuple[np.ndarray, np.ndarray]:
        """Each position's smallest and largest value (nulls and NaN ignored; a position
        without any value: ``inf`` and ``-inf``)."""
        low = np.full(max(len(self.present), 1), np.inf)
        high = np.full(len(low), -np.inf)
        if self.starts is not None:
            numbers = values.to_numpy()  # a null is NaN here: ignored by fmin and fmax
            if len(numbers):
                np.fmin.at(low, self.per_run, np.fmin.reduceat(numbers, self.starts))
                np.fmax.at(high, self.per_run, np.fmax.reduceat(numbers, self.starts))
            return low, high
        seen = (
            pl.DataFrame({"position": self.per_row, "value": values})
            .group_by("position")
            .agg(low=pl.col("value").min(), high=pl.col("value").max())
        )
        at = seen.get_column("position").to_numpy()
        low[at] = seen.get_column("low").fill_null(np.inf).fill_nan(np.inf).to_numpy()
        high[at] = seen.get_column("high").fill_null(-np.inf).fill_nan(-np.inf).to_numpy()
        return low, high


def _positions(names: pl.Series, present: list[str]) -> np.ndarray:
    """Each name's position among ``present`` (a null: 0), by one cast to an enum of them."""
    return names.cast(pl.Enum(present)).to_physical().fill_null(0).to_numpy()


def _sample_checks(
    frame: pl.DataFrame, ctx: IngestContext, metrics: MetricPositions
) -> tuple[pl.DataFrame, list[tuple[pl.Expr, pl.Expr, str]]]:
    """``frame``, with each row's catalog bounds and counter flag (``BOUND_COLUMNS``: the
    caller drops them) when some metric has a value out of them, and the checks of
    samples.  ``metrics``: each row's metric as its position among the frame's metric names
    (:class:`MetricPositions`): the bounds are looked up by position, not by comparing
    every row's name with each metric."""
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
    low_seen, high_seen = metrics.extremes(frame.get_column("value"))
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
        _step_check(frame),
    ]


def _step_check(frame: pl.DataFrame) -> tuple[pl.Expr, pl.Expr, str]:
    """The counter-step check, on the columns :func:`with_counter_steps` adds (a check that
    cannot fail when it added none)."""
    if "_step_rate" not in frame.columns:
        return pl.lit(False), pl.lit(None, dtype=pl.String), "value"
    return (
        pl.col("_step_rate") > pl.col("_max_rate"),
        pl.format(
            "implausible counter step for {}: {} -> {} in {} s, faster than the catalog's max_rate {}/s",
            pl.col("metric"),
            pl.col("_previous"),
            pl.col("value"),
            pl.col("_seconds").round(1),
            pl.col("_max_rate"),
        ),
        "value",
    )


def with_counter_steps(frame: pl.DataFrame, ctx: IngestContext, metrics: MetricPositions | None = None) -> pl.DataFrame:
    """``frame`` with, for each counter reading that grew faster than its ``_max_rate`` from
    the unit's previous one, that growth rate (``_step_rate``), the previous value and the
    seconds between them (``STEP_COLUMNS``; null on the other rows); ``frame`` as it is when
    no reading did (the step check then has nothing to find).  ``metrics``: the rows'
    metric positions (:class:`MetricPositions`) when the caller has them."""
    limits = {m.name: m.max_rate for m in ctx.catalog if m.is_counter and m.max_rate is not None}
    if not limits:
        return frame
    if metrics is None:
        metrics = MetricPositions.of(frame, _distinct(frame, "metric", {}))
    # a counter's rows by their metric's position (a row without a metric has position 0:
    # the null check keeps it out)
    limited = np.array([name in limits for name in metrics.present] or [False])[metrics.per_row]
    candidates = (
        frame.with_row_index("_row")
        .with_columns(pl.Series("_position", metrics.per_row))
        .filter(
            pl.Series(limited)
            & pl.col("_reason").is_null()
            & pl.col("metric").is_not_null()
            & pl.col("value").is_finite()
            & pl.col("ts").is_not_null()
            & pl.col("unit_id").is_not_null()
        )
        .select("_row", "unit_id", "ts", "metric", "value", "_position")
    )
    if candidates.height == 0:
        return frame
    first, last = candidates.get_column("ts").min(), candidates.get_column("ts").max()
    runs = _series_runs(candidates, candidates.get_column("_position"))
    # units in order of their first reading (the sorted path numbers series so)
    units = (
        distinct_values(candidates.get_column("unit_id"), maintain_order=True)
        if runs is None
        else runs[1].get_column("unit_id").unique(maintain_order=True)
    )
    stored = _stored_counters(ctx, units, sorted(limits), first, last)  # read once, for either path
    if runs is not None and stored.filter(pl.col("ts") >= first).height == 0:
        steps = _steps_along_runs(candidates, runs, stored, limits)
    else:  # series interleaved, or stored readings among the new ones: sorted
        steps = _steps_sorted(candidates, units, stored, limits)
    if steps.height == 0:  # the common case: no column of nulls the length of the batch
        return frame
    rows = steps.get_column("_row")
    return frame.with_columns(
        pl.Series(name, [], dtype=pl.Float64).extend_constant(None, frame.height).scatter(rows, steps.get_column(name))
        for name in STEP_COLUMNS
    )


def _steps_sorted(
    candidates: pl.DataFrame, units: pl.Series, stored: pl.DataFrame, limits: dict[str, float]
) -> pl.DataFrame:
    """The steps of :func:`with_counter_steps` faster than their limit (``_row`` and
    ``STEP_COLUMNS``), from the counter readings ``candidates`` and the ``stored`` ones
    (:func:`_stored_counters`), all sorted by series and time."""
    # Number each series (unit, metric) from the unit's and the metric's numbers: the sort
    # and the look-back to the previous reading then run over integers, not strings.  Units
    # are numbered in order of appearance, so a batch listing each unit's readings in time
    # order (one metric after another) is in series order already and needs no sort.
    metrics = sorted(limits)
    series, _ = _series_number(units, metrics)
    numbered = [
        part.select(_sid=series, ts=pl.col("ts"), value=pl.col("value"), _row=row)
        for part, row in ((stored, pl.lit(None, dtype=pl.UInt32)), (candidates, pl.col("_row")))
    ]
    # Stored readings first, then this batch's in row order: a stable sort by (series, time)
    # puts a stored reading before a new one at the same time, and new ones in row order.
    readings = _sort_by_series_time(numbered, units.len() * len(metrics))
    same_series = pl.col("_sid") == pl.col("_sid").shift(1)
    previous = pl.when(same_series).then(pl.col("value").shift(1))
    seconds = pl.when(same_series).then((pl.col("ts") - pl.col("ts").shift(1)).dt.total_microseconds() / 1e6)
    steps = (
        readings.with_columns(_previous=previous, _seconds=seconds)
        .filter(pl.col("_row").is_not_null() & (pl.col("value") > pl.col("_previous")))
        .with_columns(
            _step_rate=(pl.col("value") - pl.col("_previous")) / pl.max_horizontal("_seconds", MIN_RATE_INTERVAL),
            # Looked up for the steps only (a counter rarely moves between readings).
            _max_rate=(pl.col("_sid") % len(metrics)).replace_strict(
                list(range(len(metrics))), [limits[m] for m in metrics], default=None, return_dtype=pl.Float64
            ),
        )
        .select("_row", *STEP_COLUMNS)
        .filter(pl.col("_step_rate") > pl.col("_max_rate"))  # the only steps the check reads
    )
    return steps


# A batch is looked at for series in runs when its first rows come in runs of this many
# readings on average (a file listing a unit's readings together), else sorted at once.
RUN_PROBE_ROWS = 4096
MIN_RUN_LENGTH = 16


def _run_starts(unit: pl.Series, metric: pl.Series) -> np.ndarray:
    """Whether each row starts a run of one series (unit and metric: names, or numbers
    that are equal exactly when the names are)."""
    return ((unit != unit.shift(1)) | (metric != metric.shift(1))).fill_null(True).to_numpy()


def _series_runs(
    candidates: pl.DataFrame, metric_numbers: pl.Series | None = None
) -> tuple[np.ndarray, pl.DataFrame, np.ndarray] | None:
    """``(the runs' first rows, their unit and metric, each row's time in microseconds)``
    when the batch lists each series (unit, metric) in one
    run of strictly increasing times (as files list a unit's readings, metric by metric),
    else None.  The first rows are looked at first: readings listed time by time (a few
    rows per run) are given up on at once.  ``metric_numbers``: each row's metric as a
    number (its position among the batch's names), compared instead of the names."""
    head = candidates.head(RUN_PROBE_ROWS)
    if _run_starts(head.get_column("unit_id"), head.get_column("metric")).sum() * MIN_RUN_LENGTH > head.height:
        return None
    unit, metric = candidates.get_column("unit_id"), candidates.get_column("metric")
    start = _run_starts(unit, metric if metric_numbers is None else metric_numbers)
    starts = np.flatnonzero(start)
    if len(starts) * MIN_RUN_LENGTH > len(start):
        return None
    at_starts = pl.Series(starts)
    runs = pl.DataFrame({"unit_id": unit.gather(at_starts), "metric": metric.gather(at_starts)})
    if runs.is_duplicated().any():  # a series in two runs
        return None
    micros = candidates.get_column("ts").dt.epoch("us").to_numpy()
    if (np.diff(micros)[~start[1:]] <= 0).any():  # times that do not increase within a run
        return None
    return starts, runs, micros


def _steps_along_runs(
    candidates: pl.DataFrame,
    series_runs: tuple[np.ndarray, pl.DataFrame, np.ndarray],
    stored: pl.DataFrame,
    limits: dict[str, float],
) -> pl.DataFrame:
    """:func:`_steps_sorted` without the sort, for a batch of :func:`_series_runs` over
    which the lake holds none of the series' readings (``stored`` ends before the batch: an
    append): a reading's previous one is the row above it in its run, or for a run's first
    reading the series' last stored one."""
    starts, runs, micros = series_runs
    # each run's previous reading: the series' last stored one (or none)
    before = runs.with_row_index("_run").join(stored, on=["unit_id", "metric"], how="left").sort("_run")
    values = candidates.get_column("value").to_numpy()
    previous = np.empty(len(values))
    previous[1:] = values[:-1]
    previous[starts] = before.get_column("value").fill_null(np.nan).to_numpy()
    prior = np.empty(len(micros), dtype=np.int64)
    prior[1:] = micros[:-1]
    prior[starts] = before.get_column("ts").dt.epoch("us").fill_null(0).to_numpy()
    grew = np.flatnonzero(values > previous)  # NaN (no previous reading) compares False
    run_of = np.searchsorted(starts, grew, side="right") - 1
    max_rate = np.array([limits[m] for m in runs.get_column("metric").to_list()])[run_of]
    seconds = (micros[grew] - prior[grew]) / 1e6
    rate = (values[grew] - previous[grew]) / np.maximum(seconds, MIN_RATE_INTERVAL)
    fast = rate > max_rate
    return pl.DataFrame(
        {
            "_row": candidates.get_column("_row").gather(pl.Series(grew[fast])),
            "_step_rate": rate[fast],
            "_max_rate": max_rate[fast],
            "_previous": previous[grew][fast],
            "_seconds": seconds[fast],
        }
    )


def _stored_counters(ctx: IngestContext, units: pl.Series, metrics: list[str], first, last) -> pl.DataFrame:
    """The stored readings a new reading from ``first`` to ``last`` can follow: per series,
    the last one before ``first`` (back to the day before), and those from ``first`` to
    ``last``.  Earlier ones are never a new reading's previous one, so they are not kept
    (an append batch sorts its own readings plus one per series, not the stored days).

    A file this process wrote and whose rows all precede ``first`` is not read: the latest
    row of each of its series, kept when it was written (:mod:`foreshock.lake.latest`),
    is all it can give."""
    shards = lake_shards(ctx.lake_dir, ctx.shards)
    files = partition_files(
        ctx.lake_dir,
        "samples",
        start=first.date() - timedelta(days=1),
        end=last,
        shards={shard_of(u, shards) for u in units.drop_nulls().to_list()},  # only these units' files
    )
    kept = {path: latest for path in files if (latest := lake_latest.known_before(path, first)) is not None}
    wanted = pl.col("metric").is_in(metrics) & pl.col("unit_id").is_in(units.implode()) & (pl.col("ts") <= last)
    read = [path for path in files if path not in kept]
    parts = [latest.rows.lazy() for latest in kept.values()]
    parts += [pl.scan_parquet(read, hive_partitioning=False)] if read else []
    if not parts:
        return pl.DataFrame(schema=SCHEMAS["samples"])
    scan = pl.concat(parts, how="vertical_relaxed").filter(wanted).select("unit_id", "ts", "metric", "value").collect()
    if scan.height == 0:
        return scan
    before = scan.filter(pl.col("ts") < first)
    # A series' times are distinct (they are keys): its value at the latest time.  Grouped
    # by the series number (the scan holds only ``units`` and ``metrics``), not two strings.
    number, _ = _series_number(units, metrics)
    keyed = before.select(number.alias("_sid"), "ts", "value")
    # Lake files list a unit's readings in time order, so a series' rows often come in a
    # few runs (one per file, when it is the only counter) each in time order: then only
    # the last row of each run can be its latest, and only those are grouped.  Checked,
    # not assumed: a run whose times go back is grouped row by row as before.
    sid, ts = pl.col("_sid"), pl.col("ts")
    ends = keyed.filter((sid != sid.shift(-1)).fill_null(True))
    if ends.height * 4 <= keyed.height and not keyed.select(((sid == sid.shift(1)) & (ts < ts.shift(1))).any()).item():
        keyed = ends
    latest = keyed.group_by("_sid").agg(pl.col("ts").max(), pl.col("value").get(pl.col("ts").arg_max()))
    sid = latest.get_column("_sid")
    latest = latest.select(
        unit_id=units.gather(sid // len(metrics)),
        ts=pl.col("ts"),
        metric=pl.Series(metrics, dtype=pl.String).gather(sid % len(metrics)),
        value=pl.col("value"),
    )
    return pl.concat([latest.select(scan.columns), scan.filter(pl.col("ts") >= first)])


def _series_number(units: pl.Series, metrics: list[str]) -> tuple[pl.Expr, pl.Expr]:
    """``(unit number * len(metrics) + metric number, metric number)`` for rows whose unit
    is one of ``units`` (distinct, no null) and metric one of ``metrics`` (the callers'
    rows are filtered so): a cast to an enum of those values, cheaper than a lookup by value."""
    unit = pl.col("unit_id").cast(pl.Enum(units)).to_physical().cast(pl.UInt64)
    metric = pl.col("metric").cast(pl.Enum(metrics)).to_physical().cast(pl.UInt64)
    return unit * len(metrics) + metric, metric


def _sort_by_series_time(parts: list[pl.DataFrame], series_count: int) -> pl.DataFrame:
    """The rows of ``parts`` (same columns), in that order, stably sorted by ``_sid`` then
    ``ts``: one packed 64-bit key when the ranges fit (:func:`~foreshock.lake.columns.stable_order`:
    not at all when in order already)."""
    readings = pl.concat(parts, how="vertical_relaxed")
    if readings.height < 2:
        return readings
    micros = readings.get_column("ts").dt.epoch("us")
    low, span = micros.min(), micros.max() - micros.min()
    time_bits = int(span).bit_length()
    if max(series_count - 1, 0).bit_length() + time_bits > 63 or readings.get_column("_sid").null_count():
        return readings.sort("_sid", "ts", maintain_order=True)
    key = (readings.get_column("_sid").to_numpy().astype(np.uint64) << np.uint64(time_bits)) + (
        micros.to_numpy() - low
    ).astype(np.uint64)
    permutation = stable_order(key)
    return readings if permutation is None else in_order(readings, permutation)


def _lookup(column: pl.Expr, mapping: dict[str, float]) -> pl.Expr:
    if not mapping:
        return pl.lit(None, dtype=pl.Float64)
    return column.replace_strict(mapping, default=None, return_dtype=pl.Float64)
