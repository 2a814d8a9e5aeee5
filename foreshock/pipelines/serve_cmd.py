"""``foreshock serve``: the scheduled deployments, served by this process.

Three deployments, each a parent flow whose stages run as subflows:

- ``foreshock-ingest`` (``[schedule] ingest``, every 5 minutes): pull dcgm-exporter series
  from Prometheus when ``[pull] url`` is set, else ingest new files of the landing
  directory (``<data-dir>/raw``);
- ``foreshock-cycle`` (hourly): features -> score -> publish;
- ``foreshock-retrain`` (weekly): backtest -> train -> review.

A ``[schedule]`` entry is a cron expression or an interval written as a duration (``"30s"``,
``"5m"``): runs that often from when serve starts.  Intervals compress the day for a demo or
a soak (``benchmarks/soak.py`` runs 24 simulated hours of 5-minute ingests and hourly cycles
in minutes).

Every deployment has a concurrency limit of 1 (a second cycle or retrain waits in the queue:
two cycles never race on the outbox; an ingest due while one still runs is cancelled, since
each ingest takes every file landed so far, and queued ingests only pile up behind a slow
one), its parameters are plain values (the data directory and the
configuration file), and each stage is retried with exponential backoff when it failed on
I/O (``[schedule] retries``, ``retry_backoff``); a bad input fails at once.  Needs a Prefect
server (``PREFECT_API_URL``); see "Run it in production" in the README.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from foreshock.config import Config, load_config
from foreshock.durations import parse_duration
from foreshock.pipelines.runtime import configure_mlflow, quiet_mlflow, retry_on_io_error

log = logging.getLogger("foreshock.serve")

DEPLOYMENTS = {"ingest": "foreshock-ingest", "cycle": "foreshock-cycle", "retrain": "foreshock-retrain"}


def _stage_flows() -> dict[str, Callable[..., Any]]:
    """The stage flows by name (imported when a run starts: each pulls in its own stack)."""
    from foreshock.pipelines.backtest_flow import backtest_flow
    from foreshock.pipelines.features_flow import features_flow
    from foreshock.pipelines.ingest_flow import ingest
    from foreshock.pipelines.publish_flow import publish_flow
    from foreshock.pipelines.pull_cmd import pull_flow
    from foreshock.pipelines.review_flow import review_flow
    from foreshock.pipelines.score_flow import score_flow
    from foreshock.pipelines.train_flow import train_flow

    return {
        "pull": pull_flow,
        "ingest": ingest,
        "features": features_flow,
        "score": score_flow,
        "publish": publish_flow,
        "backtest": backtest_flow,
        "train": train_flow,
        "review": review_flow,
    }


@task(name="stage", task_run_name="stage-{name}", cache_policy=NO_CACHE)
def stage(name: str, settings: dict, parameters: dict) -> Any:
    """One stage: its flow runs as a subflow of this task (retried on I/O errors)."""
    return _stage_flows()[name](settings, **parameters)


def _prepare(data_dir: str, config_path: str | None) -> tuple[Config, dict, Callable[..., Any]]:
    config = load_config(config_path, data_dir=data_dir)
    configure_mlflow(config.mlflow_dir)
    quiet_mlflow()
    schedule = config.section("schedule")
    run_stage = stage.with_options(
        retries=int(schedule["retries"]),
        retry_delay_seconds=exponential_backoff(
            backoff_factor=parse_duration(schedule["retry_backoff"]).total_seconds()
        ),
        retry_condition_fn=retry_on_io_error,
    )
    settings = config.to_settings(config_path)

    def run(name: str, **parameters: Any) -> Any:
        return run_stage(name, settings, parameters)

    return config, settings, run


@flow(name="scheduled-ingest", log_prints=True)
def scheduled_ingest(data_dir: str, config_path: str | None = None) -> dict:
    """Pull from Prometheus when ``[pull] url`` is set, else ingest the landing directory."""
    config, _, run = _prepare(data_dir, config_path)
    if config.section("pull")["url"]:
        return run("pull")
    config.raw_dir.mkdir(parents=True, exist_ok=True)
    return run("ingest", path=str(config.raw_dir))


@flow(name="cycle", log_prints=True)
def cycle(data_dir: str, config_path: str | None = None) -> dict:
    """features -> score -> publish; returns what each stage did."""
    _, _, run = _prepare(data_dir, config_path)
    features = run("features")
    scores = run("score")
    outbox = run("publish", scores_path=scores)
    return {"features": features, "scores": scores, "outbox": outbox}


@flow(name="retrain", log_prints=True)
def retrain(data_dir: str, config_path: str | None = None) -> dict:
    """backtest -> train (registers a challenger) -> review (promotes if guardrails hold)."""
    config, _, run = _prepare(data_dir, config_path)
    backtest = run("backtest")
    trained = run("train", backtest_dir=backtest["out_dir"])
    review = run("review")
    return {"backtest": backtest, "train": trained, "review": {k: review[k] for k in ("decision", "promoted")}}


FLOWS = {"ingest": scheduled_ingest, "cycle": cycle, "retrain": retrain}


# What a run due while the last one still runs does: an ingest is dropped (the running one or
# the next takes every file landed meanwhile; queued ingests behind a slow one hammer the API),
# a cycle or retrain waits its turn.
COLLISION = {
    "ingest": "CANCEL_NEW",
    "cycle": "ENQUEUE",
    "retrain": "ENQUEUE",
}


def deployments(config: Config, config_path: str | None, only: list[str] | None = None) -> list:
    """The RunnerDeployments to serve: cron or interval from ``[schedule]``, limit 1, plain parameters."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.deployments.runner import EntrypointType

    schedule = config.section("schedule")
    parameters = {"data_dir": str(config.data_dir), "config_path": str(config_path) if config_path else None}
    out = []
    for key, name in DEPLOYMENTS.items():
        if only and key not in only:
            continue
        when = str(schedule[key])
        out.append(
            FLOWS[key].to_deployment(
                name=name,
                schedules=[_schedule(when, str(schedule["timezone"]))] if when else None,
                concurrency_limit=ConcurrencyLimitConfig(
                    limit=1, collision_strategy=ConcurrencyLimitStrategy(COLLISION[key])
                ),
                parameters=parameters,
                description=(FLOWS[key].description or "").strip().splitlines()[0],
                tags=["foreshock"],
                entrypoint_type=EntrypointType.MODULE_PATH,
            )
        )
    return out


