"""The fast path of the rollups for a raw partition made of whole scrapes (the lake's usual
shape: every sample time of a unit holds the same metrics in the same order): the check that a
partition is one (:func:`scrape_times`) and its rollup, one row per sample time and a numpy
reduction per metric over the runs of (unit, life, bucket) (:func:`regular_pieces`)."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl

from foreshock.features.packed_key import BUCKET_SLOTS, packed_key

# Markers of "no increase in the group" in the reductions of increase times (never a time).
_NO_TIME_LOW, _NO_TIME_HIGH = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def _times_or_null(stamps: np.ndarray, name: str, missing: int) -> pl.Series:
    """Microsecond stamps as UTC times, ``missing`` as null."""
    return pl.Series(name, stamps).set(pl.Series(stamps == missing), None).cast(pl.Datetime("us", "UTC"))


def regular_pieces(
    times: pl.DataFrame, values: pl.Series, counter: list[bool], every: timedelta, max_gap: timedelta
) -> tuple[list[pl.DataFrame], pl.DataFrame]:
    """Pieces and scrape counts of a partition of ``len(counter)`` metrics per sample time
    (see :func:`scrape_times`; ``counter``: whether the metric at each position is a
    counter): ``times`` holds ``_unit, life, ts`` of each sample time and ``values`` the
    samples' values, time by time.

    The values are viewed as one row per sample time and one column per metric, and each
    (unit, life, bucket) group is a run of rows (units in order, then time): every
    aggregate is a numpy reduction over the runs (``reduceat``), a column at a time, with
    no group-by.  The same numbers as the per-metric passes (sums up to the order of
    addition): the previous row is the previous sample of every metric of the row, and
    each time is distinct."""
    k = len(counter)
    ts = times.get_column("ts").to_numpy().view("int64")
    key = times.select(packed_key(every)).to_series().to_numpy()
    series = key // BUCKET_SLOTS  # unit and life
    rows = len(ts)
    opens = np.ones(rows, dtype=bool)
    np.not_equal(key[1:], key[:-1], out=opens[1:])
    starts = np.flatnonzero(opens)
    ends = np.append(starts[1:], rows) - 1
    stamps = times.get_column("ts")
    same = np.zeros(rows, dtype=bool)  # the row before is the same series' previous sample
    np.equal(series[1:], series[:-1], out=same[1:])
    # a group holding the first or the last row of its series (rollups.PIECE_SCHEMA "edge")
    last_of_series = np.ones(rows, dtype=bool)
    last_of_series[:-1] = ~same[1:]
    shared = {
        "_key": pl.Series("_key", key[starts]),
        "n": np.diff(np.append(starts, rows)).astype(np.int64),
        "last_ts": stamps.gather(ends),
        "edge": pl.Series("edge", ~same[starts] | last_of_series[ends]),
    }
    if any(counter):
        # a step is taken from the series' previous sample at most max_gap earlier
        unlinked = ~same
        unlinked[1:] |= (ts[1:] - ts[:-1]) > max_gap // timedelta(microseconds=1)
        # Only a series' first row can start it, and that row opens its group.
        counted = {"first_ts": stamps.gather(starts), "head": pl.Series("head", ~same[starts])}
    table = values.to_numpy().reshape(-1, k)
    parts = []
    for j in range(k):
        v = np.ascontiguousarray(table[:, j])
        piece = shared | {
            "sum": np.add.reduceat(v, starts),
            "sumsq": np.add.reduceat(v * v, starts),
            "max": np.maximum.reduceat(v, starts),
            "last_v": v[ends],
        }
        if counter[j]:
            step = np.empty_like(v)
            step[0] = 0.0
            np.subtract(v[1:], v[:-1], out=step[1:])
            reset = step < 0  # _counter_step: after a drop, everything the counter shows is new
            step[reset] = v[reset]
            step[unlinked] = 0.0
            increased = step > 0
            first_inc = np.minimum.reduceat(np.where(increased, ts, _NO_TIME_HIGH), starts)
            last_inc = np.maximum.reduceat(np.where(increased, ts, _NO_TIME_LOW), starts)
            piece |= counted | {
                "first_v": v[starts],
                "inc": np.add.reduceat(step, starts),
                "first_inc_ts": _times_or_null(first_inc, "first_inc_ts", _NO_TIME_HIGH),
                "last_inc_ts": _times_or_null(last_inc, "last_inc_ts", _NO_TIME_LOW),
            }
        parts.append(pl.DataFrame(piece))
    return parts, pl.DataFrame({"_key": shared["_key"], "n_ts": shared["n"], "last_ts": shared["last_ts"]})


def _codes(column: pl.Series) -> np.ndarray:
    """The codes of a Categorical column, contiguous: equal codes are equal values."""
    return column.to_physical().rechunk().to_numpy()


def scrape_times(samples: pl.DataFrame, names: list[str]) -> tuple[list[str], pl.DataFrame, pl.DataFrame] | None:
    """``(metric at each position, times, units)`` when a raw partition is whole scrapes as
    the lake stores them: units in order, every sample time of a unit holding the same
    catalog metrics in the same order, times rising, no null or NaN anywhere; None
    otherwise.  ``times`` holds ``_unit, ts`` per sample time (``_unit`` numbering the
    units' runs as :func:`_unit_runs` does), ``units`` the unit of each run.

    ``unit_id`` and ``metric`` are Categorical: the checks compare their codes, viewed as
    one row of ``k`` columns per scrape (the first scrape's ``k`` rows fix the pattern), so
    the common case costs no string comparison per sample."""
    unit_column, metric_column = samples.get_column("unit_id"), samples.get_column("metric")
    if any(samples.get_column(c).null_count() for c in samples.columns) or samples.get_column("value").is_nan().any():
        return None
    units, metrics = _codes(unit_column), _codes(metric_column)
    ts = samples.get_column("ts").to_numpy().view("int64")
    head = min(len(ts), 256)
    if head == 0:
        return None
    first_scrape = (units[:head] == units[0]) & (ts[:head] == ts[0])
    k = head if first_scrape.all() else int(np.argmin(first_scrape))
    if k < 2 or k == head or len(ts) % k:
        return None
    present = metric_column.head(k).cast(pl.String).to_list()
    if len(set(present)) != k or not set(names).issuperset(present):
        return None
    # Every scrape: the first scrape's metric pattern, one unit, one time.
    scrape_units, stamps = units[::k], ts[::k]
    for codes, per_scrape in ((metrics, metrics[:k]), (units, scrape_units[:, None]), (ts, stamps[:, None])):
        if not (codes.reshape(-1, k) == per_scrape).all():
            return None
    new_unit = np.ones(len(stamps), dtype=bool)
    np.not_equal(scrape_units[1:], scrape_units[:-1], out=new_unit[1:])
    # each time once per unit, rising
    if not (new_unit[1:] | (stamps[1:] > stamps[:-1])).all():
        return None
    starts = np.flatnonzero(new_unit)
    # Runs are maximal (neighbours differ): sorted names are strictly rising, each unit once.
    run_units = unit_column.gather(starts * k)
    if not run_units.cast(pl.String).is_sorted():
        return None
    lengths = np.diff(np.append(starts, len(stamps)))
    times = pl.DataFrame(
        {
            "_unit": np.repeat(np.arange(len(starts), dtype=np.uint32), lengths),
            "ts": samples.get_column("ts").gather_every(k),
        }
    )
    return present, times, pl.DataFrame({"_unit": np.arange(len(starts), dtype=np.uint32), "unit_id": run_units})
