"""``foreshock pull``: dcgm-exporter series from a Prometheus server into the lake.

Wiring only: fetching and the resume state live in :mod:`foreshock.ingest.pull`; the
fetched responses then go through the regular ingest flow (same parser, checks,
quarantine and merge as file ingest) as a subflow.  The resume state is saved only after
the ingest succeeded, so a failed run is fetched again by the next one.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.errors import EXIT_OK, EXIT_PARTIAL
from foreshock.pipelines.runtime import add_json_flag, print_json, retry_on_io_error

log = logging.getLogger("foreshock.pull")


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        value = datetime.fromisoformat(text)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value


@task(
    name="pull-fetch",
    retries=3,
    retry_delay_seconds=[5, 20, 60],
    retry_condition_fn=retry_on_io_error,
    cache_policy=NO_CACHE,
)
def fetch_task(settings: dict, run_id: str, overrides: dict, start: str | None, end: str | None) -> dict:
    from foreshock.ingest.pull import PullSettings, fetch

    config = Config.from_settings(settings)
    result = fetch(config, PullSettings.from_config(config, **overrides), run_id, _time(start), _time(end))
    return {
        "directory": str(result.directory),
        "files": result.files,
        "series": result.series,
        "points": result.points,
        "start": datetime.fromtimestamp(result.start, UTC).isoformat(),
        "end": datetime.fromtimestamp(result.end, UTC).isoformat(),
        "state": result.state.series,
        "query": result.state.query,
    }


@flow(name="pull", validate_parameters=False)
def pull_flow(
    settings: dict,
    query: str | None = None,
    step: str | None = None,
    start: str | None = None,
    end: str | None = None,
) -> dict:
    """Fetch, ingest, then remember where each series stopped; returns the run report.

    The server's URL is ``[pull] url`` of ``settings`` (which hold it as a reference, not
    its text: Prefect stores a flow run's parameters, and a URL can carry credentials)."""
    from foreshock.ingest.pull import PullState
    from foreshock.pipelines.ingest_flow import ingest
    from foreshock.pipelines.runtime import stamp

    config = Config.from_settings(settings)
    if not config.section("pull")["keep_files"]:
        remove_killed_pulls(config.pull_dir)
    # the run's directory names its process: a killed pull's is removed by the next pull
    fetched = fetch_task(settings, f"pull-{stamp()}-{os.getpid()}", {"query": query, "step": step}, start, end)
    report = None
    if fetched["files"]:
        report = ingest(settings, path=fetched["directory"], source="prometheus-json", force=True)
    PullState(fetched["query"], fetched["state"]).save(config.pull_dir)
    if not config.section("pull")["keep_files"]:
        shutil.rmtree(fetched["directory"], ignore_errors=True)
    return {**{k: v for k, v in fetched.items() if k != "state"}, "ingest": report}


def remove_killed_pulls(pull_dir: Path) -> list[Path]:
    """Remove the fetched directories (``pull-<time>-<pid>``) of pulls killed before they
    ingested and removed them: their chunks are fetched again, since the state was not saved."""
    from foreshock.lake.atomic import process_alive

    removed = []
    for directory in Path(pull_dir).glob("pull-*-*"):
        pid = directory.name.rsplit("-", 1)[1]
        if directory.is_dir() and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


def run_pull(args: argparse.Namespace, config: Config) -> int:
    from foreshock.ingest.pull import PullSettings
    from foreshock.pipelines.ingest_flow import report_from_dict

    for text in (args.start, args.end):
        _time(text)  # a bad time is a usage error before any flow run
    if args.url:
        config = config.with_overrides({"pull": {"url": args.url}})
    PullSettings.from_config(config, query=args.query, step=args.step)  # checks the URL and credentials
    result = pull_flow(
        config.to_settings(args.config), query=args.query, step=args.step, start=args.start, end=args.end
    )
    log.info(
        "pulled %d points of %d series from %s to %s",
        result["points"],
        result["series"],
        result["start"],
        result["end"],
    )
    ingest = result["ingest"]
    rejected = [f for f in (ingest or {}).get("files", []) if f["status"] == "rejected"]
    if args.json:
        print_json(result)
    elif ingest:
        report = report_from_dict(ingest)
        print(report.render())
    else:
        print(f"pull: nothing new from {result['start']} to {result['end']}")
    return EXIT_PARTIAL if rejected else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "pull",
        help="pull dcgm-exporter series from a Prometheus server into the lake",
        description="Read dcgm-exporter metrics from the Prometheus HTTP API (/api/v1/query_range) in bounded "
        "chunks and ingest them like files (checks, quarantine, merge). Each series resumes after its last "
        "stored timestamp, so a missed run catches up and a rerun adds nothing. Credentials come from the "
        "environment variables named in [pull] (bearer token or basic auth) or the URL's user:password@; they "
        "are refused over plain http:// unless [pull] allow_http_credentials, and never follow a redirect to "
        "another server. TLS is verified.",
    )
    parser.add_argument("--url", help="Prometheus base URL (default: [pull] url)")
    parser.add_argument("--start", help="first time (ISO 8601 or unix seconds; default: resume)")
    parser.add_argument("--end", help="last time (ISO 8601 or unix seconds; default: now)")
    parser.add_argument("--step", help="query_range resolution, e.g. 1m (default: [pull] step)")
    parser.add_argument("--query", help="PromQL selector (default: [pull] query, every DCGM_FI_* series)")
    add_json_flag(parser)
    parser.set_defaults(func=run_pull)
