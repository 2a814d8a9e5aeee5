"""Lead-time metrics on hand-built cases whose answers are worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from foreshock.contract import UTC_TS
from foreshock.costs import DrainCosts
from foreshock.models.evaluation.alerts import (
    AlertWindow,
    alert_starts,
    alerts_per_threshold,
    threshold_for_budget,
    threshold_for_precision,
)
from foreshock.models.evaluation.caught import match_failures
from foreshock.models.evaluation.metrics import (
    c_index,
    calibration_error,
    judge_alerts,
    lead_time_report,
    pr_auc,
    snapshot_metrics,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
WINDOW = AlertWindow(alert_window=timedelta(days=7), min_lead_time=timedelta(hours=1))


def series(risks: dict[str, list[float]]) -> pl.DataFrame:
    rows = [
        {"unit_id": unit, "ts": T0 + i * HOUR, "risk": r}
        for unit, values in risks.items()
        for i, r in enumerate(values)
    ]
    return pl.DataFrame(rows).with_columns(pl.col("ts").cast(UTC_TS))


def failures(items: list[tuple[str, float, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "unit_id": [u for u, _, _ in items],
            "failed_at": [T0 + h * HOUR for _, h, _ in items],
            "mode": [m for *_, m in items],
        },
        schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String},
    )


def peaks(length: int, at: list[int], high: float = 0.9, low: float = 0.1) -> list[float]:
    return [high if i in at else low for i in range(length)]


@pytest.fixture
def fleet_case():
    """Four units over 48 hourly snapshots (2 days), threshold 0.5, H = 24 h.

    A: alert at h10, fails h30 -> caught, lead 20 h, true alert.
    B: alerts at h5 and h20, never fails -> 2 false alerts (both resolved by h48).
    C: alert at h45, fails h45.5 -> lead 0.5 h < L_min: missed; the alert is true.
    D: never alerts, fails h20 -> missed.
    """
    scores = series(
        {
            "A": peaks(30, [10, 11, 12]),
            "B": peaks(48, [5, 20]),
            "C": peaks(46, [45]),
            "D": peaks(20, []),
        }
    )
    fails = failures([("A", 30, "memory"), ("C", 45.5, "memory"), ("D", 20, "sudden")])
    truth = pl.DataFrame(
        {"unit_id": ["A", "C", "D"], "failed_at": fails.get_column("failed_at"), "has_precursor": [True, True, False]}
    )
    return scores, fails, truth


def test_alert_starts_are_rising_edges(fleet_case):
    scores, _, _ = fleet_case
    alerts = alert_starts(scores, 0.5)
    got = {(u, int((t - T0) / HOUR)) for u, t in alerts.select("unit_id", "alert_start").iter_rows()}
    assert got == {("A", 10), ("B", 5), ("B", 20), ("C", 45)}


def test_gap_in_snapshots_ends_an_alert():
    assert alert_starts(series({"A": [0.9] * 6}), 0.5).height == 1
    gapped = series({"A": [0.9] * 6}).filter(~pl.col("ts").is_in([T0 + 2 * HOUR, T0 + 3 * HOUR]))
    assert alert_starts(gapped, 0.5, step=HOUR).height == 2  # the 3 h gap ends the first run


def test_lead_time_recall_precision_and_false_alerts(fleet_case):
    scores, fails, truth = fleet_case
    costs = DrainCosts(
        job_gpus=10, checkpoint_interval=2 * HOUR, restart_time=timedelta(0), drain_overhead=timedelta(0)
    )
    r = lead_time_report(scores, fails, 0.5, "24h", WINDOW, ground_truth=truth, costs=costs, step=HOUR)
    # C's alert came 0.5 h before its failure, less than L_min: late, neither true nor caught.
    assert (r.alerts, r.true_alerts, r.false_alerts, r.late_alerts, r.alerts_unresolved) == (4, 1, 2, 1, 0)
    assert r.precision == pytest.approx(1 / 3)
    # per unit: A (true) and B (two false alerts, one unit) -> 1 of 2
    assert (r.alerted_units, r.true_units, r.precision_per_unit) == (2, 1, pytest.approx(0.5))
    assert (r.failures, r.caught, r.caught_within_horizon) == (3, 1, 1)
    assert r.recall == pytest.approx(1 / 3)
    assert r.lead_time_p50_h == pytest.approx(20.0)
    assert r.recall_with_precursor == pytest.approx(0.5)
    assert r.recall_without_precursor == pytest.approx(0.0)
    # 30 + 48 + 46 + 20 hourly snapshots = 6 unit-days; 2 false alerts
    assert r.unit_days == pytest.approx(6.0)
    assert r.false_alerts_per_1000_unit_days == pytest.approx(2 / 6 * 1000)
    assert r.alerts_per_day == pytest.approx(2.0)
    assert r.by_mode["memory"]["caught"] == 1 and r.by_mode["sudden"]["caught"] == 0
    # one catch x 10 GPUs x half a 2 h checkpoint, minus B's two healthy drains idle for 3 days each
    assert r.gpu_hours_saved == pytest.approx(10 * 1.0 - 2 * 72.0)


def test_one_alert_never_credits_two_failures():
    """A unit fails, its replacement fails two days later: one alert before both credits only the first."""
    alerts = pl.DataFrame(
        {"unit_id": ["A"], "alert_start": [T0 + 10 * HOUR]}, schema={"unit_id": pl.String, "alert_start": UTC_TS}
    )
    fails = failures([("A", 30, "memory"), ("A", 80, "memory")])  # both within W = 7 d of the alert
    matched = match_failures(alerts, fails, WINDOW)
    assert matched.get_column("caught").to_list() == [True, False]
    assert matched.get_column("lead_time_h").to_list() == [pytest.approx(20.0), None]
    # A second alert in the new life credits the second failure.
    both = pl.concat([alerts, pl.DataFrame({"unit_id": ["A"], "alert_start": [T0 + 50 * HOUR]}, schema=alerts.schema)])
    assert match_failures(both, fails, WINDOW).get_column("caught").to_list() == [True, True]


def test_alert_outside_the_window_does_not_catch():
    alerts = pl.DataFrame(
        {"unit_id": ["A", "A"], "alert_start": [T0, T0 + 100 * HOUR]},
        schema={"unit_id": pl.String, "alert_start": UTC_TS},
    )
    fails = failures([("A", 24 * 8, "memory")])  # 8 days after T0: the first alert is too early
    matched = match_failures(alerts, fails, WINDOW)
    assert matched.get_column("caught").to_list() == [True]
    assert matched.get_column("lead_time_h").to_list() == [pytest.approx(92.0)]
    late = match_failures(alerts, failures([("A", 100.5, "memory")]), WINDOW)  # only 0.5 h after the alert
    assert late.get_column("lead_time_h").to_list() == [pytest.approx(100.5)]  # the earlier alert catches it


def test_a_catch_by_an_alert_earlier_than_the_horizon_is_counted_apart():
    """W = 7 d, H = 24 h: an alert 40 h before its failure catches it (recall) and is a false
    alert (precision); ``caught_within_horizon`` counts only the catches by true alerts."""
    scores = series({"A": peaks(100, [10]), "B": peaks(100, [70])})
    fails = failures([("A", 50, "memory"), ("B", 90, "memory")])  # A: 40 h after its alert, B: 20 h
    r = lead_time_report(scores, fails, 0.5, "24h", WINDOW, step=HOUR)
    assert (r.caught, r.caught_within_horizon) == (2, 1)
    assert (r.true_alerts, r.false_alerts) == (1, 1)
    assert r.early_alerts == 1  # A's false alert drained a GPU that failed 40 h later


def test_early_alerts_are_the_false_alerts_on_units_failing_within_the_alert_window():
    """H = 24 h, W = 7 d: a false alert 3 days before its unit's failure is early; one 9 days
    before it, or on a unit that never fails, is not."""
    scores = series({"A": peaks(300, [10]), "B": peaks(300, [10]), "C": peaks(300, [10])})
    fails = failures([("A", 10 + 72, "memory"), ("B", 10 + 216, "memory")])
    r = lead_time_report(scores, fails, 0.5, "24h", WINDOW, step=HOUR)
    assert (r.true_alerts, r.false_alerts, r.early_alerts) == (0, 3, 1)
    assert r.to_dict()["early_alerts"] == 1


def test_unresolved_alerts_count_in_neither_precision_nor_false_alerts():
    scores = series({"A": peaks(48, [40])})  # alert at h40; H = 24 h reaches past h48
    r = lead_time_report(scores, failures([]), 0.5, "24h", WINDOW, step=HOUR)
    assert (r.alerts, r.false_alerts, r.alerts_unresolved, r.precision) == (1, 0, 1, None)


def test_budget_threshold_matches_alert_count():
    scores = series(
        {
            "U1": peaks(48, [10], 0.9, 0.0),
            "U2": peaks(48, [11], 0.8, 0.0),
            "U3": peaks(48, [12], 0.7, 0.0),
            "U4": peaks(48, [13], 0.6, 0.0),
        }
    )
    # 2 days of snapshots: 1 alert a day = 2 alerts = the two highest peaks
    assert threshold_for_budget(scores, 1.0, HOUR) == pytest.approx(0.8)
    assert threshold_for_budget(scores, 2.0, HOUR) == pytest.approx(0.6)
    assert alert_starts(scores, threshold_for_budget(scores, 1.0, HOUR)).height == 2


def test_vectorised_alert_counts_equal_counting_edges(rng):
    units = {f"u{i}": list(np.round(rng.random(60), 2)) for i in range(5)}
    scores = series(units)
    thresholds = np.array([0.05, 0.3, 0.5, 0.77, 0.99])
    counts = alerts_per_threshold(scores, thresholds, HOUR)
    assert counts.tolist() == [alert_starts(scores, t, HOUR).height for t in thresholds]


def test_precision_threshold_reaches_target(fleet_case):
    scores, fails, _ = fleet_case
    # Resolved alerts: A's (true), B's two (false); C's horizon is still open at h48.
    t = threshold_for_precision(scores, fails, "24h", 0.3, HOUR)
    assert t is not None
    assert lead_time_report(scores, fails, t, "24h", WINDOW, step=HOUR).precision >= 0.3
    assert threshold_for_precision(scores, fails, "24h", 0.5, HOUR) is None


def test_threshold_free_metrics_known_values():
    y = np.array([0, 0, 1, 1], dtype=float)
    assert pr_auc(np.array([0.1, 0.2, 0.8, 0.9]), y) == pytest.approx(1.0)
    assert calibration_error(np.full(4, 0.5), np.zeros(4)) == pytest.approx(0.5)
    assert calibration_error(np.array([0.0, 0.0, 1.0, 1.0]), y, bins=2) == pytest.approx(0.0)
    # higher risk, sooner failure: perfectly concordant
    assert c_index(np.array([0.9, 0.5, 0.1]), np.array([1.0, 5.0, 9.0]), np.array([1, 1, 1])) == pytest.approx(1.0)


def test_snapshot_metrics_leave_out_unresolved_snapshots(fleet_case):
    scores, fails, _ = fleet_case
    m = snapshot_metrics(scores, fails, "24h", step=HOUR)
    # Observation ends at h48: every snapshot after h24 has an open horizon, failed or not
    # (A h25..h29: 5, B h25..h47: 23, C h25..h45: 21), so none of them is judged -- a
    # failure seen in an open horizon must not make a positive when the rest of the open
    # horizons cannot make negatives.
    assert (m["snapshots"], m["unresolved_snapshots"]) == (scores.height - 49, 49)
    # positives: A h6..h24 (19), C h22..h24 (3), D h0..h19 (20)
    assert m["positive_snapshots"] == 42


def test_failures_during_a_recorded_drain_are_reported_apart(fleet_case):
    """A unit drained by operations and found broken: neither a catch nor a miss."""
    scores, fails, _ = fleet_case
    drains = pl.DataFrame(
        {"unit_id": ["D", "A"], "drained_at": [T0 + 12 * HOUR, T0 + 40 * HOUR], "returned_at": [None, None]},
        schema={"unit_id": pl.String, "drained_at": UTC_TS, "returned_at": UTC_TS},
    )
    plain = lead_time_report(scores, fails, 0.5, "24h", WINDOW, step=HOUR)
    r = judge_alerts(scores, alert_starts(scores, 0.5, HOUR), fails, "24h", WINDOW, step=HOUR, drains=drains)
    # D failed at h20 while drained since h12; A's drain came after its failure.
    assert (plain.failures, plain.drained_then_failed) == (3, 0)
    assert (r.failures, r.caught, r.drained_then_failed) == (2, 1, 1)
