"""Undrain: resume / uncordon the nodes foreshock drained once their risk has cleared."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from drain_helpers import recent, score_rows, write_scores
from test_drain_exports import calls, run_script

from foreshock.drain.outbox import publish

FOREIGN = "NHC: check_hw_ib failed"


def node_stub(bin_dir: Path, name: str, log: Path, answers: dict[str, str]) -> None:
    """``scontrol``/``kubectl`` stand-in: records argv, answers `show`/`get` per node."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"answers = {answers!r}\n"
        "if sys.argv[1:2] in (['show'], ['get']): print(answers.get(sys.argv[3], ''))\n"
    )
    script.chmod(0o755)


def two_publishes(config, before: dict, after: dict, node_states=None):
    write_scores(config.data_dir, score_rows(before, recent() - timedelta(hours=1)))
    first = publish(config)
    write_scores(config.data_dir, score_rows(after, recent()))
    return first, publish(config, node_states=node_states)


@pytest.fixture
def released(drain_config):
    before = {
        "gpu-node001-gpu0": (1.0, 1.0),  # drained, then clears: released
        "gpu-node002-gpu0": (1.0, 1.0),  # drained, then 0.4: above exit_risk, stays drained
        "gpu-node003-gpu0": (1.0, 1.0),  # drained, clears, but its neighbour still drains
        "gpu-node003-gpu1": (1.0, 1.0),
        "gpu-node004-gpu0": (1.0, 1.0),  # drained by foreshock's list; another tool holds it
    }
    after = {
        "gpu-node001-gpu0": 0.01,
        "gpu-node002-gpu0": 0.4,
        "gpu-node003-gpu0": 0.01,
        "gpu-node003-gpu1": (1.0, 1.0),
        "gpu-node004-gpu0": 0.01,
    }
    config = drain_config.with_overrides({"policy": {"max_drained_share_cluster": 1.0}})
    first, second = two_publishes(config, before, after)
    assert set(first.risk_list.filter(pl.col("action") == "drain_now")["unit_id"]) == set(before)
    return second


def test_only_nodes_whose_units_all_cleared_are_released(released):
    manifest = json.loads(released.files["manifest.json"].read_text())
    assert manifest["released_units"] == ["gpu-node001-gpu0", "gpu-node003-gpu0", "gpu-node004-gpu0"]
    assert manifest["released_nodes"] == ["gpu-node001", "gpu-node004"]
    for name in ("slurm_resume.sh", "k8s_uncordon.sh"):
        check = subprocess.run(["bash", "-n", str(released.files[name])], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        assert released.files[name].stat().st_mode & 0o111


def test_slurm_resume_touches_only_foreshock_drains(released, tmp_path):
    log = tmp_path / "calls.jsonl"
    node_stub(
        tmp_path / "bin",
        "scontrol",
        log,
        {
            "gpu-node001": "NodeName=gpu-node001 Arch=x86_64\n   State=IDLE+DRAIN ThreadsPerCore=1\n"
            "   Reason=foreshock: drain_now gpu0 p=1.00/72h [root@2026-12-03T10:00:00]",
            "gpu-node004": f"NodeName=gpu-node004 Arch=x86_64\n   State=IDLE+DRAIN ThreadsPerCore=1\n   Reason={FOREIGN}",
        },
    )
    script = released.files["slurm_resume.sh"]
    dry = run_script(script, bin_dir=tmp_path / "bin", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "would run: scontrol update NodeName=gpu-node001 State=UNDRAIN" in dry.stdout
    assert all(c[0] == "show" for c in calls(log))
    applied = run_script(script, "--apply", bin_dir=tmp_path / "bin", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    assert [c for c in calls(log) if c[0] != "show"] == [["update", "NodeName=gpu-node001", "State=UNDRAIN"]]
    assert f"left alone: gpu-node004 (state IDLE+DRAIN, reason set by another tool: {FOREIGN})" in applied.stdout
    assert "summary: resumed=1 left_alone=1 errors=0 apply=1" in applied.stdout


def test_slurm_resume_leaves_down_and_undrained_nodes(released, tmp_path):
    log = tmp_path / "calls.jsonl"
    node_stub(
        tmp_path / "bin",
        "scontrol",
        log,
        {
            "gpu-node001": "NodeName=gpu-node001\n   State=DOWN+DRAIN ThreadsPerCore=1\n   Reason=foreshock: drain_now gpu0",
            "gpu-node004": "NodeName=gpu-node004\n   State=IDLE ThreadsPerCore=1",
        },
    )
    applied = run_script(released.files["slurm_resume.sh"], "--apply", bin_dir=tmp_path / "bin", cwd=tmp_path)
    assert "left alone: gpu-node001 is DOWN+DRAIN" in applied.stdout
    assert "not drained by foreshock: gpu-node004" in applied.stdout
    assert all(c[0] == "show" for c in calls(log))


def test_k8s_uncordon_removes_only_foreshock_cordons(released, tmp_path):
    log = tmp_path / "calls.jsonl"
    node_stub(tmp_path / "bin", "kubectl", log, {"gpu-node001": "true|drain_now", "gpu-node004": "true|"})
    script = released.files["k8s_uncordon.sh"]
    dry = run_script(script, bin_dir=tmp_path / "bin", cwd=tmp_path)
    assert dry.returncode == 0 and "would run: kubectl uncordon gpu-node001" in dry.stdout
    assert all(c[0] == "get" for c in calls(log))
    applied = run_script(script, "--apply", bin_dir=tmp_path / "bin", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    assert [c for c in calls(log) if c[0] != "get"] == [
        ["taint", "nodes", "gpu-node001", "foreshock.io/failure-risk-"],
        ["annotate", "node", "gpu-node001", "foreshock.io/reason-"],
        ["uncordon", "gpu-node001"],
    ]
    assert "left alone: gpu-node004 is cordoned by someone else" in applied.stdout


def test_node_states_release_foreshock_drains_the_state_forgot(drain_config):
    """With ``--sinfo`` a node still drained by foreshock is released once its units are
    below exit_risk, even when no previous publish remembers the drain."""
    node_states = pl.DataFrame(
        {
            "node": ["gpu-node005", "gpu-node006", "gpu-node007"],
            "state": ["drained", "drained", "drained"],
            "reason": ["foreshock: drain_now gpu0", "foreshock: drain_now gpu0", FOREIGN],
        }
    )
    write_scores(
        drain_config.data_dir,
        score_rows({"gpu-node005-gpu0": 0.01, "gpu-node006-gpu0": 0.4, "gpu-node007-gpu0": 0.01}),
    )
    result = publish(drain_config, node_states=node_states)
    manifest = json.loads(result.files["manifest.json"].read_text())
    assert manifest["released_nodes"] == ["gpu-node005"]
    assert "resume_node gpu-node005 " in result.files["slurm_resume.sh"].read_text()
