"""Environment defaults for Prefect and MLflow, set before either is imported.

Prefect's ephemeral server can miss its default start timeout on a 2-core machine, and
MLflow phones home unless told not to (see DESIGN.md, known pitfalls).  Values the user
already exported win.
"""

from __future__ import annotations

import os
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


def configure_mlflow(data_dir: Path) -> str:
    """Point MLflow at the embedded SQLite store under ``data_dir/mlflow`` unless
    ``MLFLOW_TRACKING_URI`` is set; returns the tracking URI in use."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        store = Path(data_dir).resolve() / "mlflow"
        store.mkdir(parents=True, exist_ok=True)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{store / 'mlflow.db'}"
    return os.environ["MLFLOW_TRACKING_URI"]


configure_prefect()
