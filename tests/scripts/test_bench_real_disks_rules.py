"""The two SMART rules of benchmarks/bench_real_disks.py on readings written here: the
level sums SMART 5, 187, 197 and 198 of the day, the growth is its increase over 7 days,
and a rule flags only drives where its value is above 0."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_real_disks import rule_scores  # noqa: E402

T0 = datetime(2015, 3, 1, tzinfo=UTC)


def levels(values: dict[str, list[float]]) -> pl.DataFrame:
    rows = [
        {"unit_id": unit, "ts": T0 + timedelta(days=d), "level": v}
        for unit, series in values.items()
        for d, v in enumerate(series)
        if v is not None
    ]
    return pl.DataFrame(rows, schema={"unit_id": pl.String, "ts": pl.Datetime("us", "UTC"), "level": pl.Float64})


def test_growth_is_the_increase_over_seven_days_and_rules_flag_only_positive_values():
    frame = levels(
        {
            # grows by 1 a day from day 3
            "A": [0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
            # pending sectors remapped: the level falls, never flagged for growth
            "B": [9, 9, 9, 9, 9, 9, 9, 9, 4, 4, 4, 4],
            # new on day 8: growth since its first reading
            "C": [None] * 8 + [2, 2, 5, 5],
            "D": [0] * 12,
        }
    )
    day = T0 + timedelta(days=10)
    keys = frame.filter(pl.col("ts") == day).select("unit_id", "ts")
    rules = rule_scores(frame, keys)
    level = dict(rules["smart_level"].select("unit_id", "score").iter_rows())
    growth = dict(rules["smart_growth"].select("unit_id", "score").iter_rows())
    assert level == {"A": 8.0, "B": 4.0, "C": 5.0, "D": None}
    # A: 8 on day 10 minus 1 on day 3; B fell by 5; C: 5 minus its first reading 2
    assert growth == {"A": 7.0, "B": None, "C": 3.0, "D": None}
    assert rules["smart_growth"].height == 4  # every reporting drive counts, flagged or not
