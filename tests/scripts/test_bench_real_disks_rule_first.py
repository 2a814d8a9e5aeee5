"""The rule-first orderings of benchmarks/bench_real_disks.py on a fleet written here: the
drives the growth rule flags come first, by the model's risk; then the others by risk,
with a floor only those at least as risky as the (fleet-weighted) median of the rule's
flagged drives that day or over the trailing days."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_real_disks import rule_first, rule_first_series  # noqa: E402

T0 = datetime(2015, 3, 1, tzinfo=UTC)
SCHEMA = {"unit_id": pl.String, "ts": pl.Datetime("us", "UTC"), "risk": pl.Float64}


def fleet() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Day 0: the rule flags R1, R2 and R3 (unscored); M1..M3 only the model ranks.
    Day 1: the rule flags nothing."""
    risk = {"R1": 0.1, "R2": 0.3, "R3": None, "M1": 0.9, "M2": 0.2, "M3": 0.05}
    rows = [{"unit_id": u, "ts": T0, "risk": r} for u, r in risk.items()]
    rows += [{"unit_id": u, "ts": T0 + timedelta(days=1), "risk": r} for u, r in (("M1", 0.5), ("M2", 0.2))]
    scores = pl.DataFrame(rows, schema=SCHEMA)
    grew = {("R1", 0): 3.0, ("R2", 0): 1.0, ("R3", 0): 2.0}
    growth = scores.select(
        "unit_id",
        "ts",
        pl.struct("unit_id", "ts")
        .map_elements(lambda k: grew.get((k["unit_id"], (k["ts"] - T0).days)), return_dtype=pl.Float64)
        .alias("score"),
    )
    return scores, growth


def order(frame: pl.DataFrame, day: int) -> list[str]:
    """The day's list: the units with a score, highest first."""
    today = frame.filter((pl.col("ts") == T0 + timedelta(days=day)) & pl.col("score").is_not_null())
    return today.sort("score", descending=True).get_column("unit_id").to_list()


def test_rule_flags_first_by_risk_then_the_model_and_floors_from_the_rules_flags():
    from foreshock.budget import DailyBudget
    from foreshock.models.evaluation.top_of_list import daily_flags

    scores, growth = fleet()
    plain = rule_first(scores, growth)
    # tier 1 by risk (R3 unscored: last of it), then every other drive by risk
    assert order(plain, 0) == ["R2", "R1", "R3", "M1", "M2", "M3"]
    assert order(plain, 1) == ["M1", "M2"]
    assert plain.height == scores.height  # every drive reporting still counts
    flags, _ = daily_flags(plain, DailyBudget(per_day=4))
    assert flags.filter(pl.col("alert_start") == T0).get_column("unit_id").to_list() == ["R2", "R1", "R3", "M1"]

    # day median of the flagged risks {0.1, 0.3}: the lower median 0.1, so M3 (0.05) is out;
    # day 1 has no flag of the rule: nothing is added
    day = rule_first(scores, growth, None, 1)
    assert order(day, 0) == ["R2", "R1", "R3", "M1", "M2"]
    assert order(day, 1) == []
    # with R2 standing for 20 drives the median is 0.3: M2 (0.2) is out too
    weights = pl.DataFrame({"unit_id": ["R2"], "fleet_weight": [20.0]})
    assert order(rule_first(scores, growth, weights, 1), 0) == ["R2", "R1", "R3", "M1"]
    # the trailing 7 days carry day 0's floor (0.1) into day 1
    week = rule_first(scores, growth, None, 7)
    assert order(week, 1) == ["M1", "M2"]
    names = set(rule_first_series("gbm", scores, growth, None))
    assert names == {"gbm>growth", "gbm>growth, floor day median", "gbm>growth, floor 7-day median"}
