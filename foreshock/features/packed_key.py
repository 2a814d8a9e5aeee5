"""The packed key the rollups group by: one unsigned 64-bit integer per row packing a dense
unit index, the life and the snapshot bucket's number, so that group-bys hash one integer
instead of a string, an integer and a time; and the expressions that read it back."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl

from foreshock.contract import UTC_TS


def bucket_number(ts: pl.Expr, every_us: int) -> pl.Expr:
    """The number of the snapshot that owns a timestamp (its time / ``every``)."""
    return (ts.dt.epoch("us") - 1) // every_us + 1


# Rows are grouped by one integer key packing a dense unit index, the life and the bucket
# number (one u64 hashes much faster than a string, an int and a datetime); the key is
# unpacked and unit ids are joined back onto the much smaller rollups.
LIFE_SLOTS = 256
BUCKET_SLOTS = 2**32


def packed_key(every: timedelta) -> pl.Expr:
    every_us = int(every.total_seconds() * 1_000_000)
    number = bucket_number(pl.col("ts"), every_us).cast(pl.UInt64)
    return (
        (pl.col("_unit").cast(pl.UInt64) * LIFE_SLOTS + pl.col("life").cast(pl.UInt64)) * BUCKET_SLOTS + number
    ).alias("_key")


def packed_key_array(unit: np.ndarray, life: np.ndarray, ts_us: np.ndarray, every: timedelta) -> np.ndarray:
    """:func:`packed_key` of arrays (unit run numbers, lives, times in microseconds)."""
    every_us = int(every.total_seconds() * 1_000_000)
    number = ((ts_us - 1) // every_us + 1).astype(np.uint64)
    return (unit.astype(np.uint64) * LIFE_SLOTS + life.astype(np.uint64)) * BUCKET_SLOTS + number


def unpacked(frame: pl.DataFrame, every: timedelta) -> pl.DataFrame:
    every_us = int(every.total_seconds() * 1_000_000)
    return frame.with_columns(
        (pl.col("_key") // (LIFE_SLOTS * BUCKET_SLOTS)).cast(pl.UInt32).alias("_unit"),
        ((pl.col("_key") // BUCKET_SLOTS) % LIFE_SLOTS).cast(pl.Int32).alias("life"),
        ((pl.col("_key") % BUCKET_SLOTS).cast(pl.Int64) * every_us).cast(UTC_TS).alias("bucket"),
    )


def new_unit() -> pl.Expr:
    """The row starts a unit's rows (rows grouped by the unit's run number ``_unit``)."""
    return (pl.col("_unit") != pl.col("_unit").shift(1)).fill_null(True)
