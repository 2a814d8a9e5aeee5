"""The drain policy: guards, hysteresis, left-alone units, burn-in, cost and lead time."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from itertools import pairwise

import polars as pl
import pytest
from drain_helpers import T0, score_rows

from foreshock.costs import DrainCosts
from foreshock.drain.policy import DrainPolicy
from foreshock.drain.risk_table import unit_risk_table
from foreshock.drain.settings import PolicySettings
from foreshock.drain.state import PolicyState

DRAINS = ("drain_now", "drain_at_checkpoint")


def fleet(racks: int = 4, nodes_per_rack: int = 4, gpus: int = 8) -> pl.DataFrame:
    rows = []
    for r in range(racks):
        for n in range(nodes_per_rack):
            node = f"gpu-node{r * nodes_per_rack + n + 1:03d}"
            for g in range(gpus):
                rows.append({"unit_id": f"{node}-gpu{g}", "node": node, "rack": f"r{r + 1}", "lot": "L1"})
    return pl.DataFrame(rows)


def decide(policy, risks: dict, inventory, state=None, ts=T0, **kwargs):
    frame = unit_risk_table(score_rows(risks, ts, rack_of=lambda n: _rack(inventory, n)), policy.settings.horizon)
    return policy.decide(frame, ts, state, inventory=inventory, **kwargs)


def _rack(inventory: pl.DataFrame, node: str) -> str:
    return inventory.filter(pl.col("node") == node).get_column("rack")[0]


def drained(decision) -> pl.DataFrame:
    return decision.recommendations.filter(pl.col("action").is_in(DRAINS))


class TestGuards:
    def test_whole_rack_at_high_risk_drains_only_its_quota(self):
        inventory = fleet()
        settings = PolicySettings(
            max_drained_share_cluster=0.5,
            max_drained_share_per_domain=0.25,
            max_new_drains_per_run=100,
            fault_domains=("node", "rack"),
        )
        rack1 = inventory.filter(pl.col("rack") == "r1").get_column("unit_id").to_list()
        risks = {u: 0.95 for u in rack1} | {u: 0.01 for u in inventory.get_column("unit_id") if u not in rack1}
        decision = decide(DrainPolicy(settings), risks, inventory)
        out = drained(decision)
        assert out.height == 8  # 25% of a 32-unit rack
        per_node = Counter(out.get_column("node").to_list())
        assert max(per_node.values()) <= 2  # 25% of an 8-GPU node
        held = decision.recommendations.filter(pl.col("unit_id").is_in(rack1) & ~pl.col("action").is_in(DRAINS))
        assert held.height == 24
        assert set(held.get_column("action")) == {"watch"}
        assert all("quota" in r for r in held.get_column("reason"))

    def test_units_already_out_count_against_the_quota(self):
        inventory = fleet()
        settings = PolicySettings(
            max_drained_share_cluster=0.5,
            max_drained_share_per_domain=0.25,
            max_new_drains_per_run=100,
            fault_domains=("rack",),
        )
        rack1 = inventory.filter(pl.col("rack") == "r1").get_column("unit_id").to_list()
        policy = DrainPolicy(settings)
        first = decide(policy, {u: 0.95 for u in rack1[:3]}, inventory)
        assert drained(first).height == 3
        second = decide(policy, {u: 0.95 for u in rack1}, inventory, state=first.state, ts=T0 + timedelta(hours=1))
        assert drained(second).height == 8  # 3 continuing + 5 new, not 8 new
        assert sorted(second.new_drains) == sorted(set(drained(second).get_column("unit_id")) - set(rack1[:3]))

    def test_cluster_quota_counts_nodes_another_tool_drained(self):
        inventory = fleet()
        settings = PolicySettings(
            max_drained_share_cluster=0.1,
            max_drained_share_per_domain=1.0,
            max_new_drains_per_run=100,
            fault_domains=("rack",),
        )
        units = inventory.get_column("unit_id").to_list()
        node_states = pl.DataFrame({"node": ["gpu-node016"], "state": ["drained"], "reason": ["NHC: bad DIMM"]})
        decision = decide(DrainPolicy(settings), {u: 0.9 for u in units[:40]}, inventory, node_states=node_states)
        # floor(0.1 * 128) = 12 may be out; gpu-node016's 8 units already are.
        assert drained(decision).height == 4

    def test_rate_limit_caps_new_drains_per_run(self):
        inventory = fleet()
        settings = PolicySettings(
            max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0, max_new_drains_per_run=3
        )
        units = inventory.get_column("unit_id").to_list()
        risks = {u: 0.6 + i / 1000 for i, u in enumerate(units[:20])}
        decision = decide(DrainPolicy(settings), risks, inventory)
        out = drained(decision)
        assert out.height == 3
        # The most at risk go first.
        assert set(out.get_column("unit_id")) == set(units[17:20])
        rate_limited = decision.recommendations.filter(pl.col("guard") == "rate limit")
        assert rate_limited.height == 17


class TestHysteresis:
    @pytest.mark.parametrize(
        "series",
        [
            [0.55, 0.45, 0.6, 0.35, 0.52, 0.31, 0.58, 0.4, 0.49, 0.33] * 2,  # around enter/exit
            [0.12, 0.08, 0.11, 0.07, 0.13, 0.09] * 3,  # around the watch threshold
            [0.26, 0.2, 0.27, 0.18, 0.3, 0.16] * 3,  # around the diagnostics threshold
        ],
    )
    def test_flapping_risk_does_not_flap_the_action(self, series):
        inventory = fleet(racks=1, nodes_per_rack=1, gpus=4)
        settings = PolicySettings(max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0)
        policy = DrainPolicy(settings)
        state = PolicyState()
        actions = []
        for i, risk in enumerate(series):
            d = decide(policy, {"gpu-node001-gpu0": risk}, inventory, state=state, ts=T0 + timedelta(hours=i))
            state = PolicyState.from_frame(d.state.to_frame())  # persisted between runs
            actions.append(d.recommendations.filter(pl.col("unit_id") == "gpu-node001-gpu0")["action"][0])
        changes = sum(a != b for a, b in pairwise(actions))
        assert changes <= 1, actions
        assert actions[-1] != "none"

    def test_drain_clears_only_below_exit_risk(self):
        inventory = fleet(racks=1, nodes_per_rack=1, gpus=4)
        policy = DrainPolicy(PolicySettings(max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0))
        state = None
        actions = []
        for i, risk in enumerate([0.7, 0.35, 0.31, 0.1, 0.01]):
            d = decide(policy, {"gpu-node001-gpu0": risk}, inventory, state=state, ts=T0 + timedelta(hours=i))
            state = d.state
            actions.append(d.recommendations["action"][0])
        assert actions[0] in DRAINS and actions[1] in DRAINS and actions[2] in DRAINS
        assert actions[3] == "watch" and actions[4] == "none"


class TestLeftAloneAndAdmission:
    def test_node_drained_by_another_tool_is_left_alone(self):
        inventory = fleet(racks=1, nodes_per_rack=2, gpus=2)
        node_states = pl.DataFrame(
            {
                "node": ["gpu-node001", "gpu-node002"],
                "state": ["drained", "idle"],
                "reason": ["NHC: check_hw failed", None],
            }
        )
        policy = DrainPolicy(PolicySettings(max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0))
        d = decide(policy, {"gpu-node001-gpu0": 0.95, "gpu-node002-gpu0": 0.95}, inventory, node_states=node_states)
        by_unit = {r["unit_id"]: r for r in d.recommendations.to_dicts()}
        assert by_unit["gpu-node001-gpu0"]["action"] == "none"
        assert "NHC: check_hw failed" in by_unit["gpu-node001-gpu0"]["reason"]
        assert by_unit["gpu-node002-gpu0"]["action"] in DRAINS

    def test_node_drained_by_foreshock_is_not_treated_as_another_tool(self):
        inventory = fleet(racks=1, nodes_per_rack=1, gpus=2)
        node_states = pl.DataFrame(
            {"node": ["gpu-node001"], "state": ["drained"], "reason": ["foreshock: drain_now gpu0"]}
        )
        policy = DrainPolicy(PolicySettings(max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0))
        d = decide(policy, {"gpu-node001-gpu0": 0.95}, inventory, node_states=node_states)
        assert d.recommendations["action"][0] in DRAINS

    def test_failed_unit_is_down_then_held_for_burn_in(self):
        inventory = fleet(racks=1, nodes_per_rack=1, gpus=2)
        settings = PolicySettings(burn_in=timedelta(hours=24))
        policy = DrainPolicy(settings)
        failures = pl.DataFrame({"unit_id": ["gpu-node001-gpu0"], "failed_at": [T0 + timedelta(hours=2)]}).with_columns(
            pl.col("failed_at").dt.cast_time_unit("us")
        )
        # Last score before the failure: down.
        scores = unit_risk_table(score_rows({"gpu-node001-gpu0": 0.01}, T0), "72h")
        down = policy.decide(scores, T0 + timedelta(hours=3), None, inventory=inventory, failures=failures)
        assert down.recommendations["action"][0] == "none"
        assert "down since failure" in down.recommendations["reason"][0]
        # Scored again after the repair: burn-in diagnostics, even at low risk.
        back = T0 + timedelta(hours=30)
        d = decide(policy, {"gpu-node001-gpu0": 0.01}, inventory, state=down.state, ts=back, failures=failures)
        assert d.recommendations["action"][0] == "run_diagnostics"
        assert "dcgmi diag -r 3" in d.recommendations["reason"][0]
        later = back + timedelta(hours=25)
        d2 = decide(policy, {"gpu-node001-gpu0": 0.01}, inventory, state=d.state, ts=later, failures=failures)
        assert d2.recommendations["action"][0] == "none"  # burn-in over: trusted again


class TestCostAndLeadTime:
    def test_imminent_failure_drains_now_distant_one_at_checkpoint(self):
        inventory = fleet(racks=1, nodes_per_rack=2, gpus=1)
        policy = DrainPolicy(PolicySettings(max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0))
        d = decide(policy, {"gpu-node001-gpu0": (1.0, 1.0), "gpu-node002-gpu0": (0.3, 0.7)}, inventory)
        by_unit = {r["unit_id"]: r for r in d.recommendations.to_dicts()}
        assert by_unit["gpu-node001-gpu0"]["action"] == "drain_now"
        assert by_unit["gpu-node001-gpu0"]["lead_time_h"] <= 2
        assert by_unit["gpu-node002-gpu0"]["action"] == "drain_at_checkpoint"
        assert by_unit["gpu-node002-gpu0"]["lead_time_h"] > 2

    def test_drain_that_costs_more_than_it_saves_becomes_diagnostics(self):
        inventory = fleet(racks=1, nodes_per_rack=1, gpus=1)
        costs = DrainCosts(job_gpus=1, repair_turnaround=timedelta(days=30))
        assert costs.break_even_risk > 0.9
        policy = DrainPolicy(PolicySettings(costs=costs, max_drained_share_cluster=1.0))
        d = decide(policy, {"gpu-node001-gpu0": 0.8}, inventory)
        row = d.recommendations.row(0, named=True)
        assert row["action"] == "run_diagnostics"
        assert "cost more than it saves" in row["reason"]

    def test_every_recommendation_says_why_and_which_model(self):
        inventory = fleet(racks=1, nodes_per_rack=1, gpus=2)
        policy = DrainPolicy(PolicySettings(max_drained_share_cluster=1.0))
        d = decide(policy, {"gpu-node001-gpu0": 0.9, "gpu-node001-gpu1": 0.15}, inventory)
        for row in d.recommendations.to_dicts():
            assert row["reason"] and row["model_name"] == "foreshock-risk" and row["model_version"] == "3"
            assert row["run_id"] and row["horizon"] == "72h" and row["lead_time_h"] > 0
            assert row["top_signals"][0]["signal"] == "ecc_sbe_increase_24h"
        top = d.recommendations.row(0, named=True)
        assert "ecc_sbe_increase_24h=42" in top["reason"]


def test_settings_reject_inverted_thresholds():
    with pytest.raises(ValueError, match="exit_risk"):
        PolicySettings(enter_risk=0.3, exit_risk=0.5)


def test_scores_without_the_decision_horizon_are_refused():
    frame = score_rows({"gpu-node001-gpu0": 0.5}).filter(pl.col("horizon") == "24h")
    with pytest.raises(ValueError, match="decision horizon '72h'"):
        unit_risk_table(frame, "72h")
