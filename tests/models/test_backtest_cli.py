"""`foreshock backtest` end to end: features on disk + failures in the lake -> report files."""

from __future__ import annotations

import json

import polars as pl

from foreshock.features.store import write_features
from foreshock.lake.merge import merge_into_lake
from foreshock.pipelines.cli import main
from tests.models.synthetic_fleet import synthetic_fleet


def test_backtest_command_writes_scores_and_report(prefect_server, rng, tmp_path, capsys):
    fleet = synthetic_fleet(rng, units=48, days=16)
    data = tmp_path / "data"
    write_features(fleet.features, data / "features", shards=4)
    merge_into_lake(data / "lake", "failures", fleet.failures, shards=4)
    truth = tmp_path / "ground_truth.parquet"
    fleet.ground_truth.write_parquet(truth)

    assert main(["--data-dir", str(data), "backtest", "--ground-truth", str(truth)]) == 0

    out = data / "backtest"
    scores = pl.read_parquet(out / "scores.parquet")
    assert scores.columns == ["unit_id", "ts", "model", "horizon", "risk"]
    assert set(scores.get_column("model")) == {"gbm", "cox", "baseline", "rules"}  # rules: as run today
    report = json.loads((out / "report.json").read_text())
    budget = report["models"]["gbm"]["72h"]["operating_points"]["budget"]
    assert budget["failures_with_precursor"] is not None  # ground truth was used
    markdown = (out / "report.md").read_text()
    assert markdown.startswith("# Backtest report") and "| baseline |" in markdown
    captured = capsys.readouterr()
    assert "out-of-sample scores" in captured.out
    # the long stage says where it is: each fold and each model fit is a log line
    folds = len(report["folds"])
    assert f"backtest: fold {folds}/{folds} done" in captured.err
    assert "gbm fitted on" in captured.err


def test_missing_ground_truth_is_a_clear_error(prefect_server, tmp_path, capsys):
    missing = tmp_path / "nope.parquet"
    assert main(["--data-dir", str(tmp_path / "data"), "backtest", "--ground-truth", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err


def test_empty_feature_store_says_what_to_run(prefect_server, tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path / "data"), "backtest"]) == 2
    assert "foreshock features" in capsys.readouterr().err
