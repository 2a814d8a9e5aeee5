"""Bucket rollups: raw samples and events reduced to one row per unit, life and snapshot bucket.

Every snapshot ``T`` (a multiple of ``snapshot_every``) owns the bucket ``(T - every, T]``.
A window ``w`` at ``T`` is the union of the ``w / every`` buckets ending at ``T``, so window
features are exact sums (or maxima) of bucket rollups, and a snapshot only ever sees rows
with ``ts <= T``: point-in-time correct by construction.

Raw partitions are rolled up one file at a time (a date x shard), so memory is bounded by
one partition whatever the fleet size, and the heavy pass over raw rows happens once.

Counter increases follow Prometheus ``increase()``: a sample lower than its predecessor
means the counter was reset (driver reload, reboot) and the new value is the increase since
the reset.  Each step is booked at the later sample's time, so the step across a bucket
boundary lands in the bucket of the later sample.  A step is only taken when the
predecessor is at most ``max_gap`` old (the longest feature window): across a longer silence
the counter has almost surely been reset and what happened in between is unknown.  That rule
also makes results independent of where a computation starts reading, which is what makes
incremental runs equal full runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import polars as pl

from foreshock.catalog import Catalog
from foreshock.contract import UTC_TS
from foreshock.features.metric_runs import metric_run_pieces
from foreshock.features.packed_key import (
    LIFE_SLOTS,
    bucket_number,
    new_unit,
    unpacked,
)
from foreshock.features.whole_scrapes import regular_pieces, scrape_times

UNIT_LIFE_BUCKET = ["unit_id", "life", "bucket"]

# Per (unit, life, metric, bucket) piece of one raw file.  Ids and metric names are
# Categorical (codes shared by every frame of the process): the rollups are sorted, grouped
# and joined on them row by row, and cached, and a code is cheaper than a string for each.
PIECE_SCHEMA: dict[str, pl.DataType] = {
    "unit_id": pl.Categorical(),
    "life": pl.Int32(),
    "metric": pl.Categorical(),
    "bucket": UTC_TS,
    "n": pl.Int64(),
    "sum": pl.Float64(),
    "sumsq": pl.Float64(),
    "max": pl.Float64(),
    "first_ts": UTC_TS,
    "first_v": pl.Float64(),
    "last_ts": UTC_TS,
    "last_v": pl.Float64(),
    "inc": pl.Float64(),
    "first_inc_ts": UTC_TS,
    "last_inc_ts": UTC_TS,
    "head": pl.Boolean(),
    # the first or last piece of its series in its file: only such a piece can meet a piece
    # of another file (combine_pieces)
    "edge": pl.Boolean(),
}
SCRAPE_SCHEMA: dict[str, pl.DataType] = {
    "unit_id": pl.Categorical(),
    "life": pl.Int32(),
    "bucket": UTC_TS,
    "n_ts": pl.Int64(),
    "last_ts": UTC_TS,
}
EVENT_SCHEMA: dict[str, pl.DataType] = {
    "unit_id": pl.Categorical(),
    "life": pl.Int32(),
    "bucket": UTC_TS,
    "source": pl.String(),
    "code": pl.Int64(),
    "count": pl.Int64(),
}


@dataclass
class Rollup:
    """Rollups of one or more raw partitions."""

    pieces: pl.DataFrame
    scrapes: pl.DataFrame
    events: pl.DataFrame

    @classmethod
    def empty(cls) -> Rollup:
        return cls(
            pl.DataFrame(schema=PIECE_SCHEMA),
            pl.DataFrame(schema=SCRAPE_SCHEMA),
            pl.DataFrame(schema=EVENT_SCHEMA),
        )


def bucket_of(ts: pl.Expr, every: timedelta) -> pl.Expr:
    """The snapshot that owns a timestamp: the first multiple of ``every`` at or after it."""
    every_us = int(every.total_seconds() * 1_000_000)
    return (bucket_number(ts, every_us) * every_us).cast(UTC_TS)


def with_lives(frame: pl.DataFrame, failures: pl.DataFrame, at: str = "ts") -> pl.DataFrame:
    """Add ``life`` (failures of the unit strictly before ``at``) keeping row order.

    Failures are rare, so each unit's failure times are spread into a few columns and
    compared in one vectorised pass instead of an as-of join that would need re-sorting.
    """
    if failures.height == 0:
        return frame.with_columns(pl.lit(0, dtype=pl.Int32).alias("life"))
    per_unit = failures.group_by("unit_id").agg(pl.col("failed_at").sort().alias("_fails"))
    most = int(per_unit.select(pl.col("_fails").list.len().max()).item())
    spread = per_unit.select(
        "unit_id", *[pl.col("_fails").list.get(i, null_on_oob=True).alias(f"_f{i}") for i in range(most)]
    )
    joined = frame.join(spread, on="unit_id", how="left", maintain_order="left")
    life = pl.sum_horizontal([(pl.col(at) > pl.col(f"_f{i}")).fill_null(False).cast(pl.Int32) for i in range(most)])
    return joined.with_columns(life.cast(pl.Int32).alias("life")).drop([f"_f{i}" for i in range(most)])


def _counter_step(value: pl.Expr, previous: pl.Expr) -> pl.Expr:
    # A drop means the counter restarted from zero: everything it now shows is new.
    return pl.when(value >= previous).then(value - previous).otherwise(value)


def _with_sample_lives(
    samples: pl.DataFrame, units: pl.DataFrame, starts: pl.Series, failures: pl.DataFrame
) -> pl.DataFrame:
    """``life`` per sample.  Rows are grouped by unit (``starts``: each unit's first row),
    so each failure is compared only with the rows of its own unit."""
    failing = failures.join(units.with_columns(pl.col("unit_id").cast(pl.String)), on="unit_id")
    failing = failing.select("_unit", "failed_at")
    if failing.height == 0:
        return samples.with_columns(pl.lit(0, dtype=pl.Int32).alias("life"))
    bounds = [*starts.to_list(), samples.height]
    life = np.zeros(samples.height, dtype=np.int32)
    ts = samples.get_column("ts")
    for unit, failed_at in failing.iter_rows():
        lo, hi = bounds[unit], bounds[unit + 1]
        life[lo:hi] += (ts.slice(lo, hi - lo) > failed_at).to_numpy()
    if life.max() >= LIFE_SLOTS:
        raise ValueError(f"a unit has more than {LIFE_SLOTS - 1} recorded failures; check the failures table")
    return samples.with_columns(pl.Series("life", life, dtype=pl.Int32))


def _unit_runs(samples: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.Series]:
    """``_unit`` (run number of ``unit_id``) per row, the unit of each run and each run's
    first row (a gather of a few hundred rows, not a filter of the whole partition)."""
    samples = samples.with_columns(pl.col("unit_id").rle_id().cast(pl.UInt32).alias("_unit"))
    starts = samples.select(new_unit().arg_true()).to_series()
    units = pl.DataFrame(
        {
            "_unit": pl.int_range(starts.len(), dtype=pl.UInt32, eager=True),
            "unit_id": samples.get_column("unit_id").gather(starts),
        }
    )
    return samples, units, starts


def _in_unit_order(samples: pl.DataFrame, names: list[str]) -> tuple[pl.DataFrame, pl.DataFrame, pl.Series]:
    """The rows of any raw partition a rollup uses (a catalog metric, a unit, a time, a
    value that is not NaN), in unit-then-time order, with ``_metric`` (the metric's catalog
    index) and ``_unit`` (:func:`_unit_runs`); and the units and their first rows."""
    samples = samples.rechunk()  # several passes over every column follow
    # Metrics become small integers once (null for a metric outside the catalog); rows are
    # copied by the filter only when one of them has to go.
    samples = samples.with_columns(pl.col("metric").cast(pl.Enum(names), strict=False).to_physical().alias("_metric"))
    keep = pl.col("_metric").is_not_null() & pl.col("value").is_not_nan() & pl.col("value").is_not_null()
    keep = keep & pl.col("unit_id").is_not_null() & pl.col("ts").is_not_null()
    if not samples.select(keep.all()).item():
        samples = samples.filter(keep)
    # The lake stores every partition sorted by unit and time; anything else is re-sorted.
    # Run ids number the units in order (cheaper than comparing strings row by row); the
    # units are in order when the ids at the runs' first rows are (runs are maximal).
    samples, units, starts = _unit_runs(samples)
    if not units.get_column("unit_id").cast(pl.String).is_sorted():
        samples, units, starts = _unit_runs(samples.sort("unit_id", "ts", "metric"))
    if samples.select(((pl.col("ts") < pl.col("ts").shift(1)) & ~new_unit()).any()).item():
        samples = samples.sort("_unit", "ts", "metric")
    return samples, units, starts


def rollup_samples(
    samples: pl.DataFrame,
    failures: pl.DataFrame,
    catalog: Catalog,
    every: timedelta,
    max_gap: timedelta,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Roll one raw samples partition up to bucket pieces and scrape counts.

    Parameters
    ----------
    samples : pl.DataFrame
        Canonical samples of one partition (``unit_id, ts, metric, value``).
    failures : pl.DataFrame
        Canonical failures (used to split a unit's samples into lives).
    catalog : Catalog
        Which metrics are counters and which gauges; other metrics are ignored.
    every : timedelta
        Snapshot spacing (bucket width).
    max_gap : timedelta
        Longest gap across which a counter step is taken.

    Returns
    -------
    (pieces, scrapes)
        ``pieces`` per unit, life, metric and bucket (see ``PIECE_SCHEMA``); ``scrapes``
        per unit, life and bucket: distinct sample times and the last one.
    """
    if samples.height == 0:  # a day without samples in a shard (the lookback before the data)
        return pl.DataFrame(schema=PIECE_SCHEMA), pl.DataFrame(schema=SCRAPE_SCHEMA)
    names = catalog.names()
    # A Parquet read gives one chunk per row group: the numeric columns are made contiguous
    # (viewed as arrays below).  Ids and metric names are compared as Categorical codes:
    # the lake's files give them as such (features.day_rollups.read_samples_coded); text from
    # elsewhere is coded here.
    samples = samples.with_columns(
        samples.get_column("ts").rechunk(),
        samples.get_column("value").rechunk(),
        pl.col("unit_id", "metric").cast(pl.Categorical),
    )
    counters = {m.name for m in catalog if m.is_counter}
    # Whole scrapes (the lake's usual shape) are rolled up one row per sample time: tried
    # on the rows as they come, then on the rows a rollup uses in unit-then-time order;
    # any other partition's rows are put in metric order (metric_runs).  Either way the
    # packed key is sorted (units in order, then time, and life and bucket grow with
    # time): each group is a run of rows, reduced in one linear pass, no hashing.
    scraped = scrape_times(samples, names)
    if scraped is None:
        samples, units, starts = _in_unit_order(samples, names)
        if samples.height == 0:
            return pl.DataFrame(schema=PIECE_SCHEMA), pl.DataFrame(schema=SCRAPE_SCHEMA)
        scraped = scrape_times(samples, names)
    if scraped is not None:
        present, times, units = scraped
        starts = times.select(new_unit().arg_true()).to_series()
        times = _with_sample_lives(times, units, starts, failures)
        counter = [name in counters for name in present]
        parts, scrapes_frame = regular_pieces(times, samples.get_column("value"), counter, every, max_gap)
        pieces = pl.concat(
            [
                p.with_columns(pl.lit(name, pl.Categorical).alias("metric"))
                for name, p in zip(present, parts, strict=True)
            ],
            how="diagonal_relaxed",
        )
    else:
        samples = _with_sample_lives(samples, units, starts, failures)
        counter = np.array([name in counters for name in names], dtype=bool)
        pieces, scrapes_frame = metric_run_pieces(samples, counter, every, max_gap)
        metric = pl.Series("metric", names, dtype=pl.Categorical)
        pieces = pieces.with_columns(metric.gather(pieces.get_column("_metric")))
    # ``_unit`` numbers the units 0, 1, ...: the unit of a row is a gather, not a join.
    unit_ids = units.get_column("unit_id")
    pieces = unpacked(pieces, every)
    pieces = pieces.with_columns(unit_ids.gather(pieces.get_column("_unit")))
    pieces = pieces.select(
        [pl.col(c).cast(t) if c in pieces.columns else pl.lit(None, t).alias(c) for c, t in PIECE_SCHEMA.items()]
    )
    scrapes = unpacked(scrapes_frame, every)
    scrapes = scrapes.with_columns(unit_ids.gather(scrapes.get_column("_unit")))
    return pieces, scrapes.select(list(SCRAPE_SCHEMA))


def rollup_events(events: pl.DataFrame, failures: pl.DataFrame, every: timedelta) -> pl.DataFrame:
    """Sum event counts per unit, life, bucket, source and code (a missing count is 1)."""
    if events.height == 0:
        return pl.DataFrame(schema=EVENT_SCHEMA)
    events = with_lives(events.drop_nulls(["unit_id", "ts"]), failures)
    return (
        events.with_columns(
            bucket_of(pl.col("ts"), every).alias("bucket"),
            pl.col("count").fill_null(1).cast(pl.Int64),
        )
        .group_by([*UNIT_LIFE_BUCKET, "source", "code"])
        .agg(pl.col("count").sum())
        .select([pl.col(c).cast(t) for c, t in EVENT_SCHEMA.items()])
    )


def combine_pieces(pieces: pl.DataFrame, max_gap: timedelta) -> pl.DataFrame:
    """Merge pieces of the same bucket from different files into one row each.

    A counter piece that starts a series in its file (``head``) is missing the step from the
    last sample of the previous file; it is taken here from the previous piece of the same
    unit, life and metric, under the same ``max_gap`` rule.
    """
    # Only the first and last piece of a series in its file (``edge``) can share a bucket
    # with, or take a step from, a piece of another file: the previous piece of a file's
    # first piece is the last piece of an earlier file, and a bucket split between files
    # ends one and opens the next.  So only those (a tenth of an hourly rollup) are sorted
    # and merged; the others are whole as they are.
    return pl.concat([inner_pieces(pieces), *combine_edges(pieces.filter(pl.col("edge")), max_gap)])


def inner_pieces(pieces: pl.DataFrame) -> pl.DataFrame:
    """The pieces no piece of another file can meet (not ``edge``), as
    :func:`combine_pieces` returns them.  A row's result depends on that row alone, so the
    pieces of several files give the rows of each file's in turn: a caller may take them
    file by file, holding only the few ``edge`` pieces until all files are read."""
    inner = pieces.filter(~pl.col("edge")).select(_COMBINED)
    # What the merge does to a piece without a bridged step: a counter's increase + 0.0, a
    # gauge's missing increase 0.0.
    inner = inner.with_columns(
        pl.when(pl.col("first_ts").is_not_null()).then(pl.col("inc").fill_null(0.0) + 0.0).fill_null(0.0).alias("inc")
    )
    return inner.drop("first_ts")


_COMBINED = ["unit_id", "life", "metric", "bucket", "n", "sum", "sumsq", "max", "last_v", "last_ts", "inc"]
_COMBINED += ["first_inc_ts", "last_inc_ts", "first_ts"]


def combine_edges(pieces: pl.DataFrame, max_gap: timedelta) -> list[pl.DataFrame]:
    """:func:`combine_pieces` of the pieces that open or close a series in their file: the
    pieces whole after the bridge, and those of split buckets merged."""
    # Pieces of one series never overlap in time, so ordering by their last sample orders
    # them by time (gauges have no first sample recorded).  What follows needs each
    # series' pieces together and in time order, not the series in name order: units and
    # metrics are sorted by their Categorical codes.
    ordered = pieces.sort(
        pl.col("unit_id").cast(pl.Categorical).to_physical(),
        "life",
        pl.col("metric").cast(pl.Categorical).to_physical(),
        "bucket",
        "last_ts",
    )
    same_series = (
        (pl.col("unit_id") == pl.col("unit_id").shift(1))
        & (pl.col("life") == pl.col("life").shift(1))
        & (pl.col("metric") == pl.col("metric").shift(1))
    ).fill_null(False)
    joinable = (
        pl.col("head")
        & same_series
        & pl.col("first_ts").is_not_null()
        & ((pl.col("first_ts") - pl.col("last_ts").shift(1)) <= max_gap)
    ).fill_null(False)
    bridged = ordered.with_columns(
        pl.when(joinable).then(_counter_step(pl.col("first_v"), pl.col("last_v").shift(1))).alias("_bridge")
    )
    stepped_up = (pl.col("_bridge") > 0).fill_null(False)
    bridged = bridged.with_columns(
        pl.when(pl.col("first_ts").is_not_null())
        .then(pl.col("inc").fill_null(0.0) + pl.col("_bridge").fill_null(0.0))
        .alias("inc"),
        # The bridged step is booked at the piece's first sample, its earliest time.
        pl.when(stepped_up).then(pl.col("first_ts")).otherwise(pl.col("first_inc_ts")).alias("first_inc_ts"),
        pl.when(stepped_up & pl.col("last_inc_ts").is_null())
        .then(pl.col("first_ts"))
        .otherwise(pl.col("last_inc_ts"))
        .alias("last_inc_ts"),
    )
    # Only a bucket that spans two files has two pieces (rows in key order: adjacent); the
    # others are already whole and skip the group-by (one row's aggregates are itself,
    # but for a gauge's missing increase, which sums to 0).
    same_key = (same_series & (pl.col("bucket") == pl.col("bucket").shift(1))).fill_null(False)
    bridged = bridged.with_columns((same_key | same_key.shift(-1).fill_null(False)).alias("_split"))
    columns = _COMBINED[:-1]
    whole = bridged.filter(~pl.col("_split")).select(columns).with_columns(pl.col("inc").fill_null(0.0))
    split = (
        bridged.filter(pl.col("_split"))
        .group_by(["unit_id", "life", "metric", "bucket"])
        .agg(
            pl.col("n").sum(),
            pl.col("sum").sum(),
            pl.col("sumsq").sum(),
            pl.col("max").max(),
            pl.col("last_v").get(pl.col("last_ts").arg_max()),
            pl.col("last_ts").max(),
            pl.col("inc").sum(),
            pl.col("first_inc_ts").min(),
            pl.col("last_inc_ts").max(),
        )
    )
    return [whole, split]


def combine_scrapes(scrapes: pl.DataFrame) -> pl.DataFrame:
    """Merge scrape counts of the same bucket from different files."""
    return scrapes.group_by(UNIT_LIFE_BUCKET).agg(pl.col("n_ts").sum(), pl.col("last_ts").max())
