"""The registry path as a user runs it: ``foreshock train / review / score`` as Prefect
flows on a lake and feature store, against the embedded SQLite MLflow store."""

from __future__ import annotations

import json
from datetime import timedelta

import polars as pl
import pytest
from test_registry_fleet import synthetic_fleet

from foreshock.features.store import write_features
from foreshock.lake.merge import merge_into_lake
from foreshock.models.registry import registry
from foreshock.pipelines.cli import main

NAME = "cli-model"
CONFIG = f"""
[models]
name = "{NAME}"
gbm = {{ params = {{ num_threads = 1 }}, num_boost_round = 80, early_stopping_rounds = 15 }}

[features]
snapshot_every = "2h"   # the synthetic fleet's interval

[backtest]
drain_budget_per_day = 1
folds = 1

[review]
max_calibration_error = 0.0   # no model meets it: review must keep the champion

[policy]
second_only = false           # either risk enters drain, the 72-hour risk on its own hold
decision_enter_for = "12h"
"""


@pytest.fixture
def workspace(tmp_path, mlflow_uri, prefect_server):
    features, failures = synthetic_fleet(seed=41)
    data_dir = tmp_path / "data"
    write_features(features, data_dir / "features", shards=2)
    merge_into_lake(data_dir / "lake", "failures", failures, shards=2)
    config = tmp_path / "foreshock.toml"
    config.write_text(CONFIG)
    return {"args": ["--config", str(config), "--data-dir", str(data_dir)], "data_dir": data_dir, "features": features}


def _scored_version(data_dir) -> set[str]:
    return set(pl.read_parquet(data_dir / "scores" / "latest.parquet")["model_version"])


@pytest.mark.slow
def test_train_review_score_and_roll_back(workspace, capsys):
    args, data_dir = workspace["args"], workspace["data_dir"]
    assert main([*args, "train"]) == 0
    assert "registered cli-model version 1 (alias challenger)" in capsys.readouterr().out
    # The second run logs the first run's backtest instead of re-running it.
    (first_backtest,) = (data_dir / "models").glob("train-*/backtest")
    assert main([*args, "train", "--backtest", str(first_backtest.parent)]) == 2  # bad input: exit 2
    assert "not a backtest result, missing scores.parquet" in capsys.readouterr().err
    assert main([*args, "train", "--backtest", str(first_backtest)]) == 0
    assert registry.aliases(NAME) == {"champion": "1", "challenger": "2"}

    assert main([*args, "review"]) == 0
    out = capsys.readouterr().out
    assert "kept version 1 as champion" in out and "guardrail calibration error: FAIL" in out
    assert len(list((data_dir / "reports").glob("review-*.md"))) == 1
    assert len(list((data_dir / "reports").glob("review-*.html"))) == 1
    assert registry.aliases(NAME)["champion"] == "1"

    assert main([*args, "score"]) == 0
    out = capsys.readouterr().out
    assert "with cli-model version 1" in out
    latest = pl.read_parquet(data_dir / "scores" / "latest.parquet")
    # every unit seen in the week before the newest snapshot; units silent longer (failed,
    # taken out) are not in the fleet any more and get no risk
    features = workspace["features"]
    recent = features.filter(pl.col("ts") >= features["ts"].max() - timedelta(days=7))
    assert set(latest["unit_id"]) == set(recent["unit_id"])
    assert recent["unit_id"].n_unique() < features["unit_id"].n_unique()  # the fleet has such units
    assert set(latest["horizon"]) == {"24h", "72h"}
    assert {"model_name", "model_version", "run_id", "top_signals", "node", "rack"} <= set(latest.columns)
    assert len(list((data_dir / "scores").glob("scores-*.parquet"))) == 1
    # The drain policy's holds: the 24-hour risk's ([policy] enter_for = 6h) is each unit's
    # last ceil(6h / 2h) = 3 snapshots, the 72-hour risk's own (decision_enter_for = 12h) its
    # last 6; each horizon's newest row carries the lowest risk of its own snapshots.
    assert not latest.select("unit_id", "horizon").is_duplicated().any()
    bundle = registry.load_champion(NAME).bundle
    expected = pl.concat(
        bundle.score(recent.sort("ts").group_by("unit_id", maintain_order=True).tail(k))
        .filter((pl.col("model") == bundle.primary) & (pl.col("horizon") == horizon))
        .group_by("unit_id", "horizon")
        .agg(pl.col("risk").min(), (pl.col("ts").max() - pl.col("ts").min()).alias("span"), pl.len())
        .with_columns(
            pl.when((pl.col("len") == k) & (pl.col("span") == timedelta(hours=2 * (k - 1)))).then("risk").alias("held")
        )
        for horizon, k in (("24h", 3), ("72h", 6))
    )
    held = latest.join(expected, on=["unit_id", "horizon"], how="left")
    assert held.height == latest.height and held.get_column("held").drop_nulls().len() > 0
    assert held.select(pl.col("risk_held").eq_missing(pl.col("held")).all()).item()

    assert main([*args, "review", "--approve", "2", "--by", "alice", "--reason", "same data, newer code"]) == 0
    capsys.readouterr()
    assert main([*args, "score", "--json", "--top", "3"]) == 0
    assert _scored_version(data_dir) == {"2"}
    # --json: one parsable document for scripts, naming the version and the riskiest units
    result = json.loads(capsys.readouterr().out)
    assert result["model_version"] == "2" and result["units"] == recent["unit_id"].n_unique()
    newest = pl.read_parquet(result["scores"])
    decided = newest.filter(pl.col("horizon") == result["horizon"]).get_column("risk").sort(descending=True)
    assert [row["risk"] for row in result["top"]] == decided.head(3).to_list()

    assert main([*args, "review", "--rollback", "1", "--by", "bob", "--reason", "undo"]) == 0
    assert main([*args, "score"]) == 0
    assert _scored_version(data_dir) == {"1"}
    assert "champion is now version 1 (was 2)" in capsys.readouterr().out


def test_score_before_any_training_says_what_to_do(workspace, tmp_path, capsys):
    config = tmp_path / "untrained.toml"
    config.write_text(CONFIG.replace(NAME, "cli-untrained"))
    assert main(["--config", str(config), "--data-dir", str(workspace["data_dir"]), "score"]) == 2
    assert "run `foreshock train` first" in capsys.readouterr().err
    assert not (workspace["data_dir"] / "scores").exists()
