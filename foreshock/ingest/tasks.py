"""A batch's steps as tasks of another runner (:class:`GroupTasks`: the Prefect flow on Dask).

The batch's telemetry files are parsed by ``parse`` steps of ``GROUP_STEPS`` called elsewhere
(Dask workers), in runs of consecutive files, each writing its rows by shard group to
Parquet files under ``<data>/staging/ingest/``; each group's rows are then checked and
merged by ``check`` and ``merge`` steps.  Steps take and return paths and counts; the driver
parses the inventory files itself, holds the lake lock throughout and hands its token to the
merges (:func:`store_as_tasks`).  The workers open the landing files at the paths the driver
would (absolute), so the landing directory, like the data directory, must be on a file
system they share with it, at the same path.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from foreshock.catalog import catalog_to_dict, parse_catalog
from foreshock.config import Config
from foreshock.contract import TIME_COLUMN
from foreshock.ingest import manifest
from foreshock.ingest.checks import check_shard, lake_columns
from foreshock.ingest.context import IngestContext, lake_compression_level
from foreshock.ingest.parsing import (
    ParsedBatch,
    in_file_order,
    parse_batch,
    report_outcome,
    table_frames,
)
from foreshock.ingest.planning import PlannedFile, planned_from_dict, planned_to_dict
from foreshock.ingest.report import FileReport
from foreshock.ingest.staged import ParsedFile, file_counts
from foreshock.ingest.staging import STAGING_PARQUET, clear_staging, staging_root
from foreshock.ingest.store import TABLE_ORDER, group_masks, store_inventory
from foreshock.lake.changes import record_stored_rows
from foreshock.lake.layout import lake_shards
from foreshock.lake.locks import lake_lock, lock_held_by_token, lock_token
from foreshock.lake.merge import merge_into_lake


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


def store_as_tasks(
    files: list[PlannedFile], batch: ParsedBatch, config: Config, tasks: GroupTasks, name: str
) -> list[tuple[str, pl.DataFrame]]:
    """Parse the batch's telemetry files and check and merge them as tasks of ``tasks`` (on
    Dask workers): same parsers, same groups of whole shards, same two phases, so the same
    lake, quarantine, counts and change log as :func:`store_batch` on threads.  ``batch`` holds
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
        clear_staging(config)
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
                frames = table_frames(table, batch.parsed, batch.shared)
                if table == "inventory" and frames:
                    bad = store_inventory(in_file_order(frames), batch, config)
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
    quarantine.  The caller holds the lake lock (see :func:`store_as_tasks`)."""
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
    (:func:`parse_batch`, with the batch's context and the files' indices in the batch);
    each table's rows, in file order, split into the batch's shard groups (the lake shard
    number modulo ``groups``, :func:`group_masks`: the same groups whatever task splits
    them) and written to ``directory``, one file per table and group.  Returns each file's
    status, reason and rows read (``files``) and the files written with their table, group
    and rows (``parts``).  Reads the landing files and the lake only."""
    config = Config.from_settings(job["settings"])
    files, indices = planned_from_dict(job["files"]), job["indices"]
    outcomes, shared = parse_batch(files, _context_from_job(job["context"]), config.local_workers, indices)
    parsed: dict[int, ParsedFile] = {}
    reported = []
    for planned, index in zip(files, indices):
        report = FileReport(planned.path, planned.format, "ingested")
        outcome = report_outcome(report, outcomes[index])
        if outcome is not None:
            parsed[index] = outcome
        reported.append(
            {"index": index, "status": report.status, "reason": report.reason, "rows_read": report.rows_read}
        )
    parts = []
    for table in TABLE_ORDER:
        frames = table_frames(table, parsed, shared)
        if not frames:
            continue
        if table == "inventory":  # planned as telemetry: cannot happen (_is_inventory reads the same)
            raise RuntimeError(f"inventory rows in files planned as telemetry: {[f.path for f in files]}")
        staged = in_file_order(frames)
        masks = group_masks(staged, config, job["groups"], min_rows=0) or {0: None}
        for group, mask in masks.items():
            rows = staged if mask is None else staged.filter(mask)
            if rows.height:
                path = Path(job["directory"]) / f"run-{job['run']:04d}-{table}-group-{_group_label(group)}.parquet"
                rows.write_parquet(path, **STAGING_PARQUET)
                parts.append({"table": table, "group": group, "path": str(path), "rows": rows.height})
    return {"files": reported, "parts": parts}


def check_group(job: dict) -> dict:
    """A ``check`` task: one shard group checked (``check_shard``), its rows read from the
    parts the ``parse`` tasks wrote (``parts``, runs in file order).  Writes the new rows
    (lake columns) and the rows to quarantine (failed checks, then conflicts) to files
    named after ``out``; returns their paths, the new rows' count and the duplicates per
    file (``[[file index, count], ...]``).  Reads the lake only."""
    table, out = job["table"], Path(job["out"])
    rows = in_file_order([pl.read_parquet(path) for path in job["parts"]])
    unique, failed, duplicates, conflicts = check_shard(table, rows, _context_from_job(job["context"]))
    new = out.with_name(f"{out.name}-new.parquet")
    unique.select(lake_columns(table, unique)).write_parquet(new, **STAGING_PARQUET)
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
        "duplicates": [[i, n] for i, n in sorted(file_counts(duplicates).items())],
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
            compression_level=lake_compression_level(config),
        )
    return {"rows_stored": result.rows_stored}


# The steps GroupTasks run, by name (a task takes the name and a job of plain values).
GROUP_STEPS: dict[str, Callable[[dict], dict]] = {"parse": parse_run, "check": check_group, "merge": merge_group}
