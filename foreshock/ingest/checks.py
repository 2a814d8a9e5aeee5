"""The checks of staged telemetry rows: each row's own (:func:`~foreshock.ingest.validate.validate`),
then against the batch and the lake: a row whose key is stored (or earlier in the batch) with
the same values is a duplicate, with other values a conflict, quarantined (the first row
wins).  Values read from two sources for the same key agree within a tolerance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from foreshock.config import Config
from foreshock.contract import KEYS, SCHEMAS, TIME_COLUMN
from foreshock.ingest.context import IngestContext
from foreshock.ingest.validate import validate
from foreshock.lake import latest as lake_latest
from foreshock.lake.layout import lake_shards, partition_path, with_shard
from foreshock.lake.split import SplitRows, split_for_merge

# Values read from two sources for the same key (a scrape and nvidia-smi) are rounded
# differently (nvidia-smi prints power with two decimals): within this they are duplicates.
ABS_TOLERANCE = 0.005
REL_TOLERANCE = 1e-4


def check_and_split(
    table: str,
    staged: pl.DataFrame,
    ctx: IngestContext,
    config: Config,
    distinct: dict[str, pl.Series] | None = None,
) -> tuple[tuple[int, pl.DataFrame, pl.DataFrame, pl.DataFrame], SplitRows]:
    """:func:`check_shard`, then the new rows split into their partitions and sorted
    (:func:`split_for_merge`), on the same thread.  ``distinct``: distinct values of text columns
    of ``staged`` (:func:`_batch_distinct`), for the checks and the split.  The new rows
    are those of the split: in their place, their count.

    Most batches hold no stored key and repeat none: when the lake holds none of the keys
    of the rows that pass the checks, those rows are split first, and when the split finds
    no two with the same key (exactly: it sorts the whole key), they are the new rows as
    they are, with no duplicates or conflicts (what :func:`_deduplicate` finds then),
    without its search for repeated keys.  Otherwise the rows are deduplicated as ever
    (with the stored rows found here: a batch's repeated keys are among its first rows'
    keys, so the lake holds the same rows of both) and the new ones split.  When the lake
    holds none and the key packs, the split itself keeps each key's first row and names
    the others (the rows :func:`_deduplicate` would find, judged by :func:`_judge_repeats`),
    so the rows are neither searched for repeats nor split again."""
    good, bad = validate(table, staged, ctx, distinct)
    stored = _stored_rows(table, good, ctx)
    if stored is None or stored.height == 0:
        rows = good.select(lake_columns(table, good))
        split = split_for_merge(config.lake_dir, table, rows, config.shards, distinct, drop_repeats=True)
        if split.repeated is False:
            return (good.height, bad, good.head(0), good.head(0)), split
        if split.dropped is not None:  # the split kept each key's first row: judge the others
            duplicates, conflicts = _judge_repeats(table, good, *split.dropped)
            return (good.height - len(split.dropped[0]), bad, duplicates, conflicts), split
    unique, duplicates, conflicts = _deduplicate(table, good, ctx, stored)
    lake_rows = unique.select(lake_columns(table, unique))
    split = split_for_merge(config.lake_dir, table, lake_rows, config.shards, distinct)
    return (unique.height, bad, duplicates, conflicts), split


def check_shard(
    table: str, staged: pl.DataFrame, ctx: IngestContext
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``(new rows to store, rows failing a check, duplicates, conflicts)`` of staged rows."""
    good, bad = validate(table, staged, ctx)
    unique, duplicates, conflicts = _deduplicate(table, good, ctx, _stored_rows(table, good, ctx))
    return unique, bad, duplicates, conflicts


def lake_columns(table: str, frame: pl.DataFrame) -> list[str]:
    columns = list(SCHEMAS[table])
    if table == "inventory":
        columns += [c for c in frame.columns if c not in SCHEMAS[table] and not c.startswith("_")]
    return [c for c in columns if c in frame.columns]


def _value_columns(table: str) -> list[str]:
    return [c for c in SCHEMAS[table] if c not in KEYS[table]]


def _differs(table: str, left: str, right: str) -> pl.Expr:
    """True where two rows with the same key disagree on a value column."""
    checks = []
    for name in _value_columns(table):
        a, b = pl.col(f"{name}{left}"), pl.col(f"{name}{right}")
        if SCHEMAS[table][name] == pl.Float64:
            tolerance = ABS_TOLERANCE + REL_TOLERANCE * pl.max_horizontal(a.abs(), b.abs())
            checks.append((a - b).abs() > tolerance)
        else:
            checks.append(a.ne_missing(b))
    return pl.any_horizontal(checks) if checks else pl.lit(False)


