"""A real Dask cluster for tests: a ``dask scheduler`` and ``dask worker`` processes on
127.0.0.1 (a free port, logs in a temp directory), stopped by the PIDs (process groups) this
helper started, never by name."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DASK = Path(sys.executable).with_name("dask")
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_workers(address: str, count: int, timeout: float = 120) -> None:
    from distributed import Client

    with Client(address, timeout=timeout) as client:
        client.wait_for_workers(count, timeout=timeout)


@contextmanager
def dask_cluster(log_dir: Path, workers: int = 2) -> Iterator[str]:
    """Yields the scheduler's address (``tcp://127.0.0.1:PORT``) once ``workers``
    single-threaded worker processes have joined it."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    started = []
    try:
        started.append(
            subprocess.Popen(
                [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                stdout=open(log_dir / "scheduler.log", "w"),
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        )
        started.append(
            subprocess.Popen(
                [str(DASK), "worker", address, "--nworkers", str(workers), "--nthreads", "1"]
                + ["--memory-limit", "2GB", "--no-dashboard"],
                stdout=open(log_dir / "workers.log", "w"),
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        )
        _wait_for_workers(address, workers)
        yield address
    finally:
        for process in reversed(started):  # our own processes, by PID (their groups)
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in reversed(started):
            try:
                process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
