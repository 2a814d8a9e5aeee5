"""Repeat offenders: found from failures and drains, replaced instead of drained, within the guards."""

from __future__ import annotations

import json
from datetime import timedelta

import polars as pl
import pytest
from drain_helpers import HAND_COSTS, T0, score_rows, write_scores
from prometheus_client.parser import text_string_to_metric_families
from test_drain_policy import fleet

from foreshock.drain.lemons import LemonSettings, incidents, lemon_history, lemons_at, node_map
from foreshock.drain.outbox import publish
from foreshock.drain.policy import DrainPolicy
from foreshock.drain.replay import replay
from foreshock.drain.replay_report import write_report
from foreshock.drain.risk_table import unit_risk_table
from foreshock.drain.settings import PolicySettings
from foreshock.lake.merge import merge_into_lake
from foreshock.pipelines.cli import main
from foreshock.reporting.lemon_section import lemon_section, lemon_view

LEMON = "gpu-node001-gpu0"
NODE2 = [f"gpu-node002-gpu{g}" for g in range(4)]
SETTINGS = LemonSettings(count=3, node_count=4, window=timedelta(days=30), replace=True)
TS = pl.Datetime("us", "UTC")


def _failures(rows: list[tuple[str, float]]) -> pl.DataFrame:
    """Failures ``days`` before T0."""
    return pl.DataFrame(
        {"unit_id": [u for u, _ in rows], "failed_at": [T0 - timedelta(days=d) for _, d in rows]},
        schema={"unit_id": pl.String, "failed_at": TS},
    )


def _drains(rows: list[tuple[str, float, float, str | None]]) -> pl.DataFrame:
    """Recorded drains ``(unit, days before T0, days out, action)``."""
    return pl.DataFrame(
        {
            "unit_id": [r[0] for r in rows],
            "drained_at": [T0 - timedelta(days=r[1]) for r in rows],
            "returned_at": [T0 - timedelta(days=r[1] - r[2]) for r in rows],
            "action": [r[3] for r in rows],
        },
        schema={"unit_id": pl.String, "drained_at": TS, "returned_at": TS, "action": pl.String},
    )


@pytest.fixture
def history():
    """LEMON: two failures and a drain in 30 days (a failure inside that drain is the same
    incident), one failure too old to count; node 2: four incidents spread over its GPUs."""
    failures = _failures(
        [(LEMON, 25), (LEMON, 10), (LEMON, 4.5), (LEMON, 45)] + [(u, 3 + i) for i, u in enumerate(NODE2)]
    )
    drains = _drains([(LEMON, 5, 2, None)])
    return failures, drains


def test_a_unit_with_repeated_incidents_is_a_repeat_offender(history):
    failures, drains = history
    events = incidents(failures, drains, T0, SETTINGS.window)
    assert events.filter(pl.col("unit_id") == LEMON).get_column("kind").to_list() == ["failure", "failure", "drain"]
    table = lemons_at(T0, failures, drains, node_map(fleet(racks=1, nodes_per_rack=3, gpus=4)), SETTINGS)
    by_unit = {r["unit_id"]: r for r in table.to_dicts()}
    assert by_unit[LEMON]["repeat_offender"] == 3 and by_unit[LEMON]["lemon"] == "unit"
    assert by_unit["gpu-node002-gpu0"]["repeat_offender"] == 1
    assert {by_unit[u]["lemon"] for u in NODE2} == {"node"}  # 4 incidents across the node
    assert "gpu-node003-gpu0" not in by_unit  # nothing happened there
    history_rows = lemon_history(events, table)
    assert history_rows.filter(pl.col("unit_id") == LEMON).height == 3
    # a replacement starts the unit's count again (new hardware); its node keeps counting
    replaced = pl.concat([drains, _drains([(LEMON, 1, 0.5, "replace")])])
    after = lemons_at(T0, failures, replaced, {LEMON: "gpu-node001"}, SETTINGS).row(0, named=True)
    assert (after["repeat_offender"], after["node_repeat_offender"], after["lemon"]) == (1, 4, "node")


def _decide(settings: PolicySettings, risks: dict, inventory: pl.DataFrame, lemons: pl.DataFrame):
    frame = unit_risk_table(score_rows(risks, T0), settings.horizon)
    return DrainPolicy(settings).decide(frame, T0, inventory=inventory, lemons=lemons)


def test_the_policy_replaces_a_repeat_offender_it_would_drain_within_the_guards(history):
    failures, drains = history
    inventory = fleet(racks=1, nodes_per_rack=3, gpus=4)
    lemons = lemons_at(T0, failures, drains, node_map(inventory), SETTINGS)
    settings = PolicySettings(
        max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0, max_new_drains_per_run=3, lemons=SETTINGS
    )
    risks = {LEMON: 0.9, "gpu-node001-gpu1": 0.95, "gpu-node003-gpu0": 0.2} | {u: 0.8 for u in NODE2}
    out = _decide(settings, risks, inventory, lemons)
    rows = {r["unit_id"]: r for r in out.recommendations.to_dicts()}
    assert rows[LEMON]["action"] == "replace" and "repeat offender: 3 incidents" in rows[LEMON]["reason"]
    assert rows[LEMON]["repeat_offender"] == 3 and rows["gpu-node003-gpu0"]["repeat_offender"] == 0
    assert rows["gpu-node001-gpu1"]["action"] in ("drain_now", "drain_at_checkpoint")  # not a lemon
    assert rows["gpu-node003-gpu0"]["action"] == "watch"  # a lemon below the drain level is not taken out
    # the rate limit holds: 3 new drains or replacements, the rest of node 2 waits
    assert len(out.new_drains) == 3
    node2 = [rows[u]["action"] for u in NODE2]
    assert node2.count("replace") == 1 and node2.count("watch") == 3
    assert {rows[u]["guard"] for u in NODE2 if rows[u]["action"] == "watch"} == {"rate limit"}
    # with replace off the same unit is drained and returned
    plain = PolicySettings(max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0, lemons=LemonSettings())
    off = _decide(
        PolicySettings(**{**plain.__dict__, "lemons": LemonSettings(replace=False)}), {LEMON: 0.9}, inventory, lemons
    )
    assert off.recommendations.row(0, named=True)["action"] in ("drain_now", "drain_at_checkpoint")


