"""Reading the registry without MLflow's client (``foreshock status`` and ``score``): the
embedded SQLite store and a real ``mlflow server`` give what the client gives."""

from __future__ import annotations

import mlflow
import pytest

from foreshock.models.registry import registry, registry_reader
from foreshock.models.registry.registry_reader import NotReadable, alias_record, run_tags, version_record
from foreshock.models.registry.tracking import experiment_id


def _register(name: str) -> tuple[str, str]:
    """A run with tags, two versions of ``name`` with tags, ``champion`` on the second."""
    client = mlflow.MlflowClient()
    mlflow.set_experiment(experiment_id=experiment_id(f"reader-{name}"))  # artifacts beside the store
    with mlflow.start_run() as run:
        mlflow.set_tags({"foreshock.source": "foreshock train", "note": "a run tag"})
    client.create_registered_model(name)
    client.create_model_version(name, source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    second = client.create_model_version(
        name, source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id, tags={"foreshock.logged_by": "foreshock"}
    )
    client.set_model_version_tag(name, second.version, "foreshock.review", "promoted")
    client.set_registered_model_alias(name, "champion", second.version)
    return run.info.run_id, str(second.version)


def _same_as_client(uri: str, name: str) -> None:
    run_id, version = _register(name)
    client = mlflow.MlflowClient()
    expected = client.get_model_version_by_alias(name, "champion")
    found = alias_record(uri, name, "champion")
    assert found is not None
    assert (found.name, found.version, found.run_id, found.creation_timestamp, found.source) == (
        expected.name,
        str(expected.version),
        expected.run_id,
        expected.creation_timestamp,
        expected.source,
    )
    assert found.version == version
    assert found.tags == expected.tags == {"foreshock.logged_by": "foreshock", "foreshock.review": "promoted"}
    assert run_tags(uri, run_id) == client.get_run(run_id).data.tags
    assert run_tags(uri, run_id)["foreshock.source"] == "foreshock train"
    assert alias_record(uri, name, "no-such-alias") is None
    assert alias_record(uri, f"{name}-missing", "champion") is None
    # the alias moves: the reader follows it
    client.set_registered_model_alias(name, "champion", "1")
    assert alias_record(uri, name, "champion").version == "1"


def test_sqlite_store_reads_what_the_client_reads(mlflow_uri):
    _same_as_client(mlflow_uri, "reader-sqlite")
    assert version_record(mlflow_uri, "reader-sqlite", 2).tags["foreshock.review"] == "promoted"
    mlflow.MlflowClient().delete_model_version("reader-sqlite", "2")
    assert version_record(mlflow_uri, "reader-sqlite", 2) is None  # deleted: the client finds none either


def test_tracking_server_reads_what_the_client_reads(mlflow_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(mlflow_server)
    try:
        _same_as_client(mlflow_server, "reader-http")
        with pytest.raises(NotReadable):  # artifacts on a server: the client downloads them
            version_record(mlflow_server, "reader-http", 1)
    finally:
        mlflow.set_tracking_uri(previous)


def test_settings_the_reader_does_not_honour_leave_it_to_the_client(mlflow_uri, monkeypatch):
    _register("reader-tls")
    monkeypatch.setenv("MLFLOW_TRACKING_INSECURE_TLS", "true")
    with pytest.raises(NotReadable):
        alias_record(mlflow_uri, "reader-tls", "champion")
    assert str(registry.find_alias("reader-tls", "champion").version) == "2"  # through the client
    with pytest.raises(NotReadable):
        alias_record("postgresql://user@127.0.0.1/mlflow", "reader-tls", "champion")
    assert registry_reader.tracking_uri() == mlflow_uri
