"""The generated Slurm script against a real local controller (slurmctld + munged)."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime

import pytest
from drain_helpers import SLURM_NODES, score_rows, write_scores

from foreshock.drain.outbox import publish

pytestmark = pytest.mark.slurm

NHC_REASON = "NHC: check_hw_ib failed"


def test_apply_drains_exactly_the_recommended_nodes(slurm_controller, drain_config):
    slurm = slurm_controller
    slurm.run("scontrol", "update", "NodeName=gpu-node003", "State=DRAIN", f"Reason={NHC_REASON}")
    risks = {f"{node}-gpu0": 0.01 for node in SLURM_NODES}
    risks |= {
        "gpu-node002-gpu0": (1.0, 1.0),  # drain_now
        "gpu-node002-gpu5": (1.0, 1.0),  # same node: one drain, both units in the reason
        "gpu-node003-gpu1": (1.0, 1.0),  # drain_now, but another tool already drained it
        "gpu-node005-gpu2": (1.0, 1.0),  # drain_now
        "gpu-node006-gpu0": (0.3, 0.8),  # drain_at_checkpoint
    }
    write_scores(drain_config.data_dir, score_rows(risks))
    config = drain_config.with_overrides({"policy": {"max_drained_share_cluster": 1.0}})
    result = publish(config, generated_at=datetime.now(UTC))
    script = str(result.files["slurm_drain.sh"])
    before = slurm.node_reasons()

    dry = slurm.run("bash", script)
    assert "would run: scontrol update NodeName=gpu-node002 State=DRAIN" in dry.stdout
    assert slurm.node_reasons() == before  # a dry run changes nothing

    applied = slurm.run("bash", script, "--apply")
    assert f"left alone: gpu-node003 (state UNKNOWN+DRAIN, reason set by another tool: {NHC_REASON}" in applied.stdout
    after = slurm.node_reasons()
    drained = {node for node, (state, reason) in after.items() if reason}
    assert drained == {"gpu-node002", "gpu-node003", "gpu-node005"}
    assert after["gpu-node003"][1] == NHC_REASON
    for node in ("gpu-node002", "gpu-node005"):
        state, reason = after[node]
        assert "drain" in state and reason.startswith("foreshock: drain_now")
    assert "gpu0 p=1.00/72h" in after["gpu-node002"][1] and "gpu5 p=1.00/72h" in after["gpu-node002"][1]
    assert after["gpu-node006"][1] is None  # waits for the checkpoint

    again = slurm.run("bash", script, "--apply", "--at-checkpoint")
    assert "already drained by foreshock: gpu-node002" in again.stdout
    final = slurm.node_reasons()
    assert final["gpu-node006"][1].startswith("foreshock: drain_at_checkpoint")
    assert final["gpu-node003"][1] == NHC_REASON
    assert final["gpu-node002"] == after["gpu-node002"]
    assert {n for n, (_, r) in final.items() if r} == {"gpu-node002", "gpu-node003", "gpu-node005", "gpu-node006"}


def test_publish_reads_live_node_states_and_leaves_foreign_drains_alone(slurm_controller, drain_config):
    """``foreshock publish --sinfo`` path: the policy itself skips nodes another tool holds."""
    from foreshock.drain.slurm import read_sinfo

    slurm = slurm_controller
    slurm.run("scontrol", "update", "NodeName=gpu-node007", "State=DRAIN", "Reason=NHC: GPU fell off the bus")
    out = subprocess.run(
        ["sinfo", "--noheader", "--Node", "--format=%N|%T|%E"],
        env={**os.environ, **slurm.env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    states = read_sinfo(out)
    write_scores(drain_config.data_dir, score_rows({"gpu-node007-gpu0": (1.0, 1.0), "gpu-node008-gpu0": 0.01}))
    result = publish(drain_config, node_states=states)
    row = result.risk_list.filter(result.risk_list["unit_id"] == "gpu-node007-gpu0").row(0, named=True)
    assert row["action"] == "none"
    assert "NHC: GPU fell off the bus" in row["reason"]
    assert "gpu-node007" not in result.files["slurm_drain.sh"].read_text()


def test_resume_releases_foreshock_drains_and_leaves_foreign_ones(slurm_controller, drain_config):
    from datetime import timedelta

    from drain_helpers import recent

    slurm = slurm_controller
    slurm.run("scontrol", "update", "NodeName=gpu-node004", "State=DRAIN", f"Reason={NHC_REASON}")
    config = drain_config.with_overrides({"policy": {"max_drained_share_cluster": 1.0}})
    hot = {"gpu-node001-gpu0": (1.0, 1.0), "gpu-node004-gpu0": (1.0, 1.0)}
    write_scores(config.data_dir, score_rows(hot, recent() - timedelta(hours=1)))
    drained = publish(config)
    slurm.run("bash", str(drained.files["slurm_drain.sh"]), "--apply")
    assert slurm.node_reasons()["gpu-node001"][1].startswith("foreshock: drain_now")
    assert slurm.node_reasons()["gpu-node004"][1] == NHC_REASON

    write_scores(config.data_dir, score_rows(dict.fromkeys(hot, 0.01), recent()))
    cleared = publish(config)
    script = str(cleared.files["slurm_resume.sh"])
    before = slurm.node_reasons()
    dry = slurm.run("bash", script)
    assert "would run: scontrol update NodeName=gpu-node001 State=UNDRAIN" in dry.stdout
    assert slurm.node_reasons() == before

    applied = slurm.run("bash", script, "--apply", check=False)
    # These fake nodes never registered (no slurmd): slurmctld clears the drain but then
    # answers "Invalid node state specified" for their UNKNOWN base state.  On a node
    # that registered, UNDRAIN succeeds; the effect checked below is the same.
    if applied.returncode != 0:
        assert "Invalid node state specified" in applied.stderr, applied.stdout + applied.stderr
        assert "error: gpu-node001: scontrol update failed" in applied.stderr
    else:
        assert "resumed: gpu-node001" in applied.stdout
    assert f"left alone: gpu-node004 (state UNKNOWN+DRAIN, reason set by another tool: {NHC_REASON}" in applied.stdout
    after = slurm.node_reasons()
    assert after["gpu-node001"][1] is None and "drain" not in after["gpu-node001"][0]
    assert after["gpu-node004"] == before["gpu-node004"]
    slurm.run("scontrol", "update", "NodeName=gpu-node004", "State=UNDRAIN", check=False)  # leave the session clean
