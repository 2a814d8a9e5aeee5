"""Actions learned from outcomes: realised GPU-hours per band, the chooser, its comparison
with the fixed cost model, and exploration that stays within the guards."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import polars as pl
import pytest
from drain_helpers import HAND_COSTS, T0, score_rows
from test_drain_policy import fleet

from foreshock.drain.learned import LearnedSettings, choose, compare, decision_records, fit
from foreshock.drain.policy import DrainPolicy
from foreshock.drain.risk_table import unit_risk_table
from foreshock.drain.settings import PolicySettings
from foreshock.drain.state import PolicyState

TS = pl.Datetime("us", "UTC")
F, D, R = 150.0, 10.0, 24.0  # by hand: 100 x (1 h + 0.5 h), 100 x 0.1 h, one day out
LEARNED = LearnedSettings(bands=(0.1, 0.25, 0.5, 0.75), min_drains=2, bootstrap=200, confidence=0.9)
HORIZON = timedelta(hours=72)


def recorded(days: int = 20, per_day: int = 3):
    """The fixed policy's recorded drains: at risk 0.6 the units never failed (healthy
    drains), at 0.9 they failed 10 h after the decision (drained ahead)."""
    rows, failures = [], []
    for day in range(days):
        ts = T0 + timedelta(days=day)
        for i in range(per_day):
            rows.append({"unit_id": f"a-{day}-{i}", "ts": ts, "risk": 0.6, "action": "drain_at_checkpoint"})
            rows.append({"unit_id": f"b-{day}-{i}", "ts": ts, "risk": 0.9, "action": "drain_now"})
            failures.append({"unit_id": f"b-{day}-{i}", "failed_at": ts + timedelta(hours=10)})
            rows.append({"unit_id": f"c-{day}-{i}", "ts": ts, "risk": 0.15, "action": "watch"})
    decisions = pl.DataFrame(rows).with_columns(pl.col("ts").cast(TS))
    return decisions, pl.DataFrame(failures).with_columns(pl.col("failed_at").cast(TS))


def records_of(decisions, failures):
    until = decisions.get_column("ts").max() + HORIZON
    return decision_records(
        decisions, failures, HAND_COSTS, LEARNED, horizon=HORIZON, min_lead_time=timedelta(hours=1), until=until
    )


def test_realised_gpu_hours_per_band_and_the_chosen_threshold():
    records = records_of(*recorded())
    by_arm = records.group_by("band", "arm").agg(pl.col("cost").mean(), pl.col("cost_none").mean()).sort("band")
    assert by_arm.rows() == [(1, "none", 0.0, 0.0), (3, "drain", D + R, 0.0), (4, "drain", D, F)]
    estimates = fit(records, HAND_COSTS, LEARNED)
    assert estimates.cost(3, "drain") == pytest.approx(D + R) and estimates.cost(3, "none") == 0.0
    assert estimates.cost(4, "drain") == pytest.approx(D) and estimates.cost(4, "none") == pytest.approx(F)
    # band 1 was never drained: its drain cost is the direct model, D + (1 - 0 failures) R
    assert estimates.cost(1, "drain") == pytest.approx(D + R)
    choice = choose(estimates, LEARNED, fixed=3)
    assert choice.threshold() == 0.75  # draining at 0.6 cost more than it saved
    assert choice.arm(0.6) == "none" and choice.arm(0.9) == "drain"
    assert choice.arm(0.3) == "none"  # band 2 has no record: the fixed policy (drains from band 3) decides
    assert 2 in choice.explore_bands and 1 in choice.explore_bands  # short of drain records


def test_learned_beats_the_fixed_model_by_its_interval_on_later_decisions():
    result = compare(records_of(*recorded()), HAND_COSTS, LEARNED, fixed=3)
    assert result.train_records == result.test_records == 90
    # the later half's 30 healthy drains at 0.6 are what the learned chooser would not do
    assert result.difference_gpu_h == pytest.approx(-30 * (D + R))
    assert result.interval[1] < 0 and result.better
    # with no difference to learn (drains at 0.6 as good as at 0.9) it is not better
    decisions, failures = recorded()
    also = decisions.filter(pl.col("risk") == 0.6).select(
        "unit_id", (pl.col("ts") + timedelta(hours=10)).alias("failed_at")
    )
    same = compare(records_of(decisions, pl.concat([failures, also])), HAND_COSTS, LEARNED, fixed=3)
    assert same.difference_gpu_h == 0.0 and not same.better


def test_the_learned_chooser_decides_and_explores_within_the_guards():
    choice = choose(fit(records_of(*recorded()), HAND_COSTS, LEARNED), LEARNED, fixed=3)
    learned = dataclasses.replace(LEARNED, chooser="learned", explore_rate=1.0, explore_per_day=1)
    settings = PolicySettings(
        costs=HAND_COSTS,
        max_drained_share_cluster=1.0,
        max_drained_share_per_domain=1.0,
        max_new_drains_per_run=2,
        learned=learned,
    )
    choice.settings = learned
    inventory = fleet(racks=1, nodes_per_rack=2, gpus=4)
    units = inventory.get_column("unit_id").to_list()
    risks = {units[0]: 0.9, units[1]: 0.6, units[2]: 0.3, units[3]: 0.3, units[4]: 0.3}
    policy = DrainPolicy(settings, choice)
    first = policy.decide(unit_risk_table(score_rows(risks, T0), settings.horizon), T0, inventory=inventory)
    rows = {r["unit_id"]: r for r in first.recommendations.to_dicts()}
    assert rows[units[0]]["action"] in ("drain_now", "drain_at_checkpoint")
    assert rows[units[1]]["action"] == "run_diagnostics"  # the fixed model would drain at 0.6
    explored = [u for u in units[2:5] if rows[u]["action"] in ("drain_now", "drain_at_checkpoint")]
    assert len(explored) == 1 and rows[explored[0]]["propensity"] == 1.0
    assert "exploration" in rows[explored[0]]["reason"]
    assert len(first.new_drains) == 2  # the rate limit holds
    # later that day: the day's exploratory drain is spent, whatever the rate limit allows
    state = PolicyState.from_frame(first.state.to_frame())
    later = T0 + timedelta(hours=3)
    second = policy.decide(
        unit_risk_table(score_rows(risks, later), settings.horizon), later, state, inventory=inventory
    )
    assert second.new_drains == []
    guards = second.recommendations.filter(pl.col("guard").is_not_null()).get_column("guard").unique().to_list()
    assert guards == ["exploration budget"]


def test_publish_learns_from_earlier_risk_lists_and_decides_only_when_better(drain_config):
    """Earlier publishes' risk lists are the recorded decisions; with too few the fixed policy decides."""
    from foreshock.drain.learned_history import learned_chooser
    from foreshock.drain.outbox_files import DIR_FORMAT, MANIFEST_FILE
    from foreshock.drain.risk_list import build_risk_list, write_risk_list

    config = drain_config.with_overrides(
        {"policy": {"chooser": "learned", "learned_min_drains": 2, "repair_turnaround": "1d", "job_gpus": 100}}
    )
    settings = PolicySettings.from_config(config)
    decisions, failures = recorded()
    now = decisions.get_column("ts").max() + timedelta(days=4)
    choice, notes = learned_chooser(config, settings, now, failures, None)
    assert choice is None and "too few recorded decisions (0)" in notes[0]
    for (ts,), rows in decisions.group_by(["ts"]):
        directory = config.outbox_dir / f"{ts:{DIR_FORMAT}}"
        directory.mkdir(parents=True)
        listed = rows.rename({"ts": "score_ts"}).with_columns(
            pl.lit("drain: ...").alias("reason"), pl.lit(1.0).alias("propensity")
        )
        write_risk_list(build_risk_list(listed, ts), directory)
        (directory / MANIFEST_FILE).write_text("{}")
    choice, notes = learned_chooser(config, settings, now, failures, None)
    assert choice is not None and choice.threshold() == 0.75, notes
    assert notes[0].startswith("learned chooser decides (drains from risk 0.75)")


