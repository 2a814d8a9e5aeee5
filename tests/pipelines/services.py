"""Real servers for the pipeline tests: started on 127.0.0.1 on a free port, stopped by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, timeout: float, process: subprocess.Popen | None = None, log: Path | None = None) -> None:
    """Until ``url`` answers 200; fails early with the log if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"{process.args[0]} exited {process.returncode}: {log.read_text()[-3000:] if log else ''}"
            )
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s: {log.read_text()[-3000:] if log else ''}")


def stop(process: subprocess.Popen, grace: float = 20) -> None:
    """SIGTERM to the process group this test started (the server and its children), then SIGKILL."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@contextlib.contextmanager
def running(argv: list[str], log: Path, env: dict | None = None, cwd: Path | None = None) -> Iterator[subprocess.Popen]:
    """A background process in its own session (so it and its children stop together)."""
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
    try:
        yield process
    finally:
        stop(process)


MLFLOW_SERVER_STARTUP_S = 240  # migrations + uvicorn: ~17 s idle, minutes on a saturated 2-core machine


@contextlib.contextmanager
def mlflow_server(root: Path, timeout: float = MLFLOW_SERVER_STARTUP_S) -> Iterator[str]:
    """A real ``mlflow server`` on 127.0.0.1 with its own SQLite store and artifact root
    (``root/artifacts``), stopped by its process group (workers included); yields its URL."""
    with mlflow_server_starting(root) as ready:
        yield ready(timeout)


@contextlib.contextmanager
def mlflow_server_starting(root: Path) -> Iterator[Callable[..., str]]:
    """:func:`mlflow_server` without the wait: the server starts at once, and the function
    yielded waits until it answers (``timeout`` seconds at most) and returns its URL."""
    port = free_port()
    argv = [
        str(Path(sys.executable).with_name("mlflow")),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{root / 'server.db'}",
        "--artifacts-destination",
        str(root / "artifacts"),
    ]
    log = root / "server.log"
    # no job runner: MLflow's server jobs (GenAI trace rollups, prompt optimisation) are not
    # what foreshock uses, and each of its four processes imports MLflow again
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with running(argv, log, env=env) as server:
        url = f"http://127.0.0.1:{port}"

        def ready(timeout: float = MLFLOW_SERVER_STARTUP_S) -> str:
            wait_http(f"{url}/health", timeout, server, log)
            return url

        yield ready


@contextlib.contextmanager
def prometheus_server(openmetrics: Path, root: Path, timeout: float = 300) -> Iterator[str]:
    """A real Prometheus on 127.0.0.1 serving the series of an OpenMetrics file, backfilled
    into ``root/tsdb`` with ``promtool`` (the file is removed once backfilled: a benchmark's is
    large); stopped by its process group; yields its base URL."""
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(root / "tsdb")],
        check=True,
        capture_output=True,
        timeout=1800,
    )
    openmetrics.unlink()
    (root / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    argv = [
        "prometheus",
        f"--config.file={root / 'prometheus.yml'}",
        f"--storage.tsdb.path={root / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=3650d",  # the series may lie far in the past
    ]
    log = root / "prometheus.log"
    with running(argv, log) as process:
        wait_http(f"http://127.0.0.1:{port}/-/ready", timeout, process, log)
        yield f"http://127.0.0.1:{port}"
