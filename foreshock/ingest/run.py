"""Ingest a landing path into the lake: plan the files, then parse, check and merge batches.

``ingest_path`` does everything in one call; the Prefect flow calls ``plan_ingest`` and
then ``ingest_batch`` once per batch (one task each), passing paths, never frames.

Batches: inventory files first (units are resolved and checked against the inventory),
then files grouped by the day in their path (``nvidia-smi/<node>/2026-11-01.csv``,
``dcgm/2026-11-01/...``) so each merge rewrites only that day's partitions, then the files
without a day (scrapes, kernel logs, tickets).  A batch is capped in bytes to bound memory.
Files of a format with a batch parser (nvidia-smi: a node's file per day) are parsed
together, one frame for the batch instead of one per file.

Accounting, per file: ``rows_read = rows_stored + rows_updated + rows_quarantined +
duplicates_dropped``.  Telemetry is append-only: a row whose key is stored with other values
is quarantined as a conflict.  Inventory is an upsert: each file is merged in turn (path
order), and a row that changes its unit (a replaced GPU's new uuid) replaces the stored row
and counts as updated; an identical row is a duplicate.

Where the parse, check and merge run: by default on ``[runner] local_workers`` threads of
this process.  Given :class:`GroupTasks` (the flow passes them on the Dask runner), the
batch's telemetry files are parsed by ``parse`` steps of ``GROUP_STEPS`` called elsewhere
(Dask workers), in runs of consecutive files, each writing its rows by shard group to
Parquet files under ``<data>/staging/ingest/``; each group's rows are then checked and
merged by ``check`` and ``merge`` steps.  Steps take and return paths and counts; this
process parses the inventory files itself, holds the lake lock throughout and hands its
token to the merges (:func:`_store_as_tasks`).  The workers open the landing files at the
paths this process would (absolute), so the landing directory, like the data directory,
must be on a file system they share with it, at the same path.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl
import yaml

from foreshock.catalog import (
    Catalog,
    catalog_to_dict,
    lake_catalog_path,
    load_catalog,
    merge_catalogs,
    parse_catalog,
    read_lake_catalog,
)
from foreshock.config import Config
from foreshock.contract import KEYS, SCHEMAS, TIME_COLUMN
from foreshock.ingest import manifest
from foreshock.ingest.context import IngestContext
from foreshock.ingest.csv_table import read_csv_header
from foreshock.ingest.detect import detect_format, skip_reason
from foreshock.ingest.parsers import BATCH_PARSERS, FORMATS, LAKE_FREE_FORMATS, PARSE_AHEAD_FORMATS, PARSERS
from foreshock.ingest.parsers.canonical import table_of
from foreshock.ingest.report import FileReport, IngestReport
from foreshock.ingest.staged import ParsedFile, UnreadableFile
from foreshock.ingest.validate import validate
from foreshock.lake import latest as lake_latest
from foreshock.lake.atomic import atomic_write_parquet, atomic_write_text
from foreshock.lake.changes import record_split, record_stored_rows
from foreshock.lake.columns import long_runs
from foreshock.lake.layout import lake_shards, partition_path, shard_numbers, with_shard
from foreshock.lake.locks import lake_lock, lock_held_by_caller, lock_held_by_token, lock_token
from foreshock.lake.merge import merge_into_lake, merge_split
from foreshock.lake.read import read_table
from foreshock.lake.split import SplitRows, split_for_merge

SOURCES = ("auto", *FORMATS)
MAX_BATCH_BYTES = 256 * 1024 * 1024
DETECT_BYTES = 65536
DAY_IN_PATH = re.compile(r"(\d{4}-\d{2}-\d{2})")
# Values read from two sources for the same key (a scrape and nvidia-smi) are rounded
# differently (nvidia-smi prints power with two decimals): within this they are duplicates.
ABS_TOLERANCE = 0.005
REL_TOLERANCE = 1e-4
QUARANTINE_SCHEMA = {
    "source_file": pl.String,
    "line": pl.Int64,
    "table": pl.String,
    "field": pl.String,
    "reason": pl.String,
    "raw": pl.String,
    "run_id": pl.String,
}


@dataclass
class PlannedFile:
    """A file the run will read (plain values: it crosses Prefect task boundaries)."""

    path: str
    format: str
    sha256: str
    size: int
    mtime_ns: int
    context: str
    day: str | None = None
    inventory: bool = False
    # The name's bytes (hex): ``path`` is the readable text form (see manifest.shown_name).
    path_hex: str = ""

    def open_path(self) -> Path:
        return manifest.path_from_bytes(bytes.fromhex(self.path_hex)) if self.path_hex else Path(self.path)


@dataclass
class IngestPlan:
    run_id: str
    root: str
    source: str
    batches: list[list[PlannedFile]] = field(default_factory=list)
    reports: list[FileReport] = field(default_factory=list)
    catalog_path: str | None = None
    notes: list[str] = field(default_factory=list)

    def after(self, number: int) -> list[PlannedFile] | None:
        """The batch after batch ``number`` (what ``ingest_batch`` may parse ahead), or None."""
        return self.batches[number + 1] if number + 1 < len(self.batches) else None


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-{os.getpid()}"


def parse_scrape_time(text: str | None) -> datetime | None:
    """``--scrape-time`` (ISO 8601 with ``Z`` or an offset) as an aware UTC datetime."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--scrape-time {text!r}: not an ISO 8601 time (e.g. 2026-11-30T23:50:00Z)") from None
    if value.tzinfo is None:
        raise ValueError(f"--scrape-time {text!r}: give a UTC offset or Z")
    return value.astimezone(UTC)


def load_run_catalog(config: Config, catalog_path: str | None) -> Catalog:
    """The configured catalog, with a landing directory's ``catalog.yaml`` merged over it."""
    if not catalog_path:
        return config.catalog
    extra = load_catalog(catalog_path)
    return Catalog(
        metrics={**config.catalog.metrics, **extra.metrics}, source=f"{config.catalog.source} + {catalog_path}"
    )


