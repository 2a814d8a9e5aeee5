"""A parsed batch stored on this process's threads: table by table (inventory first), its
rows checked and merged under one hold of the lake lock.

A large batch is split into groups of whole lake shards (:func:`group_masks`, the groups
the Dask tasks use too), checked and merged side by side on ``[runner] local_workers``
threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import polars as pl

from foreshock.config import Config
from foreshock.ingest.checks import check_and_split, lake_columns
from foreshock.ingest.context import IngestContext, lake_compression_level
from foreshock.ingest.parsing import ParsedBatch, in_file_order, table_frames
from foreshock.ingest.report import FileReport
from foreshock.ingest.staged import ParsedFile, file_counts
from foreshock.ingest.staging import clear_staging
from foreshock.ingest.validate import validate
from foreshock.lake.changes import record_split
from foreshock.lake.columns import long_runs
from foreshock.lake.layout import lake_shards, shard_numbers
from foreshock.lake.locks import lake_lock, lock_held_by_caller
from foreshock.lake.merge import merge_into_lake, merge_split

# The tables of a batch in the order they are stored: inventory first (the checks of the
# others look units up in it).
TABLE_ORDER = ("inventory", "samples", "events", "failures", "drains")


def store_batch(batch: ParsedBatch, config: Config) -> list[tuple[str, pl.DataFrame]]:
    """Check and merge a batch parsed in this process, table by table, on this process's
    threads; returns the rows to quarantine by table.

    A telemetry table's staged rows are let go of as soon as its shard groups are filtered
    from them (:func:`_release_staged`): the batch no longer holds them while the groups are
    checked, split and written."""
    bad_rows = []
    for table in TABLE_ORDER:
        frames = table_frames(table, batch.parsed, batch.shared)
        if not frames:
            continue
        staged = in_file_order(frames)
        del frames
        if table == "inventory":
            bad = store_inventory(staged, batch, config)
        else:
            distinct = _batch_distinct(table, batch.parsed, batch.shared)
            held = [staged]  # the only reference left once released: _check_and_merge takes it out
            del staged
            _release_staged(table, batch)
            bad = _check_and_merge(table, held, batch.reports, config, batch.ctx, distinct)
        if bad.height:
            bad_rows.append((table, bad))
    return bad_rows


def _release_staged(table: str, batch: ParsedBatch) -> None:
    """Let go of a telemetry table's parsed rows in ``batch`` (frames of several files, and
    each file's own): once in one staged frame they are not read again (a quarantined row's
    text comes from the file's lines or its lookup, :meth:`ParsedFile.raw_text`), and a day
    batch's rows are as large as what its checks and split make of them."""
    batch.shared.pop(table, None)
    for parsed in batch.parsed.values():
        parsed.tables.pop(table, None)


def store_inventory(staged: pl.DataFrame, batch: ParsedBatch, config: Config) -> pl.DataFrame:
    """Check the batch's inventory rows and upsert the good ones; returns the failed ones."""
    good, bad = validate("inventory", staged, batch.ctx)
    _upsert_inventory(good, batch.parsed, batch.reports, config)
    return bad


def _upsert_inventory(
    good: pl.DataFrame, parsed: dict[int, ParsedFile], reports: list[FileReport], config: Config
) -> None:
    """Merge each file's checked inventory rows in turn (the batch's files are in path order).

    One merge per file, so a later export replaces what an earlier one said (exactly as if
    they had come in separate runs) and only the columns a file carries are written.  The
    counts come from the merge itself, taken under the lake lock.
    """
    for i in sorted(parsed):
        if "inventory" not in parsed[i].tables:
            continue
        rows = good.filter(pl.col("_file") == i)
        if rows.height == 0:
            continue
        columns = lake_columns("inventory", parsed[i].tables["inventory"])
        result = merge_into_lake(
            config.lake_dir,
            "inventory",
            rows.select(columns),
            shards=config.shards,
            compression_level=lake_compression_level(config),
        )
        reports[i].rows_updated += result.rows_updated
        reports[i].duplicates_dropped += result.duplicates_dropped


def _batch_distinct(
    table: str, parsed: dict[int, ParsedFile], shared: dict[str, list[pl.DataFrame]]
) -> dict[str, pl.Series]:
    """The distinct values of text columns of a table's staged rows, from those the parsers
    found (``ParsedFile.distinct``): for a column every file's parser gave, else none.  A
    frame several files share (a batch parser's) counts as its files'."""
    files = [p for p in parsed.values() if table in p.tables]
    if shared.get(table):  # rows of several files in one frame: each file's parser must give them
        sharing = {i for frame in shared[table] for i in file_counts(frame)}
        if not all(i in parsed and table in parsed[i].distinct for i in sharing):
            return {}
        files += [parsed[i] for i in sorted(sharing)]
    if not files:
        return {}
    columns = set.intersection(*(set(p.distinct.get(table, {})) for p in files))
    return {
        name: pl.concat([p.distinct[table][name] for p in files]).unique(maintain_order=True)
        for name in sorted(columns)
    }


