"""Environment defaults for Prefect and MLflow, set before either is imported.

Prefect's ephemeral server can miss its default start timeout on a 2-core machine, and
MLflow phones home unless told not to (see docs/design.md, known pitfalls).  Values the user
already exported win.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefect.task_runners import TaskRunner

    from foreshock.config import Config

RUNNERS = ("local", "dask")

PREFECT_DEFAULTS = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_UI_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
}


def configure_prefect() -> None:
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)


def configure_mlflow(store: Path) -> str:
    """Point MLflow at the embedded SQLite store in ``store`` (``Config.mlflow_dir``) unless
    ``MLFLOW_TRACKING_URI`` is set; returns the tracking URI in use."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        store = Path(store).resolve()
        store.mkdir(parents=True, exist_ok=True)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{store / 'mlflow.db'}"
    return os.environ["MLFLOW_TRACKING_URI"]


def quiet_mlflow() -> None:
    """MLflow's per-model notes (uv project detected, pip version unknown) are noise here."""
    for name in ("mlflow.utils.environment", "mlflow.utils.uv_utils", "mlflow.pyfunc", "mlflow.models.model"):
        logging.getLogger(name).setLevel(logging.ERROR)


def stamp() -> str:
    """A UTC timestamp for run and file names: ``20261203T101500Z``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def task_runner(config: Config) -> TaskRunner:
    """The Prefect task runner ``[runner]`` asks for: a thread pool of ``local_workers``
    threads, or prefect-dask's ``DaskTaskRunner`` on the cluster at ``dask_address`` (a
    ``LocalCluster`` of ``local_workers`` single-threaded processes when it is empty).
    Tasks pass settings and paths, never frames, so either runner gives the same results."""
    section = config.section("runner")
    kind, workers = section["kind"], int(section["local_workers"])
    if kind == "local":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers)
    if kind != "dask":
        raise ValueError(f"[runner] kind: {kind!r} is not one of {', '.join(RUNNERS)}")
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ValueError(
            "[runner] kind = dask needs the dask extra: uv sync --extra dask (make setup installs it)"
        ) from None
    if section["dask_address"]:
        return DaskTaskRunner(address=section["dask_address"])
    return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True})


def runner_overrides(runner: str | None, dask_address: str | None) -> dict:
    """Config overrides for the global ``--runner`` / ``--dask-address`` options (an address
    alone implies the Dask runner)."""
    section = {}
    if runner:
        section["kind"] = runner
    if dask_address:
        section["dask_address"] = dask_address
        section.setdefault("kind", "dask")
    return {"runner": section} if section else {}


configure_prefect()
