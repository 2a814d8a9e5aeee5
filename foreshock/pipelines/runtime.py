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

import errno
import json
import logging
import os
import re
import signal
import sys
import threading
import time
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


# the defaults this process set (not exported by the user): a command may change them
DEFAULTED: set[str] = set()


def configure_prefect() -> None:
    for key, value in PREFECT_DEFAULTS.items():
        if key not in os.environ:
            DEFAULTED.add(key)
            os.environ[key] = value


def configure_served_runs() -> None:
    """Flow runs of ``foreshock serve`` (subprocesses of the runner) send INFO lines and the
    ``foreshock`` loggers' lines to the Prefect server, so the UI shows what a run did."""
    if "PREFECT_LOGGING_LEVEL" in DEFAULTED:
        os.environ["PREFECT_LOGGING_LEVEL"] = "INFO"
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "foreshock")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")  # serve's own lines


def configure_mlflow(store: Path) -> str:
    """Export the tracking URI (:func:`foreshock.config.mlflow_tracking_uri`: the embedded
    SQLite store in ``store`` unless ``MLFLOW_TRACKING_URI`` is set) so every flow and task
    of this process uses it; returns it."""
    from foreshock.config import mlflow_tracking_uri

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ["MLFLOW_TRACKING_URI"] = mlflow_tracking_uri(store)
    return os.environ["MLFLOW_TRACKING_URI"]


def quiet_mlflow() -> None:
    """MLflow's per-model notes (uv project detected, pip version unknown) are noise here."""
    for name in ("mlflow.utils.environment", "mlflow.utils.uv_utils", "mlflow.pyfunc", "mlflow.models.model"):
        logging.getLogger(name).setLevel(logging.ERROR)


def retry_on_io_error(task_, task_run, state) -> bool:
    """A Prefect ``retry_condition_fn``: retry only a failure caused by I/O (a full disk, a
    flaky NFS mount, a network error); a bad input fails at once, and so does a missing or
    forbidden path (a retry finds the same)."""
    from foreshock.errors import is_user_error

    try:
        state.result(raise_on_failure=True)
    except Exception as exc:  # noqa: BLE001 - judged below: only I/O is worth a retry
        return not is_user_error(exc) and is_io_error(exc)
    return False


# How a library that wraps the OS error in its own exception (Polars' ComputeError around a
# Rust io::Error) still says it: "No space left on device (os error 28)".
IO_ERROR_TEXT = re.compile(r"os error (\d+)\)|no space left on device|disk quota exceeded|stale file handle", re.I)
NOT_RETRIED_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM}


def is_io_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is an I/O failure a retry may get past:
    an ``OSError`` other than a missing or forbidden path, or a library error wrapping
    one (Polars raises ``ComputeError("... No space left on device (os error 28)")``)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)):
            return False
        if isinstance(exc, OSError) or _server_busy(exc):
            return True
        found = IO_ERROR_TEXT.search(str(exc))
        if found:
            return not (found.group(1) and int(found.group(1)) in NOT_RETRIED_ERRNOS)
        # ``raise ... from None`` hides the context: a bad query answered by HTTP 400 is a
        # user error even though urllib's HTTPError (an OSError) was being handled.
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return False


# What a busy HTTP server (the Prefect API on SQLite under load: "503 Service Unavailable")
# answers for "try again later".
BUSY_STATUS = {429, 502, 503, 504}


def _server_busy(exc: BaseException) -> bool:
    """An HTTP call (httpx: Prefect's client) that could not connect, timed out, or was told
    to come back later: the soak saw cycles fail on the Prefect server's 503s."""
    httpx = sys.modules.get("httpx")  # only a process that made such a call has it loaded
    if httpx is None:
        return False
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in BUSY_STATUS


def print_json(value: object) -> None:
    """A command's result as one JSON document on stdout (``--json``); times as ISO 8601."""
    print(json.dumps(value, indent=2, default=_plain))