def _check_and_merge(
    table: str,
    held: list[pl.DataFrame],
    reports: list[FileReport],
    config: Config,
    ctx: IngestContext,
    distinct: dict[str, pl.Series] | None = None,
) -> pl.DataFrame:
    """Check staged telemetry rows and merge the good ones (the stored row wins); returns
    the rows to quarantine (failed checks and conflicts).  The staged rows come in ``held``, a
    list of one frame, and are taken out of it: they are let go of once the shard groups are
    filtered from them (the caller holds no other reference).

    The comparison with the stored rows and the merge happen under one hold of the lake
    lock: a concurrent ingest of the same keys either stored its rows before (ours are
    then duplicates or conflicts, compared value by value) or after (theirs are).

    A large batch is split by the lake's unit shard and the shards are checked and merged
    side by side on ``[runner] local_workers`` threads (Polars releases the GIL).  Every
    check looks only at one unit's rows (ids, times, its counter steps, its stored keys)
    and every key holds its unit, so the split changes no outcome: the lake and the
    quarantine are those of the whole batch at once.  Two phases: all shards are checked
    and their new rows split into partitions and sorted (``split_for_merge``), the
    partitions they will change are logged (``record_split``: the lines
    ``record_stored_rows`` writes), then written.
    """
    workers = config.local_workers
    staged = held.pop()
    with lake_lock(config.lake_dir):
        clear_staging(config)  # a killed Dask driver's, whichever runner comes next
        masks = _shard_masks(staged, config, workers, distinct=(distinct or {}).get("unit_id"))
        if masks is None:
            groups = [staged]
        else:  # each group filtered on its own thread, then the whole batch let go of
            groups = _run_parallel([partial(staged.filter, mask) for mask in masks], config, workers)
        del staged, masks
        tasks = [partial(check_and_split, table, group, ctx, config, distinct) for group in groups]
        del groups
        done = _run_parallel(tasks, config, workers)
        checked = [found for found, _ in done]
        splits = [split for _, split in done]
        new_rows = [count for count, _, _, _ in checked]
        # Logged before any partition is written (a crash cannot store rows the log misses).
        record_split(config.lake_dir, splits)
        # check_shard checked the batch and the lake under this lock: written as they are.
        level = lake_compression_level(config)
        results = _run_parallel(
            [partial(merge_split, config.lake_dir, split, level) for split in splits], config, workers
        )
    for count, result in zip(new_rows, results):
        if result.rows_stored != count:  # cannot happen under the lock: fail loudly
            raise RuntimeError(f"{table}: {count} new rows checked but {result.rows_stored} stored")
    for _, _, duplicates, _ in checked:
        for i, count in file_counts(duplicates).items():
            reports[i].duplicates_dropped += count
    bad = [frame for _, found, _, conflicts in checked for frame in (found, conflicts) if frame.height]
    return pl.concat(bad, how="diagonal_relaxed") if bad else checked[0][1]


# A batch of fewer staged rows is checked and merged in one piece (threads cost more than
# they save on a few rows).  Small batches still touch many partitions (a run's last batch
# of scrapes and kernel logs: 17 k rows rewrite a day's samples partitions and the events
# of every day), each rewritten whole: split, the groups' partitions are written side by
# side (that batch 1.75 -> 1.62 s, the same CPU, five alternating pairs on one free core).
SPLIT_MIN_ROWS = 1_000


def _shard_masks(
    staged: pl.DataFrame,
    config: Config,
    workers: int,
    min_rows: int | None = None,
    distinct: pl.Series | None = None,
) -> list[pl.Series] | None:
    """Which rows of ``staged`` each group of whole lake shards holds, one group per
    worker (rows keep their order; rows without a unit form their own group); None (one
    group, all of them) when ``staged`` has fewer than ``min_rows`` rows (default
    ``SPLIT_MIN_ROWS``) or there is one worker.  A caller with threads filters each group
    on its own thread."""
    masks = group_masks(staged, config, workers, min_rows, distinct)
    return None if masks is None else list(masks.values())


def group_masks(
    staged: pl.DataFrame,
    config: Config,
    workers: int,
    min_rows: int | None = None,
    distinct: pl.Series | None = None,
) -> dict[int | None, pl.Series] | None:
    """:func:`_shard_masks` by group number: the lake shard number modulo ``workers``, the
    same whatever rows a caller holds (None: the rows without a unit), so parts of a batch
    split apart (``parse`` tasks' runs of files) fall into the same groups."""
    min_rows = SPLIT_MIN_ROWS if min_rows is None else min_rows
    if workers < 2 or staged.height < max(min_rows, 1):
        return None
    shards = lake_shards(config.lake_dir, config.shards)
    # One group per worker (shard number modulo workers; crc32 spreads units evenly): fewer,
    # larger pieces cost less per-call overhead than one piece per shard.  Shard numbers are
    # computed once per distinct unit or per run of one unit (shard_numbers).
    # Groups in order of their first rows, as partition_by gives them; a filter each costs
    # less than it.
    # When the units come in long runs (a file lists a unit's readings together), the
    # groups are found per run and the masks repeated along the runs.
    units = staged.get_column("unit_id").cast(pl.String)
    runs = long_runs(units)
    numbers = shard_numbers(units if runs is None else runs[0], shards, distinct) % workers
    masks = {
        number: numbers.is_null() if number is None else (numbers == number).fill_null(False)
        for number in numbers.unique(maintain_order=True).to_list()
    }
    if runs is None:
        return masks
    return {number: pl.Series(np.repeat(mask.to_numpy(), runs[1])) for number, mask in masks.items()}


def _run_parallel(calls: list, config: Config, workers: int) -> list:
    """``[call() for call in calls]``, on ``workers`` threads when there are several calls.
    The caller holds the lake lock and waits: the threads act under it."""
    if len(calls) == 1 or workers < 2:
        return [call() for call in calls]

    def under_lock(call):
        with lock_held_by_caller(config.lake_dir):
            return call()

    with ThreadPoolExecutor(max_workers=min(workers, len(calls))) as pool:
        return list(pool.map(under_lock, calls))
