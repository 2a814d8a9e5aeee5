"""The drain policy's daily budget: absolute or a share of the units reporting that day."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from drain_helpers import T0

from foreshock.budget import DailyBudget, allowed_on_day, epoch_day
from foreshock.config import load_config
from foreshock.config_schema import ConfigError
from foreshock.drain.policy import DrainPolicy
from foreshock.drain.replay import replay
from foreshock.drain.risk_table import unit_risk_table
from foreshock.drain.settings import PolicySettings

DRAINS = ("drain_now", "drain_at_checkpoint")


def units(n: int) -> list[str]:
    return [f"gpu-node{i // 8 + 1:03d}-gpu{i % 8}" for i in range(n)]


def settings(budget: DailyBudget | None) -> PolicySettings:
    return PolicySettings(
        max_drained_share_cluster=1.0,
        max_drained_share_per_domain=1.0,
        max_new_drains_per_run=1000,
        fault_domains=("node",),
        daily_budget=budget,
    )


def risks(values: dict[str, float], ts) -> pl.DataFrame:
    rows = [
        {"unit_id": u, "ts": ts, "node": u.split("-gpu")[0], "horizon": h, "risk": r if h == "72h" else r / 2}
        for u, r in values.items()
        for h in ("24h", "72h")
    ]
    return unit_risk_table(pl.DataFrame(rows).with_columns(pl.col("ts").dt.cast_time_unit("us")), "72h")


def test_without_a_daily_budget_the_policy_drains_every_unit_that_pays():
    fleet = units(40)
    decision = DrainPolicy(settings(None)).decide(risks(dict.fromkeys(fleet[:10], 0.95), T0), T0)
    assert len(decision.new_drains) == 10
    assert not any("daily drain budget" in n for n in decision.notes)


def test_an_absolute_budget_grants_the_highest_savings_and_holds_the_rest_back():
    fleet = units(40)
    values = {u: 0.9 + i / 100 for i, u in enumerate(fleet[:6])}
    decision = DrainPolicy(settings(DailyBudget(per_day=2))).decide(risks(values, T0), T0)
    assert sorted(decision.new_drains) == sorted(fleet[4:6])  # the two riskiest
    held = decision.recommendations.filter(pl.col("guard") == "daily budget")
    assert held.height == 4 and set(held.get_column("action")) == {"watch"}
    assert any("daily drain budget 2 a day" in n for n in decision.notes)


def test_drains_granted_earlier_that_day_use_up_the_budget():
    fleet = units(40)
    policy = DrainPolicy(settings(DailyBudget(per_day=2)))
    first = policy.decide(risks({fleet[0]: 0.95}, T0), T0)
    later = T0 + timedelta(hours=5)
    second = policy.decide(risks({fleet[0]: 0.95, fleet[1]: 0.95, fleet[2]: 0.96}, later), later, first.state)
    assert second.new_drains == [fleet[2]]  # one left today
    next_day = T0 + timedelta(days=1)
    third = policy.decide(risks({u: 0.95 for u in fleet[:4]}, next_day), next_day, second.state)
    assert sorted(third.new_drains) == sorted([fleet[1], fleet[3]])  # a new day, two more


def test_a_share_follows_the_units_reporting_that_day():
    """0.1 % of the units reporting: 2 of 2,000 units, 4 of 4,000 (a fleet that doubled)."""
    policy = DrainPolicy(settings(DailyBudget(share=0.001)))
    for size, expected in ((2000, 2), (4000, 4)):
        fleet = units(size)
        values = dict.fromkeys(fleet, 0.01) | {u: 0.95 for u in fleet[:10]}
        decision = policy.decide(risks(values, T0), T0)
        assert len(decision.new_drains) == expected
        assert any(
            f"0.1 % of the units reporting that day: {expected:.2f} today ({size} units" in n for n in decision.notes
        )


def test_a_fractional_budget_is_whole_drains_by_the_day_index():
    """1.5 a day is 1 and 2 on alternate days; over any run of days within one of 1.5 per day."""
    allowed = [allowed_on_day(epoch_day(T0) + d, 1.5) for d in range(10)]
    assert sorted(set(allowed)) == [1, 2] and sum(allowed) == 15
    assert [allowed_on_day(d, 0.25) for d in range(8)] == [0, 0, 0, 1, 0, 0, 0, 1]
    fleet = units(1500)
    policy = DrainPolicy(settings(DailyBudget(share=0.001)))  # 1.5 a day on 1,500 units
    granted = []
    for d in range(4):
        now = T0 + timedelta(days=d)
        values = dict.fromkeys(fleet, 0.01) | {u: 0.95 for u in fleet[10 * d : 10 * d + 10]}
        granted.append(len(policy.decide(risks(values, now), now).new_drains))
    assert granted == [allowed_on_day(epoch_day(T0) + d, 1.5) for d in range(4)]
    assert sum(granted) == 6


def test_the_share_takes_precedence_over_the_count_in_the_configuration(tmp_path):
    file = tmp_path / "foreshock.toml"
    file.write_text("[policy]\ndrain_budget_per_day = 5\ndaily_budget_share = 0.01\n")
    assert PolicySettings.from_config(load_config(file)).daily_budget == DailyBudget(share=0.01)
    file.write_text("[policy]\ndrain_budget_per_day = 5\n")
    assert PolicySettings.from_config(load_config(file)).daily_budget == DailyBudget(per_day=5)
    assert PolicySettings.from_config(load_config(None)).daily_budget is None
    file.write_text("[policy]\ndaily_budget_share = 2\n")
    with pytest.raises(ConfigError, match="daily_budget_share"):
        load_config(file)
    with pytest.raises(ValueError, match="exactly one"):
        DailyBudget(per_day=2, share=0.01)


def test_the_replay_spends_the_budget_and_says_which(tmp_path):
    """Ten units at high risk every hour for three days: a budget of 1 a day drains three."""
    fleet = units(10)
    rows = [
        {"unit_id": u, "ts": T0 + timedelta(hours=h), "model": "gbm", "horizon": "72h", "risk": 0.95}
        for u in fleet
        for h in range(72)
    ]
    scores = pl.DataFrame(rows).with_columns(
        pl.col("ts").dt.cast_time_unit("us"), pl.col("unit_id").str.slice(0, 11).alias("node")
    )
    failures = pl.DataFrame(schema={"unit_id": pl.String, "failed_at": pl.Datetime("us", "UTC")})
    report = replay(
        scores,
        failures,
        settings(DailyBudget(share=0.1)),
        alert_window=timedelta(days=7),
        min_lead_time=timedelta(hours=1),
    )
    gbm = next(o for o in report.outcomes if o.variant == "gbm")
    assert gbm.drains == 3
    assert report.settings["daily_budget"]["text"] == "10 % of the units reporting that day, 1.0 a day on average"
