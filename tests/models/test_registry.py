"""Registry: training runs become versions, aliases move as documented, scoring follows
the champion, and rolling back is moving the alias.  Real SQLite MLflow store."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import mlflow
import polars as pl
import pytest
from test_registry_fleet import SBE, TEMP, fast_config, synthetic_fleet, train_and_register

from foreshock.models.registry import registry, scoring, tracking

NAME = "registry-test"


@pytest.fixture(scope="module")
def registered(mlflow_uri, tmp_path_factory):
    """Two training runs: v1 on a fleet whose errors announce failures, v2 on one where
    temperature does (so the two versions score the same units differently)."""
    config = fast_config(tmp_path_factory.mktemp("data"), NAME)
    features, failures = synthetic_fleet(seed=11)
    other_features, other_failures = synthetic_fleet(seed=12, precursor=TEMP)
    first = train_and_register(config, features, failures)
    after_first = registry.aliases(NAME)
    second = train_and_register(config, other_features, other_failures)
    return {
        "config": config,
        "features": features,
        "records": (first, second),
        "after_first": after_first,
        "store": Path(mlflow_uri[len("sqlite:///") :]).parent,
    }


def test_two_training_runs_give_two_versions_and_move_challenger(registered):
    first, second = registered["records"]
    assert (first.version, second.version) == ("1", "2")
    assert [str(v.version) for v in registry.versions(NAME)] == ["1", "2"]
    # The first version ever is champion as well as challenger; the second only challenger.
    assert registered["after_first"] == {"champion": "1", "challenger": "1"}
    assert registry.aliases(NAME) == {"champion": "1", "challenger": "2"}
    tags = mlflow.MlflowClient().get_model_version(NAME, "1").tags
    assert tags["foreshock.promotion"] == "first version"
    assert mlflow.MlflowClient().get_model_version(NAME, "2").run_id == second.run_id


def test_training_run_logs_params_metrics_plots_and_models(registered):
    client = mlflow.MlflowClient()
    run = client.get_run(registered["records"][0].run_id)
    params, metrics = run.data.params, run.data.metrics
    assert params["models.name"] == NAME
    assert params["features.count"] == "2"
    assert params["data.start"].startswith("2026-01-01")
    assert params["labels.horizons"] == "24h,72h"
    # The lead-time table at each operating point, for every model.
    for model in ("gbm", "cox", "baseline"):
        assert f"{model}.72h.budget.recall" in metrics
        assert f"{model}.72h.snapshot.pr_auc" in metrics
    assert 0.0 <= metrics["gbm.72h.budget.recall"] <= 1.0
    plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert plots == {
        f"plots/{name}.png"
        for name in ("pr_curve", "calibration", "survival_by_risk_decile", "lead_time_histogram", "feature_importance")
    }
    used = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/features_used.json")
    assert used["feature_names"] == [SBE, TEMP]
    # Artifacts live beside the SQLite store, not in ./mlruns of whatever directory we ran in.
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.artifact_location == (registered["store"] / "artifacts").as_uri()
    assert run.info.artifact_uri.startswith(experiment.artifact_location)
    logged = {
        m.name
        for m in mlflow.search_logged_models(experiment_ids=[run.info.experiment_id], output_format="list")
        if m.source_run_id == run.info.run_id
    }
    assert logged == {"gbm-24h", "gbm-72h", tracking.BUNDLE_MODEL_NAME}


def test_registered_pyfunc_scores_its_input_example(registered):
    features = registered["features"]
    model = mlflow.pyfunc.load_model(f"models:/{NAME}/1")
    assert model.metadata.signature is not None
    example = features.tail(3).select("unit_id", "ts", SBE, TEMP).with_columns(pl.col("ts").dt.replace_time_zone(None))
    out = pl.from_pandas(model.predict(example.to_pandas()))
    assert set(out["model"]) == {"gbm", "cox", "baseline"}
    assert set(out["horizon"]) == {"24h", "72h"}
    assert out.height == 3 * 3 * 2
    assert out["risk"].is_between(0, 1).all()
    requirements = Path(mlflow.pyfunc.get_model_dependencies(f"models:/{NAME}/1")).read_text().split()
    assert requirements[0].startswith("artifacts/foreshock-") and requirements[0].endswith(".whl")
    assert f"lightgbm=={version('lightgbm')}" in requirements


def test_scoring_follows_the_champion_and_rollback_moves_it(registered):
    features = registered["features"]
    latest = scoring.latest_snapshots(features)
    assert latest.height == features["unit_id"].n_unique()

    before = scoring.live_scores(registry.load_champion(NAME), latest)
    assert set(before["model_version"]) == {"1"}
    assert set(before["run_id"]) == {registered["records"][0].run_id}
    assert set(before["model"]) == {"gbm"}  # the primary model decides drains
    assert before.height == latest.height * 2  # one row per unit and horizon
    signals = before["top_signals"][0].to_list()
    assert signals and set(signals[0]) == {"signal", "value", "contribution"}
    assert set(before["node"].drop_nulls()) and set(before["rack"].drop_nulls())

    previous = registry.set_champion(NAME, "2", action="approved", by="alice", reason="temperature model")
    assert previous == "1"
    promoted = scoring.live_scores(registry.load_champion(NAME), latest)
    assert set(promoted["model_version"]) == {"2"}
    key = ["unit_id", "horizon"]
    changed = before.select(*key, "risk").join(promoted.select(*key, "risk"), on=key, suffix="_v2")
    assert (changed["risk"] - changed["risk_v2"]).abs().max() > 0.01

    registry.set_champion(NAME, "1", action="rollback", by="bob", reason="v2 drains healthy GPUs")
    after = scoring.live_scores(registry.load_champion(NAME), latest)
    assert set(after["model_version"]) == {"1"}
    assert after.select(*key, "risk").equals(before.select(*key, "risk"))
    tags = mlflow.MlflowClient().get_model_version(NAME, "1").tags
    assert (tags["foreshock.promotion"], tags["foreshock.promoted_by"]) == ("rollback", "bob")
    assert tags["foreshock.promotion_reason"] == "v2 drains healthy GPUs"
    assert tags["foreshock.previous_champion"] == "2"


def test_unknown_version_is_refused_with_the_known_ones(registered):
    with pytest.raises(ValueError, match=r"no version 7 \(versions: 1, 2\)"):
        registry.set_champion(NAME, 7, action="rollback", by="bob")
    assert registry.aliases(NAME)["champion"] == "1"


def test_loading_without_a_champion_says_what_to_do(mlflow_uri):
    with pytest.raises(LookupError, match="foreshock train"):
        registry.load_champion("never-trained")


def test_backtest_report_flattens_to_metric_names():
    report = {
        "models": {
            "gbm": {
                "72h": {
                    "snapshot": {"pr_auc": 0.4, "c_index": None},
                    "operating_points": {
                        "budget": {"recall": 0.5, "by_mode": {"memory": {"recall": 1.0}}},
                        "target_precision": None,
                    },
                }
            }
        },
        "scored": {"units": 3},
    }
    assert tracking.backtest_metrics(report) == {
        "gbm.72h.snapshot.pr_auc": 0.4,
        "gbm.72h.budget.recall": 0.5,
        "gbm.72h.budget.by_mode.memory.recall": 1.0,
        "scored.units": 3.0,
    }
