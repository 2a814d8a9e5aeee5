"""Policy replay: drains matched to failures and GPU-hours checked by hand."""

from __future__ import annotations

import json
from datetime import timedelta

import polars as pl
import pytest
from drain_helpers import HAND_COSTS, T0

from foreshock.drain.replay import NO_PREDICTION, replay
from foreshock.drain.replay_report import write_report
from foreshock.drain.settings import PolicySettings

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
    settings = PolicySettings(
        costs=HAND_COSTS,
        max_drained_share_cluster=1.0,
        max_drained_share_per_domain=1.0,
        fault_domains=("node",),
        enter_for=timedelta(hours=6),
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
    # The decision comes at A's sixth hourly snapshot above enter_risk (hour 29: the hold,
    # enter_for = 6h); drain_at_checkpoint takes effect half a checkpoint interval later.
    assert gbm.median_lead_time_h == pytest.approx(72 - 30)
    none = by[NO_PREDICTION]
    assert (none.drains, none.gpu_hours_lost, none.gpu_hours_saved) == (0, pytest.approx(300), 0)
    assert by["baseline"].gpu_hours_saved == 0 and by["baseline"].drains == 0

    log = report.drains.filter(pl.col("variant") == "gbm").sort("unit_id")
    assert log.select("unit_id", "outcome").rows() == [(A, "drained_ahead"), (B, "healthy")]
    assert log.get_column("decided_at").to_list() == [T0 + timedelta(hours=29), T0 + timedelta(hours=15)]

    files = write_report(report, tmp_path / "replay")
    payload = json.loads(files["replay.json"].read_text())
    assert {o["variant"] for o in payload["outcomes"]} == {NO_PREDICTION, "gbm", "baseline"}
    assert "| gbm | 2 | 0 | 1 | 1 | 2 |" in files["replay.md"].read_text()
    # the learned chooser against the fixed cost model, on the same replayed decisions
    (learned,) = [row for row in payload["learned"] if row["variant"] == "gbm"]
    # one record each for A and B: their drains (a continuing drain is no new decision)
    assert (learned["train_records"], learned["test_records"]) == (1, 1)
    assert "## Learned chooser against the fixed cost model" in files["replay.md"].read_text()
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


def test_checkpoint_interval_matches_a_hand_computation(small_case, tmp_path):
    """Young/Daly: T* = sqrt(2 tau / lambda), checked with the numbers written out."""
    scores, failures, settings = small_case
    report = replay(scores, failures, settings, alert_window=timedelta(days=7), min_lead_time=timedelta(hours=1))
    plans = {p.variant: p for p in report.checkpoint}
    # A job of 100 GPUs on a 4-unit fleet seen for 119 h: each unit-hour of failures is
    # 100 / (4 * 119) job interruptions per hour.  tau = 5 min write + 30 min restart.
    tau = 35 / 60
    none_rate = 2 * 100 / (4 * 119)  # both failures unplanned
    assert plans[NO_PREDICTION].unplanned_per_day == pytest.approx(24 * 0.42016807)
    assert plans[NO_PREDICTION].optimal_interval_h == pytest.approx((2 * tau / none_rate) ** 0.5)
    assert plans[NO_PREDICTION].optimal_interval_h == pytest.approx(1.66633, rel=1e-5)
    # gbm drained A ahead: one unplanned failure left, two planned drains (6 min each)
    gbm_rate = 1 * 100 / (4 * 119)
    gbm = plans["gbm"]
    assert gbm.optimal_interval_h == pytest.approx(2.35655, rel=1e-5)
    assert gbm.planned_per_day == pytest.approx(24 * 2 * 100 / (4 * 119))
    waste_at_optimum = (5 / 60) / gbm.optimal_interval_h + gbm_rate * (gbm.optimal_interval_h / 2 + 0.5)
    waste_at_optimum += (2 * 100 / (4 * 119)) * 0.1
    assert gbm.effective_at_optimum == pytest.approx(1 - waste_at_optimum)
    waste_at_2h = (5 / 60) / 2 + gbm_rate * (2 / 2 + 0.5) + (2 * 100 / (4 * 119)) * 0.1
    assert gbm.effective_at_configured == pytest.approx(1 - waste_at_2h)
    # prediction lets the job checkpoint less often
    assert gbm.optimal_interval_h > plans[NO_PREDICTION].optimal_interval_h

    text = write_report(report, tmp_path / "replay", plots=False)["replay.md"].read_text()
    assert "## Checkpoint interval" in text
    assert "| no prediction | 10.08 | 0.00 | 1.7 h |" in text


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
