"""Scoring never runs code from the registry: a champion foreshock did not log is refused
without its code running; a foreshock version loads as data; trusted_runs_only checks the
run's source tag.  Real SQLite MLflow store."""

from __future__ import annotations

import mlflow
import pytest
from test_registry_fleet import fast_config, synthetic_fleet, train_and_register

from foreshock.models.registry import registry
from foreshock.models.registry.tracking import experiment_id
from foreshock.models.registry.trusted_bundle import LOGGED_BY_TAG, SOURCE_TAG, UntrustedModelError, version_tags

NAME = "trusted-registry-test"

EVIL = """
import pathlib
import mlflow
from mlflow.pyfunc import PythonModel

pathlib.Path({marker!r}).write_text("code from the registry ran at import")


class Evil(PythonModel):
    def load_context(self, context):
        pathlib.Path({marker!r}).write_text("code from the registry ran in load_context")

    def predict(self, context, model_input, params=None):
        return model_input


mlflow.models.set_model(Evil())
"""


@pytest.fixture(scope="module")
def trained(mlflow_uri, tmp_path_factory):
    config = fast_config(tmp_path_factory.mktemp("data"), NAME)
    features, failures = synthetic_fleet(seed=11)
    return train_and_register(config, features, failures)


def register_evil(tmp_path, fake_tags: bool) -> str:
    marker = tmp_path / "marker"
    code = tmp_path / "evil_model.py"
    code.write_text(EVIL.format(marker=str(marker)))
    with mlflow.start_run(experiment_id=experiment_id("untrusted-writer")):  # artifacts beside the store
        info = mlflow.pyfunc.log_model(name="evil", python_model=str(code))
    client = mlflow.MlflowClient()
    tags = version_tags() if fake_tags else {}
    version = mlflow.register_model(info.model_uri, NAME, tags=tags).version
    client.set_registered_model_alias(NAME, "champion", version)
    marker.unlink(missing_ok=True)  # logging may have run it; loading must not
    return str(marker)


@pytest.mark.parametrize("fake_tags", [False, True], ids=["untagged", "forged tags"])
def test_an_evil_models_from_code_champion_is_refused_without_running(trained, tmp_path, fake_tags):
    marker = register_evil(tmp_path, fake_tags)
    with pytest.raises(UntrustedModelError) as refused:
        registry.load_champion(NAME)
    assert "not registered by foreshock" in str(refused.value) or "not a foreshock bundle" in str(refused.value)
    assert not (tmp_path / "marker").exists(), marker
    registry.set_champion(NAME, trained.version, action="rollback", by="test", reason="back to the real model")


def test_a_foreshock_version_loads_as_data_and_trusted_runs_only_checks_its_run(trained):
    client = mlflow.MlflowClient()
    version = client.get_model_version(NAME, trained.version)
    assert version.tags[LOGGED_BY_TAG] == "foreshock"
    loaded = registry.load_version(NAME, trained.version, trusted_runs_only=True)
    assert loaded.bundle.feature_names and loaded.run_id == trained.run_id

    client.set_tag(trained.run_id, SOURCE_TAG, "someone else")
    try:
        with pytest.raises(UntrustedModelError, match="trusted_runs_only"):
            registry.load_version(NAME, trained.version, trusted_runs_only=True)
        assert registry.load_version(NAME, trained.version).version == str(trained.version)  # the default
    finally:
        client.set_tag(trained.run_id, SOURCE_TAG, registry.TRUSTED_SOURCE)


def test_score_without_a_champion_is_one_line_and_exit_2(mlflow_uri, tmp_path, capsys):
    from foreshock.pipelines.cli import main

    features = tmp_path / "data" / "features" / "date=2026-11-01" / "shard=00"
    features.mkdir(parents=True)
    synthetic_fleet(seed=3)[0].head(10).write_parquet(features / "part.parquet")
    config = tmp_path / "foreshock.toml"
    config.write_text('[models]\nname = "never-trained-model"\n')
    assert main(["--config", str(config), "--data-dir", str(tmp_path / "data"), "score"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()  # one line, no traceback
    assert line.endswith(
        " ERROR foreshock score: registered model 'never-trained-model' has no champion: run `foreshock train` first"
    )


def test_an_untrusted_champion_is_refused_before_any_flow_run(trained, tmp_path):
    register_evil(tmp_path, fake_tags=False)
    try:
        with pytest.raises(UntrustedModelError, match="not registered by foreshock"):
            registry.check_champion(NAME)
    finally:
        registry.set_champion(NAME, trained.version, action="rollback", by="test", reason="back to the real model")
    assert registry.check_champion(NAME, trusted_runs_only=True) == str(trained.version)