def _unreadable_reason(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(DETECT_BYTES)  # a bounded prefix: a 3 GB file is not read whole
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    if not data.strip():
        return "empty file" if len(data) < DETECT_BYTES else "unrecognised format (starts with blank space)"
    if b"\x00" in data:
        return "binary content, not a recognised format"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 4:
            return f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
    return "unrecognised format (use --source to name it)"


def landing_files(root: Path, follow_symlinks: bool) -> tuple[list[Path], list[Path]]:
    """``(files, symlinks)`` under ``root``, sorted; symbolic links are listed apart and
    not followed (into directories either) unless ``follow_symlinks``."""
    if root.is_file():
        return [root], []
    files, links = [], []
    seen: set[tuple[int, int]] = set()
    for directory, dirs, names in os.walk(root, followlinks=follow_symlinks):
        info = os.stat(directory)
        if (info.st_dev, info.st_ino) in seen:  # a link loop
            dirs[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        for name in [*names, *(d for d in dirs if not follow_symlinks)]:
            path = Path(directory) / name
            if path.is_symlink() and not follow_symlinks:
                links.append(path)
            elif name in names and path.is_file():
                files.append(path)
    return sorted(files), sorted(links)


def _is_inventory(path: Path, fmt: str) -> bool:
    if fmt != "canonical":
        return False
    if path.suffix.lower() == ".parquet":
        try:
            columns = list(pl.read_parquet_schema(path))
        except Exception:  # a broken file is reported when it is parsed
            return path.stem.lower().startswith("inventory")
    else:
        columns = read_csv_header(path) or []
    return table_of(path, columns) == "inventory"


def plan_ingest(
    path: str | Path,
    config: Config,
    source: str = "auto",
    *,
    force: bool = False,
    run_id: str | None = None,
    max_batch_bytes: int = MAX_BATCH_BYTES,
    follow_symlinks: bool = False,
) -> IngestPlan:
    """Find, recognise and batch the files under ``path`` that are not ingested yet.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    ValueError
        When ``source`` is not a known format.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r}: choose one of {', '.join(SOURCES)}")
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"ingest path not found: {root}")
    plan = IngestPlan(run_id=run_id or new_run_id(), root=str(root), source=source)
    candidates, links = landing_files(root, follow_symlinks)
    for link in links:
        reason = "symbolic link, not followed (use --follow-symlinks to read what it points to)"
        plan.reports.append(FileReport(manifest.shown_name(link), None, "skipped", reason=reason))
    if root.is_dir():
        for name in ("catalog.yaml", "catalog.yml"):
            if (root / name).is_file():
                plan.catalog_path = str((root / name).resolve())
                plan.notes.append(f"using metric catalog {root / name} (merged over {config.catalog.source})")
    recorded = manifest.read_manifest(config.lake_dir) if not force else pl.DataFrame(schema=manifest.SCHEMA)
    seen = set(zip(recorded.get_column("sha256").to_list(), recorded.get_column("context").to_list()))
    # Same path, size and mtime as an ingested file: unchanged, no need to read it to hash it.
    unchanged = set(
        zip(
            recorded.get_column("path").to_list(),
            recorded.get_column("size").to_list(),
            recorded.get_column("mtime_ns").to_list(),
        )
    )
    in_run: dict[tuple[str, str], str] = {}
    planned: list[PlannedFile] = []
    for file in candidates:
        shown = manifest.shown_name(file)
        try:
            raw_name = manifest.name_bytes(file)
        except ValueError as exc:  # rejected before any row is merged
            plan.reports.append(FileReport(shown, None, "rejected", reason=str(exc)))
            continue
        reason = skip_reason(file)
        if reason:
            plan.reports.append(FileReport(shown, None, "skipped", reason=reason))
            continue
        fmt = source if source != "auto" else detect_format(file)
        if fmt is None:
            plan.reports.append(FileReport(shown, None, "rejected", reason=_unreadable_reason(file)))
            continue
        stat = file.stat()
        if (shown, stat.st_size, stat.st_mtime_ns) in unchanged:
            plan.reports.append(FileReport(shown, fmt, "already ingested"))
            continue
        digest = manifest.file_sha256(file)
        context = manifest.file_context(file, fmt)
        key = (digest, context)
        if key in seen:
            plan.reports.append(FileReport(shown, fmt, "already ingested"))
            continue
        if key in in_run:
            plan.reports.append(FileReport(shown, fmt, "already ingested", reason=f"same content as {in_run[key]}"))
            continue
        in_run[key] = shown
        relative = file.relative_to(root) if root.is_dir() else Path(file.name)
        day = DAY_IN_PATH.search(manifest.shown_name(relative))
        planned.append(
            PlannedFile(
                path=shown,
                format=fmt,
                sha256=digest,
                size=stat.st_size,
                mtime_ns=stat.st_mtime_ns,
                context=context,
                day=day.group(1) if day else None,
                inventory=_is_inventory(file, fmt),
                path_hex=raw_name.hex(),
            )
        )
    plan.batches = _batches(planned, max_batch_bytes)
    return plan


def _batches(files: list[PlannedFile], max_bytes: int) -> list[list[PlannedFile]]:
    inventory = [f for f in files if f.inventory]
    rest = [f for f in files if not f.inventory]
    groups: dict[str | None, list[PlannedFile]] = {}
    for f in rest:
        groups.setdefault(f.day, []).append(f)
    order = sorted(k for k in groups if k is not None) + ([None] if None in groups else [])
    batches = [inventory] if inventory else []
    for day in order:
        batch: list[PlannedFile] = []
        size = 0
        for f in groups[day]:
            if batch and size + f.size > max_bytes:
                batches.append(batch)
                batch, size = [], 0
            batch.append(f)
            size += f.size
        if batch:
            batches.append(batch)
    return batches


@dataclass
class GroupTasks:
    """Runs a batch's steps (the parse of a run of files, a shard group's check or merge)
    as tasks of another runner (the Prefect flow on Dask gives one): ``run(step, jobs)``
    calls ``GROUP_STEPS[step](job)`` for each job, in processes that see the data and
    landing directories, and returns the results in job order once *every* job has ended
    (then raising the first failure: none may still be working when the lake lock is let
    go).  Jobs and results are plain values: paths, counts, settings."""

    run: Callable[[str, list[dict]], list[dict]]
    settings: dict


def ingest_batch(
    files: list[PlannedFile],
    config: Config,
    *,
    run_id: str,
    batch_number: int = 0,
    catalog_path: str | None = None,
    timezone_name: str | None = None,
    scrape_time: datetime | None = None,
    tasks: GroupTasks | None = None,
    next_files: list[PlannedFile] | None = None,
) -> tuple[list[FileReport], str | None]:
    """Parse, check and merge one batch; record its files in the manifest.

    Returns the batch's file reports and the quarantine file written (or None).  An
    ``OSError`` propagates (the flow retries the batch); a file that cannot be parsed is
    reported as rejected and the others go on.  ``tasks``: parse the telemetry files and
    check and merge the shard groups as those tasks (see :func:`_store_as_tasks`) instead
    of on threads.
    ``next_files``: the run's next batch, parsed on a thread of this process while this
    one is checked and merged (:func:`_prefetch`; not on Dask, nor with ``[ingest]
    parse_ahead = false``, nor when ``files`` store an inventory that ``next_files``'
    parsers read: :func:`_may_parse_ahead`).
    """
    if tasks is not None:
        # The inventory files here (their rows are upserted here), the others on the workers.
        inventory = [i for i, f in enumerate(files) if f.inventory]
        parsed_batch = _parse_stage(files, config, catalog_path, timezone_name, scrape_time, inventory)
        name = f"{run_id}-b{batch_number:04d}"
        bad_rows = _store_as_tasks(files, parsed_batch, config, tasks, name)
    else:
        parsed_batch = _take_prefetched(run_id, batch_number, files)
        if parsed_batch is None:
            parsed_batch = _parse_stage(files, config, catalog_path, timezone_name, scrape_time)
        ahead = next_files and config.section("ingest")["parse_ahead"]
        if ahead and _may_parse_ahead(files, next_files):
            stale = any(f.inventory for f in files)  # the next batch's checks need the inventory stored now
            _prefetch(run_id, batch_number + 1, next_files, config, catalog_path, timezone_name, scrape_time, stale)
        bad_rows = _store(parsed_batch, config)
    ctx, reports, parsed = parsed_batch.ctx, parsed_batch.reports, parsed_batch.parsed

    for _, bad in bad_rows:
        for i, count in _count_by_file(bad).items():
            reports[i].rows_quarantined += count
    # Files parsed on the workers are parsed again here for their quarantined rows' text.
    sources = {**parsed, **_parse_again(files, bad_rows, parsed, ctx, config)}
    quarantined = [
        _quarantine_rows(sources[i], files[i].path, part, table, run_id)
        for table, bad in bad_rows
        for (i,), part in bad.group_by("_file")
    ]
    for report in reports:
        if report.status == "ingested":
            report.rows_stored = (
                report.rows_read - report.rows_quarantined - report.duplicates_dropped - report.rows_updated
            )

    if any(r.status == "ingested" for r in reports):  # a file was parsed (here or on a worker)
        record_catalog(config.lake_dir, ctx.catalog)
    quarantine_file = None
    if quarantined:
        target = config.quarantine_dir / f"run={run_id}" / f"batch-{batch_number:04d}.parquet"
        atomic_write_parquet(pl.concat(quarantined).sort("source_file", "line"), target)
        quarantine_file = str(target)
    manifest.record_files(
        config.lake_dir,
        [
            {
                "path": f.path,
                "context": f.context,
                "sha256": f.sha256,
                "size": f.size,
                "mtime_ns": f.mtime_ns,
                "format": f.format,
                "rows_read": r.rows_read,
                "rows_stored": r.rows_stored,
                "rows_quarantined": r.rows_quarantined,
                "duplicates_dropped": r.duplicates_dropped,
                "rows_updated": r.rows_updated,
                "run_id": run_id,
                "path_bytes": bytes.fromhex(f.path_hex) if f.path_hex else manifest.name_bytes(f.path),
            }
            for f, r in zip(files, reports)
            if r.status == "ingested"
        ],
    )
    return reports, quarantine_file


# The tables of a batch in the order they are stored: inventory first (the checks of the
# others look units up in it).
TABLE_ORDER = ("inventory", "samples", "events", "failures", "drains")


def _store(batch: ParsedBatch, config: Config) -> list[tuple[str, pl.DataFrame]]:
    """Check and merge a batch parsed in this process, table by table, on this process's
    threads; returns the rows to quarantine by table."""
    bad_rows = []
    for table in TABLE_ORDER:
        frames = _table_frames(table, batch.parsed, batch.shared)
        if not frames:
            continue
        staged = _in_file_order(frames)
        if table == "inventory":
            bad = _store_inventory(staged, batch, config)
        else:
            distinct = _batch_distinct(table, batch.parsed, batch.shared)
            bad = _check_and_merge(table, staged, batch.reports, config, batch.ctx, distinct)
        if bad.height:
            bad_rows.append((table, bad))
    return bad_rows


def _store_inventory(staged: pl.DataFrame, batch: ParsedBatch, config: Config) -> pl.DataFrame:
    """Check the batch's inventory rows and upsert the good ones; returns the failed ones."""
    good, bad = validate("inventory", staged, batch.ctx)
    _upsert_inventory(good, batch.parsed, batch.reports, config)
    return bad


def _parse_again(
    files: list[PlannedFile],
    bad_rows: list[tuple[str, pl.DataFrame]],
    parsed: dict[int, ParsedFile],
    ctx: IngestContext,
    config: Config,
) -> dict[int, ParsedFile]:
    """The files with quarantined rows that were not parsed in this process (but by
    ``parse`` tasks), parsed here: the quarantine shows each row's raw text, which only
    the parsed file knows (:meth:`ParsedFile.raw_text`).  Usually none."""
    missing = sorted({i for _, bad in bad_rows for i in _count_by_file(bad)} - set(parsed))
    if not missing:
        return {}
    outcomes, _ = _parse_batch([files[i] for i in missing], ctx, config.local_workers, missing)
    for i in missing:
        if not isinstance(outcomes[i], ParsedFile):  # a worker parsed it: it differs here
            raise RuntimeError(
                f"{files[i].path}: parsed by a task but not in this process ({outcomes[i]}); "
                "is the landing directory on a file system both see, at the same path?"
            )
    return outcomes


@dataclass
class ParsedBatch:
    """A batch after parsing: its context, file reports, parsed files and shared frames."""

    ctx: IngestContext
    reports: list[FileReport]
    parsed: dict[int, ParsedFile]
    shared: dict[str, list[pl.DataFrame]]


def _parse_stage(
    files: list[PlannedFile],
    config: Config,
    catalog_path: str | None,
    timezone_name: str | None,
    scrape_time: datetime | None,
    indices: list[int] | None = None,
) -> ParsedBatch:
    """A batch's context (with the lake's inventory as it is now) and its files parsed;
    only the files ``indices`` lists, if given (the others are parsed by ``parse`` tasks,
    which fill in their reports)."""
    ctx = IngestContext.from_config(
        config, catalog=load_run_catalog(config, catalog_path), timezone_name=timezone_name, scrape_time=scrape_time
    )
    reports = [FileReport(f.path, f.format, "ingested") for f in files]
    if indices is None:
        indices = list(range(len(files)))
    outcomes, shared = _parse_batch([files[i] for i in indices], ctx, config.local_workers, indices)
    parsed: dict[int, ParsedFile] = {}
    for index in indices:
        outcome = _report_outcome(reports[index], outcomes[index])
        if outcome is not None:
            parsed[index] = outcome
    return ParsedBatch(ctx, reports, parsed, shared)


def _report_outcome(report: FileReport, outcome: ParsedFile | Exception) -> ParsedFile | None:
    """A file's parse entered in its report (rejected and why, or its rows read and the
    parser's notes); the parsed file, or None when it was rejected."""
    if isinstance(outcome, UnreadableFile):
        report.status, report.reason = "rejected", str(outcome)
        return None
    if isinstance(outcome, Exception):  # a parser bug must not stop the other files
        first = str(outcome).splitlines()[0][:200] if str(outcome) else ""
        report.status, report.reason = "rejected", f"{type(outcome).__name__}: {first}"
        return None
    report.rows_read = outcome.rows
    if outcome.notes:
        report.reason = "; ".join(outcome.notes)
    return outcome


# The next batch of a run, parsed ahead on a thread while the current one is checked and
# merged (at most one: starting one drops any other).  Keyed by run, batch number and the
# files' contents, so only the call for exactly those files takes it; with whether it was
# parsed while the batch before stored an inventory.
_prefetched: dict[tuple, tuple[Future, bool]] = {}
_prefetch_lock = threading.Lock()


def _may_parse_ahead(files: list[PlannedFile], next_files: list[PlannedFile]) -> bool:
    """Whether ``next_files`` parse the same before and after ``files`` are stored: their
    parsers read nothing of the lake, or this batch changes no inventory and their parsers
    read nothing else of the lake."""
    if all(f.format in LAKE_FREE_FORMATS for f in next_files):
        return True
    return not any(f.inventory for f in files) and all(f.format in PARSE_AHEAD_FORMATS for f in next_files)


def _prefetch_key(run_id: str, batch_number: int, files: list[PlannedFile]) -> tuple:
    return (run_id, batch_number, tuple((f.path_hex or f.path, f.sha256) for f in files))


def _prefetch(
    run_id: str,
    batch_number: int,
    files: list[PlannedFile],
    config: Config,
    catalog_path: str | None,
    timezone_name: str | None,
    scrape_time: datetime | None,
    stale_inventory: bool = False,
) -> None:
    """Start parsing ``files`` (batch ``batch_number`` of the run) on a thread.

    Only for batches :func:`_may_parse_ahead` allows: their parsers read nothing of the
    lake but an inventory no batch changes meanwhile, or nothing at all; the checks that
    read stored telemetry (counter steps) run in the batch's own turn.
    ``stale_inventory``: the batch before stores an inventory while this one is parsed,
    so the taker reads it again for the checks.  An error (``OSError``) is raised by the
    call that takes the batch, as if it had parsed it itself.  The memory of one more
    parsed batch is the price.
    """
    future: Future = Future()
    with _prefetch_lock:
        _prefetched.clear()
        _prefetched[_prefetch_key(run_id, batch_number, files)] = (future, stale_inventory)

    def parse() -> None:
        try:
            future.set_result(_parse_stage(files, config, catalog_path, timezone_name, scrape_time))
        except BaseException as exc:  # noqa: BLE001 - raised again by the taker
            future.set_exception(exc)

    threading.Thread(target=parse, name=f"ingest-prefetch-{batch_number}", daemon=True).start()


def _take_prefetched(run_id: str, batch_number: int, files: list[PlannedFile]) -> ParsedBatch | None:
    """The batch parsed ahead for exactly these files, or None.  Parsed while the batch
    before stored an inventory, its context gets the inventory stored now (the checks read
    it; its parse did not, see :func:`_may_parse_ahead`)."""
    with _prefetch_lock:
        entry = _prefetched.pop(_prefetch_key(run_id, batch_number, files), None)
    if entry is None:
        return None
    future, stale_inventory = entry
    batch = future.result()
    if stale_inventory:
        batch.ctx = replace(batch.ctx, inventory=read_table(batch.ctx.lake_dir, "inventory"), _lookups={})
    return batch


def drop_prefetched() -> None:
    """Forget a batch parsed ahead that no call took (a run that stopped early)."""
    with _prefetch_lock:
        _prefetched.clear()


def _parse_batch(
    files: list[PlannedFile], ctx: IngestContext, workers: int = 1, indices: list[int] | None = None
) -> tuple[dict[int, ParsedFile | Exception], dict[str, list[pl.DataFrame]]]:
    """Parse a batch's files: ``(per file index a ParsedFile or the error that rejects the
    file, frames staged for several files at once by table, with ``_file``)``.
    ``indices``: the index in the batch of each of ``files`` when they are some of its
    files (a ``parse`` task's run, the driver's share); by default their positions.

    Files of a format in ``BATCH_PARSERS`` are parsed together (one frame per header
    instead of one per file), in ``workers`` runs of consecutive files; the others one by
    one.  With several workers these parses run side by side on threads (a file-by-file
    parser in Python beside Polars work that releases the GIL); parsers only read the lake.
    ``OSError`` propagates (the flow retries the batch).
    """
    by_index = dict(zip(range(len(files)) if indices is None else indices, files, strict=True))
    outcomes: dict[int, ParsedFile | Exception] = {}
    shared: dict[str, list[pl.DataFrame]] = {}
    together: dict[str, list[int]] = {}
    single: list[int] = []
    for index, planned in by_index.items():
        if planned.format in BATCH_PARSERS:
            together.setdefault(planned.format, []).append(index)
        else:
            single.append(index)

    def parse_one(index: int) -> None:
        try:
            outcomes[index] = PARSERS[by_index[index].format](by_index[index].open_path(), ctx)
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as the file's rejection
            outcomes[index] = exc

    def parse_together(fmt: str, run_indices: list[int]) -> list[pl.DataFrame]:
        results, frames = BATCH_PARSERS[fmt]([by_index[i].open_path() for i in run_indices], run_indices, ctx)
        outcomes.update(results)
        return frames

    runs = []
    for fmt, indices_of_format in together.items():
        count = max(1, min(workers, len(indices_of_format) // BATCH_PARSE_MIN_FILES))
        size = -(-len(indices_of_format) // count)
        runs += [(fmt, indices_of_format[k : k + size]) for k in range(0, len(indices_of_format), size)]
    if workers < 2 or len(runs) + len(single) < 2:
        for index in single:
            parse_one(index)
        staged = [(fmt, parse_together(fmt, run_indices)) for fmt, run_indices in runs]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            pending = [(fmt, pool.submit(parse_together, fmt, run_indices)) for fmt, run_indices in runs]
            singles = [pool.submit(parse_one, index) for index in single]
            staged = [(fmt, future.result()) for fmt, future in pending]
            for future in singles:
                future.result()
    for _, frames in staged:
        shared.setdefault("samples", []).extend(frames)
    return outcomes, shared


# A format's batch parse is split into runs of at least this many files (one per worker).
BATCH_PARSE_MIN_FILES = 8


def _table_frames(
    table: str, parsed: dict[int, ParsedFile], shared: dict[str, list[pl.DataFrame]]
) -> list[pl.DataFrame]:
    """A table's staged frames of parsed files, each row with its file's index (``_file``),
    for :func:`_in_file_order`."""
    frames = [
        p.tables[table].with_columns(_file=pl.lit(i, dtype=pl.Int32)) for i, p in parsed.items() if table in p.tables
    ]
    return frames + shared.get(table, [])


def _in_file_order(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The staged frames as one, with rows of the same key in file order (the first is
    the one kept).  Frames covering disjoint ranges of files are concatenated in range
    order; a frame of several files lists each metric's rows file by file, so frames
    whose ranges interleave are sorted by file (stably)."""
    if len(frames) == 1:
        return frames[0]
    filled = [frame for frame in frames if frame.height]
    ranges = sorted(
        ((frame.get_column("_file").min(), frame.get_column("_file").max()), k) for k, frame in enumerate(filled)
    )
    staged = pl.concat(
        [filled[k] for _, k in ranges] + [frame for frame in frames if not frame.height], how="diagonal_relaxed"
    )
    if any(first[0][1] >= second[0][0] for first, second in zip(ranges, ranges[1:])):
        staged = staged.sort("_file", maintain_order=True)
    return staged


def record_catalog(lake_dir: Path, catalog: Catalog) -> None:
    """Merge the run's metric catalog into the one the lake records (``_catalog.yaml``), so
    later stages know every metric the lake holds without being told the file again."""
    with lake_lock(lake_dir):
        recorded = _recorded_catalog(lake_dir)
        merged = catalog if recorded is None else merge_catalogs(recorded, catalog)
        if recorded is None or catalog_to_dict(merged) != catalog_to_dict(recorded):
            text = yaml.safe_dump(catalog_to_dict(merged), sort_keys=True, allow_unicode=True)
            atomic_write_text(
                lake_catalog_path(lake_dir), "# written by foreshock ingest: the lake's metric catalog\n" + text
            )


# The lake catalog last read, by path, with its text: a run parses it once, not once per
# batch, while its text stays the same (reading 5 KB costs little; parsing YAML does not).
_read_catalogs: dict[str, tuple[str, Catalog]] = {}


def _recorded_catalog(lake_dir: Path) -> Catalog | None:
    """``read_lake_catalog(lake_dir)``, parsed again only when the file's text changed."""
    path = lake_catalog_path(lake_dir)
    try:
        text = path.read_text()
    except (FileNotFoundError, IsADirectoryError):
        return read_lake_catalog(lake_dir)
    cached = _read_catalogs.get(str(path))
    if cached is not None and cached[0] == text:
        return cached[1]
    recorded = read_lake_catalog(lake_dir)
    if recorded is not None:
        _read_catalogs[str(path)] = (text, recorded)
    return recorded


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
        columns = _lake_columns("inventory", parsed[i].tables["inventory"])
        result = merge_into_lake(config.lake_dir, "inventory", rows.select(columns), shards=config.shards)
        reports[i].rows_updated += result.rows_updated
        reports[i].duplicates_dropped += result.duplicates_dropped


def _batch_distinct(
    table: str, parsed: dict[int, ParsedFile], shared: dict[str, list[pl.DataFrame]]
) -> dict[str, pl.Series]:
    """The distinct values of text columns of a table's staged rows, from those the parsers
    found (``ParsedFile.distinct``): for a column every file's parser gave, else none."""
    files = [p for p in parsed.values() if table in p.tables]
    if not files or shared.get(table):
        return {}
    columns = set.intersection(*(set(p.distinct.get(table, {})) for p in files))
    return {
        name: pl.concat([p.distinct[table][name] for p in files]).unique(maintain_order=True)
        for name in sorted(columns)
    }


def _check_and_merge(
    table: str,
    staged: pl.DataFrame,
    reports: list[FileReport],
    config: Config,
    ctx: IngestContext,
    distinct: dict[str, pl.Series] | None = None,
) -> pl.DataFrame:
    """Check staged telemetry rows and merge the good ones (the stored row wins); returns
    the rows to quarantine (failed checks and conflicts).

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
    with lake_lock(config.lake_dir):
        _clear_staging(config)  # a killed Dask driver's, whichever runner comes next
        masks = _shard_masks(staged, config, workers)
        done = _run_parallel(
            [partial(_check_and_split, table, staged, ctx, config, mask, distinct) for mask in masks or [None]],
            config,
            workers,
        )
        checked = [found for found, _ in done]
        splits = [split for _, split in done]
        unique = [rows for rows, _, _, _ in checked]
        # Logged before any partition is written (a crash cannot store rows the log misses).
        record_split(config.lake_dir, splits)
        # _check_shard checked the batch and the lake under this lock: written as they are.
        results = _run_parallel([partial(merge_split, config.lake_dir, split) for split in splits], config, workers)
    for rows, result in zip(unique, results):
        if result.rows_stored != rows.height:  # cannot happen under the lock: fail loudly
            raise RuntimeError(f"{table}: {rows.height} new rows checked but {result.rows_stored} stored")
    for _, _, duplicates, _ in checked:
        for i, count in _count_by_file(duplicates).items():
            reports[i].duplicates_dropped += count
    bad = [frame for _, found, _, conflicts in checked for frame in (found, conflicts) if frame.height]
    return pl.concat(bad, how="diagonal_relaxed") if bad else checked[0][1]


# A batch of fewer staged rows is checked and merged in one piece (threads cost more than
# they save on small frames).
SPLIT_MIN_ROWS = 200_000


def _shard_masks(
    staged: pl.DataFrame, config: Config, workers: int, min_rows: int | None = None
) -> list[pl.Series] | None:
    """Which rows of ``staged`` each group of whole lake shards holds, one group per
    worker (rows keep their order; rows without a unit form their own group); None (one
    group, all of them) when ``staged`` has fewer than ``min_rows`` rows (default
    ``SPLIT_MIN_ROWS``) or there is one worker.  A caller with threads filters each group
    on its own thread."""
    masks = _group_masks(staged, config, workers, min_rows)
    return None if masks is None else list(masks.values())


def _group_masks(
    staged: pl.DataFrame, config: Config, workers: int, min_rows: int | None = None
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
    numbers = shard_numbers(units if runs is None else runs[0], shards) % workers
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


def _check_and_split(
    table: str,
    staged: pl.DataFrame,
    ctx: IngestContext,
    config: Config,
    mask: pl.Series | None = None,
    distinct: dict[str, pl.Series] | None = None,
) -> tuple[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame], SplitRows]:
    """:func:`_check_shard`, then the new rows split into their partitions and sorted
    (:func:`split_for_merge`), on the same thread; of the rows ``mask`` selects, if given
    (the filter runs on this thread too).  ``distinct``: distinct values of text columns
    of ``staged`` (:func:`_batch_distinct`), for the checks and the split.

    Most batches hold no stored key and repeat none: when the lake holds none of the keys
    of the rows that pass the checks, those rows are split first, and when the split finds
    no two with the same key (exactly: it sorts the whole key), they are the new rows as
    they are, with no duplicates or conflicts (what :func:`_deduplicate` finds then),
    without its search for repeated keys.  Otherwise the rows are deduplicated as ever
    (with the stored rows found here: a batch's repeated keys are among its first rows'
    keys, so the lake holds the same rows of both) and the new ones split."""
    if mask is not None:
        staged = staged.filter(mask)
    good, bad = validate(table, staged, ctx, distinct)
    stored = _stored_rows(table, good, ctx)
    if stored is None or stored.height == 0:
        rows = good.select(_lake_columns(table, good))
        split = split_for_merge(config.lake_dir, table, rows, config.shards, distinct)
        if split.repeated is False:
            return (good, bad, good.head(0), good.head(0)), split
    unique, duplicates, conflicts = _deduplicate(table, good, ctx, stored)
    lake_rows = unique.select(_lake_columns(table, unique))
    split = split_for_merge(config.lake_dir, table, lake_rows, config.shards, distinct)
    return (unique, bad, duplicates, conflicts), split


def _check_shard(
    table: str, staged: pl.DataFrame, ctx: IngestContext
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``(new rows to store, rows failing a check, duplicates, conflicts)`` of staged rows."""
    good, bad = validate(table, staged, ctx)
    unique, duplicates, conflicts = _deduplicate(table, good, ctx, _stored_rows(table, good, ctx))
    return unique, bad, duplicates, conflicts


# With GroupTasks, a batch's rows are split into one group per this many rows (at most one
# per lake shard): a task costs a Parquet write and read and the scheduler's round trip,
# more than a thread.  The groups are chosen before the rows are parsed (every ``parse``
# task splits its rows into the same groups), so the rows are guessed from the files' bytes:
# an nvidia-smi line of ~250 bytes holds 13 samples, a Prometheus JSON sample ~20 bytes.
TASK_GROUP_MIN_ROWS = 100_000
LANDING_BYTES_PER_ROW = 20
# A ``parse`` task takes a run of consecutive files of about this many bytes, or this many
# files (a 256 MB batch in about 16 tasks; many small files in tasks of 64, where
# nvidia-smi's batch parser still reads many files as one frame).
TASK_PARSE_BYTES = 16 * 1024 * 1024
TASK_PARSE_FILES = 64
STAGING_PARQUET = {"compression": "lz4", "statistics": False}


def staging_root(config: Config) -> Path:
    """Where a batch's parsed rows are staged for :class:`GroupTasks`: a directory per
    batch, made and removed while the driver holds the lake lock."""
    return config.data_dir / "staging" / "ingest"


def _clear_staging(config: Config) -> None:
    """Remove shard groups a killed driver left staged.  Called under the lake lock, so no
    staging directory is in use: each lives only within the hold that made it."""
    root = staging_root(config)
    if root.is_dir():
        for leftover in root.iterdir():
            shutil.rmtree(leftover, ignore_errors=True)


def _parse_runs(files: list[PlannedFile], indices: list[int]) -> list[list[int]]:
    """``indices`` (files of a batch) in runs of consecutive files, one per ``parse`` task:
    a run ends once it holds ``TASK_PARSE_BYTES`` bytes or ``TASK_PARSE_FILES`` files."""
    runs: list[list[int]] = []
    size = 0
    for i in indices:
        if not runs or size >= TASK_PARSE_BYTES or len(runs[-1]) >= TASK_PARSE_FILES:
            runs.append([])
            size = 0
        runs[-1].append(i)
        size += files[i].size
    return runs


def _task_group_count(rows: int, shards: int) -> int:
    """How many shard groups a batch of about ``rows`` staged rows is split into for tasks."""
    return max(1, min(shards, -(-rows // max(TASK_GROUP_MIN_ROWS, 1))))


def _store_as_tasks(
    files: list[PlannedFile], batch: ParsedBatch, config: Config, tasks: GroupTasks, name: str
) -> list[tuple[str, pl.DataFrame]]:
    """Parse the batch's telemetry files and check and merge them as tasks of ``tasks`` (on
    Dask workers): same parsers, same groups of whole shards, same two phases, so the same
    lake, quarantine, counts and change log as :func:`_store` on threads.  ``batch`` holds
    the inventory files, parsed in this process (their rows are upserted here).  Returns
    the rows to quarantine by table; fills in the reports of the files parsed by tasks.

    Under one hold of the lake lock, this process writes the inventory it read (the one
    every parse and check of the batch uses) to ``staging_root/<name>/``; ``parse`` tasks
    (:func:`parse_run`) parse runs of consecutive files and write each table's rows by
    shard group; the inventory is upserted here, then per table ``check`` tasks
    (:func:`check_group`) read a group's parts from every run, in file order, check them
    against the batch and the lake and write the new rows, failed rows and conflicts to
    files; the partitions the new rows go to are logged here (``record_stored_rows``);
    then ``merge`` tasks merge the new rows, acting under this hold through the lock's
    token (a task given a token of a hold that has ended is refused).  The parses end
    before anything of the batch is stored (its inventory included), as in this process,
    so a parser that reads the inventory or stored rows sees what it would here.  The
    directory is removed before the lock is let go, whatever happens; one left by a killed
    driver is removed by the next hold that stages (no stage directory outlives the hold
    that made it).
    """
    ctx, reports = batch.ctx, batch.reports
    telemetry = [i for i, f in enumerate(files) if not f.inventory]
    shards = lake_shards(config.lake_dir, config.shards)
    groups = _task_group_count(sum(files[i].size for i in telemetry) // LANDING_BYTES_PER_ROW, shards)
    bad_rows = []
    with lake_lock(config.lake_dir):
        _clear_staging(config)
        directory = staging_root(config) / name
        try:
            directory.mkdir(parents=True)
            inventory = directory / "inventory.parquet"
            ctx.inventory.write_parquet(inventory, **STAGING_PARQUET)
            context = _context_job(ctx, inventory)
            jobs = [
                {
                    "settings": tasks.settings,
                    # Opened where this process would open them (not relative to its directory).
                    "files": planned_to_dict([_absolute(files[i]) for i in run]),
                    "indices": run,
                    "context": context,
                    "groups": groups,
                    "directory": str(directory),
                    "run": number,
                }
                for number, run in enumerate(_parse_runs(files, telemetry))
            ]
            parts: dict[str, dict[int | None, list[str]]] = {}
            for result in tasks.run("parse", jobs) if jobs else []:
                for item in result["files"]:
                    report = reports[item["index"]]
                    report.status, report.reason, report.rows_read = item["status"], item["reason"], item["rows_read"]
                for part in result["parts"]:  # runs in file order
                    parts.setdefault(part["table"], {}).setdefault(part["group"], []).append(part["path"])
            for table in TABLE_ORDER:
                frames = _table_frames(table, batch.parsed, batch.shared)
                if table == "inventory" and frames:
                    bad = _store_inventory(_in_file_order(frames), batch, config)
                elif table in parts:
                    bad = _check_and_merge_as_tasks(table, parts[table], reports, config, tasks, directory, context)
                else:
                    continue
                if bad.height:
                    bad_rows.append((table, bad))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return bad_rows


def _absolute(planned: PlannedFile) -> PlannedFile:
    """``planned`` with the absolute path of the file it names (for another process)."""
    path = planned.open_path()
    return planned if path.is_absolute() else replace(planned, path_hex=manifest.name_bytes(path.absolute()).hex())


def _check_and_merge_as_tasks(
    table: str,
    groups: dict[int | None, list[str]],
    reports: list[FileReport],
    config: Config,
    tasks: GroupTasks,
    directory: Path,
    context: dict,
) -> pl.DataFrame:
    """:func:`_check_and_merge` with each shard group (its parts staged by the ``parse``
    tasks, in file order) checked and merged by a task of ``tasks``; returns the rows to
    quarantine.  The caller holds the lake lock (see :func:`_store_as_tasks`)."""
    lake_dir = config.lake_dir
    time_col = TIME_COLUMN[table]
    jobs = [
        {
            "settings": tasks.settings,
            "table": table,
            "parts": paths,
            "out": str(directory / f"{table}-group-{_group_label(group)}"),
            "context": context,
        }
        for group, paths in groups.items()
    ]
    checked = tasks.run("check", jobs)
    if time_col is not None:
        columns = ["unit_id", time_col]
        new = [pl.read_parquet(c["new"], columns=columns) for c in checked if c["new_rows"]]
        record_stored_rows(lake_dir, table, new, config.shards)
    token = lock_token(lake_dir)
    merging = [c for c in checked if c["new_rows"]]
    merge_jobs = [{"settings": tasks.settings, "table": table, "rows": c["new"], "token": token} for c in merging]
    results = tasks.run("merge", merge_jobs) if merge_jobs else []
    for c, result in zip(merging, results):
        if result["rows_stored"] != c["new_rows"]:  # cannot happen under the lock: fail loudly
            raise RuntimeError(f"{table}: {c['new_rows']} new rows checked but {result['rows_stored']} stored")
    for c in checked:
        for i, number in c["duplicates"]:
            reports[i].duplicates_dropped += number
    bad = [pl.read_parquet(path) for c in checked for path in c["bad"]]
    return pl.concat(bad, how="diagonal_relaxed") if bad else pl.DataFrame()


def _group_label(group: int | None) -> str:
    """A shard group's part of a staged file's name."""
    return "nounit" if group is None else f"{group:03d}"


def _context_job(ctx: IngestContext, inventory: Path) -> dict:
    """What a task needs to rebuild the batch's :class:`IngestContext`, as plain values."""
    return {
        "catalog": catalog_to_dict(ctx.catalog),
        "catalog_source": ctx.catalog.source,
        "inventory": str(inventory),
        "lake_dir": str(ctx.lake_dir),
        "timezone": ctx.timezone,
        "now": ctx.now.isoformat(),
        "max_future_us": ctx.max_future // timedelta(microseconds=1),
        "scrape_time": ctx.scrape_time.isoformat() if ctx.scrape_time else None,
        "violation_unit": ctx.violation_unit,
        "shards": ctx.shards,
    }


def _context_from_job(job: dict) -> IngestContext:
    return IngestContext(
        catalog=parse_catalog(job["catalog"], source=job["catalog_source"]),
        inventory=pl.read_parquet(job["inventory"]),
        lake_dir=Path(job["lake_dir"]),
        timezone=job["timezone"],
        now=datetime.fromisoformat(job["now"]),
        max_future=timedelta(microseconds=job["max_future_us"]),
        scrape_time=datetime.fromisoformat(job["scrape_time"]) if job["scrape_time"] else None,
        violation_unit=job["violation_unit"],
        shards=job["shards"],
    )


def parse_run(job: dict) -> dict:
    """A ``parse`` task: a run of a batch's files parsed as this process would parse them
    (:func:`_parse_batch`, with the batch's context and the files' indices in the batch);
    each table's rows, in file order, split into the batch's shard groups (the lake shard
    number modulo ``groups``, :func:`_group_masks`: the same groups whatever task splits
    them) and written to ``directory``, one file per table and group.  Returns each file's
    status, reason and rows read (``files``) and the files written with their table, group
    and rows (``parts``).  Reads the landing files and the lake only."""
    config = Config.from_settings(job["settings"])
    files, indices = planned_from_dict(job["files"]), job["indices"]
    outcomes, shared = _parse_batch(files, _context_from_job(job["context"]), config.local_workers, indices)
    parsed: dict[int, ParsedFile] = {}
    reported = []
    for planned, index in zip(files, indices):
        report = FileReport(planned.path, planned.format, "ingested")
        outcome = _report_outcome(report, outcomes[index])
        if outcome is not None:
            parsed[index] = outcome
        reported.append(
            {"index": index, "status": report.status, "reason": report.reason, "rows_read": report.rows_read}
        )
    parts = []
    for table in TABLE_ORDER:
        frames = _table_frames(table, parsed, shared)
        if not frames:
            continue
        if table == "inventory":  # planned as telemetry: cannot happen (_is_inventory reads the same)
            raise RuntimeError(f"inventory rows in files planned as telemetry: {[f.path for f in files]}")
        staged = _in_file_order(frames)
        masks = _group_masks(staged, config, job["groups"], min_rows=0) or {0: None}
        for group, mask in masks.items():
            rows = staged if mask is None else staged.filter(mask)
            if rows.height:
                path = Path(job["directory"]) / f"run-{job['run']:04d}-{table}-group-{_group_label(group)}.parquet"
                rows.write_parquet(path, **STAGING_PARQUET)
                parts.append({"table": table, "group": group, "path": str(path), "rows": rows.height})
    return {"files": reported, "parts": parts}


def check_group(job: dict) -> dict:
    """A ``check`` task: one shard group checked (``_check_shard``), its rows read from the
    parts the ``parse`` tasks wrote (``parts``, runs in file order).  Writes the new rows
    (lake columns) and the rows to quarantine (failed checks, then conflicts) to files
    named after ``out``; returns their paths, the new rows' count and the duplicates per
    file (``[[file index, count], ...]``).  Reads the lake only."""
    table, out = job["table"], Path(job["out"])
    rows = _in_file_order([pl.read_parquet(path) for path in job["parts"]])
    unique, failed, duplicates, conflicts = _check_shard(table, rows, _context_from_job(job["context"]))
    new = out.with_name(f"{out.name}-new.parquet")
    unique.select(_lake_columns(table, unique)).write_parquet(new, **STAGING_PARQUET)
    bad = []
    for kind, frame in (("failed", failed), ("conflicts", conflicts)):
        if frame.height:
            path = out.with_name(f"{out.name}-{kind}.parquet")
            frame.write_parquet(path, **STAGING_PARQUET)
            bad.append(str(path))
    return {
        "new": str(new),
        "new_rows": unique.height,
        "bad": bad,
        "duplicates": [[i, n] for i, n in sorted(_count_by_file(duplicates).items())],
    }


def merge_group(job: dict) -> dict:
    """A ``merge`` task: a group's checked new rows merged into the lake, under the hold of
    the lake lock whose token the job carries (refused if that hold has ended)."""
    config = Config.from_settings(job["settings"])
    rows = pl.read_parquet(job["rows"])
    with lock_held_by_token(config.lake_dir, job["token"]):
        result = merge_into_lake(
            config.lake_dir,
            job["table"],
            rows,
            shards=config.shards,
            deduplicated=True,  # check_group checked the batch and the lake under this hold
            record_changes=False,  # logged by the driver before any merge started
        )
    return {"rows_stored": result.rows_stored}


# The steps GroupTasks run, by name (a task takes the name and a job of plain values).
GROUP_STEPS: dict[str, Callable[[dict], dict]] = {"parse": parse_run, "check": check_group, "merge": merge_group}


def _lake_columns(table: str, frame: pl.DataFrame) -> list[str]:
    columns = list(SCHEMAS[table])
    if table == "inventory":
        columns += [c for c in frame.columns if c not in SCHEMAS[table] and not c.startswith("_")]
    return [c for c in columns if c in frame.columns]


def _count_by_file(frame: pl.DataFrame) -> dict[int, int]:
    if frame.height == 0:
        return {}
    counts = frame.group_by("_file").len()
    return dict(zip(counts.get_column("_file").to_list(), counts.get_column("len").to_list()))


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
        conflicts = (
            joined.filter(clash)
            .select(later.columns)
            .with_columns(
                _reason=pl.lit(
                    "duplicate key with a different value than an earlier row of this ingest (the earlier row is kept)"
                ),
                _field=pl.lit(",".join(values)),
            )
        )
    if stored is not None and stored.height:
        joined = firsts.join(stored, on=key, how="left", suffix="_stored", nulls_equal=True)
        present = pl.col("_present").is_not_null()
        clash = present & _differs(table, "", "_stored")
        dup_lake = joined.filter(present & ~clash).select(firsts.columns)
        conflict_lake = (
            joined.filter(clash)
            .select(firsts.columns)
            .with_columns(
                _reason=pl.lit("key already stored in the lake with a different value (the stored row is kept)"),
                _field=pl.lit(",".join(values)),
            )
        )
        firsts = joined.filter(~present).select(firsts.columns)
        duplicates = pl.concat([duplicates, dup_lake], how="vertical_relaxed")
        conflicts = pl.concat([conflicts, conflict_lake], how="vertical_relaxed")
    return firsts, duplicates, conflicts


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


def _quarantine_rows(parsed: ParsedFile, shown: str, rows: pl.DataFrame, table: str, run_id: str) -> pl.DataFrame:
    raw = parsed.raw_text(rows)
    return pl.DataFrame(
        {
            "source_file": [shown] * rows.height,
            "line": rows.get_column("_line"),
            "table": [table] * rows.height,
            "field": rows.get_column("_field"),
            "reason": rows.get_column("_reason"),
            "raw": raw.str.slice(0, 1000) if raw.dtype == pl.String else raw.cast(pl.String),
            "run_id": [run_id] * rows.height,
        },
        schema=QUARANTINE_SCHEMA,
    )


def finish_report(
    plan: IngestPlan, batch_reports: list[FileReport], quarantine_files: list[str], started: float, config: Config
) -> IngestReport:
    """Assemble the run's report and record it under ``<data>/ingest_runs/<run_id>.json``."""
    report = IngestReport(run_id=plan.run_id, source=plan.source, path=plan.root)
    order = {r.path: r for r in [*plan.reports, *batch_reports]}
    report.files = sorted(order.values(), key=lambda r: r.path)
    report.quarantine_files = quarantine_files
    report.notes = list(plan.notes)
    report.seconds = time.monotonic() - started
    report.write(config.ingest_runs_dir)
    return report


def ingest_path(
    path: str | Path,
    config: Config,
    source: str = "auto",
    timezone: str | None = None,
    *,
    scrape_time: datetime | str | None = None,
    force: bool = False,
    follow_symlinks: bool = False,
) -> IngestReport:
    """Ingest a file or a landing directory into the lake (see module notes).

    Parameters
    ----------
    path
        A file or a directory (searched recursively).
    config
        Loaded configuration (lake directory, catalog, ``[ingest]`` settings).
    source
        ``"auto"`` to recognise each file, or one format for all files.
    timezone
        Zone of naive timestamps (overrides ``[ingest] timezone``); None rejects them.
    scrape_time
        When timestamp-less Prometheus scrapes were taken.
    force
        Read files even if the manifest says they were ingested.
    follow_symlinks
        Read the files symbolic links in the landing directory point to (default: skip
        them, since they may lead outside it).

    Returns
    -------
    IngestReport
        Per-file and total accounting; also written to ``<data>/ingest_runs/``.
    """
    started = time.monotonic()
    if isinstance(scrape_time, str):
        scrape_time = parse_scrape_time(scrape_time)
    plan = plan_ingest(path, config, source, force=force, follow_symlinks=follow_symlinks)
    reports: list[FileReport] = []
    quarantine_files: list[str] = []
    try:
        for number, batch in enumerate(plan.batches):
            batch_reports, quarantine_file = ingest_batch(
                batch,
                config,
                run_id=plan.run_id,
                batch_number=number,
                catalog_path=plan.catalog_path,
                timezone_name=timezone,
                scrape_time=scrape_time,
                next_files=plan.after(number),
            )
            reports += batch_reports
            if quarantine_file:
                quarantine_files.append(quarantine_file)
    finally:
        drop_prefetched()
    return finish_report(plan, reports, quarantine_files, started, config)


def planned_to_dict(files: list[PlannedFile]) -> list[dict]:
    return [asdict(f) for f in files]


def planned_from_dict(items: list[dict]) -> list[PlannedFile]:
    return [PlannedFile(**item) for item in items]
