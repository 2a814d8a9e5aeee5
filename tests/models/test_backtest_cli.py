"""`foreshock backtest` end to end: features on disk + failures in the lake -> report files."""

from __future__ import annotations

import json

import polars as pl
from polars.testing import assert_frame_equal

from foreshock.features.store import write_features
from foreshock.lake.merge import merge_into_lake
from foreshock.pipelines.cli import main
from tests.models.synthetic_fleet import synthetic_fleet


def test_backtest_command_writes_scores_and_report(prefect_server, dask_cluster, rng, tmp_path, capsys):
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

    # On the Dask runner each fold is a task on the cluster: the same scores and report.
    from distributed import Client

    def transitions() -> int:  # the session's cluster: other tests' work counts too
        with Client(dask_cluster) as client:
            return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)

    before = transitions()
    on_dask = tmp_path / "on-dask"
    argv = ["--data-dir", str(data), "--dask-address", dask_cluster, "backtest", "--ground-truth", str(truth)]
    assert main([*argv, "--out", str(on_dask)]) == 0
    assert transitions() > before
    assert (on_dask / "report.md").read_text() == markdown
    # equal up to float rounding: the ranked rules' risks sum in another order on the
    # cluster's single-threaded workers (1e-11 apart)
    assert_frame_equal(pl.read_parquet(on_dask / "scores.parquet"), scores, check_exact=False, rel_tol=1e-9)
    assert not list((data / "staging").glob("backtest-*"))  # the folds' score files are gone


def test_missing_ground_truth_is_a_clear_error(prefect_server, tmp_path, capsys):
    missing = tmp_path / "nope.parquet"
    assert main(["--data-dir", str(tmp_path / "data"), "backtest", "--ground-truth", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err


def test_empty_feature_store_says_what_to_run(prefect_server, tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path / "data"), "backtest"]) == 2
    assert "foreshock features" in capsys.readouterr().err