def _schedule(when: str, timezone: str):
    """A cron expression, or an interval when ``when`` reads as a duration (``"30s"``)."""
    from prefect.schedules import Cron, Interval

    try:
        every = parse_duration(when)
    except ValueError:
        return Cron(when, timezone=timezone)
    return Interval(every, timezone=timezone)


def describe_schedules(deployment) -> str:
    """How a served deployment is scheduled, for serve's log: cron expressions or intervals."""
    shown = []
    for item in deployment.schedules or []:
        cron, interval = getattr(item.schedule, "cron", None), getattr(item.schedule, "interval", None)
        shown.append(cron if cron else f"every {interval.total_seconds():g} s")
    return ", ".join(shown) or "none (run by hand)"


# States of a run that only a live serve process could be in: at start, serve's own runs in
# them were left by a serve that was killed (their process died with it).
ORPHAN_STATES = ("PENDING", "RUNNING", "CANCELLING")


def crash_orphaned_runs(names: list[str]) -> list[str]:
    """Mark the runs of the deployments ``names`` that a killed serve left pending or running
    as Crashed; returns their names.

    A serve killed mid-run (OOM, reboot, SIGKILL) leaves its run Running on the server, and
    that run keeps the deployment's concurrency slot: the schedule never resumes.  Leaving
    Running releases the slot, so serve, which runs each of its deployments' runs as its own
    child process, ends them when it starts (one serve per deployment).
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    ended = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=names)),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType(s) for s in ORPHAN_STATES]))
            ),
        )
        for run in runs:
            message = "its foreshock serve process was gone when serve started again"
            client.set_flow_run_state(run.id, Crashed(message=message), force=True)
            ended.append(run.name)
    return ended


def run_serve(args: argparse.Namespace, config: Config) -> int:
    from prefect import serve

    if not os.environ.get("PREFECT_API_URL"):
        log.warning("PREFECT_API_URL is not set: serving against a temporary local server (no UI, no history)")
    config_path = os.path.abspath(args.config) if args.config else None
    served = deployments(config, config_path, args.only)
    orphans = crash_orphaned_runs([d.name for d in served])
    if orphans:
        log.warning("marked %d run(s) left by a killed serve as crashed: %s", len(orphans), ", ".join(orphans))
    for deployment in served:
        log.info("serving %s/%s schedule %s", deployment.flow_name, deployment.name, describe_schedules(deployment))
    serve(*served, print_starting_message=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "serve",
        help="serve the scheduled Prefect deployments (ingest, cycle, retrain)",
        description="Serve foreshock-ingest, foreshock-cycle and foreshock-retrain with the cron schedules "
        "of [schedule] until stopped (Ctrl-C or SIGTERM). Runs execute in this process's host; "
        "point PREFECT_API_URL at a Prefect server to see them in its UI.",
    )
    parser.add_argument(
        "--only", action="append", choices=sorted(DEPLOYMENTS), help="serve only this deployment (repeatable)"
    )
    parser.set_defaults(func=run_serve)
