"""Rows merged into the lake, atomically and idempotently.

Every write is a merge on the table's natural key under the lake lock
(:mod:`foreshock.lake.locks`), written atomically (:mod:`foreshock.lake.atomic`).

* Telemetry (samples, events, failures, drains) is append-only: on a key collision the row
  already in the lake wins, so a rerun never changes what is stored.  Every partition file
  is sorted by unit, time and the rest of the key.  Rows that are all later than a
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

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from foreshock.contract import KEYS, TIME_COLUMN, conform
from foreshock.lake import latest as lake_latest
from foreshock.lake.atomic import atomic_write_parquet, written_together
from foreshock.lake.changes import record_change
from foreshock.lake.latest import Latest
from foreshock.lake.layout import lake_shards, partition_path, record_shards
from foreshock.lake.locks import lake_lock
from foreshock.lake.split import SplitRows, sort_rows, split_conformed


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
    level: int | None = None,
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
    when they follow from it (:mod:`foreshock.lake.latest`), and forgotten otherwise.
    ``level``: the zstd level the file is written with (``[lake] compression_level``).
    """
    key = list(KEYS[table])
    time_col = TIME_COLUMN[table]
    before = lake_latest.known(path)  # read before the file is, under the lake lock
    lake_latest.forget(path)
    existing = pl.read_parquet(path) if path.exists() else None
    if fast and time_col is not None and (deduplicated or _keys_unique(new, key)):
        new = new if presorted else sort_rows(new, table)
        if existing is None:
            atomic_write_parquet(new, path, compression_level=level)
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
            atomic_write_parquet(merged, path, compression_level=level)
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
    atomic_write_parquet(sort_rows(merged, table), path, compression_level=level)
    return fresh


def _upsert_inventory(path: Path, new: pl.DataFrame, carried: list[str], level: int | None = None) -> tuple[int, int]:
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
    atomic_write_parquet(merged.sort("unit_id"), path, compression_level=level)
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
    compression_level: int | None = None,
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
    ``compression_level``: the zstd level of the files written (ingest passes
    ``[lake] compression_level``; None is Polars' default level).
    """
    lake_dir = Path(lake_dir)
    carried = list(df.columns)  # before conform adds a missing optional column as nulls
    df = conform(df, table)
    result = MergeResult(rows_in=df.height)
    if df.height == 0:
        return result
    with lake_lock(lake_dir):
        shards = lake_shards(lake_dir, shards)
        record_shards(lake_dir, shards)
        time_col = TIME_COLUMN[table]
        if table == "inventory":
            stored, updated = _upsert_inventory(partition_path(lake_dir, table), df, carried, compression_level)
            result.rows_stored += stored
            result.rows_updated += updated
            result.partitions_written += int(stored + updated > 0)
        elif time_col is None:
            stored = _merge_one(partition_path(lake_dir, table), df, table, level=compression_level).height
            result.rows_stored += stored
            result.partitions_written += int(stored > 0)
        else:
            split = split_conformed(df, table, shards, in_frame_order=record_changes)
            result = _merge_split(lake_dir, split, fast_path, deduplicated, record_changes, compression_level)
    result.duplicates_dropped = result.rows_in - result.rows_stored - result.rows_updated
    return result


def merge_split(lake_dir: Path, split: SplitRows, compression_level: int | None = None) -> MergeResult:
    """Write the rows of :func:`split_for_merge` into the lake (the caller checked them
    against the batch and the lake and logged them, under the same hold of the lock);
    ``compression_level`` as for :func:`merge_into_lake`."""
    with lake_lock(lake_dir):
        if split.rows_in:
            record_shards(Path(lake_dir), split.shards)
        with written_together():  # the partitions fsynced side by side (they are logged already)
            result = _merge_split(Path(lake_dir), split, True, True, False, compression_level)
    result.duplicates_dropped = result.rows_in - result.rows_stored - result.rows_updated
    return result


def _merge_split(
    lake_dir: Path,
    split: SplitRows,
    fast_path: bool,
    deduplicated: bool,
    record_changes: bool,
    level: int | None = None,
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
            level,
        )
        result.rows_stored += fresh.height
        result.partitions_written += int(fresh.height > 0)
        if fresh.height and record_changes:
            record_change(lake_dir, split.table, day, shard, fresh.get_column(time_col))
    return result
