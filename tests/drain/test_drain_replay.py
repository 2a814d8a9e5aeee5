"""Policy replay: drains matched to failures and GPU-hours checked by hand."""

from __future__ import annotations

import json
from datetime import timedelta

import polars as pl
import pytest
from drain_helpers import T0

from foreshock.costs import DrainCosts
from foreshock.drain.policy import PolicySettings
from foreshock.drain.replay import NO_PREDICTION, replay
from foreshock.drain.replay_report import write_report

HOURS = 120  # snapshots t0 .. t0 + 119h
A, B, C, D = (f"gpu-node00{i}-gpu0" for i in range(1, 5))
A_FAILS, C_FAILS = T0 + timedelta(hours=72), T0 + timedelta(hours=50)


def _risk(model: str, unit: str, hour: int) -> float:
    if model == "gbm":
        if unit == A and 24 <= hour < 72:
            return 0.9  # a precursor the model sees two days ahead
        if unit == B and 10 <= hour < 20:
            return 0.9  # a false alarm
    return 0.02


@pytest.fixture
def small_case():
    rows = [
        {"unit_id": u, "ts": T0 + timedelta(hours=h), "model": m, "horizon": "72h", "risk": _risk(m, u, h)}
        for m in ("gbm", "baseline")
        for u in (A, B, C, D)
        for h in range(HOURS)
    ]
    scores = pl.DataFrame(rows).with_columns(
        pl.col("ts").dt.cast_time_unit("us"), pl.col("unit_id").str.slice(0, 11).alias("node")
    )
    failures = pl.DataFrame({"unit_id": [A, C], "failed_at": [A_FAILS, C_FAILS]}).with_columns(
        pl.col("failed_at").dt.cast_time_unit("us")
    )
    costs = DrainCosts(
        job_gpus=100,
        checkpoint_interval=timedelta(hours=2),
        restart_time=timedelta(minutes=30),
        drain_overhead=timedelta(minutes=6),
        repair_turnaround=timedelta(days=1),
    )
    settings = PolicySettings(
        costs=costs, max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0, fault_domains=("node",)
    )
    return scores, failures, settings


def test_gpu_hours_match_a_hand_computation(small_case, tmp_path):
    scores, failures, settings = small_case
    report = replay(scores, failures, settings, alert_window=timedelta(days=7), min_lead_time=timedelta(hours=1))
    by = {o.variant: o for o in report.outcomes}
    # By hand: an unplanned failure costs 100 GPUs x (2h/2 + 0.5h) = 150 GPU-h; a drain
    # costs 100 x 0.1h = 10 GPU-h; a healthy unit drained is out for 1 day = 24 GPU-h.
    # gbm drains A (fails 47h later: drained ahead) and B (never fails: healthy); C fails unseen.
    gbm = by["gbm"]
    assert (gbm.failures, gbm.drained_ahead, gbm.healthy_drains, gbm.drains) == (2, 1, 1, 2)
    assert gbm.gpu_hours_lost == pytest.approx(1 * 150 + 2 * 10 + 1 * 24)
    assert gbm.gpu_hours_saved == pytest.approx(2 * 150 - 194)
    assert gbm.effective_training_time == pytest.approx(1 - 194 / (4 * 119))
    assert gbm.drains_per_day == pytest.approx(2 / (119 / 24))
    # drain_at_checkpoint takes effect half a checkpoint interval after the decision.
    assert gbm.median_lead_time_h == pytest.approx(72 - 25)
    none = by[NO_PREDICTION]
    assert (none.drains, none.gpu_hours_lost, none.gpu_hours_saved) == (0, pytest.approx(300), 0)
    assert by["baseline"].gpu_hours_saved == 0 and by["baseline"].drains == 0

    log = report.drains.filter(pl.col("variant") == "gbm").sort("unit_id")
    assert log.select("unit_id", "outcome").rows() == [(A, "drained_ahead"), (B, "healthy")]
    assert log.get_column("decided_at").to_list() == [T0 + timedelta(hours=24), T0 + timedelta(hours=10)]

    files = write_report(report, tmp_path / "replay")
    payload = json.loads(files["replay.json"].read_text())
    assert {o["variant"] for o in payload["outcomes"]} == {NO_PREDICTION, "gbm", "baseline"}
    assert "| gbm | 2 | 0 | 1 | 1 | 2 |" in files["replay.md"].read_text()
    for name in ("outcomes", "gpu_hours", "cumulative"):
        assert files[name].stat().st_size > 1000


def test_a_drained_unit_returns_through_burn_in_not_a_second_drain(small_case):
    scores, failures, settings = small_case
    # A stays at high risk after it comes back from repair (t0+49h): burn-in holds it.
    report = replay(scores, failures, settings, alert_window=timedelta(days=7), min_lead_time=timedelta(hours=1))
    drains_of_a = report.drains.filter((pl.col("variant") == "gbm") & (pl.col("unit_id") == A))
    assert drains_of_a.height == 1


def test_drain_too_close_to_the_failure_does_not_count(small_case):
    scores, failures, settings = small_case
    report = replay(
        scores,
        failures,
        settings,
        alert_window=timedelta(days=7),
        min_lead_time=timedelta(hours=48),
        models=["gbm"],
    )
    gbm = next(o for o in report.outcomes if o.variant == "gbm")
    assert gbm.drained_ahead == 0  # 47h lead < 48h needed
    assert gbm.gpu_hours_saved == pytest.approx(-2 * 10 - 24)  # B's drain was of a healthy unit


def test_failure_during_a_recorded_drain_is_reported_apart(small_case):
    """C was in a drain operations recorded when it failed: no variant could catch or miss it."""
    scores, failures, settings = small_case
    drains = pl.DataFrame(
        {"unit_id": [C], "drained_at": [C_FAILS - timedelta(hours=5)], "returned_at": [None]},
        schema={"unit_id": pl.String, "drained_at": pl.Datetime("us", "UTC"), "returned_at": pl.Datetime("us", "UTC")},
    )
    report = replay(
        scores, failures, settings, alert_window=timedelta(days=7), min_lead_time=timedelta(hours=1), drains=drains
    )
    by = {o.variant: o for o in report.outcomes}
    assert (by["gbm"].failures, by["gbm"].drained_ahead, by["gbm"].drained_then_failed) == (1, 1, 1)
    assert by[NO_PREDICTION].gpu_hours_lost == pytest.approx(150)
