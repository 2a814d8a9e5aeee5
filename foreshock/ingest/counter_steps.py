"""The counter-step check's inputs: for each counter reading that grew faster than the
catalog's ``max_rate`` from the unit's previous reading of that metric (this batch's, or the
last one stored, back to the day before), its growth rate, the previous value and the
seconds between them.  The rate is taken over at least ``MIN_RATE_INTERVAL`` so that two
sources' readings a few milliseconds apart do not look like a storm.  A counter that goes
*down* is not a step: resets happen on driver reload and reboot.

Readings are compared along each series (unit, metric) in time order; a batch that lists a
series' readings together (as files do) is compared along its runs without a sort.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import polars as pl

from foreshock.contract import SCHEMAS
from foreshock.ingest.context import IngestContext
from foreshock.lake import latest as lake_latest
from foreshock.lake.columns import distinct_values, in_order, long_runs, stable_order
from foreshock.lake.layout import lake_shards, partition_files, shard_of

MIN_RATE_INTERVAL = 60.0  # seconds
STEP_COLUMNS = ("_step_rate", "_max_rate", "_previous", "_seconds")


def distinct_of(frame: pl.DataFrame, column: str, known: dict[str, pl.Series]) -> list[str]:
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


def step_check(frame: pl.DataFrame) -> tuple[pl.Expr, pl.Expr, str]:
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


def with_counter_steps(
    frame: pl.DataFrame,
    ctx: IngestContext,
    metrics: MetricPositions | None = None,
    extremes: tuple[np.ndarray, np.ndarray] | None = None,
) -> pl.DataFrame:
    """``frame`` with, for each counter reading that grew faster than its ``_max_rate`` from
    the unit's previous one, that growth rate (``_step_rate``), the previous value and the
    seconds between them (``STEP_COLUMNS``; null on the other rows); ``frame`` as it is when
    no reading did (the step check then has nothing to find).  ``metrics``: the rows'
    metric positions (:class:`MetricPositions`) when the caller has them; ``extremes``:
    their :meth:`MetricPositions.extremes` of the values, when the caller has them."""
    limits = {m.name: m.max_rate for m in ctx.catalog if m.is_counter and m.max_rate is not None}
    if not limits:
        return frame
    if metrics is None:
        metrics = MetricPositions.of(frame, distinct_of(frame, "metric", {}))
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
    flat = _flat_counters(metrics, extremes or metrics.extremes(frame.get_column("value")), stored, limits)
    if flat:  # no reading of theirs grew: their rows are left out of the look for steps
        candidates = candidates.filter(~pl.col("_position").is_in(flat))
        stored = stored.filter(~pl.col("metric").is_in([metrics.present[p] for p in flat]))
        if candidates.height == 0:
            return frame
        if runs is not None:
            runs = _series_runs(candidates, candidates.get_column("_position"))
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


def _flat_counters(
    metrics: MetricPositions, extremes: tuple[np.ndarray, np.ndarray], stored: pl.DataFrame, limits: dict[str, float]
) -> list[int]:
    """The positions of the counters whose readings, this batch's (``extremes``: each
    position's smallest and largest value) and the ``stored`` ones they can follow, all
    have one value: none of them grew, so none is a step, whatever the order.  Many
    counters sit at 0 on every GPU (double-bit errors, uncorrectable remaps): about half a
    batch's counter readings need no sort then."""
    low, high = extremes
    flat = {metrics.present[p]: p for p in np.flatnonzero(low == high) if metrics.present[p] in limits}
    if not flat or stored.height == 0:
        return sorted(flat.values())
    seen = (
        stored.filter(pl.col("metric").is_in(list(flat)))
        .group_by("metric")
        .agg(low=pl.col("value").min(), high=pl.col("value").max())
    )
    for name, stored_low, stored_high in seen.iter_rows():
        value = low[flat[name]]
        if not (stored_low == stored_high == value):  # a stored reading below: the first may be a step
            del flat[name]
    return sorted(flat.values())


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
    number (its position among the batch's names), compared instead of the names.
    The last rows are looked at next: a batch whose files list series in runs (Prometheus
    exports) ahead of files that do not (nvidia-smi lists units line by line) is given up
    on without a pass over all its rows.  (None takes the sorted path: the same steps.)"""
    for probe in (candidates.head(RUN_PROBE_ROWS), candidates.tail(RUN_PROBE_ROWS)):
        if _run_starts(probe.get_column("unit_id"), probe.get_column("metric")).sum() * MIN_RUN_LENGTH > probe.height:
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
    sids = readings.get_column("_sid").to_numpy()
    key = (sids.astype(np.uint64) << np.uint64(time_bits)) + (micros.to_numpy() - low).astype(np.uint64)
    if series_count > SERIES_RADIX_LIMIT:
        permutation = stable_order(key)
        return readings if permutation is None else in_order(readings, permutation)
    # By series first (a radix sort of 16-bit numbers), then by the whole key: files list
    # each series' readings in time order but for a few (clock faults), so the stable sort
    # of the key in series order finds long runs (in a day's batch, a third of the CPU of
    # sorting the key at once).  The same order: both sorts are stable.
    by_series = np.argsort(sids.astype(np.uint16), kind="stable")
    within = stable_order(key[by_series])
    permutation = by_series if within is None else by_series[within]
    if (permutation[1:] > permutation[:-1]).all():
        return readings
    return in_order(readings, permutation)


# Up to this many series, rows are put in series order first by a radix sort of 16-bit
# numbers (numpy's stable sort of 16-bit integers; of 64-bit ones, a timsort).
SERIES_RADIX_LIMIT = 1 << 16
