"""The rollup of a raw partition of any shape once its rows are in unit-then-time order:
every metric's pieces from one pass over the rows put in metric order, each (metric, unit,
life, bucket) group a run of those rows.

The lake's partitions mix sources (nvidia-smi every 10 minutes, DCGM scrapes at other
times and with other metrics), so most are not whole scrapes (:mod:`whole_scrapes`); this
is their path.  The rows are put in metric order once (a stable sort of the small metric
codes keeps each metric's rows in unit-then-time order), and every aggregate is a numpy
reduction over the runs, instead of a Polars query per metric (a partition of 20 metrics
took 21 queries and as many frames to concatenate).

The float aggregates are Polars' bits: its sum over a run of rows adds them one after the
other, where numpy's ``add.reduceat`` adds them in another order, so the runs are folded
position by position (:func:`_float_aggregates`), and the pieces are the same bit for bit
as the group-by of each metric's rows they replace (``tests/features/test_metric_runs.py``).
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl

from foreshock.features.packed_key import BUCKET_SLOTS, packed_key_array

_NO_TIME_LOW, _NO_TIME_HIGH = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def _times(stamps: np.ndarray, missing: np.ndarray | None = None) -> pl.Series:
    """Microsecond stamps as UTC times (null where ``missing``)."""
    series = pl.Series(stamps)
    if missing is not None:
        series = series.set(pl.Series(missing), None)
    return series.cast(pl.Datetime("us", "UTC"))


# Polars adds the rows of a run shorter than this one after the other, in order (longer
# runs pairwise): the sums below follow it, so that they are its bits.
_SEQUENTIAL_RUN = 128
_LANES = 8  # from this many rows its maximum is taken lane by lane


def _float_aggregates(
    starts: np.ndarray, lengths: np.ndarray, value: np.ndarray, step: np.ndarray, stepped: np.ndarray
) -> dict[str, np.ndarray]:
    """Per run of rows (``starts``, ``lengths``): the sum, the sum of squares and the
    maximum of ``value`` and the sum of ``step`` where ``stepped``; the numbers Polars'
    group-by gives (the group-by per metric these replace), bit for bit.

    Polars sums a run shorter than ``_SEQUENTIAL_RUN`` rows in order from 0.0 (a run of
    one row is its value, a missing step adding nothing) and keeps the later of equal
    maxima (below 8 rows; over more, a lane's); numpy's ``reduceat`` sums in another order.  So runs are folded position by
    position here (a handful of vectorised steps: a run is an hour of one metric), and the
    rare longer runs are left to Polars itself."""
    sample, squares = value, value * value
    steps = np.where(stepped, step, -0.0)  # -0.0 + x is x for every x: a null adds nothing
    # Runs longest first, so that those with a row at each offset are a prefix (added to in
    # place, no scatter); the order undone at the end.
    by_length = np.argsort(-np.minimum(lengths, _SEQUENTIAL_RUN).astype(np.int16), kind="stable")
    first = starts[by_length]
    totals = [sample[first], squares[first], steps[first], sample[first]]
    live = np.bincount(np.minimum(lengths, _SEQUENTIAL_RUN))[::-1].cumsum()[::-1]  # runs longer than each offset
    for offset in range(1, len(live) - 1):
        n = int(live[offset + 1])
        at = first[:n] + offset
        totals[0][:n] += sample[at]
        totals[1][:n] += squares[at]
        totals[2][:n] += steps[at]
        np.maximum(totals[3][:n], sample[at], out=totals[3][:n])
    out = {}
    for name, total in zip(("sum", "sumsq", "inc", "max"), totals, strict=True):
        out[name] = np.empty_like(total)
        out[name][by_length] = total
    several = lengths > 1
    for name in ("sum", "sumsq"):
        out[name][several] += 0.0  # the fold starts from 0.0: a -0.0 total is 0.0
    out["inc"][several | ~stepped[starts]] += 0.0  # a lone missing step sums to 0.0
    # Left to Polars: the long runs, and the runs of 8 rows or more holding a -0.0, whose
    # maximum is 0.0 or -0.0 by which of the equal zeros its lanes met last.
    left = lengths >= _SEQUENTIAL_RUN
    negative_zero = (sample == 0.0) & np.signbit(sample)
    if negative_zero.any():
        left |= np.logical_or.reduceat(negative_zero, starts) & (lengths >= _LANES)
    long = np.flatnonzero(left)
    if len(long):
        sizes = lengths[long]
        rows = np.arange(sizes.sum()) + np.repeat(starts[long] - (np.cumsum(sizes) - sizes), sizes)
        frame = pl.DataFrame(
            {
                "_run": np.repeat(np.arange(len(long)), lengths[long]),
                "v": sample[rows],
                "step": pl.Series(step[rows]).set(pl.Series(~stepped[rows]), None),
            }
        )
        v = pl.col("v")
        polars = (
            frame.lazy()
            .with_columns(pl.col("_run").set_sorted())
            .group_by("_run", maintain_order=True)
            .agg(
                v.sum().alias("sum"),
                (v * v).sum().alias("sumsq"),
                v.max().alias("max"),
                pl.col("step").sum().alias("inc"),
            )
            .collect(engine="in-memory")
        )
        for name in out:
            out[name][long] = polars.get_column(name).to_numpy()
    return out


def _scrape_counts(key: np.ndarray, ts: np.ndarray) -> pl.DataFrame:
    """Distinct sample times and the last one per packed key, over the rows as they are
    (unit-then-time order: one run per unit, life and bucket)."""
    rows = len(key)
    opens = np.ones(rows, dtype=bool)
    np.not_equal(key[1:], key[:-1], out=opens[1:])
    starts = np.flatnonzero(opens)
    new_ts = opens.copy()  # a new unit always opens a run
    new_ts[1:] |= ts[1:] != ts[:-1]
    ends = np.append(starts[1:], rows) - 1
    return pl.DataFrame(
        {
            "_key": key[starts],
            "n_ts": np.add.reduceat(new_ts, starts, dtype=np.int64),
            "last_ts": _times(ts[ends]),  # times rise within a unit
        }
    )


def metric_run_pieces(
    samples: pl.DataFrame, counter: np.ndarray, every: timedelta, max_gap: timedelta
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Pieces of every metric and scrape counts of a raw partition in unit-then-time order.

    Parameters
    ----------
    samples : pl.DataFrame
        ``_unit`` (run number of the unit), ``life``, ``ts``, ``_metric`` (the metric's
        catalog index) and ``value`` of each sample (no null, no NaN), units in order, then
        time.
    counter : np.ndarray of bool
        Per catalog index, whether the metric is a counter.
    every, max_gap : timedelta
        Bucket width; the longest gap a counter step is taken across.

    Returns
    -------
    (pieces, scrapes)
        ``pieces``: ``_key`` (:func:`packed_key`), ``_metric`` and the columns of
        ``rollups.PIECE_SCHEMA`` but the unit, life and bucket (the counter columns null for
        a gauge), metrics in catalog order, then key order; ``scrapes``: ``_key``, ``n_ts``
        (distinct sample times) and ``last_ts`` per key.
    """
    ts = samples.get_column("ts").rechunk().to_numpy().view("int64")
    unit, life = (samples.get_column(c).rechunk().to_numpy() for c in ("_unit", "life"))
    key = packed_key_array(unit, life, ts, every)
    rows = len(key)

    scrapes = _scrape_counts(key, ts)

    # Pieces: the rows in metric order, each metric's rows still in unit-then-time order
    # (numpy's stable sort of 8- or 16-bit codes is a radix sort: one linear pass).
    codes = samples.get_column("_metric").rechunk().to_numpy()
    codes = codes.astype(np.uint8 if codes.max(initial=0) < 256 else np.uint16)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    m = np.repeat(np.arange(len(counts), dtype=codes.dtype), counts)
    # (the row-sized arrays dropped once used: a first pass rolls up a few partitions at once)
    k = key[order]
    del key
    t = ts[order]
    v = samples.get_column("value").rechunk().to_numpy()[order]
    del order
    series = k >> np.uint64(BUCKET_SLOTS.bit_length() - 1)  # unit and life
    same = np.zeros(rows, dtype=bool)  # the row before is the same series' previous sample
    np.equal(series[1:], series[:-1], out=same[1:])
    del series
    same[np.cumsum(counts)[:-1]] = False  # nor across metrics
    opens = np.ones(rows, dtype=bool)
    np.not_equal(k[1:], k[:-1], out=opens[1:])
    opens |= ~same
    starts = np.flatnonzero(opens)
    ends = np.append(starts[1:], rows) - 1
    last_of_series = np.ones(rows, dtype=bool)
    last_of_series[:-1] = ~same[1:]
    is_counter = counter[m[starts]]

    # Counter steps (rollups._counter_step): from the series' previous sample at most
    # max_gap earlier; computed for every row, kept for counters only.
    linked = same.copy()
    linked[1:] &= (t[1:] - t[:-1]) <= max_gap // timedelta(microseconds=1)
    linked &= counter[m]
    step = v.copy()  # the first row takes no step
    np.subtract(v[1:], v[:-1], out=step[1:])
    np.copyto(step[1:], v[1:], where=v[1:] < v[:-1])  # a drop: all the counter shows is new
    lengths = np.diff(np.append(starts, rows))
    floats = _float_aggregates(starts, lengths, v, step, linked)
    increased = linked & (step > 0)
    first_inc = np.minimum.reduceat(np.where(increased, t, _NO_TIME_HIGH), starts)
    last_inc = np.maximum.reduceat(np.where(increased, t, _NO_TIME_LOW), starts)

    gauge = ~is_counter
    pieces = pl.DataFrame(
        {
            "_key": k[starts],
            "_metric": m[starts],
            "n": lengths.astype(np.int64),
            "sum": floats["sum"],
            "sumsq": floats["sumsq"],
            "max": floats["max"],
            "first_ts": _times(t[starts], gauge),
            "first_v": pl.Series(v[starts]).set(pl.Series(gauge), None),
            "last_ts": _times(t[ends]),
            "last_v": v[ends],
            "inc": pl.Series(floats["inc"]).set(pl.Series(gauge), None),
            "first_inc_ts": _times(first_inc, first_inc == _NO_TIME_HIGH),
            "last_inc_ts": _times(last_inc, last_inc == _NO_TIME_LOW),
            "head": pl.Series(~same[starts]).set(pl.Series(gauge), None),
            "edge": ~same[starts] | last_of_series[ends],
        }
    )
    return pieces, scrapes
