"""``foreshock ingest``: raw telemetry (a file or a landing directory) into the lake.

The work lives in :mod:`foreshock.ingest`.  A run that is recorded (a configured Prefect API,
``foreshock serve``) or that runs on Dask goes through the flow of
:mod:`foreshock.pipelines.ingest_flow`; otherwise the command calls
:func:`foreshock.ingest.ingest_path` itself, the same batches in the same order on the same
threads, and neither imports Prefect nor starts its temporary server (about 25 s of wall
clock on a busy 2-core machine before the first batch).  What the flow adds is its retry of
a batch that failed on I/O; without it the command fails and a rerun ingests what is left
(the manifest skips what was stored).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from foreshock.errors import EXIT_FAILURE, EXIT_OK, EXIT_PARTIAL, UserError
from foreshock.ingest import SOURCES, parse_scrape_time
from foreshock.ingest.context import check_timezone
from foreshock.pipelines.runtime import runs_as_flow


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
    if runs_as_flow(config):
        from foreshock.pipelines.ingest_flow import ingest, report_from_dict
        from foreshock.pipelines.runtime import task_runner

        flow_run = ingest
        if config.section("runner")["kind"] != "local":  # the local runner keeps the in-process threads
            flow_run = ingest.with_options(task_runner=task_runner(config))
        result = flow_run(
            config.to_settings(args.config),
            path=path,
            source=args.source,
            timezone=args.timezone,
            scrape_time=args.scrape_time,
            force=args.force,
            follow_symlinks=args.follow_symlinks,
        )
        report = report_from_dict(result)
    else:
        from foreshock.ingest import ingest_path
        from foreshock.pipelines.progress import track

        report = ingest_path(
            path,
            config,
            args.source,
            args.timezone,
            scrape_time=args.scrape_time,
            force=args.force,
            follow_symlinks=args.follow_symlinks,
            progress=track,
        )
    print(report.render())
    problems = report.by_status("rejected") or report.totals["rows_quarantined"]
    if args.strict and problems:
        return EXIT_FAILURE
    return EXIT_PARTIAL if report.by_status("rejected") else EXIT_OK
