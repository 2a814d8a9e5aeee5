"""Train and review against a real ``mlflow server`` over HTTP (the production setup)."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
from test_registry_fleet import TEMP, fast_config, synthetic_fleet, train_and_register

from foreshock.models.estimators.base import config_horizons
from foreshock.models.estimators.training import labelled_until
from foreshock.models.registry import promotion, registry, tracking

NAME = "served-model"


@pytest.fixture
def served(mlflow_server, mlflow_server_root, monkeypatch):
    """The session's real tracking server on 127.0.0.1 (its own SQLite store and artifact
    root), as this test's tracking URI."""
    previous_uri = mlflow.get_tracking_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    mlflow.set_tracking_uri(mlflow_server)
    try:
        yield {"url": mlflow_server, "artifacts": mlflow_server_root / "artifacts"}
    finally:
        mlflow.set_tracking_uri(previous_uri)


@pytest.mark.slow
def test_train_and_review_over_http(served, tmp_path):
    config = fast_config(tmp_path / "data", NAME)
    features, failures = synthetic_fleet(seed=31)
    # the session's server also holds other tests' models: count only the ones added here
    before = set(served["artifacts"].rglob("MLmodel"))
    first = train_and_register(config, features, failures)
    second = train_and_register(config, *synthetic_fleet(seed=32, precursor=TEMP))
    assert tracking.tracking_uri(config.mlflow_dir) == served["url"]
    assert not (config.data_dir / "mlflow").exists()  # nothing went to the embedded store

    result = promotion.run_review(config, labelled_until(features, failures, config_horizons(config)), failures)
    assert not result.promoted
    assert registry.aliases(NAME) == {"champion": first.version, "challenger": second.version}

    # Everything is on the server: a fresh client sees the run, the report and the model.
    client = mlflow.MlflowClient(served["url"])
    assert client.get_run(result.run_id).data.tags["foreshock.kind"] == "review"
    report = mlflow.artifacts.download_artifacts(
        run_id=result.run_id, artifact_path=f"review/{result.report_md.name}", dst_path=str(tmp_path / "fetched")
    )
    assert "| metric | champion v1 | challenger v2 | change |" in Path(report).read_text()
    # both versions' artifacts proxied to the server's root
    assert len(set(served["artifacts"].rglob("MLmodel")) - before) >= 2
    assert registry.load_champion(NAME).version == first.version
