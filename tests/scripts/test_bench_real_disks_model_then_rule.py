"""The "model top, then rule" ordering of benchmarks/bench_real_disks.py on a fleet written
here: each day the model's own flags at the top 0.1 % come first, then the drives the growth
rule flags by the model's risk, and nothing else, within the budget."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_real_disks import judge_shares, model_then_rule, model_then_rule_name, ruled  # noqa: E402

T0 = datetime(2015, 3, 1, tzinfo=UTC)
SCHEMA = {"unit_id": pl.String, "ts": pl.Datetime("us", "UTC"), "risk": pl.Float64}
DRIVES = 2_000  # 0.1 % of them: 2 a day; 0.5 %: 10 a day


def fleet() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two days of 2,000 drives with distinct risks (d0000 the riskiest).  Day 0: the rule
    flags d0001 (also in the model's top 2), d0500, d1500 and d1999 (unscored).  Day 1: the
    rule flags 20 drives, d0100..d0119."""
    rng = np.random.default_rng(0)
    risk = np.sort(rng.uniform(0.0, 0.9, DRIVES))[::-1]
    units = [f"d{i:04d}" for i in range(DRIVES)]
    days = [T0, T0 + timedelta(days=1)]
    scores = pl.DataFrame(
        {
            "unit_id": units * 2,
            "ts": [d for d in days for _ in units],
            "risk": [None if (d == T0 and u == "d1999") else float(r) for d in days for u, r in zip(units, risk)],
        },
        schema=SCHEMA,
    )
    grew = {(u, 0) for u in ("d0001", "d0500", "d1500", "d1999")} | {(f"d{i:04d}", 1) for i in range(100, 120)}
    growth = scores.select(
        "unit_id",
        "ts",
        pl.struct("unit_id", "ts")
        .map_elements(lambda k: 1.0 if (k["unit_id"], (k["ts"] - T0).days) in grew else None, return_dtype=pl.Float64)
        .alias("score"),
    )
    return scores, growth


def flagged(frame: pl.DataFrame, share: float, day: int) -> list[str]:
    from foreshock.budget import DailyBudget
    from foreshock.models.evaluation.top_of_list import daily_flags

    flags, _ = daily_flags(frame, DailyBudget(share=share))
    return flags.filter(pl.col("alert_start") == T0 + timedelta(days=day)).get_column("unit_id").to_list()


def test_the_models_own_top_then_the_rules_flags_by_risk_and_nothing_else():
    scores, growth = fleet()
    ordered = model_then_rule(ruled(scores, growth))
    assert ordered.height == scores.height  # every drive reporting still counts
    # at 0.5 % (10 a day): the model's top 2, then the rule's other flags by risk (d1999
    # unscored: last); nobody else although 5 of the 10 are left: d0002 is never flagged
    assert flagged(ordered, 0.005, 0) == ["d0000", "d0001", "d0500", "d1500", "d1999"]
    # day 1: 20 rule flags for the 8 places left after the model's top 2
    assert flagged(ordered, 0.005, 1) == ["d0000", "d0001", *(f"d{i:04d}" for i in range(100, 108))]
    # at 0.1 % the ordering is the model's own list
    for day in (0, 1):
        assert flagged(ordered, 0.001, day) == flagged(scores, 0.001, day) == ["d0000", "d0001"]


def test_judged_per_maker_on_the_makers_own_top_of_the_list():
    """Through the judge: each maker's tier 1 is the maker's own top 0.1 % (so the 0.1 %
    rows are the model's, per maker too), and the 0.5 % budget is a cap."""
    from foreshock.config import load_config

    scores, growth = fleet()
    inventory = pl.DataFrame({"unit_id": scores["unit_id"].unique().sort()}).with_columns(
        pl.when(pl.col("unit_id") < "d1000").then(pl.lit("A")).otherwise(pl.lit("B")).alias("maker")
    )
    failures = pl.DataFrame(
        {"unit_id": ["d0000", "d0500", "d1500"], "failed_at": [T0 + timedelta(days=1, hours=23)] * 3},
        schema={"unit_id": pl.String, "failed_at": pl.Datetime("us", "UTC")},
    )
    config = load_config(None)
    name = model_then_rule_name("gbm")
    model = judge_shares({"gbm": scores}, failures, inventory, config, [0.001, 0.005])["results"]
    tiered = judge_shares(
        {name: ruled(scores, growth)}, failures, inventory, config, [0.001, 0.005], order=model_then_rule
    )["results"]
    rows = {(r["maker"], r["share"]): r for r in model}
    for r in tiered:
        assert r["model"] == name
        other = rows[(r["maker"], r["share"])]
        if r["share"] == 0.001:
            assert (r["flags"], r["caught"], r["true_flags"]) == (other["flags"], other["caught"], other["true_flags"])
        else:
            assert r["flags"] <= other["flags"]
    # maker B's top 0.1 % is its own riskiest drive (d1000), not a drive of the fleet's top
    b = {r["share"]: r for r in tiered if r["maker"] == "B"}
    assert b[0.001]["flags"] == 2 and b[0.001]["caught"] == 0  # d1000 on both days
    assert b[0.005]["caught"] == 1  # d1500, flagged by the rule on day 0
    assert name == "gbm+growth@0.1%"
