"""The backtest over a long history, bounded in memory.

What a user would notice if this broke: a backtest whose report changes when its scores
wait on disk instead of in memory, scores files left behind in the temporary directory
(after a run or after a failed one), or live scoring that reads the whole history of the
feature store to find the newest snapshot.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import polars as pl
import pytest

from foreshock.config import load_config
from foreshock.models.estimators.bundle import model_factories
from foreshock.models.estimators.dataset import FeatureSource, FrameSource
from foreshock.models.evaluation.alert_replay import Period
from foreshock.models.evaluation.backtest import walk_forward
from foreshock.models.evaluation.backtest_report import read_result, write_result
from foreshock.models.evaluation.judging import judge_scores
from tests.models.synthetic_fleet import daily_disk_fleet, synthetic_fleet


@pytest.fixture(scope="module")
def daily_backtest(tmp_path_factory):
    """A backtest of 160 disks over 100 days, scored 300 snapshots at a time (several
    score files per fold), its scores waiting under ``work``."""
    import numpy as np

    rng = np.random.default_rng(26)
    features, failures = daily_disk_fleet(
        rng, 160, 100, fail_share=(0.25, 0.1), strength=(2.0, 3.0), fail_days=(10, 98)
    )
    config = load_config().with_overrides(
        {
            "features": {"snapshot_every": "1d", "windows": ["1d", "3d", "7d"]},
            "labels": {"horizons": ["14d"]},
            "backtest": {"alert_window": "14d", "min_lead_time": "1d", "score_batch_rows": 300},
        }
    )
    made = model_factories(config)
    work = tmp_path_factory.mktemp("work")
    factories = {name: made[name] for name in ("gbm", "baseline")}
    result = walk_forward(features, failures, config, factories=factories, folds=3, work_dir=work)
    return result, features, failures, config, work


def test_scores_waiting_on_disk_are_judged_as_in_memory(daily_backtest, tmp_path):
    result, features, failures, config, work = daily_backtest
    scores = result.scores
    # Every test snapshot scored once by each model (gbm, the ranked rules, the rules as run)
    tested = features.filter(pl.col("ts") >= pl.lit(result.folds[0].cutoff).cast(pl.Datetime("us", "UTC")))
    assert scores.height == result.score_rows == 3 * tested.height
    assert not scores.select("unit_id", "ts", "model").is_duplicated().any()
    assert scores.equals(scores.sort("model", "horizon", "unit_id", "ts"))
    # Judged from the files one model at a time: the same report as the whole table in memory.
    in_memory = judge_scores(
        scores,
        failures,
        config,
        step=timedelta(days=1),
        periods=[Period(f.cutoff, f.test_end) for f in result.folds],
    )
    assert in_memory["models"] == result.report["models"]
    assert in_memory["scored"] == result.report["scored"]
    assert result.report["models"]["gbm"]["14d"]["operating_points"]["budget"]["failures"] > 0
    # Only the sorted files (one per model and horizon) wait; the folds' batch files are gone.
    waiting = sorted(p.name for p in work.rglob("*.parquet"))
    assert waiting == [f"scores-{k:04d}.parquet" for k in range(3)]
    saved = read_result(write_result(result, tmp_path / "backtest"))
    assert saved.scores.equals(scores)


def test_scores_files_are_removed_when_the_result_is_closed_or_the_run_fails(daily_backtest):
    result, features, failures, config, work = daily_backtest
    with result:
        pass
    assert not any(work.iterdir())

    class Broken:
        def fit(self, *args, **kwargs):
            raise RuntimeError("fit failed")

    with pytest.raises(RuntimeError, match="fit failed"):
        walk_forward(features, failures, config, factories={"broken": Broken}, folds=2, work_dir=work)
    assert not any(work.iterdir())


def test_latest_snapshots_read_only_the_newest_partitions(rng, tmp_path, monkeypatch):
    from foreshock.features.store import feature_files, write_features

    fleet = synthetic_fleet(rng, units=8, days=10)
    write_features(fleet.features, tmp_path / "features", 2)
    source = FeatureSource.from_dir(tmp_path / "features")
    scanned: list[Path] = []
    scan = pl.scan_parquet

    def recording_scan(files, *args, **kwargs):
        scanned.extend(files if isinstance(files, list) else [files])
        return scan(files, *args, **kwargs)

    monkeypatch.setattr(pl, "scan_parquet", recording_scan)
    latest = source.latest(lookback=timedelta(days=2))
    monkeypatch.undo()

    # The rows read: the last days' partitions, never the whole history.
    def day(path: Path) -> date:
        return date.fromisoformat(path.parent.parent.name.removeprefix("date="))

    newest = day(feature_files(tmp_path / "features")[-1])
    assert scanned and min(day(p) for p in scanned) >= newest - timedelta(days=2)
    # The span from the first and last dates' partitions is the whole store's.
    assert source.span() == FrameSource(fleet.features).span()
    expected = FrameSource(fleet.features).latest(lookback=timedelta(days=2))
    assert latest.height > 0
    assert latest.select("unit_id", "ts").equals(expected.select("unit_id", "ts"))
    # The drain policy's hold scores each unit's last few snapshots: the newest 3 of each.
    last3 = source.latest(lookback=timedelta(days=2), count=3)
    reporting = fleet.features.filter(pl.col("unit_id").is_in(latest.get_column("unit_id").implode()))
    newest3 = reporting.sort("ts", descending=True).group_by("unit_id", maintain_order=True).head(3)
    assert last3.select("unit_id", "ts").equals(newest3.select("unit_id", "ts").sort("unit_id", "ts"))
