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


configure_prefect()
