"""The Parquet lake: hive-partitioned canonical tables, merged atomically and idempotently.

Layout under ``<data_dir>/lake/``::

    samples/date=2026-11-01/shard=03/part.parquet
    events/date=.../shard=../part.parquet
    failures/date=.../shard=../part.parquet
    inventory/part.parquet
    _lake.json            # {"shards": N}: fixed for the life of the lake
    _changes.jsonl        # time span of rows stored per telemetry partition, until features read it
    _catalog.yaml         # the metric catalog the lake was ingested with, merged across runs

Every write is a merge on the table's natural key, written under a temporary name
(``.part.parquet.tmp-<pid>-<thread>``), fsynced, renamed into place and its directory
fsynced, so a crash never leaves a partial file visible and a power loss never loses a
rename that was reported done.  An exclusive lock file serialises writers (two ingests at
once are safe); the lock is an ``flock``, so a killed holder never leaves it stale.  A
temp file left by a killed writer is removed the next time the lock is taken.

* Telemetry (samples, events, failures) is append-only: on a key collision the row already
  in the lake wins, so a rerun never changes what is stored.  Every partition file is
  sorted by unit, time and the rest of the key.  Rows that are all later than a
  partition's newest row (telemetry arriving in order) are merged into that order without
  the key check or a sort of the whole partition (see ``_merge_one``).
* Inventory is an upsert on ``unit_id``: rows are applied in order, and a row that differs
  from the unit's current row in any column it carries replaces it (the last ingested export
  wins: a replaced GPU gets its new ``uuid``, lot and ``installed_at``); an identical row is
  a duplicate and nothing is written, so re-ingest stays idempotent.  Columns the new rows
  do not carry (even ``lot``) keep their stored values, and a new extra column is added
  (null for the other units).  The replaced row is not kept: the lake holds the current
  fleet; a replacement stays visible as the failure that ended the old GPU's life and the
  new life that follows it, and the old export itself stays in the landing directory.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import threading
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

import numpy as np
import polars as pl

from foreshock import lake_latest
from foreshock.contract import KEYS, SCHEMAS, TIME_COLUMN, conform
from foreshock.lake_latest import Latest

PART_NAME = "part.parquet"
CHANGES_NAME = "_changes.jsonl"


@dataclass
class MergeResult:
    """Row accounting of one merge: ``rows_in == rows_stored + rows_updated + duplicates_dropped``.

    ``rows_stored`` counts rows with a key new to the lake, ``rows_updated`` inventory rows
    that replaced the stored row of their unit (always 0 for telemetry).
    """

    rows_in: int = 0
    rows_stored: int = 0
    duplicates_dropped: int = 0
    partitions_written: int = 0
    rows_updated: int = 0

    def __iadd__(self, other: MergeResult) -> MergeResult:
        self.rows_in += other.rows_in
        self.rows_stored += other.rows_stored
        self.rows_updated += other.rows_updated
        self.duplicates_dropped += other.duplicates_dropped
        self.partitions_written += other.partitions_written
        return self


def shard_of(unit_id: str, shards: int) -> int:
    """Stable shard of a unit (crc32, identical across processes and library versions)."""
    return zlib.crc32(unit_id.encode()) % shards


def shard_numbers(unit_ids: pl.Series, shards: int) -> pl.Series:
    """Each row's shard (Int32, null without a unit): crc32 once per distinct unit, then
    looked up by the unit's position among them (an enum cast).  Rows that come in long
    runs of one unit (a unit's readings one after another, as files list them) are looked
    up once per run and repeated along it, without the per-row cast."""
    unit_ids = unit_ids.cast(pl.String)
    runs = long_runs(unit_ids)
    if runs is not None:
        values, lengths = runs
        per_run = _shard_numbers(values, shards)
        return per_run.gather(pl.Series(np.repeat(np.arange(len(lengths)), lengths))).alias("shard")
    return _shard_numbers(unit_ids, shards)


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


def _shard_numbers(unit_ids: pl.Series, shards: int) -> pl.Series:
    units = unit_ids.unique().drop_nulls()
    numbers = pl.Series([shard_of(u, shards) for u in units.to_list()], dtype=pl.Int32)
    return numbers.gather(unit_ids.cast(pl.Enum(units)).to_physical()).alias("shard")


def with_shard(df: pl.DataFrame, shards: int) -> pl.DataFrame:
    """``df`` with each row's ``shard`` (:func:`shard_numbers`)."""
    return df.with_columns(shard_numbers(df.get_column("unit_id"), shards))


def lake_shards(lake_dir: Path, default: int) -> int:
    """The lake's shard count: recorded on first write, never changed afterwards."""
    meta = Path(lake_dir) / "_lake.json"
    if meta.exists():
        return int(json.loads(meta.read_text())["shards"])
    return default


def _record_shards(lake_dir: Path, shards: int) -> None:
    meta = Path(lake_dir) / "_lake.json"
    if not meta.exists():
        atomic_write_text(meta, json.dumps({"shards": shards}) + "\n")


_held = threading.local()  # lake dirs whose lock this thread holds, with the nesting depth
# What a holder leaves in ``.lock`` when it lets go normally.  A holder writes "held by <pid>
# <token>" first, so a killed holder leaves that: only then can its temp files be lying in the lake,
# and only then does the next holder search the whole lake for them (a walk of every
# partition directory, which costs more than a small merge on a lake of some months).
LOCK_RELEASED = "released\n"
TEMP_NAME = re.compile(r"^\..+\.tmp-(\d+)(?:-\d+)?$")


@contextmanager
def lake_lock(lake_dir: Path) -> Iterator[None]:
    """Exclusive, blocking lock over the lake (released even if the holder crashes).

    Re-entrant within a thread, so a caller can hold it over a read-check-merge sequence
    that calls :func:`merge_into_lake`.  Taking it (outermost) after a holder was killed
    removes the temp files that holder may have left in the lake: every lake write happens
    under this lock, so none is live (see ``LOCK_RELEASED``).
    """
    lake_dir = Path(lake_dir)
    key = str(lake_dir.resolve())
    depth = getattr(_held, "depth", None)
    if depth is None:
        depth = _held.depth = {}
    if depth.get(key):
        depth[key] += 1
        try:
            yield
        finally:
            depth[key] -= 1
        return
    lake_dir.mkdir(parents=True, exist_ok=True)
    with open(lake_dir / ".lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        depth[key] = 1
        try:
            handle.seek(0)
            if handle.read() != LOCK_RELEASED:  # the last holder was killed (or an older version)
                remove_temp_files(lake_dir)
            token = secrets.token_hex(16)
            _tokens()[key] = token
            _mark_lock(handle, f"held by {os.getpid()} {token}\n")
            yield
        finally:
            depth[key] = 0
            _tokens().pop(key, None)
            try:
                _mark_lock(handle, LOCK_RELEASED)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _mark_lock(handle, text: str) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(text)
    handle.flush()


@contextmanager
def lock_held_by_caller(lake_dir: Path) -> Iterator[None]:
    """In a worker thread of a thread that holds :func:`lake_lock` on ``lake_dir`` and waits
    for the worker: lets the worker call functions that take the lock (``merge_into_lake``)
    without taking it again (a second ``flock`` from the same process would wait forever)."""
    key = str(Path(lake_dir).resolve())
    depth = getattr(_held, "depth", None)
    if depth is None:
        depth = _held.depth = {}
    depth[key] = depth.get(key, 0) + 1
    try:
        yield
    finally:
        depth[key] -= 1


def _tokens() -> dict[str, str]:
    tokens = getattr(_held, "tokens", None)
    if tokens is None:
        tokens = _held.tokens = {}
    return tokens


def lock_token(lake_dir: Path) -> str:
    """The token of this thread's (outermost) hold of :func:`lake_lock` on ``lake_dir``: a
    random value, new for every hold, that the holder also writes in ``.lock``.  A holder
    hands it to work it runs in other processes and waits for (see
    :func:`lock_held_by_token`).  RuntimeError when this thread does not hold the lock."""
    token = _tokens().get(str(Path(lake_dir).resolve()))
    if token is None:
        raise RuntimeError(f"the lake lock of {lake_dir} is not held by this thread")
    return token


@contextmanager
def lock_held_by_token(lake_dir: Path, token: str) -> Iterator[None]:
    """:func:`lock_held_by_caller` for another process (a Dask worker) doing work for a
    holder of :func:`lake_lock` that passed it :func:`lock_token` and waits for it: the
    work may call functions that take the lock (``merge_into_lake``).  Refused (RuntimeError)
    unless ``.lock`` shows that very hold still current: a token of a hold that has ended
    (its holder let go, or was killed and another writer took the lock) never lets anyone
    in, so other writers stay excluded as before."""
    try:
        marker = (Path(lake_dir) / ".lock").read_text()
    except FileNotFoundError:
        marker = ""
    if not token or not marker.startswith("held by ") or marker.split()[-1:] != [token]:
        raise RuntimeError(f"the lake lock of {lake_dir} is not held under this token (the holder let go)")
    with lock_held_by_caller(lake_dir):
        yield


def remove_temp_files(root: Path, *, only_dead_writers: bool = False) -> list[Path]:
    """Remove temp files (``.<name>.tmp-<pid>[-<thread>]``) under ``root``; returns them.

    With ``only_dead_writers``, a file is removed only when the process that wrote it is
    gone (for directories written without a lock: a live writer's file is left alone).
    """
    removed = []
    root = Path(root)
    if not root.is_dir():
        return removed
    for directory, _, files in os.walk(root):
        for name in files:
            match = TEMP_NAME.match(name)
            if not match or (only_dead_writers and _process_alive(int(match.group(1)))):
                continue
            path = Path(directory) / name
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append(path)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_durably(tmp: Path, path: Path) -> None:
    try:
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def atomic_write_parquet(df: pl.DataFrame, path: Path) -> None:
    """Write ``df`` to ``path`` atomically and durably (temp file, fsync, rename, fsync dir)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path(path)
    try:
        df.write_parquet(tmp, compression="zstd", statistics=True)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _replace_durably(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically and durably (temp file, fsync, rename, fsync dir)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path(path)
    try:
        tmp.write_text(text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _replace_durably(tmp, path)


def partition_path(lake_dir: Path, table: str, day: date | None = None, shard: int | None = None) -> Path:
    if TIME_COLUMN[table] is None:
        return Path(lake_dir) / table / PART_NAME
    return Path(lake_dir) / table / f"date={day.isoformat()}" / f"shard={shard:02d}" / PART_NAME


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
            rank = _rank_of(name, values)
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


def stable_order(key: np.ndarray) -> np.ndarray | None:
    """The row numbers that sort ``key`` (integers) with ties in their order, or None when
    it is in order already.  numpy's stable sort (a timsort for 64-bit keys) finds the runs
    a file's rows come in: a third of the CPU of Polars' sort on the lake's packed keys."""
    if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):
        return None
    return np.argsort(key, kind="stable")


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


def _rank_of(name: str, distinct: pl.Series) -> pl.Expr:
    """Each value of the string column ``name`` as its position in ``distinct`` (which
    holds every value of the column, once): a cast to an enum of those values, cheaper
    than a lookup by value."""
    return pl.col(name).cast(pl.Enum(distinct)).to_physical().cast(pl.UInt64)


def _packed(parts: list[tuple[pl.Expr, int]]) -> pl.Expr:
    """One 64-bit key from ``parts`` (the first is the most significant)."""
    key = pl.lit(0, dtype=pl.UInt64)
    for rank, bits in parts:
        key = key * pl.lit(1 << bits, dtype=pl.UInt64) + rank if bits else key
    return key


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
    parts = _rank_parts(frame, order)
    if parts is None or sum(bits for _, bits in parts) > 64:
        return frame.sort(order)
    return frame.sort(_packed(parts), maintain_order=True)


def _split_sorted(
    frame: pl.DataFrame,
    table: str,
    shards: int,
    *,
    in_frame_order: bool = True,
    repeats: list[bool] | None = None,
    distinct: dict[str, pl.Series] | None = None,
    latest: dict[tuple[date, int], Latest] | None = None,
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
    unit_rank = _rank_of("unit_id", by_shard.get_column("unit_id"))
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
    permutation = stable_order(key)
    if permutation is None:
        rows = frame
    else:
        # Sort the key and the columns outside it only; the key's columns are read back
        # from the sorted key (each is a function of its bits), which moves far less data
        # than gathering every column (strings above all) in the new order.
        others = [name for name in frame.columns if name not in order]
        key = key[permutation]
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
    if repeats is not None:
        repeats.append(bool(len(key) > 1 and (key[1:] == key[:-1]).any()))
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


def _keys_unique(frame: pl.DataFrame, key: list[str]) -> bool:
    """True when no two rows share a key, decided from 64-bit key hashes (sorting hashes is
    far cheaper than grouping by the key columns).  A hash collision answers False: the
    caller then takes the exact path, so a collision costs time, never a row."""
    if frame.height < 2:
        return True
    hashes = frame.select(key).hash_rows(seed=0)
    return hashes.n_unique() == hashes.len()


def _merge_one(
    path: Path,
    new: pl.DataFrame,
    table: str,
    fast: bool = True,
    deduplicated: bool = False,
    presorted: bool = False,
    latest: Latest | None = None,
) -> pl.DataFrame:
    """Merge ``new`` into the file at ``path``; returns the rows newly stored.

    Fast path (``fast``): when ``new`` has no repeated key and, for a partition that exists,
    every new row is later than the partition's newest row (the normal case of telemetry
    arriving in time order), no key can collide: the anti-join with the stored keys and the
    sort of the whole partition are skipped.  The new rows are sorted among themselves and
    merged into the stored order by unit (stored rows first within a unit, all of them
    older), which gives exactly the order a full sort gives.  Anything else takes the
    exact path: deduplicate, anti-join with the stored keys, sort everything.
    ``deduplicated``: the caller has already dropped repeated and stored keys under the
    same hold of the lake lock, so neither check is repeated here.  ``presorted``: ``new``
    is in partition order already (:func:`_split_sorted`).  ``latest``: the latest reading
    of each series of ``new`` (samples): with it, the file's latest rows are remembered
    when they follow from it (:mod:`foreshock.lake_latest`), and forgotten otherwise.
    """
    key = list(KEYS[table])
    time_col = TIME_COLUMN[table]
    before = lake_latest.known(path)  # read before the file is, under the lake lock
    lake_latest.forget(path)
    existing = pl.read_parquet(path) if path.exists() else None
    if fast and time_col is not None and (deduplicated or _keys_unique(new, key)):
        new = new if presorted else sort_rows(new, table)
        if existing is None:
            atomic_write_parquet(new, path)
            if latest is not None:
                lake_latest.remember(path, latest)
            return new
        newest = existing.get_column(time_col).max()
        oldest_new = new.get_column(time_col).min()
        if (
            newest is not None
            and oldest_new is not None
            and oldest_new > newest
            and existing.schema == new.schema
            and existing.get_column("unit_id").is_sorted()
        ):
            merged = existing.merge_sorted(new, key="unit_id", maintain_order=True)
            atomic_write_parquet(merged, path)
            if latest is not None and before is not None:
                lake_latest.remember(path, lake_latest.appended(before, latest))
            return new
    fresh = new if deduplicated else new.unique(subset=key, keep="first", maintain_order=True)
    if existing is not None:
        if not deduplicated:
            fresh = fresh.join(existing.select(key), on=key, how="anti", nulls_equal=True)
        if fresh.height == 0:
            return fresh
        merged = pl.concat([existing, fresh], how="diagonal_relaxed")
    else:
        merged = fresh
    atomic_write_parquet(sort_rows(merged, table), path)
    return fresh


def _upsert_inventory(path: Path, new: pl.DataFrame, carried: list[str]) -> tuple[int, int]:
    """Apply inventory rows in order to the file at ``path``; returns ``(stored, updated)``.

    A row is *stored* when its unit is new, *updated* when it differs from the unit's
    current row (the stored one, or an earlier row of ``new``) in any of the ``carried``
    columns (those the caller gave), else a duplicate.  Nothing is written when every row
    is a duplicate.
    """
    existing = pl.read_parquet(path) if path.exists() else None
    if existing is not None:
        new = new.select(carried)
    columns = new.columns
    sequence = new.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("_seq"))
    if existing is not None:
        # The stored row goes first in its unit's sequence; columns it lacks compare as null.
        before = pl.concat([existing, new.head(0)], how="diagonal_relaxed").select(columns)
        sequence = pl.concat(
            [before.with_columns(pl.lit(-1, dtype=pl.Int64).alias("_seq")), sequence],
            how="vertical_relaxed",
        )
    sequence = sequence.sort("unit_id", "_seq", maintain_order=True)
    changed = pl.any_horizontal(
        [pl.col(c).ne_missing(pl.col(c).shift(1).over("unit_id")) for c in columns if c != "unit_id"]
    )
    status = sequence.with_columns(
        _first=pl.col("_seq").rank("ordinal").over("unit_id") == 1,
        _changed=changed if len(columns) > 1 else pl.lit(False),
    ).filter(pl.col("_seq") >= 0)
    stored = status.filter(pl.col("_first")).height
    updated = status.filter(~pl.col("_first") & pl.col("_changed")).height
    if stored == 0 and updated == 0:
        return 0, 0
    latest = new.unique(subset=["unit_id"], keep="last", maintain_order=True)
    if existing is None:
        merged = latest
    else:
        untouched = existing.join(latest.select("unit_id"), on="unit_id", how="anti")
        # Columns this export does not carry keep the unit's stored values.
        carried_over = [c for c in existing.columns if c not in columns]
        replaced = latest.join(existing.select(["unit_id", *carried_over]), on="unit_id", how="left")
        merged = pl.concat([untouched, replaced], how="diagonal_relaxed")
    atomic_write_parquet(merged.sort("unit_id"), path)
    return stored, updated


def merge_into_lake(
    lake_dir: Path,
    table: str,
    df: pl.DataFrame,
    shards: int = 8,
    *,
    fast_path: bool = True,
    deduplicated: bool = False,
    record_changes: bool = True,
) -> MergeResult:
    """Merge validated rows of one canonical table into the lake.

    Telemetry rows whose natural key is already stored (or repeated within ``df``) are
    dropped and counted as duplicates; inventory rows are upserted (see the module notes).
    ``rows_in == rows_stored + rows_updated + duplicates_dropped`` always holds.
    ``fast_path=False`` forces the exact merge of every partition (same result, slower;
    for benchmarks and tests that compare the two).  ``deduplicated=True`` is for a caller
    that holds the lake lock and has already removed keys repeated in ``df`` or stored
    (ingest does, comparing values to quarantine conflicts): the key checks are skipped.
    ``record_changes=False``: the caller logs the partitions (``record_stored_rows``) itself
    (ingest does, before it writes them, so a crash cannot store rows the log misses).
    """
    lake_dir = Path(lake_dir)
    carried = list(df.columns)  # before conform adds a missing optional column as nulls
    df = conform(df, table)
    result = MergeResult(rows_in=df.height)
    if df.height == 0:
        return result
    with lake_lock(lake_dir):
        shards = lake_shards(lake_dir, shards)
        _record_shards(lake_dir, shards)
        time_col = TIME_COLUMN[table]
        if table == "inventory":
            stored, updated = _upsert_inventory(partition_path(lake_dir, table), df, carried)
            result.rows_stored += stored
            result.rows_updated += updated
            result.partitions_written += int(stored + updated > 0)
        elif time_col is None:
            stored = _merge_one(partition_path(lake_dir, table), df, table).height
            result.rows_stored += stored
            result.partitions_written += int(stored > 0)
        else:
            split = _split_conformed(df, table, shards, in_frame_order=record_changes)
            result = _merge_split(lake_dir, split, fast_path, deduplicated, record_changes)
    result.duplicates_dropped = result.rows_in - result.rows_stored - result.rows_updated
    return result


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


def _split_conformed(
    df: pl.DataFrame,
    table: str,
    shards: int,
    *,
    in_frame_order: bool,
    distinct: dict[str, pl.Series] | None = None,
) -> SplitRows:
    repeats: list[bool] = []
    latest: dict[tuple[date, int], Latest] = {}
    split = _split_sorted(
        df, table, shards, in_frame_order=in_frame_order, repeats=repeats, distinct=distinct, latest=latest
    )
    presorted = split is not None
    if split is None:
        split = split_by_partition(df, table, shards)
    return SplitRows(table, shards, split, presorted, df.height, repeats[0] if repeats else None, latest)


def split_for_merge(
    lake_dir: Path, table: str, df: pl.DataFrame, shards: int = 8, distinct: dict[str, pl.Series] | None = None
) -> SplitRows:
    """The split and sort :func:`merge_into_lake` makes of deduplicated telemetry rows
    (``deduplicated=True``), done apart so that a caller holding the lake lock can run it
    beside other work, log the partitions from it (:func:`record_split`) and then write
    them (:func:`merge_split`): the same files as ``merge_into_lake`` of ``df``.  The split
    also tells whether two rows of ``df`` share a key (``repeated``): a caller that has not
    deduplicated them yet may split first and deduplicate only when some do (the order of
    rows with the same key is then not kept: such a split is not for writing).  ``distinct``:
    the distinct values of ``unit_id`` or ``metric`` when the caller knows them (a superset
    does: each is only ranked)."""
    if TIME_COLUMN[table] is None or table == "inventory":
        raise ValueError(f"split_for_merge is for telemetry tables, not {table!r}")
    df = conform(df, table)
    shards = lake_shards(lake_dir, shards)
    if df.height == 0:
        return SplitRows(table, shards, [], True, 0, False)
    return _split_conformed(df, table, shards, in_frame_order=False, distinct=distinct)


def merge_split(lake_dir: Path, split: SplitRows) -> MergeResult:
    """Write the rows of :func:`split_for_merge` into the lake (the caller checked them
    against the batch and the lake and logged them, under the same hold of the lock)."""
    with lake_lock(lake_dir):
        if split.rows_in:
            _record_shards(Path(lake_dir), split.shards)
        result = _merge_split(Path(lake_dir), split, True, True, False)
    result.duplicates_dropped = result.rows_in - result.rows_stored - result.rows_updated
    return result


def _merge_split(
    lake_dir: Path, split: SplitRows, fast_path: bool, deduplicated: bool, record_changes: bool
) -> MergeResult:
    result = MergeResult(rows_in=split.rows_in)
    time_col = TIME_COLUMN[split.table]
    for day, shard, part in split.pieces:
        fresh = _merge_one(
            partition_path(lake_dir, split.table, day, shard),
            part,
            split.table,
            fast_path,
            deduplicated,
            split.presorted,
            split.latest.get((day, shard)),
        )
        result.rows_stored += fresh.height
        result.partitions_written += int(fresh.height > 0)
        if fresh.height and record_changes:
            _record_change(lake_dir, split.table, day, shard, fresh.get_column(time_col))
    return result


def record_split(lake_dir: Path, splits: list[SplitRows]) -> None:
    """:func:`record_stored_rows` of the rows of ``splits`` (one table's), read off their
    partitions: the same lines, without a pass over the rows by date and unit."""
    spans: dict[tuple[date, int], tuple[datetime, datetime]] = {}
    table = None
    for split in splits:
        table = split.table
        time_col = TIME_COLUMN[split.table]
        for day, shard, part in split.pieces:
            if part.height == 0:
                continue
            times = part.get_column(time_col)
            first, last = times.min(), times.max()
            if (day, shard) in spans:
                first, last = min(first, spans[day, shard][0]), max(last, spans[day, shard][1])
            spans[day, shard] = (first, last)
    if spans:
        _append_changes(lake_dir, table, [(*key, *span) for key, span in sorted(spans.items())])


def _record_change(lake_dir: Path, table: str, day: date, shard: int, times: pl.Series) -> None:
    """Append which partition received rows and their time span (under the lake lock), so
    the features stage can recompute exactly the snapshots late rows affect."""
    _append_changes(lake_dir, table, [(day, shard, times.min(), times.max())])


def _append_changes(lake_dir: Path, table: str, spans: list[tuple[date, int, datetime, datetime]]) -> None:
    """Append one change-log line per ``(date, shard, first, last)`` of ``table``."""
    lines = [
        json.dumps(
            {
                "table": table,
                "date": day.isoformat(),
                "shard": int(shard),
                "first": first.isoformat(),
                "last": last.isoformat(),
            }
        )
        + "\n"
        for day, shard, first, last in spans
    ]
    with open(Path(lake_dir) / CHANGES_NAME, "a") as handle:
        handle.write("".join(lines))


def record_stored_rows(lake_dir: Path, table: str, frames: list[pl.DataFrame], shards: int) -> None:
    """Log the partitions the rows of ``frames`` (a telemetry table's) go to, with their time
    spans: one line per partition, in date and shard order, as :func:`merge_into_lake`
    writes them.  For a caller that stores exactly these rows next, under the lake lock:
    logged first, a partition never changes without the features stage hearing of it (a
    crash in between only makes it recompute a little more)."""
    time_col = TIME_COLUMN[table]
    frames = [f for f in frames if f.height]
    if not frames or time_col is None:
        return
    shards = lake_shards(lake_dir, shards)
    # Spans per date and unit first (a few thousand rows), then per partition.
    by_unit = (
        pl.concat([f.lazy().select("unit_id", time_col) for f in frames])
        .group_by(pl.col(time_col).dt.date().alias("_date"), "unit_id")
        .agg(first=pl.col(time_col).min(), last=pl.col(time_col).max())
        .collect()
    )
    spans = (
        with_shard(by_unit, shards)
        .group_by("_date", "shard")
        .agg(pl.col("first").min(), pl.col("last").max())
        .sort("_date", "shard")
        .select("_date", "shard", "first", "last")
    )
    _append_changes(lake_dir, table, list(spans.iter_rows()))


def read_changes(lake_dir: Path) -> list[dict]:
    """Partitions changed since the features stage last consumed the change log (one dict per
    merge: ``table, date, shard, first, last``)."""
    path = Path(lake_dir) / CHANGES_NAME
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def consume_changes(lake_dir: Path, count: int) -> None:
    """Drop the first ``count`` entries of the change log (those a features run handled);
    entries appended since stay."""
    path = Path(lake_dir) / CHANGES_NAME
    if count <= 0 or not path.exists():
        return
    with lake_lock(lake_dir):
        rest = path.read_text().splitlines(keepends=True)[count:]
        atomic_write_text(path, "".join(rest))


def partition_files(
    lake_dir: Path,
    table: str,
    start: date | datetime | None = None,
    end: date | datetime | None = None,
    shards: Iterable[int] | None = None,
) -> list[Path]:
    """Partition files of ``table`` with start <= date <= end (inclusive), sorted."""
    root = Path(lake_dir) / table
    if TIME_COLUMN[table] is None:
        path = root / PART_NAME
        return [path] if path.exists() else []
    start_d = start.date() if isinstance(start, datetime) else start
    end_d = end.date() if isinstance(end, datetime) else end
    wanted = None if shards is None else {int(s) for s in shards}
    files = []
    for day_dir in sorted(root.glob("date=*")):
        day = date.fromisoformat(day_dir.name.split("=", 1)[1])
        if (start_d and day < start_d) or (end_d and day > end_d):
            continue
        for shard_dir in sorted(day_dir.glob("shard=*")):
            if wanted is not None and int(shard_dir.name.split("=", 1)[1]) not in wanted:
                continue
            path = shard_dir / PART_NAME
            if path.exists():
                files.append(path)
    return files


def partition_dates(lake_dir: Path, table: str) -> list[date]:
    root = Path(lake_dir) / table
    return sorted(date.fromisoformat(p.name.split("=", 1)[1]) for p in root.glob("date=*"))


def scan_table(
    lake_dir: Path,
    table: str,
    start: date | datetime | None = None,
    end: date | datetime | None = None,
    shards: Iterable[int] | None = None,
) -> pl.LazyFrame:
    """Lazy scan of a canonical table (partition-pruned by date and shard).

    Always returns the contract's columns, even when nothing is stored yet.
    """
    files = partition_files(lake_dir, table, start, end, shards)
    if not files:
        return pl.LazyFrame(schema=SCHEMAS[table])
    return pl.scan_parquet(files, hive_partitioning=False)


def read_table(lake_dir: Path, table: str, **kwargs) -> pl.DataFrame:
    return scan_table(lake_dir, table, **kwargs).collect()


def lake_summary(lake_dir: Path) -> dict[str, dict]:
    """Rows, units and time span of each canonical table (what an operator checks first)."""
    summary: dict[str, dict] = {}
    for table, time_col in TIME_COLUMN.items():
        frame = scan_table(lake_dir, table)
        aggs = [pl.len().alias("rows"), pl.col("unit_id").n_unique().alias("units")]
        if time_col:
            aggs += [pl.col(time_col).min().alias("first"), pl.col(time_col).max().alias("last")]
        row = frame.select(aggs).collect().row(0, named=True)
        if table == "samples":
            row["metrics"] = frame.select(pl.col("metric").n_unique()).collect().item()
        row["partitions"] = len(partition_files(lake_dir, table))
        summary[table] = row
    return summary


def lake_metrics(lake_dir: Path) -> list[str]:
    """The distinct metric names stored in ``samples``, sorted."""
    frame = scan_table(lake_dir, "samples").select(pl.col("metric").unique()).collect()
    return sorted(frame.get_column("metric").drop_nulls().to_list())


def format_lake_summary(summary: dict[str, dict]) -> str:
    lines = [f"{'table':<10} {'rows':>12} {'units':>7} {'partitions':>10}  span"]
    for table, row in summary.items():
        span = ""
        if row.get("first") is not None:
            span = f"{row['first']:%Y-%m-%d %H:%M} .. {row['last']:%Y-%m-%d %H:%M} UTC"
        extra = f"  ({row['metrics']} metrics)" if row.get("metrics") else ""
        lines.append(f"{table:<10} {row['rows']:>12,} {row['units']:>7,} {row['partitions']:>10,}  {span}{extra}")
    return "\n".join(lines)