def test_publish_lists_repeat_offender_counts_and_scripts_drain_the_replacement(drain_config, history, capsys):
    failures, drains = history
    merge_into_lake(drain_config.lake_dir, "failures", failures, shards=1)
    merge_into_lake(drain_config.lake_dir, "drains", drains, shards=1)
    inventory = fleet(racks=1, nodes_per_rack=3, gpus=4).with_columns(
        pl.lit("H100").alias("model"), pl.lit(T0 - timedelta(days=400)).cast(TS).alias("installed_at")
    )
    merge_into_lake(drain_config.lake_dir, "inventory", inventory, shards=1)
    now = T0 + timedelta(hours=1)
    write_scores(drain_config.data_dir, score_rows({LEMON: 0.9, "gpu-node003-gpu0": 0.05}, now))
    result = publish(drain_config, generated_at=now + timedelta(minutes=5))
    rows = {r["unit_id"]: r for r in result.risk_list.to_dicts()}
    assert rows[LEMON]["action"] == "replace" and rows[LEMON]["repeat_offender"] == 3
    assert rows["gpu-node003-gpu0"]["repeat_offender"] == 0
    assert "repeat_offender" in result.files["risk_list.csv"].read_text().splitlines()[0]
    script = result.files["slurm_drain.sh"].read_text()
    assert "foreshock: replace" in script and "# drain_now: 1 node(s)" in script
    # the fleet page lists the repeat offenders with their history
    page = lemon_section(lemon_view(drain_config, now), None)
    assert "1 unit(s), 1 node(s)" in page
    assert page.count(f'<td class="l">{LEMON}</td>') == 3  # two failures and the drain
    # foreshock status names them too (its exit code is about freshness, not about them)
    main(["--data-dir", str(drain_config.data_dir), "status", "--now", now.isoformat()])
    text = capsys.readouterr().out
    assert f"unit {LEMON}: 3 incidents (node gpu-node001: 3)" in text
    assert "node gpu-node002: 4 incidents over its units" in text
    gauges = drain_config.data_dir / "status.prom"
    main(
        [
            "--data-dir",
            str(drain_config.data_dir),
            "status",
            "--json",
            "--now",
            now.isoformat(),
            "--textfile",
            str(gauges),
        ]
    )
    rows = {r["unit_id"]: r["lemon"] for r in json.loads(capsys.readouterr().out)["repeat_offenders"]}
    assert rows[LEMON] == "unit" and {rows[u] for u in NODE2} == {"node"}
    families = {f.name: f.samples for f in text_string_to_metric_families(gauges.read_text())}
    assert {s.labels["level"]: s.value for s in families["foreshock_repeat_offenders"]} == {"unit": 1, "node": 1}
    mine = {
        s.labels["scope"]: s.value for s in families["foreshock_unit_repeat_offender"] if s.labels["unit_id"] == LEMON
    }
    assert mine == {"unit": 3, "node": 3}


def test_replay_reports_what_replacing_saved(tmp_path):
    """A unit fails twice, comes back at high risk and would fail a third time: replaced, the
    third failure is avoided; drained and returned, it happens in service."""
    a, others = "gpu-node001-gpu0", [f"gpu-node00{i}-gpu0" for i in (2, 3, 4)]
    fails = [T0 + timedelta(hours=h) for h in (20, 50, 110)]

    def risk(unit: str, hour: int) -> float:
        return 0.9 if unit == a and 76 <= hour < 90 else 0.02

    rows = [
        {"unit_id": u, "ts": T0 + timedelta(hours=h), "model": "gbm", "horizon": "72h", "risk": risk(u, h)}
        for u in (a, *others)
        for h in range(120)
    ]
    scores = pl.DataFrame(rows).with_columns(pl.col("ts").cast(TS), pl.col("unit_id").str.slice(0, 11).alias("node"))
    failures = pl.DataFrame({"unit_id": [a] * 3, "failed_at": fails}, schema={"unit_id": pl.String, "failed_at": TS})
    settings = PolicySettings(
        costs=HAND_COSTS,
        burn_in=timedelta(hours=1),
        max_drained_share_cluster=1.0,
        max_drained_share_per_domain=1.0,
        fault_domains=("node",),
        lemons=LemonSettings(count=2, window=timedelta(days=30), replace=True, replace_turnaround=timedelta(days=2)),
    )
    report = replay(scores, failures, settings, alert_window=timedelta(hours=24), min_lead_time=timedelta(hours=1))
    (lemon,) = report.lemons
    assert (lemon["replacements"], lemon["avoided_failures"]) == (1, 1)
    # By hand: drained and returned, the third failure costs F = 100 x (1 h + 0.5 h) = 150 GPU-h and
    # the drain's unit was out 24 h; replaced, the failure is avoided and the unit is out 48 h.
    assert lemon["replacing_saved_gpu_h"] == pytest.approx(150 + 24 - 48)
    gbm = next(o for o in report.outcomes if o.variant == "gbm")
    assert gbm.failures == 2  # the avoided failure is not judged
    text = write_report(report, tmp_path, plots=False)["replay.md"].read_text()
    assert "## Repeat offenders: replace instead of drain and return" in text
    assert "| gbm | 1 | 1 |" in text
