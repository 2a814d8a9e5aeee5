"""Telemetry rows split into their partitions, each in partition order (unit, time, the rest
of the key), from one sort of the whole frame by a packed 64-bit key.

Sorting strings is slow: each key column becomes an integer rank (strings ranked over their
few distinct values), the ranks are packed into one 64-bit key when their value ranges fit,
and rows are sorted by that key alone (a stable sort: ties keep their order).  Keys with
nulls or ranges too wide to pack take the plain sort and ``partition_by``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.contract import KEYS, TIME_COLUMN, conform
from foreshock.lake.columns import distinct_values, gathered, long_runs, stable_order
from foreshock.lake.latest import Latest
from foreshock.lake.layout import lake_shards, with_shard


def _sort_order(table: str) -> list[str]:
    """The row order of a partition file: unit, then time, then the rest of the key."""
    key = list(KEYS[table])
    time_col = TIME_COLUMN[table]
    return ["unit_id"] + ([time_col] if time_col else []) + [k for k in key if k not in ("unit_id", time_col)]


def _rank_parts(
    frame: pl.DataFrame,
    names: list[str],
    decoders: list[tuple[str, object]] | None = None,
    distinct: dict[str, pl.Series] | None = None,
) -> list[tuple[pl.Expr, int]] | None:
    """Each column of ``names`` as a non-negative integer rank expression with the bits it
    needs (strings ranked over their distinct values, times and integers offset from their
    minimum), in the order of the values; None when a column has nulls or another type.
    ``decoders``: given a list, each column's ``(name, distinct values)`` (strings) or
    ``(name, (minimum, dtype))`` is appended, to turn ranks back into values (:func:`_unrank`).
    ``distinct``: a string column's distinct values when known (:func:`_distinct_of`)."""
    parts: list[tuple[pl.Expr, int]] = []
    for name in names:
        column = frame.get_column(name)
        if column.null_count():
            return None
        if column.dtype == pl.String:
            values = _distinct_of(column, distinct).sort()
            rank = _rank_of(column, values)
            span = values.len() - 1
            info: object = values
        elif column.dtype.is_temporal() or column.dtype.is_integer():
            physical = column.to_physical()
            low, high = physical.min(), physical.max()
            rank = (pl.col(name).to_physical().cast(pl.Int64) - low).cast(pl.UInt64)
            span = high - low
            info = (low, column.dtype)
        else:
            return None
        parts.append((rank, max(int(span), 0).bit_length()))
        if decoders is not None:
            decoders.append((name, info))
    return parts


def _distinct_of(column: pl.Series, known: dict[str, pl.Series] | None) -> pl.Series:
    """The distinct values of a column without nulls: ``known[name]`` when the caller knows
    them (every value of the column is among them; more only widen a rank by a bit), else
    found (:func:`distinct_values`)."""
    values = (known or {}).get(column.name)
    return distinct_values(column) if values is None else values.alias(column.name)


def _ranks(key: np.ndarray, shift: int, bits: int) -> np.ndarray:
    """The ``bits`` bits of packed keys above their lowest ``shift`` bits, as int64 (a view
    of the shifted key, not a converted copy: values of fewer than 64 bits fit)."""
    if shift >= 64:
        return np.zeros(len(key), dtype=np.int64)
    out = key >> np.uint64(shift)
    if bits < 64 - shift:
        np.bitwise_and(out, np.uint64((1 << bits) - 1), out=out)
    return out.view(np.int64) if bits < 64 else out.astype(np.int64)


def _unrank(name: str, info: object, ranks: np.ndarray) -> pl.Series:
    """Column ``name``'s values from their ranks (``info`` from :func:`_rank_parts`)."""
    if isinstance(info, pl.Series):  # a string column's distinct values, sorted
        return info.gather(pl.Series(ranks)).alias(name)
    low, dtype = info
    values = pl.Series(name, np.add(ranks, np.int64(low), out=ranks))
    physical = dtype.to_physical() if hasattr(dtype, "to_physical") else dtype
    return values.cast(physical).cast(dtype)


