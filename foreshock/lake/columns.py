"""Cheap operations on columns, shared by the lake and ingest: runs of equal values (ids and
metric names repeat row after row), stable orders of integer keys, gathers by row number.
"""

from __future__ import annotations

import numpy as np
import polars as pl

# Values are looked up per run (long_runs) when a column has this many rows and its runs of
# one value are this long on average.
RUN_LOOKUP_MIN_ROWS = 4096
RUN_LOOKUP_MIN_LENGTH = 64


def long_runs(column: pl.Series) -> tuple[pl.Series, np.ndarray] | None:
    """``(value of each run, its length)`` of the runs of equal values in ``column`` when
    they are long (``RUN_LOOKUP_MIN_LENGTH`` rows on average, as a unit's readings or a
    metric's listed one after another are), else None: a lookup by value can then be done
    once per run instead of once per row.  The first rows are looked at first, so a column
    without runs costs little."""
    if column.len() < RUN_LOOKUP_MIN_ROWS:
        return None
    if column.head(RUN_LOOKUP_MIN_ROWS).rle_id().max() >= RUN_LOOKUP_MIN_ROWS // RUN_LOOKUP_MIN_LENGTH:
        return None
    runs = column.rle()
    if runs.len() * RUN_LOOKUP_MIN_LENGTH > column.len():
        return None
    return runs.struct.field("value"), runs.struct.field("len").to_numpy()


def distinct_values(column: pl.Series, *, maintain_order: bool = False) -> pl.Series:
    """``column.unique(maintain_order=...)``, from the values of its runs when they are long
    (:func:`long_runs`): ids and metric names repeat on row after row."""
    runs = long_runs(column)
    return (column if runs is None else runs[0]).unique(maintain_order=maintain_order)


def stable_order(key: np.ndarray, top_first: bool = False) -> np.ndarray | None:
    """The row numbers that sort ``key`` (non-negative integers) with ties in their order,
    or None when it is in order already.  numpy's stable sort (a timsort for 64-bit keys)
    finds the runs a file's rows come in: a third of the CPU of Polars' sort on the lake's
    packed keys.  ``top_first``: the rows are first put in order of the key's top 6 bits (a
    radix sort of one byte), then sorted whole: for a key whose top bits are few values
    with runs under each (the split's day and unit, rows listed metric by metric, units
    interleaved), the timsort then finds long runs (half the CPU on a simulated day);
    the same order, as both sorts are stable."""
    if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):
        return None
    if not top_first:
        return np.argsort(key, kind="stable")
    shift = max(int(key.max()).bit_length() - 6, 0)
    first = np.argsort((key >> np.uint64(shift)).astype(np.uint8), kind="stable")
    return first[np.argsort(key[first], kind="stable")]


def in_order(frame: pl.DataFrame, permutation: np.ndarray) -> pl.DataFrame:
    """``frame``'s rows in the order of ``permutation`` (:func:`gathered`, column by column)."""
    return pl.DataFrame([gathered(column, permutation) for column in frame.get_columns()])


def gathered(column: pl.Series, permutation: np.ndarray) -> pl.Series:
    """``column`` in the order of ``permutation`` (row numbers): a numpy take for numbers
    and times without nulls (several times cheaper), Polars' gather otherwise."""
    if column.null_count():
        return column.gather(pl.Series(permutation))
    if column.dtype.is_numeric():
        return pl.Series(column.name, column.to_numpy()[permutation], dtype=column.dtype)
    if column.dtype.is_temporal():
        return pl.Series(column.name, column.to_physical().to_numpy()[permutation]).cast(column.dtype)
    return column.gather(pl.Series(permutation))
