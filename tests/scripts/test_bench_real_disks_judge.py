"""benchmarks/bench_real_disks.py on data written here: where a ranking's false flags are
(drives failing after the horizon, within 30 days or not, or never), and the date an
interrupted features stage resumes from."""

from __future__ import annotations

import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_real_disks import against_rules, false_flag_causes, features_resume_day  # noqa: E402

T0 = datetime(2015, 3, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


def test_false_flags_split_by_when_the_drive_fails_and_reweighted():
    # (unit, days reporting, days scored): every scored drive-day is flagged (share 1.0)
    plan = {"C": (range(10), range(0, 5)), "A": (range(40), range(5, 8)), "E": (range(40), range(12, 14))}
    plan["B"] = (range(46), range(8, 10))
    rows = [
        {"unit_id": unit, "ts": day(d), "risk": 1.0 if d in scored else None}
        for unit, (reporting, scored) in plan.items()
        for d in reporting
    ]
    scores = pl.DataFrame(rows, schema={"unit_id": pl.String, "ts": pl.Datetime("us", "UTC"), "risk": pl.Float64})
    # C fails 6-10 days after its flags (true), A 33-35 days after, E 27-28 days after; B never
    failures = pl.DataFrame(
        {"unit_id": ["C", "A", "E"], "failed_at": [day(10), day(40), day(40)]},
        schema={"unit_id": pl.String, "failed_at": pl.Datetime("us", "UTC")},
    )
    weights = pl.DataFrame({"unit_id": ["A", "B", "C", "E"], "fleet_weight": [1.0, 20.0, 1.0, 1.0]})
    causes = false_flag_causes(scores, failures, 1.0, timedelta(days=1), weights)
    assert causes["fails_later"] == {"flags": 5, "weighted": 5.0}
    assert causes["fails_within_30d"] == {"flags": 2, "weighted": 2.0}
    assert causes["no_failure"] == {"flags": 2, "weighted": 40.0}  # B stands for 20 drives
    # 14 days: 5 true of 5 + 5 + 40; 30 days: E's two flags become true as well
    assert causes["precision_30d"] == pytest.approx(7 / 50)


def test_an_interrupted_features_stage_resumes_at_its_first_unfinished_date(tmp_path):
    from foreshock.config import load_config
    from foreshock.features import store

    (tmp_path / "data").mkdir()
    (tmp_path / "data/foreshock.toml").write_text("")
    features_dir = load_config(tmp_path / "data/foreshock.toml", data_dir=tmp_path / "lake").features_dir
    assert features_resume_day(tmp_path) is None  # nothing stored: the stage starts afresh

    def stored(d: int, shard: int) -> None:
        path = store.partition_path(features_dir, day(d).date(), shard)
        path.parent.mkdir(parents=True)
        pl.DataFrame({"unit_id": [f"u{shard}"], "ts": [day(d)]}).write_parquet(path)

    for d in range(3):
        stored(d, 0)
    for d in range(2):
        stored(d, 1)
    # shard 1 never wrote day 2: every shard's newest date is day 1, so day 2 is redone
    assert features_resume_day(tmp_path) == date(2015, 3, 3)
    # a date still staged was not written out: it is redone too, and what follows it
    store.staging_day_dir(features_dir, day(1).date()).mkdir(parents=True)
    assert features_resume_day(tmp_path) == date(2015, 3, 2)


def test_a_ranking_beats_both_rules_only_with_as_many_catches_at_a_precision_as_high():
    """The judge's verdict per share: the model spends its whole budget and loses on
    precision to the growth rule; with the floor it keeps enough catches to beat both."""

    def row(model, caught, precision, maker="all"):
        return {"model": model, "maker": maker, "share": 0.005, "caught": caught, "precision": precision}

    judged = {
        "results": [
            row("gbm", 87, 0.052),
            row("gbm, floor 0.05", 79, 0.153),
            row("gbm, floor 0.1", 71, 0.234),  # fewer catches than the level rule
            row("smart_level", 75, 0.041),
            row("smart_growth", 59, 0.109),
            row("gbm", 1, 1.0, maker="WDC"),  # makers are not judged against the fleet's rules
        ]
    }
    verdict = {v["model"]: v for v in against_rules(judged)}
    assert set(verdict) == {"gbm", "gbm, floor 0.05", "gbm, floor 0.1"}
    assert (verdict["gbm"]["beats_smart_level"], verdict["gbm"]["beats_smart_growth"]) == (True, False)
    assert verdict["gbm, floor 0.05"]["beats_both"]
    assert not verdict["gbm, floor 0.1"]["beats_both"] and verdict["gbm, floor 0.1"]["beats_smart_growth"]
    # a tie on both counts beats nothing
    tie = {"results": [row("m", 59, 0.109), row("smart_growth", 59, 0.109), row("smart_level", 0, 0.0)]}
    assert against_rules(tie)[0]["beats_smart_growth"] is False