def _rank_of(column: pl.Series, distinct: pl.Series) -> pl.Expr:
    """Each value of the string ``column`` as its position in ``distinct`` (which holds
    every value of the column, once): a cast to an enum of those values, cheaper than a
    lookup by value; once per run of one value when the column comes in long runs
    (:func:`long_runs`: a batch lists each metric's samples together), a tenth of the
    cast of every row."""
    runs = long_runs(column)
    if runs is None:
        return pl.col(column.name).cast(pl.Enum(distinct)).to_physical().cast(pl.UInt64)
    values, lengths = runs
    ranks = values.cast(pl.Enum(distinct)).to_physical().cast(pl.UInt64).to_numpy()
    return pl.lit(pl.Series(column.name, np.repeat(ranks, lengths)))


def _packed(parts: list[tuple[pl.Expr, int]]) -> pl.Expr:
    """One 64-bit key from ``parts`` (the first is the most significant)."""
    key = pl.lit(0, dtype=pl.UInt64)
    for rank, bits in parts:
        key = key * pl.lit(1 << bits, dtype=pl.UInt64) + rank if bits else key
    return key


# Below this many rows a frame is sorted by its key columns as they are: ranking each column
# over its distinct values costs a few Polars calls per column, more than the sort itself
# (an events partition of a few rows: 0.6 ms against 0.05 ms; 1,000 samples: 0.60 against
# 0.25 ms; at 10,000 the ranks win, 1.9 against 3.1 ms).
SMALL_SORT_ROWS = 5_000


