"""Outbox exports: risk list formats, diff across publishes, scripts that are safe to run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from drain_helpers import T0, score_rows, write_scores

from foreshock.drain.outbox import StaleScoresError, publish
from foreshock.drain.outbox_files import newest_list_dir
from foreshock.drain.risk_list import SCHEMA_VERSION, build_risk_list
from foreshock.drain.shell import one_line
from foreshock.drain.slurm import node_reasons, slurm_script

SCRIPTS = ("slurm_drain.sh", "k8s_cordon.sh", "npd_foreshock_check.sh")
NASTY = [
    "gpu-node001'; touch PWNED; '",
    "gpu-node$(touch PWNED)",
    "gpu node 001",
    "gpu-node001\ntouch PWNED",
    'gpu-node001"; touch PWNED; "',
    "gpu-node001;touch PWNED",
]


def stub(bin_dir: Path, name: str, log: Path, show_output: str = "") -> None:
    """A stand-in for ``scontrol``/``kubectl`` that records its argv as JSON lines."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"if sys.argv[1:2] in (['show'], ['get']): print({show_output!r})\n"
    )
    script.chmod(0o755)


def run_script(path: Path, *args: str, bin_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(path), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def published(drain_config):
    scores = score_rows(
        {
            "gpu-node001-gpu0": (1.0, 1.0),  # imminent: drain_now
            "gpu-node001-gpu1": 0.15,  # watch
            "gpu-node002-gpu3": (0.3, 0.8),  # drain_at_checkpoint
            "gpu-node003-gpu0": 0.3,  # diagnostics
            "gpu-node004-gpu0": 0.01,
        }
    )
    write_scores(drain_config.data_dir, scores)
    return publish(drain_config, generated_at=datetime.now(UTC))


class TestRiskList:
    def test_three_formats_carry_the_same_rows(self, published):
        files = published.files
        parquet = pl.read_parquet(files["risk_list.parquet"])
        csv = pl.read_csv(files["risk_list.csv"])
        jsonl = [json.loads(line) for line in files["risk_list.jsonl"].read_text().splitlines()]
        assert parquet.height == csv.height == len(jsonl) == 5
        assert parquet.get_column("unit_id").to_list() == csv.get_column("unit_id").to_list()
        assert [r["unit_id"] for r in jsonl] == parquet.get_column("unit_id").to_list()
        assert set(parquet.get_column("schema_version")) == {SCHEMA_VERSION}
        assert jsonl[0]["schema_version"] == SCHEMA_VERSION
        assert jsonl[0]["top_signals"][0]["signal"] == "ecc_sbe_increase_24h"
        assert csv.get_column("top_signals")[0].startswith("ecc_sbe_increase_24h=42")
        for column in ("risk_24h", "risk_72h", "expected_lead_time_h", "reason", "model_uri", "generated_at"):
            assert column in parquet.columns
        assert parquet.get_column("model_uri")[0] == "models:/foreshock-risk/3"
        actions = dict(zip(parquet["unit_id"], parquet["action"]))
        assert actions["gpu-node001-gpu0"] == "drain_now"
        assert actions["gpu-node002-gpu3"] == "drain_at_checkpoint"
        assert actions["gpu-node003-gpu0"] == "run_diagnostics"
        assert actions["gpu-node004-gpu0"] == "none"

    def test_generated_scripts_pass_bash_syntax_check(self, published):
        for name in SCRIPTS:
            result = subprocess.run(
                ["bash", "-n", str(published.files[name])], capture_output=True, text=True, check=False
            )
            assert result.returncode == 0, f"{name}: {result.stderr}"


class TestDiff:
    def test_diff_across_three_publishes(self, drain_config):
        def run(risks: dict, hours: int):
            write_scores(drain_config.data_dir, score_rows(risks, T0 + timedelta(hours=hours)))
            result = publish(drain_config, generated_at=datetime(2026, 11, 1, hours, tzinfo=UTC))
            return {(r["unit_id"], r["change"], r["previous_action"], r["action"]) for r in result.diff.to_dicts()}

        first = run({"gpu-node001-gpu0": 0.9, "gpu-node002-gpu0": 0.15, "gpu-node003-gpu0": 0.01}, 0)
        assert first == {
            ("gpu-node001-gpu0", "new", "none", "drain_at_checkpoint"),
            ("gpu-node002-gpu0", "new", "none", "watch"),
        }
        second = run({"gpu-node001-gpu0": 0.9, "gpu-node002-gpu0": 0.3, "gpu-node003-gpu0": 0.12}, 1)
        assert second == {
            ("gpu-node002-gpu0", "escalated", "watch", "run_diagnostics"),
            ("gpu-node003-gpu0", "new", "none", "watch"),
        }
        third = run({"gpu-node001-gpu0": 0.01, "gpu-node002-gpu0": 0.12, "gpu-node003-gpu0": 0.01}, 2)
        assert third == {
            ("gpu-node001-gpu0", "cleared", "drain_at_checkpoint", "none"),
            ("gpu-node002-gpu0", "lowered", "run_diagnostics", "watch"),
            ("gpu-node003-gpu0", "cleared", "watch", "none"),
        }
        dirs = sorted(p.name for p in drain_config.outbox_dir.iterdir() if p.is_dir())
        assert len(dirs) == 3
        manifest = json.loads((drain_config.outbox_dir / dirs[-1] / "manifest.json").read_text())
        assert manifest["previous"] == dirs[1]
        assert manifest["diff"] == {"new": 0, "escalated": 0, "lowered": 1, "cleared": 2}
        assert (drain_config.outbox_dir / "LATEST").read_text().strip() == dirs[-1]


class TestShellSafety:
    def test_bad_ids_in_scores_are_refused_and_never_reach_a_script(self, drain_config, tmp_path):
        risks = {"gpu-node001-gpu0": (1.0, 1.0)} | {f"{bad}-gpu0": (1.0, 1.0) for bad in NASTY}
        frame = score_rows(risks)
        write_scores(drain_config.data_dir, frame)
        result = publish(drain_config)
        assert set(result.risk_list.get_column("unit_id")) == {"gpu-node001-gpu0"}
        rejected = pl.read_csv(result.files["rejected.csv"])
        assert set(rejected.get_column("field")) == {"unit_id", "node"}
        assert rejected.get_column("row").min() >= 2  # rows 0-1 are the valid unit
        assert all(str(result.files["risk_list.parquet"].parent.parent.parent) in f for f in rejected["file"])
        log = tmp_path / "calls.jsonl"
        stub(tmp_path / "bin", "scontrol", log, "NodeName=x\n   State=IDLE ThreadsPerCore=1")
        run = run_script(result.files["slurm_drain.sh"], "--apply", bin_dir=tmp_path / "bin", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        recorded = calls(log)
        assert [c[:3] for c in recorded if c[0] == "show"] == [["show", "node", "gpu-node001"]]
        assert [c[1] for c in recorded if c[0] == "update"] == ["NodeName=gpu-node001"]
        assert not list(tmp_path.rglob("PWNED"))

    @pytest.mark.parametrize("bad", NASTY)
    def test_script_generators_refuse_a_bad_node_id(self, published, bad):
        frame = published.risk_list.with_columns(
            pl.when(pl.col("action") == "drain_now").then(pl.lit(bad)).otherwise(pl.col("node")).alias("node")
        )
        with pytest.raises(ValueError, match="risk list row 0: node .* not a valid id"):
            slurm_script(frame, datetime.now(UTC))

    def test_hostile_reason_text_is_passed_as_one_quoted_argument(self, published, tmp_path):
        hostile = "m$(touch PWNED)'\"; `touch PWNED`; touch PWNED\nnext line"
        frame = published.risk_list.with_columns(pl.lit(hostile).alias("model_name"))
        script = tmp_path / "slurm_drain.sh"
        script.write_text(slurm_script(frame, datetime.now(UTC)))
        log = tmp_path / "calls.jsonl"
        stub(tmp_path / "bin", "scontrol", log, "NodeName=x\n   State=IDLE ThreadsPerCore=1")
        run = run_script(script, "--apply", "--at-checkpoint", bin_dir=tmp_path / "bin", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        updates = [c for c in calls(log) if c[0] == "update"]
        expected = {
            node: reason
            for action in ("drain_now", "drain_at_checkpoint")
            for node, reason in node_reasons(frame, action)
        }
        assert (
            {u[1] for u in updates}
            == {f"NodeName={n}" for n in expected}
            == {"NodeName=gpu-node001", "NodeName=gpu-node002"}
        )
        for update in updates:
            node = update[1].split("=", 1)[1]
            assert update[2:] == ["State=DRAIN", f"Reason={expected[node]}"]
            assert "$(touch PWNED)" in update[3] and "\n" not in update[3]
        assert not list(tmp_path.rglob("PWNED"))

    def test_kubernetes_script_cordons_and_leaves_foreign_cordons_alone(self, published, tmp_path):
        script = published.files["k8s_cordon.sh"]
        log = tmp_path / "calls.jsonl"
        stub(tmp_path / "bin", "kubectl", log, "|")  # schedulable, no foreshock taint
        dry = run_script(script, bin_dir=tmp_path / "bin", cwd=tmp_path)
        assert dry.returncode == 0 and "would run: kubectl cordon gpu-node001" in dry.stdout
        assert all(c[0] == "get" for c in calls(log))
        run_script(script, "--apply", bin_dir=tmp_path / "bin", cwd=tmp_path)
        applied = [c for c in calls(log) if c[0] != "get"]
        assert ["cordon", "gpu-node001"] in applied
        assert [
            "taint",
            "nodes",
            "gpu-node001",
            "foreshock.io/failure-risk=drain_now:NoSchedule",
            "--overwrite",
        ] in applied
        assert not any("gpu-node002" in c for c in applied)  # drain_at_checkpoint needs the flag
        log.unlink()
        stub(tmp_path / "bin", "kubectl", log, "true|")  # cordoned by someone else
        foreign = run_script(script, "--apply", bin_dir=tmp_path / "bin", cwd=tmp_path)
        assert "left alone: gpu-node001 is cordoned by someone else" in foreign.stdout
        assert all(c[0] == "get" for c in calls(log))


class TestNodeProblemDetector:
    def test_exit_code_contract(self, published, drain_config, tmp_path):
        script = published.files["npd_foreshock_check.sh"]
        env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}

        def check(*args, extra_env=None):
            return subprocess.run(
                ["bash", str(script), *args],
                env={**env, **(extra_env or {})},
                capture_output=True,
                text=True,
                check=False,
            )

        problem = check("gpu-node001")
        assert problem.returncode == 1
        assert problem.stdout.startswith("foreshock: drain_now gpu0")
        assert len(problem.stdout.splitlines()[0]) <= 80
        assert check("gpu-node002").returncode == 1  # drain at checkpoint is also a problem
        ok = check("gpu-node004")
        assert ok.returncode == 0 and "no drain recommended" in ok.stdout
        assert check(extra_env={"NODE_NAME": "gpu-node001"}).returncode == 1
        # Republished now from 7h-old scores: the list is new, its scores are not.
        old_scores = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=7)
        write_scores(drain_config.data_dir, score_rows({"gpu-node001-gpu0": (1.0, 1.0)}, old_scores))
        stale = publish(drain_config, allow_stale=True)
        result = subprocess.run(
            ["bash", str(stale.files["npd_foreshock_check.sh"]), "gpu-node001"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 2 and "stale" in result.stdout


class TestStaleScores:
    def test_old_scores_are_refused_and_nothing_is_written(self, drain_config):
        write_scores(drain_config.data_dir, score_rows({"gpu-node001-gpu0": (1.0, 1.0)}, T0))
        now = T0 + timedelta(days=29)
        with pytest.raises(StaleScoresError) as refused:
            publish(drain_config, generated_at=now)
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith("scores are 29d old (newest snapshot 2026-11-01 00:00 UTC")
        assert "max_score_age = 6h" in message and "--allow-stale" in message
        assert not drain_config.outbox_dir.exists() or not newest_list_dir(drain_config.outbox_dir)

        forced = publish(drain_config, generated_at=now, allow_stale=True)
        assert forced.risk_list["action"][0] == "drain_now"

    def test_scores_within_the_limit_publish(self, drain_config):
        write_scores(drain_config.data_dir, score_rows({"gpu-node001-gpu0": 0.01}, T0))
        config = drain_config.with_overrides({"policy": {"max_score_age": "30d"}})
        assert publish(config, generated_at=T0 + timedelta(days=29)).directory.is_dir()


def test_slurm_dry_run_changes_nothing(published, tmp_path):
    log = tmp_path / "calls.jsonl"
    stub(tmp_path / "bin", "scontrol", log, "NodeName=x\n   State=IDLE ThreadsPerCore=1")
    run = run_script(published.files["slurm_drain.sh"], bin_dir=tmp_path / "bin", cwd=tmp_path)
    assert run.returncode == 0
    assert "would run: scontrol update NodeName=gpu-node001 State=DRAIN" in run.stdout
    assert all(c[0] == "show" for c in calls(log))


def test_one_line_strips_control_characters():
    assert one_line("a\nb\tc\x1b[31m") == "a b c [31m"


def test_build_risk_list_keeps_schema_with_no_rows():
    empty = build_risk_list(pl.DataFrame(schema={"unit_id": pl.String, "action": pl.String, "risk": pl.Float64}), T0)
    assert empty.height == 0 and "schema_version" in empty.columns and "top_signals" in empty.columns


def test_scores_of_several_models_need_a_choice(drain_config):
    gbm = score_rows({"gpu-node001-gpu0": 0.9})
    cox = gbm.with_columns(pl.lit("cox").alias("model"), pl.lit(0.01).alias("risk"))
    write_scores(drain_config.data_dir, pl.concat([gbm, cox]))
    with pytest.raises(ValueError, match=r"several models \['cox', 'gbm'\]"):
        publish(drain_config)
    chosen = publish(drain_config, model="cox")
    assert chosen.risk_list.get_column("action").to_list() == ["none"]


def test_terminal_list_shows_lead_times_as_operators_read_them():
    """A unit back from repair has almost no hazard: its expected time to failure is years,
    shown as '>1y', not as tens of thousands of hours; a near one stays in hours."""
    from foreshock.drain.outbox import format_top

    rows = pl.DataFrame(
        {
            "unit_id": ["gpu-node001-gpu0", "gpu-node002-gpu0", "gpu-node003-gpu0"],
            "node": ["gpu-node001", "gpu-node002", "gpu-node003"],
            "action": ["drain_at_checkpoint", "watch", "run_diagnostics"],
            "risk": [0.96, 0.3, 0.0],
            "expected_lead_time_h": [23.4, 100.0, 17713.0],
            "reason": ["soon", "later", "back in service"],
        }
    )
    lines = format_top(rows).splitlines()
    assert [line.split()[4] for line in lines[1:]] == ["23h", "4d", ">1y"]
