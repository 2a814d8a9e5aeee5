"""`foreshock --runner dask --dask-address ...` runs the features flow on a real Dask cluster
(a scheduler and two single-threaded worker processes started here on 127.0.0.1) and
stores exactly what the local thread-pool runner stores."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_fleet
from polars.testing import assert_frame_equal

from foreshock.config import load_config
from foreshock.features.store import scan_features
from foreshock.pipelines.cli import main

pytest.importorskip("prefect_dask", reason="the dask extra is not installed (make setup installs it)")
DASK = Path(sys.executable).with_name("dask")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_workers(address: str, count: int, timeout: float = 120) -> None:
    from distributed import Client

    with Client(address, timeout=timeout) as client:
        client.wait_for_workers(count, timeout=timeout)


@pytest.fixture
def dask_cluster(tmp_path):
    if not DASK.exists():
        pytest.skip(f"no dask command next to {sys.executable}")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = tmp_path / "dask-logs"
    logs.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
    scheduler = subprocess.Popen(
        [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
        stdout=open(logs / "scheduler.log", "w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    workers = subprocess.Popen(
        [str(DASK), "worker", address, "--nworkers", "2", "--nthreads", "1", "--memory-limit", "2GB", "--no-dashboard"],
        stdout=open(logs / "workers.log", "w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        _wait_for_workers(address, 2)
        yield address
    finally:
        for process in (workers, scheduler):  # our own processes, by PID (their groups)
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in (workers, scheduler):
            try:
                process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _config(data_dir: Path):
    return load_config(None, data_dir=data_dir).with_overrides(
        {
            "features": {"windows": ["1h", "6h", "1d"], "baseline_window": "1d", "expected_sample_every": "10m"},
            "lake": {"shards": 4},
        }
    )


def _write_toml(path: Path) -> Path:
    path.write_text(
        '[features]\nwindows = ["1h", "6h", "1d"]\nbaseline_window = "1d"\nexpected_sample_every = "10m"\n'
        "[lake]\nshards = 4\n"
    )
    return path


def test_dask_cluster_features_equal_the_local_runner(prefect_server, dask_cluster, tmp_path, capsys):
    fleet = make_fleet(5, units=12, days=2, failures=1)
    local_dir, dask_dir = tmp_path / "local", tmp_path / "dask"
    fleet.write(_config(local_dir).lake_dir, shards=4)
    shutil.copytree(local_dir / "lake", dask_dir / "lake")
    toml = str(_write_toml(tmp_path / "foreshock.toml"))

    assert main(["--config", toml, "--data-dir", str(local_dir), "features"]) == 0
    assert (
        main(
            [
                "--config",
                toml,
                "--data-dir",
                str(dask_dir),
                "--runner",
                "dask",
                "--dask-address",
                dask_cluster,
                "features",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("unit snapshots") == 2

    local = scan_features(_config(local_dir)).collect().sort("unit_id", "ts")
    distributed = scan_features(_config(dask_dir)).collect().sort("unit_id", "ts")
    assert local.height > 0
    assert_frame_equal(distributed, local)
    # The work really ran on the cluster: its scheduler moved tasks to the workers.
    from distributed import Client

    with Client(dask_cluster) as client:
        assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter) > 0


def test_an_unknown_runner_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--data-dir", str(tmp_path), "--runner", "spark", "features"])
    assert "invalid choice" in capsys.readouterr().err
