"""One small demo fleet run through the whole pipeline, shared by the tests that read a
finished data directory (the notebooks, the fleet report page, serve, the short soak, the
kill tests).

``foreshock demo`` itself (simulate, ingest, lake, features, backtest, train, review, score,
publish, replay), on 64 GPUs for 14 days with the failure rate raised so a short history
still holds about twenty failures.  It is the suite's run of the demo command, as a user
runs it: a process of its own, with its own temporary Prefect server and its registry in
the data directory (``mlflow/``).  Built once per test session, in the background from the
session's start (:class:`DemoBuild`): about a minute on 2 cores, spent on the core the
other tests leave idle instead of in the first reader's setup.  Under pytest-xdist the
workers share one build (:func:`shared_build`): the first to claim it runs it, the others
wait for its exit code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_UNITS = 64
DEMO_DAYS = 14
DEMO_SEED = 11
DEMO_FAILURE_RATE = 20.0  # per 1,000 unit-days in service
# Its registered model's name (the fleet page names it).
DEMO_CONFIG = '[models]\nname = "foreshock-demo-fleet"\n'
BUILD_TIMEOUT_S = 1800  # a minute idle; many on a saturated 2-core machine


def demo_config_file(data_dir: Path) -> Path:
    """The configuration the demo data was built with (``foreshock.toml`` beside ``data_dir``):
    run a notebook or a command from that directory, or pass it as ``--config``."""
    return Path(data_dir).parent / "foreshock.toml"


def demo_tracking_uri(data_dir: Path) -> str:
    """The demo's MLflow registry: the SQLite store in ``data_dir/mlflow`` (where a command
    run without ``MLFLOW_TRACKING_URI`` keeps it; a copy of the data directory has its own)."""
    return f"sqlite:///{Path(data_dir).resolve() / 'mlflow' / 'mlflow.db'}"


class DemoBuild:
    """``foreshock demo`` into ``data_dir``, running in a process of its own from construction;
    :meth:`wait` returns the finished data directory (raises if a step failed)."""

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        config_file = demo_config_file(self.data_dir)
        config_file.parent.mkdir(parents=True, exist_ok=True)
        config_file.write_text(DEMO_CONFIG)
        fleet = ["--units", str(DEMO_UNITS), "--days", str(DEMO_DAYS), "--seed", str(DEMO_SEED)]
        self.argv = ["--config", str(config_file), "--data-dir", str(self.data_dir), "demo", *fleet]
        self.argv += ["--failure-rate", str(DEMO_FAILURE_RATE)]
        # no Prefect API and no tracking URI: the demo starts its temporary Prefect server
        # (its own home, not the session's) and keeps its registry in the data directory
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_TRACKING_URI"))}
        env.update(PREFECT_HOME=str(config_file.parent / "prefect-home"), MLFLOW_DISABLE_TELEMETRY="true")
        self.log = _log(self.data_dir)
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "foreshock.pipelines.cli", *self.argv],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # stopped with its children (the server, the fold workers)
            )
        self.checked: Path | None = None

    def wait(self) -> Path:
        """The finished data directory, its outputs checked."""
        if self.checked is not None:
            return self.checked
        rc = self.process.wait(BUILD_TIMEOUT_S)
        self.checked = _finished(self.data_dir, rc, f"foreshock {' '.join(self.argv)}")
        return self.checked

    def stop(self, finish: bool = False) -> None:
        """End the build if it still runs (a session that ended early), with its children
        (a child left behind by a finished build too: its process group is the build's).
        ``finish``: let a running build end first (other workers may be waiting for it)."""
        if finish and self.process.poll() is None:
            try:
                self.process.wait(BUILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
                self.process.wait(grace)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue


def _log(data_dir: Path) -> Path:
    """The build's output (beside its configuration)."""
    return demo_config_file(data_dir).parent / "demo.log"


def _finished(data_dir: Path, rc: int, what: str) -> Path:
    """``data_dir`` once the build ``what`` exited with ``rc`` 0 and its outputs are there
    (raises with the log's tail otherwise)."""
    if rc != 0:
        tail = _log(data_dir).read_text(errors="replace")[-3000:]
        raise RuntimeError(f"demo data: {what} exited with {rc}:\n{tail}")
    sim = data_dir / "raw" / "sim"
    assert (sim / "ground_truth.parquet").is_file() and (data_dir / "outbox" / "LATEST").is_file()
    assert (data_dir / "reports" / "replay" / "replay.json").is_file()
    assert (data_dir / "mlflow" / "mlflow.db").is_file()  # its registry, where the readers look
    return data_dir


def shared_build_done(root: Path) -> bool:
    """Whether the workers' shared build in ``root`` has ended (its exit code is written)."""
    return (Path(root) / SHARED_RC).is_file()


SHARED_RC = "demo.rc"


class SharedBuild:
    """One demo build for every pytest-xdist worker of a run, in ``root/demo/data``: the
    worker that claims ``root/demo.claim`` first runs it (a :class:`DemoBuild`) and writes
    its exit code to ``root/demo.rc``; the others wait for that file."""

    def __init__(self, root: Path):
        self.data_dir = Path(root) / "demo" / "data"
        self.rc_file = Path(root) / SHARED_RC
        claim = Path(root) / "demo.claim"
        self.build: DemoBuild | None = None
        try:
            os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return  # another worker builds it
        self.build = DemoBuild(self.data_dir)
        claim.write_text(str(self.build.process.pid))
        threading.Thread(target=self._record_exit, daemon=True).start()

    def _record_exit(self) -> None:
        rc = self.build.process.wait()
        partial = self.rc_file.with_suffix(".part")
        partial.write_text(str(rc))
        os.replace(partial, self.rc_file)

    def wait(self) -> Path:
        if self.build is not None:
            return self.build.wait()
        deadline = time.monotonic() + BUILD_TIMEOUT_S
        while not self.rc_file.is_file():
            if time.monotonic() > deadline:
                raise RuntimeError(f"demo data: no build finished in {BUILD_TIMEOUT_S} s ({self.data_dir})")
            time.sleep(1)
        return _finished(self.data_dir, int(self.rc_file.read_text()), "the shared build")

    def stop(self) -> None:
        if self.build is not None:
            self.build.stop(finish=True)  # a reader on another worker may still wait for it
