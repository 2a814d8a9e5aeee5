"""Flags that expire (benchmarks/bench_real_disks.py's ``set_aside``) on a fleet written here:
a drive the list flagged a whole horizon in a row makes way for the next, comes back when
its SMART sum rises, and a list in which nothing expires is the ranking's own list."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_real_disks import SET_ASIDE_DAYS, set_aside  # noqa: E402

from foreshock.budget import DailyBudget  # noqa: E402
from foreshock.models.evaluation.top_of_list import daily_flags  # noqa: E402

T0 = datetime(2015, 3, 1, tzinfo=UTC)
DRIVES = 1_000  # 0.1 % of them: one flag a day


def fleet(days: int, rise: dict[str, int] | None = None, seed: int = 0) -> pl.DataFrame:
    """``days`` days of 1,000 drives; d0000 the riskiest every day, then d0001, d0002, ...;
    each drive's SMART sum 8, rising by one on the days of ``rise`` (drive -> day)."""
    rng = np.random.default_rng(seed)
    risk = np.sort(rng.uniform(0.0, 0.5, DRIVES))[::-1]
    risk[:3] = [0.9, 0.8, 0.7]
    units = [f"d{i:04d}" for i in range(DRIVES)]
    rise = rise or {}
    rows = {"unit_id": [], "ts": [], "risk": [], "level": []}
    for day in range(days):
        for unit, r in zip(units, risk, strict=True):
            rows["unit_id"].append(unit)
            rows["ts"].append(T0 + timedelta(days=day))
            rows["risk"].append(float(r))
            rows["level"].append(8.0 + (1.0 if unit in rise and day >= rise[unit] else 0.0))
    return pl.DataFrame(
        rows, schema={"unit_id": pl.String, "ts": pl.Datetime("us", "UTC"), "risk": pl.Float64, "level": pl.Float64}
    )


def flagged(scores: pl.DataFrame, share: float = 0.001, weights=None) -> list[str]:
    """The unit the judge flags each day (one a day at 0.1 % of 1,000), in day order."""
    flags, _ = daily_flags(scores, DailyBudget(share=share), weights)
    return flags.sort("alert_start").get_column("unit_id").to_list()


def test_a_drive_flagged_a_whole_horizon_makes_way_and_comes_back_when_its_sum_rises():
    assert SET_ASIDE_DAYS == 14
    days = 50
    scores = fleet(days, rise={"d0000": 20})
    plain = flagged(scores.drop("level"))
    assert plain == ["d0000"] * days  # the ranking alone: the same drive every day

    got = flagged(set_aside(scores, 0.001))
    # 14 days of d0000, then d0001 while d0000 is set aside; d0000's sum rises on day 20:
    # ranked again, 14 more days, set aside again, and d0001 (flagged days 14-19) resumes.
    assert got[:14] == ["d0000"] * 14
    assert got[14:20] == ["d0001"] * 6
    assert got[20:34] == ["d0000"] * 14
    assert got[34:48] == ["d0001"] * 14  # a streak broken by a day off the list starts again ...
    assert got[48:] == ["d0002"] * 2  # ... and after 14 days d0001 too is set aside (its sum never rose)


def test_a_streak_broken_by_a_day_off_the_list_starts_again():
    scores = fleet(30)
    # day 5: the model did not score d0000 (it still reports): off the list that day
    off = (pl.col("unit_id") == "d0000") & (pl.col("ts") == T0 + timedelta(days=5))
    scores = scores.with_columns(pl.when(off).then(None).otherwise(pl.col("risk")).alias("risk"))
    got = flagged(set_aside(scores, 0.001))
    assert got[:5] == ["d0000"] * 5 and got[5] == "d0001"
    assert got[6:20] == ["d0000"] * 14  # a fresh streak of 14 from day 6
    assert got[20:] == ["d0001"] * 10


@pytest.mark.parametrize("weighted", [False, True])
def test_with_nothing_expiring_the_list_is_the_rankings_own(weighted):
    scores = fleet(10, seed=3).with_columns(
        pl.when(pl.col("unit_id").str.ends_with("7")).then(None).otherwise(pl.col("risk")).alias("risk")
    )
    weights = None
    if weighted:  # kept healthy drives standing for 20 each, as a subsampled fleet's inventory says
        weights = pl.DataFrame({"unit_id": [f"d{i:04d}" for i in range(0, DRIVES, 3)]}).with_columns(
            pl.lit(20.0).alias("fleet_weight")
        )
    for share in (0.001, 0.005, 0.02):
        expected, _ = daily_flags(scores.drop("level"), DailyBudget(share=share), weights)
        got, _ = daily_flags(set_aside(scores, share, weights, days=10**6), DailyBudget(share=share), weights)
        assert got.equals(expected)
        assert expected.height > 0