def test_a_second_publish_in_the_same_second_is_recorded_too(drain_config):
    """Two publishes in one second write ``<time>`` and ``<time>-01``; the decisions of both
    are the learned chooser's history (the suffixed one used to be skipped)."""
    from foreshock.drain.learned_history import published_decisions
    from foreshock.drain.outbox_files import MANIFEST_FILE, new_name
    from foreshock.drain.risk_list import build_risk_list, write_risk_list

    decisions, _ = recorded(days=1, per_day=1)
    ts = decisions.get_column("ts").max()
    for unit in ("b-0-0", "a-0-0"):
        directory = drain_config.outbox_dir / new_name(drain_config.outbox_dir, ts)
        directory.mkdir(parents=True)
        listed = decisions.filter(pl.col("unit_id") == unit).rename({"ts": "score_ts"})
        listed = listed.with_columns(pl.lit("drain: ...").alias("reason"), pl.lit(1.0).alias("propensity"))
        write_risk_list(build_risk_list(listed, ts), directory)
        (directory / MANIFEST_FILE).write_text("{}")
    assert sorted(p.name[-3:] for p in drain_config.outbox_dir.iterdir())[0] == "-01"
    found = published_decisions(drain_config.outbox_dir, ts - timedelta(days=1))
    assert sorted(found.get_column("unit_id").to_list()) == ["a-0-0", "b-0-0"]
