"""``foreshock ingest``: the Prefect flow that lands raw telemetry in the lake.

Wiring only: planning, parsing, checks and merges live in :mod:`foreshock.ingest`.  One
task per batch of files (a day of a fleet's files, not one per file: task overhead is
~17 ms here); tasks take and return plain values (paths, counts), never frames, and are
retried on I/O errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.errors import EXIT_FAILURE, EXIT_OK, EXIT_PARTIAL, UserError
from foreshock.ingest import SOURCES, FileReport, IngestReport, ingest_batch, parse_scrape_time, plan_ingest
from foreshock.ingest.context import check_timezone
from foreshock.ingest.run import finish_report, planned_from_dict, planned_to_dict
from foreshock.pipelines.progress import track
from foreshock.pipelines.runtime import retry_on_io_error


@task(
    name="ingest-batch", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_on_io_error, cache_policy=NO_CACHE
)
def ingest_batch_task(
    files: list[dict],
    settings: dict,
    run_id: str,
    batch_number: int,
    catalog_path: str | None,
    timezone: str | None,
    scrape_time: str | None,
) -> dict:
    """Parse, check and merge one batch of files; returns its file reports as dicts."""
    reports, quarantine_file = ingest_batch(
        planned_from_dict(files),
        Config.from_settings(settings),
        run_id=run_id,
        batch_number=batch_number,
        catalog_path=catalog_path,
        timezone_name=timezone,
        scrape_time=parse_scrape_time(scrape_time),
    )
    return {"files": [dataclasses.asdict(r) for r in reports], "quarantine_file": quarantine_file}


@flow(name="ingest", validate_parameters=False)
def ingest(
    settings: dict,
    path: str,
    source: str = "auto",
    timezone: str | None = None,
    scrape_time: str | None = None,
    force: bool = False,
    follow_symlinks: bool = False,
) -> dict:
    """Ingest a file or landing directory; returns the run report as a dict."""
    started = time.monotonic()
    config = Config.from_settings(settings)
    plan = plan_ingest(path, config, source, force=force, follow_symlinks=follow_symlinks)
    reports: list[FileReport] = []
    quarantine_files: list[str] = []
    for number, batch in track(list(enumerate(plan.batches)), "ingest: batches"):
        # Sequential on purpose: inventory must land before the batches that check units
        # against it, and a day's XID gauge and counter steps read the previous day's stored
        # rows.  Inside a batch, parsing and the shard-by-shard checks and merges run on
        # [runner] local_workers threads (foreshock.ingest.run).
        done = ingest_batch_task(
            planned_to_dict(batch), settings, plan.run_id, number, plan.catalog_path, timezone, scrape_time
        )
        reports += [FileReport(**item) for item in done["files"]]
        if done["quarantine_file"]:
            quarantine_files.append(done["quarantine_file"])
    report: IngestReport = finish_report(plan, reports, quarantine_files, started, config)
    return report.to_dict()


def report_from_dict(result: dict) -> IngestReport:
    """The run report back from the flow's plain-dict result."""
    report = IngestReport(run_id=result["run_id"], source=result["source"], path=result["path"])
    report.files = [FileReport(**f) for f in result["files"]]
    report.quarantine_files = result["quarantine_files"]
    report.notes = result["notes"]
    report.seconds = result["seconds"]
    return report


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ingest",
        help="read raw telemetry (a file or a landing directory) into the lake",
        description="Parse, check and merge raw telemetry into the Parquet lake. Bad rows go to "
        "data/quarantine/; every run prints and records (data/ingest_runs/) rows read, stored, "
        "quarantined and duplicates dropped.",
    )
    parser.add_argument("--source", default="auto", choices=SOURCES, help="input format (default: recognise each file)")
    parser.add_argument("--path", help="file or directory to ingest (default: <data-dir>/raw)")
    parser.add_argument("--catalog", help="metric catalog YAML (default: the configured or built-in catalog)")
    parser.add_argument(
        "--timezone", help="zone of naive timestamps, e.g. UTC (default: [ingest] timezone; else reject them)"
    )
    parser.add_argument("--scrape-time", help="when timestamp-less Prometheus scrapes were taken (ISO 8601 with Z)")
    parser.add_argument("--force", action="store_true", help="read files again even if the manifest lists them")
    parser.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="read the files symbolic links in the landing directory point to (default: skip them)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when a file is rejected or a row quarantined (without it: 3 when a file is rejected)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, config) -> int:
    path = args.path or str(config.raw_dir)
    # user errors are reported before a flow run is created
    parse_scrape_time(args.scrape_time)
    check_timezone(args.timezone)
    if not Path(path).exists():
        raise UserError(f"ingest path not found: {path}")
    if args.catalog:
        config = config.with_overrides({"paths": {"catalog": args.catalog}})
    result = ingest(
        config.to_settings(args.config),
        path=path,
        source=args.source,
        timezone=args.timezone,
        scrape_time=args.scrape_time,
        force=args.force,
        follow_symlinks=args.follow_symlinks,
    )
    report = report_from_dict(result)
    print(report.render())
    problems = report.by_status("rejected") or report.totals["rows_quarantined"]
    if args.strict and problems:
        return EXIT_FAILURE
    return EXIT_PARTIAL if report.by_status("rejected") else EXIT_OK
