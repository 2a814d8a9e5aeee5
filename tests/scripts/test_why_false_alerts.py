"""benchmarks/why_false_alerts.py on the suite's demo fleet: it explains the alerts the
backtest's judge counted (the same alerts and outcomes as the report's policy point), and the
fleet it draws again from the simulation's parameters is the one the data came from."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from demo_fleet import DEMO_DAYS, DEMO_FAILURE_RATE, DEMO_SEED, DEMO_UNITS, demo_config_file  # noqa: E402
from why_false_alerts import explain, main  # noqa: E402


def _args(data: Path, model: str):
    import argparse

    return argparse.Namespace(
        work=data,
        backtest=data / "backtest",
        data_dir=data,
        config=demo_config_file(data),
        units=DEMO_UNITS,
        days=float(DEMO_DAYS),
        failure_rate=DEMO_FAILURE_RATE,
        seed=DEMO_SEED,
        model=model,
    )


@pytest.mark.parametrize("model", ["gbm", "baseline"])
def test_the_alerts_explained_are_the_ones_the_report_counted(demo_data_dir, model):
    table, _ = explain(_args(demo_data_dir, model))
    report = json.loads((demo_data_dir / "backtest" / "report.json").read_text())
    point = report["models"][model]["72h"]["operating_points"]["policy"]
    judged = table.get_column("judged")
    assert table.height == point["alerts"] > 0
    assert [int((judged == o).sum()) for o in ("true", "false", "late", "unresolved")] == [
        point["true_alerts"],
        point["false_alerts"],
        point["late_alerts"],
        point["alerts_unresolved"],
    ]
    # The simulator's lives drawn again are the data's: a failure it places inside the
    # simulated span is the ground truth's failure of that unit.
    truth = pl.read_parquet(demo_data_dir / "raw" / "sim" / "ground_truth.parquet")
    end = truth.get_column("failed_at").max()
    failing = table.filter(pl.col("days_to_failure").is_not_null())
    for row in failing.iter_rows(named=True):
        failed = row["alert_start"] + timedelta(days=row["days_to_failure"])
        if failed < end:
            known = truth.filter(pl.col("unit_id") == row["unit_id"]).get_column("failed_at")
            assert any(abs(known - failed) <= timedelta(hours=3)), row
    # What the judge counted true, the simulator put down to a failure within the horizon.
    assert table.filter(pl.col("judged") == "true").get_column("kind").to_list() == ["true"] * point["true_alerts"]


def test_it_prints_the_judges_outcome_beside_the_cause(demo_data_dir, capsys):
    a = _args(demo_data_dir, "gbm")
    argv = ["--work", str(a.work), "--backtest", str(a.backtest), "--config", str(a.config)]
    argv += ["--units", str(a.units), "--days", str(a.days), "--failure-rate", str(a.failure_rate)]
    assert main([*argv, "--seed", str(a.seed)]) == 0
    out = capsys.readouterr().out
    assert "alerts at the policy point over" in out and "judged" in out and "kind" in out
