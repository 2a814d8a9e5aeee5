"""The Prefect flow that lands raw telemetry in the lake (``foreshock ingest`` when a Prefect
API records its runs or on Dask, :mod:`foreshock.pipelines.ingest_cmd`; ``foreshock serve``;
``foreshock pull``).

Wiring only: planning, parsing, checks and merges live in :mod:`foreshock.ingest`.  One
task per batch of files (a day of a fleet's files, not one per file: task overhead is
~17 ms here); tasks take and return plain values (paths, counts), never frames, and are
retried on I/O errors.

The batches run one after another in this process.  On the local runner (the default) a
batch's parse and its shard groups' checks and merges run on ``[runner] local_workers``
threads inside its task.  On the Dask runner (``--runner dask``) the batch task submits
one ``ingest-parse`` task per run of consecutive telemetry files (each stages its rows by
shard group under ``<data>/staging/ingest/``), then one ``ingest-shard-group`` task per
group and phase (check, then merge) to the flow's task runner, so they run on the
cluster's workers while this process holds the lake lock (see
``foreshock.ingest.tasks.store_as_tasks``); it parses only the inventory files itself, and
again the few files whose rows are quarantined (for their raw text).  The workers need the
data directory and the landing directory on a file system they share with this process, at
the same paths.
"""

from __future__ import annotations

import dataclasses
import sys
import time

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.futures import wait

from foreshock.config import Config
from foreshock.ingest import FileReport, IngestReport, ingest_batch, parse_scrape_time, plan_ingest
from foreshock.ingest.parse_ahead import drop_prefetched
from foreshock.ingest.planning import planned_from_dict, planned_to_dict
from foreshock.ingest.run import finish_report
from foreshock.ingest.tasks import GROUP_STEPS, GroupTasks
from foreshock.pipelines.progress import track
from foreshock.pipelines.runtime import retry_on_io_error


# No retries of its own: a merge that failed half way must not be repeated on rows checked
# before it (the batch task is retried as a whole, checking them again).
@task(name="ingest-shard-group", cache_policy=NO_CACHE)
def shard_group_task(step: str, job: dict) -> dict:
    """One shard group's ``check`` or ``merge`` step (paths and counts in and out)."""
    return GROUP_STEPS[step](job)


@task(name="ingest-parse", cache_policy=NO_CACHE)
def parse_run_task(job: dict) -> dict:
    """A run of a batch's telemetry files parsed and staged by shard group (paths and
    counts in and out); no retries of its own either: the batch task is retried whole."""
    return GROUP_STEPS["parse"](job)


def _run_on_task_runner(step: str, jobs: list[dict]) -> list[dict]:
    """``GroupTasks.run``: the jobs as tasks of the flow's task runner, results in order,
    after all of them ended (the batch holds the lake lock until then)."""
    if step == "parse":
        futures = [parse_run_task.submit(job) for job in jobs]
    else:
        futures = [shard_group_task.submit(step, job) for job in jobs]
    wait(futures)
    return [future.result() for future in futures]


def _on_dask() -> bool:
    """Whether this flow run's task runner is prefect-dask's (``--runner dask``)."""
    context = FlowRunContext.get()
    module = sys.modules.get("prefect_dask")  # imported by task_runner() when it made one
    return context is not None and module is not None and isinstance(context.task_runner, module.DaskTaskRunner)


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
    group_tasks: bool = False,
    next_files: list[dict] | None = None,
) -> dict:
    """Parse, check and merge one batch of files; returns its file reports as dicts.
    ``group_tasks``: its telemetry files are parsed, and its shard groups checked and
    merged, as tasks of the flow's runner.
    ``next_files``: the next batch, parsed ahead in this process meanwhile (local runner)."""
    reports, quarantine_file = ingest_batch(
        planned_from_dict(files),
        Config.from_settings(settings),
        run_id=run_id,
        batch_number=batch_number,
        catalog_path=catalog_path,
        timezone_name=timezone,
        scrape_time=parse_scrape_time(scrape_time),
        tasks=GroupTasks(run=_run_on_task_runner, settings=settings) if group_tasks else None,
        next_files=planned_from_dict(next_files) if next_files else None,
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
    on_dask = _on_dask()
    try:
        for number, batch in track(list(enumerate(plan.batches)), "ingest: batches"):
            # Sequential on purpose: inventory must land before the batches that check units
            # against it, and a day's XID gauge and counter steps read the previous day's
            # stored rows.  Inside a batch, parsing and the shard-by-shard checks and merges
            # run on [runner] local_workers threads (foreshock.ingest.store), or the parses,
            # checks and merges as tasks on the Dask workers.  On the local runner the next
            # batch is parsed meanwhile (ingest_batch decides whether it may be).
            ahead = plan.after(number)
            done = ingest_batch_task(
                planned_to_dict(batch),
                settings,
                plan.run_id,
                number,
                plan.catalog_path,
                timezone,
                scrape_time,
                on_dask,
                planned_to_dict(ahead) if ahead else None,
            )
            reports += [FileReport(**item) for item in done["files"]]
            if done["quarantine_file"]:
                quarantine_files.append(done["quarantine_file"])
    finally:
        drop_prefetched()
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
