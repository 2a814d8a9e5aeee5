"""Environment defaults for Prefect and MLflow, set before either is imported, and the
process's own cleanup.

Prefect's ephemeral server can miss its default start timeout on a 2-core machine, and
MLflow phones home unless told not to (see docs/design.md, known pitfalls).  Values the user
already exported win.

Without ``PREFECT_API_URL`` a flow run starts a temporary Prefect server as a child
process and stops it at interpreter exit; a CLI killed by SIGTERM never gets there and the
server is orphaned.  :func:`stop_servers_on_signals` makes SIGTERM and SIGINT stop it first.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
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


def stop_ephemeral_servers() -> int:
    """Stop the temporary Prefect servers this process started; returns how many."""
    module = sys.modules.get("prefect.server.api.server")
    if module is None:  # Prefect not imported: no server was started
        return 0
    servers = list(getattr(module.SubprocessASGIServer, "_instances", {}).values())
    for server in servers:
        server.stop()
    return len(servers)


def stop_servers_on_signals() -> None:
    """On SIGTERM or SIGINT, stop this process's temporary Prefect server, then exit as
    the signal asks (SIGINT: KeyboardInterrupt, exit 130; SIGTERM: exit 143)."""

    def handler(signum, frame):  # noqa: ARG001 - the signal module's signature
        stop_ephemeral_servers()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (a CLI called from a worker thread)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)


def stamp() -> str:
    """A UTC timestamp for run and file names: ``20261203T101500Z``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


configure_prefect()
