"""Ingest a landing path into the lake: plan the files, then parse, check and merge batches.

``ingest_path`` does everything in one call; the Prefect flow calls ``plan_ingest``
(:mod:`~foreshock.ingest.planning`) and then ``ingest_batch`` once per batch (one task
each), passing paths, never frames.  A batch is parsed (:mod:`~foreshock.ingest.parsing`,
perhaps ahead: :mod:`~foreshock.ingest.parse_ahead`), checked (:mod:`~foreshock.ingest.checks`)
and merged on this process's threads (:mod:`~foreshock.ingest.store`) or as tasks of another
runner (:mod:`~foreshock.ingest.tasks`); this module records what came of it: the quarantine,
the manifest, the lake's catalog and the run's report.

Accounting, per file: ``rows_read = rows_stored + rows_updated + rows_quarantined +
duplicates_dropped``.  Telemetry is append-only: a row whose key is stored with other values
is quarantined as a conflict.  Inventory is an upsert: each file is merged in turn (path
order), and a row that changes its unit (a replaced GPU's new uuid) replaces the stored row
and counts as updated; an identical row is a duplicate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

import polars as pl
import yaml

from foreshock.catalog import Catalog, catalog_to_dict, lake_catalog_path, merge_catalogs, read_lake_catalog
from foreshock.config import Config
from foreshock.ingest import manifest
from foreshock.ingest.context import lake_compression_level
from foreshock.ingest.parse_ahead import drop_prefetched, may_parse_ahead, prefetch, take_prefetched
from foreshock.ingest.parsing import parse_again, parse_stage
from foreshock.ingest.planning import IngestPlan, PlannedFile, parse_scrape_time, plan_ingest
from foreshock.ingest.report import FileReport, IngestReport
from foreshock.ingest.staged import ParsedFile, file_counts
from foreshock.ingest.store import store_batch
from foreshock.ingest.tasks import GroupTasks, store_as_tasks
from foreshock.lake.atomic import atomic_write_parquet, atomic_write_text
from foreshock.lake.locks import lake_lock

QUARANTINE_SCHEMA = {
    "source_file": pl.String,
    "line": pl.Int64,
    "table": pl.String,
    "field": pl.String,
    "reason": pl.String,
    "raw": pl.String,
    "run_id": pl.String,
}


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
    check and merge the shard groups as those tasks (see :func:`store_as_tasks`) instead
    of on threads.
    ``next_files``: the run's next batch, parsed on a thread of this process while this
    one is checked and merged, and parsed too when it was not parsed ahead itself
    (:func:`prefetch`; not on Dask, nor with ``[ingest]
    parse_ahead = false``, nor when ``files`` store an inventory that ``next_files``'
    parsers read: :func:`may_parse_ahead`).
    """
    if tasks is not None:
        # The inventory files here (their rows are upserted here), the others on the workers.
        inventory = [i for i, f in enumerate(files) if f.inventory]
        parsed_batch = parse_stage(files, config, catalog_path, timezone_name, scrape_time, inventory)
        name = f"{run_id}-b{batch_number:04d}"
        bad_rows = store_as_tasks(files, parsed_batch, config, tasks, name)
    else:
        parsed_batch = take_prefetched(run_id, batch_number, files)
        ahead = next_files and config.section("ingest")["parse_ahead"] and may_parse_ahead(files, next_files)
        if ahead:
            # Started before this batch's own parse when it was not parsed ahead (a run's first
            # batches): the two parses side by side, as a parse beside a store later on.  Either
            # way the next batch is parsed before this one is stored, as may_parse_ahead allows.
            stale = any(f.inventory for f in files)  # the next batch's checks need the inventory stored now
            prefetch(run_id, batch_number + 1, next_files, config, catalog_path, timezone_name, scrape_time, stale)
        if parsed_batch is None:
            parsed_batch = parse_stage(files, config, catalog_path, timezone_name, scrape_time)
        bad_rows = store_batch(parsed_batch, config)
    ctx, reports, parsed = parsed_batch.ctx, parsed_batch.reports, parsed_batch.parsed

    for _, bad in bad_rows:
        for i, count in file_counts(bad).items():
            reports[i].rows_quarantined += count
    # Files parsed on the workers are parsed again here for their quarantined rows' text.
    sources = {**parsed, **parse_again(files, bad_rows, parsed, ctx, config)}
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
        atomic_write_parquet(
            pl.concat(quarantined).sort("source_file", "line"),
            target,
            compression_level=lake_compression_level(config),
        )
        quarantine_file = str(target)
    _record_in_manifest(files, reports, run_id, config)
    return reports, quarantine_file


def _record_in_manifest(files: list[PlannedFile], reports: list[FileReport], run_id: str, config: Config) -> None:
    """Record the batch's ingested files and their counts in the lake's manifest (a later
    run skips them)."""
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
        lake_compression_level(config),
    )


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
    progress: Callable[[list, str], Iterable] | None = None,
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
    progress
        Wraps the list of ``(number, batch)`` with a description (a bar or log lines, as
        the command shows them); None: nothing shown.

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
        batches = list(enumerate(plan.batches))
        for number, batch in progress(batches, "ingest: batches") if progress else batches:
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