def _plain(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def add_json_flag(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON (for scripts)")


def _ephemeral_servers() -> list:
    """The temporary Prefect servers this process started (none if Prefect's server
    module was never imported)."""
    module = sys.modules.get("prefect.server.api.server")
    if module is None:
        return []
    return list(getattr(module.SubprocessASGIServer, "_instances", {}).values())


def stop_ephemeral_servers() -> int:
    """Stop the temporary Prefect servers this process started; returns how many."""
    servers = _ephemeral_servers()
    for server in servers:
        server.stop()
    return len(servers)


def flows_tracked() -> bool:
    """Whether a flow run here is recorded without starting a server first: a Prefect API
    is configured (``PREFECT_API_URL``, as under ``foreshock serve``) or this process
    already runs its temporary server (the demo starts one for all its stages).

    Otherwise a command of a second's work (score, publish) runs its flow's function
    directly: a temporary server takes tens of seconds to start on a small machine, and
    Prefect itself seconds to import, so it is asked only when it could say yes."""
    if "prefect.settings" not in sys.modules and not _api_url_may_be_set():
        return False
    from prefect.settings import get_current_settings

    return bool(get_current_settings().api.url) or bool(_ephemeral_servers())


def runs_as_flow(config: Config) -> bool:
    """Whether a command with a Prefect-free path (``ingest``, ``features``) runs as its flow:
    when the run is recorded (:func:`flows_tracked`) or its tasks go to a runner other than
    the local threads (Dask).  Otherwise it runs the same plan directly."""
    return flows_tracked() or config.section("runner")["kind"] != "local"


def _api_url_may_be_set() -> bool:
    """Whether one of Prefect's settings sources could set its API URL: the environment,
    a ``.env``, ``prefect.toml`` or ``pyproject.toml`` (``[tool.prefect]``) in the working
    directory, or the profiles file. Only where one could does Prefect get imported to say."""
    if "PREFECT_API_URL" in os.environ or Path("prefect.toml").is_file():
        return True
    home = Path(os.environ.get("PREFECT_HOME", "~/.prefect")).expanduser()
    profiles = Path(os.environ.get("PREFECT_PROFILES_PATH", home / "profiles.toml")).expanduser()
    for path, marker in (
        (Path(".env"), "PREFECT_API_URL"),
        (Path("pyproject.toml"), "tool.prefect"),
        (profiles, "PREFECT_API_URL"),
    ):
        try:
            if marker in path.read_text(errors="replace"):
                return True
        except OSError:  # absent or unreadable: it sets nothing
            continue
    return False


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


class _UTCFormatter(logging.Formatter):
    converter = time.gmtime

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(record.created)) + f".{int(record.msecs):03d}Z"


class JSONLineFormatter(_UTCFormatter):
    """One JSON object per line: ``{"ts", "level", "logger", "message"[, "exc"]}``."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line)


LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(message)s"


def log_level(verbose: int, quiet: int) -> int:
    """INFO by default; ``-v`` DEBUG, ``-q`` WARNING, ``-qq`` ERROR."""
    return min(max(logging.INFO - 10 * verbose + 10 * quiet, logging.DEBUG), logging.ERROR)


def configure_logging(level: int = logging.INFO, fmt: str = "text") -> None:
    """The ``foreshock`` loggers write timestamped, levelled lines to stderr (results a user
    asked for go to stdout). Replaces the handler of an earlier call (tests call main many
    times, each with its own stderr)."""
    logger = logging.getLogger("foreshock")
    for handler in list(logger.handlers):
        if getattr(handler, "_foreshock", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._foreshock = True  # type: ignore[attr-defined]
    handler.setFormatter(JSONLineFormatter() if fmt == "json" else _UTCFormatter(TEXT_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    quiet_user_errors_of_runs()


# Prefect's loggers of flow and task runs: each logs a failed run's exception (with its
# traceback) before the CLI reports it.
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
PREFECT_EXCEPTION = re.compile(r"encountered an exception:? (\w+):")


class UserErrorsOnce(logging.Filter):
    """Drop Prefect's lines about a run that failed on bad usage or input (a
    :func:`foreshock.errors.is_user_error`): the CLI says it in one line, without the
    engine's traceback of 80 lines.  ``-v`` keeps them (the foreshock loggers at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from foreshock.errors import is_user_error, user_error_names

        if logging.getLogger("foreshock").level <= logging.DEBUG:
            return True
        if record.exc_info and record.exc_info[1] is not None:
            return not is_user_error(record.exc_info[1])
        named = PREFECT_EXCEPTION.search(record.getMessage()) if record.levelno >= logging.ERROR else None
        return not (named and named.group(1) in user_error_names())


def quiet_user_errors_of_runs() -> None:
    """Install :class:`UserErrorsOnce` on Prefect's run loggers (once per process)."""
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, UserErrorsOnce) for f in logger.filters):
            logger.addFilter(UserErrorsOnce())


def task_runner(config: Config) -> TaskRunner:
    """The Prefect task runner ``[runner]`` asks for: a thread pool of ``local_workers``
    threads, or prefect-dask's ``DaskTaskRunner`` on the cluster at ``dask_address`` (a
    ``LocalCluster`` of ``local_workers`` single-threaded processes when it is empty).
    Tasks pass settings and paths, never frames, so either runner gives the same results."""
    section = config.section("runner")
    kind, workers = section["kind"], config.local_workers
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
    from foreshock.models.estimators.gbm_dask import dask_target  # the cluster training uses too

    target = dask_target(section)
    if isinstance(target, str):
        return DaskTaskRunner(address=target)
    url = flow_api_url()
    return DaskTaskRunner(cluster_kwargs={**target, "env": {"PREFECT_API_URL": url}} if url else target)


def needs_temporary_server() -> bool:
    """Whether this process's flow runs report to a temporary Prefect server: no
    ``PREFECT_API_URL`` and Prefect's ephemeral server allowed."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    return not settings.api.url and settings.server.ephemeral.enabled


def flow_api_url() -> str:
    """The Prefect API this process's flow runs report to: ``PREFECT_API_URL``, else its
    temporary server (started now; the flow's client finds the same one).

    A local Dask cluster's workers are new processes: without the URL they would each start
    a temporary server of their own (about 220 MB and tens of seconds each on 2 cores) and
    record the flow's task runs there, where nobody sees them."""
    if not needs_temporary_server():
        from prefect.settings import get_current_settings

        return str(get_current_settings().api.url or "")
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    return server.api_url


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
