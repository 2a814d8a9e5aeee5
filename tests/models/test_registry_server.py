"""Train and review against a real ``mlflow server`` over HTTP (the production setup)."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
from test_registry_fleet import TEMP, fast_config, synthetic_fleet, train_and_register

from foreshock.models.estimators.base import config_horizons
from foreshock.models.estimators.training import labelled_until
from foreshock.models.registry import promotion, registry, tracking
from tests.pipelines.services import mlflow_server as running_mlflow_server

NAME = "served-model"


@pytest.fixture
def mlflow_server(tmp_path, monkeypatch):
    """A real tracking server on 127.0.0.1 with its own SQLite store and artifact root."""
    previous_uri = mlflow.get_tracking_uri()
    try:
        with running_mlflow_server(tmp_path) as url:
            monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
            mlflow.set_tracking_uri(url)
            yield {"url": url, "artifacts": tmp_path / "artifacts"}
    finally:
        mlflow.set_tracking_uri(previous_uri)


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