def _deduplicate(
    table: str, good: pl.DataFrame, ctx: IngestContext, stored: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Split checked telemetry rows into ``(unique new rows, duplicates, conflicts)``.

    A duplicate has the key of an earlier row of the batch or of a stored row and the
    same values; a *conflict* has the key but other values: the first row (the stored
    one, else the batch's first) is kept and the conflicting one quarantined.
    ``stored``: the stored rows with the keys of ``good`` (:func:`_stored_rows`).
    """
    key = list(KEYS[table])
    values = _value_columns(table)
    # Most batches have no repeated key: find candidates by a hash of the key (sorting
    # 64-bit hashes is far cheaper than grouping by three columns), then check exactly.
    # (``hash_rows`` costs a third of hashing a struct of the key columns.)
    hashes = good.select(key).hash_rows(seed=0)
    ordered = hashes.sort()
    repeated = ordered.slice(1).filter(ordered.slice(1) == ordered.slice(0, max(ordered.len() - 1, 0))).unique()
    if repeated.len() == 0:
        firsts, later = good, good.head(0)
    else:
        indexed = good.with_row_index("_row")
        candidates = indexed.filter(hashes.is_in(repeated.implode()))
        first_rows = candidates.group_by(key).agg(pl.col("_row").min()).get_column("_row")
        later_rows = candidates.get_column("_row").filter(~candidates.get_column("_row").is_in(first_rows.implode()))
        is_later = indexed.get_column("_row").is_in(later_rows.implode())
        firsts, later = good.filter(~is_later), good.filter(is_later)
    duplicates = later.head(0)
    conflicts = later.head(0)
    if later.height:
        kept = firsts.join(later.select(key).unique(), on=key, how="semi", nulls_equal=True)
        joined = later.join(kept.select(key + values), on=key, how="left", suffix="_kept", nulls_equal=True)
        clash = _differs(table, "", "_kept")
        duplicates = joined.filter(~clash).select(later.columns)
        conflicts = _conflicts(joined.filter(clash).select(later.columns), BATCH_CONFLICT, values)
    if stored is not None and stored.height:
        joined = firsts.join(stored, on=key, how="left", suffix="_stored", nulls_equal=True)
        present = pl.col("_present").is_not_null()
        clash = present & _differs(table, "", "_stored")
        dup_lake = joined.filter(present & ~clash).select(firsts.columns)
        conflict_lake = _conflicts(joined.filter(clash).select(firsts.columns), LAKE_CONFLICT, values)
        firsts = joined.filter(~present).select(firsts.columns)
        duplicates = pl.concat([duplicates, dup_lake], how="vertical_relaxed")
        conflicts = pl.concat([conflicts, conflict_lake], how="vertical_relaxed")
    return firsts, duplicates, conflicts


BATCH_CONFLICT = "duplicate key with a different value than an earlier row of this ingest (the earlier row is kept)"
LAKE_CONFLICT = "key already stored in the lake with a different value (the stored row is kept)"


def _conflicts(rows: pl.DataFrame, reason: str, values: list[str]) -> pl.DataFrame:
    """``rows`` marked as conflicts (``reason``; the field: the table's value columns)."""
    return rows.with_columns(_reason=pl.lit(reason), _field=pl.lit(",".join(values)))


def _judge_repeats(
    table: str, good: pl.DataFrame, later: np.ndarray, first: np.ndarray
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`_deduplicate`'s duplicates and conflicts without stored rows, given which rows
    of ``good`` have the key of an earlier row (``later``, in order) and that key's first
    row (``first``): ``(later rows with the first row's values, later rows with other
    values)``.  The other rows are the split's already (not filtered out of ``good`` again)."""
    values = _value_columns(table)
    later_rows = good[later]
    kept = good.select(pl.col(values).name.suffix("_kept"))[first]
    clash = pl.concat([later_rows.select(values), kept], how="horizontal").select(_differs(table, "", "_kept"))
    clash = clash.to_series()
    duplicates = later_rows.filter(~clash)
    conflicts = _conflicts(later_rows.filter(clash), BATCH_CONFLICT, values)
    return duplicates, conflicts


def _stored_rows(table: str, rows: pl.DataFrame, ctx: IngestContext) -> pl.DataFrame | None:
    """Stored rows (key, values, ``_present``) in the partitions ``rows`` would go to."""
    if rows.height == 0:
        return None
    key = list(KEYS[table])
    wanted = key + _value_columns(table)
    time_col = TIME_COLUMN[table]
    if time_col is None:
        paths = [partition_path(ctx.lake_dir, table)]
    else:
        times = rows.get_column(time_col)
        first, last = times.min(), times.max()
        if first is not None and last is not None and first.date() == last.date():
            days = [first.date()]  # a day's rows (the date of a UTC time, as dt.date gives it)
        else:
            days = times.dt.date().unique().to_list()
        if not any((Path(ctx.lake_dir) / table / f"date={d.isoformat()}").is_dir() for d in days):
            return None  # the common first ingest of a day: nothing stored to compare with
        shards = lake_shards(ctx.lake_dir, ctx.shards)
        parts = with_shard(rows.select("unit_id", pl.col(time_col).dt.date().alias("_date")).unique(), shards)
        parts = parts.select("_date", "shard").unique()
        paths = [partition_path(ctx.lake_dir, table, d, s) for d, s in parts.iter_rows()]
        # A partition whose rows are all older than the batch's (known when this process
        # wrote it: foreshock.lake.latest) holds none of its keys: not read.
        paths = [p for p in paths if lake_latest.known_before(p, first) is None]
    paths = [p for p in paths if p.exists()]
    if not paths:
        return None
    stored = (
        pl.scan_parquet(paths)
        .select(wanted)
        .join(rows.lazy().select(key).unique(), on=key, how="semi", nulls_equal=True)
        .collect()
    )
    return stored.with_columns(_present=pl.lit(True))
