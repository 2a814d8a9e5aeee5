"""Train and review against a real ``mlflow server`` over HTTP (the production setup)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import pytest
from test_registry_fleet import TEMP, fast_config, synthetic_fleet, train_and_register

from foreshock.models import promotion, registry, tracking
from foreshock.models.base import config_horizons
from foreshock.models.training import labelled_until

NAME = "served-model"
STARTUP_TIMEOUT_S = 240  # migrations + uvicorn: ~17 s idle, minutes on a saturated 2-core machine


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path, monkeypatch):
    """A real tracking server on 127.0.0.1 with its own SQLite store and artifact root."""
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "served-artifacts"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
    )
    url = f"http://127.0.0.1:{port}"
    previous_uri = mlflow.get_tracking_uri()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if server.poll() is not None:
                pytest.fail(
                    f"mlflow server exited with {server.returncode}: {(tmp_path / 'server.log').read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not answer /health within {STARTUP_TIMEOUT_S} s")
            time.sleep(0.5)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        mlflow.set_tracking_uri(url)
        yield {"url": url, "artifacts": tmp_path / "served-artifacts"}
    finally:
        mlflow.set_tracking_uri(previous_uri)
        # The server runs in its own session: signal its process group (workers included).
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()


@pytest.mark.slow
def test_train_and_review_over_http(mlflow_server, tmp_path):
    config = fast_config(tmp_path / "data", NAME)
    features, failures = synthetic_fleet(seed=31)
    first = train_and_register(config, features, failures)
    second = train_and_register(config, *synthetic_fleet(seed=32, precursor=TEMP))
    assert tracking.tracking_uri(config.mlflow_dir) == mlflow_server["url"]
    assert not (config.data_dir / "mlflow").exists()  # nothing went to the embedded store

    result = promotion.run_review(config, labelled_until(features, failures, config_horizons(config)), failures)
    assert not result.promoted
    assert registry.aliases(NAME) == {"champion": first.version, "challenger": second.version}

    # Everything is on the server: a fresh client sees the run, the report and the model.
    client = mlflow.MlflowClient(mlflow_server["url"])
    assert client.get_run(result.run_id).data.tags["foreshock.kind"] == "review"
    report = mlflow.artifacts.download_artifacts(
        run_id=result.run_id, artifact_path=f"review/{result.report_md.name}", dst_path=str(tmp_path / "fetched")
    )
    assert "| metric | champion v1 | challenger v2 | change |" in Path(report).read_text()
    assert any(mlflow_server["artifacts"].rglob("MLmodel"))  # artifacts proxied to the server's root
    assert registry.load_champion(NAME).version == first.version