def sort_rows(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    """``frame`` in partition order (:func:`_sort_order`), the order ``frame.sort`` gives.

    Sorting strings is slow: each key column becomes an integer rank (strings ranked over
    their few distinct values), the ranks are packed into one 64-bit key when their value
    ranges fit, and the frame is sorted by that key alone (ties keep their order).  Keys
    with nulls or ranges too wide to pack take the plain sort.
    """
    order = _sort_order(table)
    if frame.height < 2:
        return frame
    if frame.height < SMALL_SORT_ROWS:  # ranking costs more than it saves (same order: ties kept)
        return frame.sort(order, maintain_order=True)
    parts = _rank_parts(frame, order)
    if parts is None or sum(bits for _, bits in parts) > 64:
        return frame.sort(order)
    return frame.sort(_packed(parts), maintain_order=True)


# About 110 lines in one function: the key's packing, the sort, the columns read back from
# the key and the partitions' offsets all use the same bit layout (day, unit and key bits,
# the units' shards, the decoders); split up, a dozen of those values would travel between
# the pieces.
def _split_sorted(
    frame: pl.DataFrame,
    table: str,
    shards: int,
    *,
    in_frame_order: bool = True,
    repeats: list[bool] | None = None,
    distinct: dict[str, pl.Series] | None = None,
    latest: dict[tuple[date, int], Latest] | None = None,
    dropped: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[tuple[date, int, pl.DataFrame]] | None:
    """A telemetry frame split into its partitions, each in partition order: ``(day, shard,
    rows)``, in the order of the partitions' first rows in ``frame`` (``in_frame_order``)
    or else in date and shard order.

    Same partitions and rows as ``partition_by`` on (date, shard) followed by
    :func:`sort_rows` on each, from one sort of the whole frame by a packed 64-bit key
    (date, then the unit ranked by shard and id, then time and the rest of the key; the
    shard is a function of the unit, so it needs no bits of its own), skipped when the
    rows are in that order already.  Each partition is a slice of the sorted frame.
    None when the key does not pack (nulls, ranges too wide): the caller splits as before.
    Rows with the same key keep their order (a stable sort).  ``repeats``: given a
    list, whether two rows share a key is appended (exact: equal packed keys are equal keys,
    next to each other once sorted).  ``distinct``: distinct values of string key columns
    when known (:func:`_distinct_of`).  ``latest``: given a dict, each samples partition's
    latest reading of each series (:func:`_series_latest`) is put in it, by (day, shard).
    ``dropped``: given a list, only the first row of each key (in frame order) is kept and
    ``(later rows, their key's first row)`` (row numbers in ``frame``) is appended
    (:func:`_drop_repeats`): the split of the frame's first rows of each key.
    """
    time_col = TIME_COLUMN[table]
    order = _sort_order(table)
    if frame.height == 0 or any(frame.get_column(name).null_count() for name in order):
        return None
    decoders: list[tuple[str, object]] = []
    rest = _rank_parts(frame, order[1:], decoders, distinct)
    if rest is None:
        return None
    units = _distinct_of(frame.get_column("unit_id"), distinct)
    by_shard = with_shard(pl.DataFrame({"unit_id": units}), shards).sort("shard", "unit_id")
    unit_shard = by_shard.get_column("shard").to_numpy().astype(np.int64)
    unit_bits = max(units.len() - 1, 0).bit_length()
    unit_rank = _rank_of(frame.get_column("unit_id"), by_shard.get_column("unit_id"))
    dtype = frame.schema[time_col]
    per_day = {"us": 86_400_000_000, "ns": 86_400_000_000_000, "ms": 86_400_000}.get(getattr(dtype, "time_unit", None))
    if isinstance(dtype, pl.Datetime) and dtype.time_zone in (None, "UTC") and per_day:
        day = pl.col(time_col).to_physical() // per_day  # the UTC date's day number, without a calendar pass
        times = frame.get_column(time_col).to_physical()
        first_day, last_day = times.min() // per_day, times.max() // per_day  # floor division, as the expression
    else:
        day = pl.col(time_col).dt.date().to_physical().cast(pl.Int64)
        first_day, last_day = frame.select(day.min().alias("first"), day.max().alias("last")).row(0)
    day_bits = int(last_day - first_day).bit_length()
    parts = [((day - first_day).cast(pl.UInt64), day_bits), (unit_rank, unit_bits), *rest]
    if sum(bits for _, bits in parts) > 64:
        return None
    low_bits = sum(bits for _, bits in rest)
    key = frame.select(_packed(parts).alias("_key")).to_series().to_numpy()

    def partition_of(key: np.ndarray) -> np.ndarray:
        """Day rank * shards + shard of each packed key."""
        rank = _ranks(key, low_bits, unit_bits)
        return _ranks(key, low_bits + unit_bits, 64 - low_bits - unit_bits) * shards + unit_shard[rank]

    first_seen = None
    if in_frame_order:
        first_seen = pl.Series(partition_of(key)).unique(maintain_order=True).to_list()
    permutation = stable_order(key, top_first=True)
    if permutation is not None:
        key = key[permutation]
    same = key[1:] == key[:-1] if repeats is not None or dropped is not None else None
    if repeats is not None:
        repeats.append(bool(same.any()))
    if dropped is not None:  # left out before any column is put in order
        key, permutation = _drop_repeats(key, same, permutation, dropped)
    if permutation is None:
        rows = frame
    else:
        # Sort the key and the columns outside it only; the key's columns are read back
        # from the sorted key (each is a function of its bits), which moves far less data
        # than gathering every column (strings above all) in the new order.
        others = [name for name in frame.columns if name not in order]
        columns = {name: gathered(frame.get_column(name), permutation) for name in others}
        columns["unit_id"] = by_shard.get_column("unit_id").gather(pl.Series(_ranks(key, low_bits, unit_bits)))
        shift = low_bits
        for (name, info), (_, bits) in zip(decoders, rest):
            shift -= bits
            columns[name] = _unrank(name, info, _ranks(key, shift, bits))
        rows = pl.DataFrame([columns[name].alias(name) for name in frame.columns])
    # Partitions follow each other in (day, shard) order in the sorted key (units are ranked
    # by shard first): each one's first row is found by a binary search for its lowest key.
    first_rank = {}
    for rank, shard in enumerate(unit_shard.tolist()):
        first_rank.setdefault(shard, rank)
    days = range(int(last_day - first_day) + 1)
    if len(days) * len(first_rank) > 4096:  # rows over a long span: only the days present
        days = np.unique(_ranks(key, low_bits + unit_bits, day_bits)).tolist()
    starts = [
        (number, (d << (low_bits + unit_bits)) | (rank << low_bits))
        for d in days
        for shard, rank in sorted(first_rank.items())
        for number in [d * shards + shard]
    ]
    offsets = np.searchsorted(key, np.array([low for _, low in starts], dtype=np.uint64), side="left").tolist()
    offsets.append(len(key))
    epoch = date(1970, 1, 1).toordinal()
    pieces: dict[int, tuple[date, int, pl.DataFrame]] = {}
    for (number, _), offset, end in zip(starts, offsets, offsets[1:]):
        if end > offset:
            day_of = date.fromordinal(epoch + first_day + number // shards)
            pieces[number] = (day_of, number % shards, rows.slice(offset, end - offset))
            if latest is not None and table == "samples" and order[-1] == "metric":
                part = pieces[number][2]
                latest[day_of, number % shards] = _series_latest(
                    key[offset:end], part, low_bits, unit_bits, rest[-1][1]
                )
    return [pieces[n] for n in first_seen] if first_seen is not None else list(pieces.values())


def _drop_repeats(
    key: np.ndarray, same: np.ndarray, permutation: np.ndarray | None, dropped: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray | None]:
    """The sorted ``key`` and the ``permutation`` that sorts the frame (None: in order
    already) without the rows whose key the row before has (``same``; equal packed keys
    are equal keys, and the sort is stable, so the first row of a run of equal keys is
    the key's first row in frame order); ``(later rows, their key's first row)``, as row
    numbers of the frame, in frame order, appended to ``dropped``."""
    if not same.any():
        dropped.append((np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)))
        return key, permutation
    first = np.ones(len(key), dtype=bool)
    first[1:] = ~same
    positions = np.arange(len(key), dtype=np.int64)
    run_first = np.maximum.accumulate(np.where(first, positions, 0))
    later = np.flatnonzero(~first)
    before = positions if permutation is None else permutation.astype(np.int64, copy=False)
    later_rows, first_rows = before[later], before[run_first[later]]
    order = np.argsort(later_rows, kind="stable")
    dropped.append((later_rows[order], first_rows[order]))
    return key[first], before[first]


def _series_latest(key: np.ndarray, rows: pl.DataFrame, low_bits: int, unit_bits: int, metric_bits: int) -> Latest:
    """The latest row of each series (unit, metric) of one samples partition's ``rows``,
    sorted by their packed ``key`` (:func:`_split_sorted`: the unit's rank above the
    ``low_bits``, the metric's in the lowest ``metric_bits``, the time between): each
    series' last row, found by series number (no pass over the names)."""
    unit = _ranks(key, low_bits, unit_bits)
    metric = _ranks(key, 0, metric_bits)
    lowest = int(unit[0])  # the rows are sorted by unit: a partition's units are a range
    series = ((unit - lowest) << metric_bits) | metric
    last = np.full((int(unit[-1]) - lowest + 1) << metric_bits, -1, dtype=np.int64)
    np.maximum.at(last, series, np.arange(len(key), dtype=np.int64))
    picked = rows.select("unit_id", "ts", "metric", "value")[last[last >= 0]]
    return Latest(picked, picked.get_column("ts").max())


def split_by_partition(frame: pl.DataFrame, table: str, shards: int) -> list[tuple[date, int, pl.DataFrame]]:
    """A telemetry frame split into its partitions ``(day, shard, rows)`` in the order of
    their first rows, each part's rows in frame order (``partition_by``): the split for
    frames :func:`_split_sorted` cannot pack."""
    time_col = TIME_COLUMN[table]
    keyed = with_shard(frame, shards).with_columns(pl.col(time_col).dt.date().alias("_date"))
    parts = keyed.partition_by(["_date", "shard"], maintain_order=True, as_dict=True)
    return [(day, shard, part.drop("_date", "shard")) for (day, shard), part in parts.items()]


@dataclass
class SplitRows:
    """A telemetry table's rows split into their partitions (``pieces``: ``(day, shard,
    rows)``), each in partition order when ``presorted``: :func:`split_for_merge`."""

    table: str
    shards: int
    pieces: list[tuple[date, int, pl.DataFrame]]
    presorted: bool
    rows_in: int
    # Whether two rows share a key (None: not known, the key did not pack).
    repeated: bool | None = None
    # Samples: each partition's latest reading of each series, by (day, shard), when known.
    latest: dict[tuple[date, int], Latest] = field(default_factory=dict)
    # With ``drop_repeats``: the rows left out because an earlier row has their key, and
    # that row (row numbers of the split frame, in its order); ``pieces`` hold the others.
    dropped: tuple[np.ndarray, np.ndarray] | None = None


def split_conformed(
    df: pl.DataFrame,
    table: str,
    shards: int,
    *,
    in_frame_order: bool,
    distinct: dict[str, pl.Series] | None = None,
    drop_repeats: bool = False,
) -> SplitRows:
    """Rows of ``table`` (conformed to the contract) split into their partitions: sorted by
    :func:`_split_sorted` when the key packs, else by ``partition_by`` (not presorted).
    ``drop_repeats``: when the key packs, the pieces hold each key's first row only and
    ``dropped`` says which rows were left out (:func:`_drop_repeats`)."""
    repeats: list[bool] = []
    latest: dict[tuple[date, int], Latest] = {}
    dropped: list[tuple[np.ndarray, np.ndarray]] | None = [] if drop_repeats else None
    split = _split_sorted(
        df,
        table,
        shards,
        in_frame_order=in_frame_order,
        repeats=repeats,
        distinct=distinct,
        latest=latest,
        dropped=dropped,
    )
    presorted = split is not None
    if split is None:
        split = split_by_partition(df, table, shards)
    repeated = repeats[0] if repeats else None
    if not dropped:
        return SplitRows(table, shards, split, presorted, df.height, repeated, latest)
    rows_in = df.height - len(dropped[0][0])
    return SplitRows(table, shards, split, presorted, rows_in, repeated, latest, dropped[0])


def split_for_merge(
    lake_dir: Path,
    table: str,
    df: pl.DataFrame,
    shards: int = 8,
    distinct: dict[str, pl.Series] | None = None,
    drop_repeats: bool = False,
) -> SplitRows:
    """The split and sort :func:`merge_into_lake` makes of deduplicated telemetry rows
    (``deduplicated=True``), done apart so that a caller holding the lake lock can run it
    beside other work, log the partitions from it (:func:`record_split`) and then write
    them (:func:`merge_split`): the same files as ``merge_into_lake`` of ``df``.  The split
    also tells whether two rows of ``df`` share a key (``repeated``): a caller that has not
    deduplicated them yet may split first and deduplicate only when some do (the order of
    rows with the same key is then not kept: such a split is not for writing).  ``distinct``:
    the distinct values of ``unit_id`` or ``metric`` when the caller knows them (a superset
    does: each is only ranked).  ``drop_repeats``: when the key packs, each key's first row
    only is split, and ``dropped`` names the others (the caller judges them: duplicates or
    conflicts); the pieces are then those of ``df`` without them, ready to write."""
    if TIME_COLUMN[table] is None or table == "inventory":
        raise ValueError(f"split_for_merge is for telemetry tables, not {table!r}")
    df = conform(df, table)
    shards = lake_shards(lake_dir, shards)
    if df.height == 0:
        return SplitRows(table, shards, [], True, 0, False)
    return split_conformed(df, table, shards, in_frame_order=False, distinct=distinct, drop_repeats=drop_repeats)
