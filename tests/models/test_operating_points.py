"""Operating points: alerts as operations raise them, thresholds chosen from the past only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.models.evaluation.alert_replay import AlertRule, Period, policy_alerts
from foreshock.models.evaluation.operating_points import (
    NO_FLOOR,
    OperatingPoints,
    budget_threshold,
    choose_thresholds,
    prospective,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def frame(rows: list[tuple[str, datetime, float]], margin: list[float] | None = None) -> pl.DataFrame:
    data = {"unit_id": [u for u, _, _ in rows], "ts": [t for _, t, _ in rows], "risk": [r for *_, r in rows]}
    if margin is not None:
        data["margin"] = margin
    return pl.DataFrame(data).with_columns(pl.col("ts").cast(UTC_TS))


def hourly(risks: dict[str, list[float]]) -> pl.DataFrame:
    return frame([(u, T0 + i * HOUR, r) for u, values in risks.items() for i, r in enumerate(values)])


def test_daily_cap_takes_the_highest_risks_first():
    # Ten units at high risk for the whole of three days; budget two a day.
    units = {f"u{i}": [0.5 + i / 100] * 72 for i in range(10)}
    alerts = policy_alerts(hourly(units), 0.1, AlertRule(daily_cap=2), HOUR)
    per_day = alerts.group_by(pl.col("alert_start").dt.date()).len().get_column("len").to_list()
    assert per_day == [2, 2, 2]
    first_day = alerts.filter(pl.col("alert_start") < T0 + DAY).get_column("unit_id").sort().to_list()
    assert first_day == ["u8", "u9"]  # the two highest risks
    assert alerts.get_column("unit_id").n_unique() == 6  # a unit in alert is not alerted again


def test_fractional_budget_accrues():
    units = {f"u{i}": [0.9] * (24 * 4) for i in range(5)}
    alerts = policy_alerts(hourly(units), 0.1, AlertRule(daily_cap=0.5), HOUR)
    assert alerts.height == 2  # four days at half an alert a day


def test_budget_above_one_keeps_its_fraction_and_a_late_start_gets_the_rest_of_its_day():
    units = {f"u{i}": [0.9] * (24 * 4) for i in range(20)}
    alerts = policy_alerts(hourly(units), 0.1, AlertRule(daily_cap=1.5), HOUR)
    per_day = alerts.group_by(pl.col("alert_start").dt.date()).len().sort("alert_start").get_column("len")
    assert per_day.to_list() == [1, 2, 1, 2]  # 1.5 a day, not 1
    # Scores that start at noon: half a day, so one of the day's two alerts.
    late = hourly(units).filter(pl.col("ts") >= T0 + 12 * HOUR)
    starts = policy_alerts(late, 0.1, AlertRule(daily_cap=2), HOUR).get_column("alert_start")
    assert (starts < T0 + DAY).sum() == 1 and starts.len() == 1 + 2 * 3
    # ... counted from where the scores start, not from the first unit over the threshold
    rising = {f"u{i}": [0.0] * 18 + [0.9] * (24 * 4 - 18) for i in range(20)}
    starts = policy_alerts(hourly(rising).filter(pl.col("ts") >= T0 + 12 * HOUR), 0.5, AlertRule(daily_cap=2), HOUR)
    assert (starts.get_column("alert_start") < T0 + DAY).sum() == 1


def test_hysteresis_keeps_one_alert_while_risk_hovers():
    hovering = {"A": [0.2, 0.55, 0.45, 0.55, 0.45, 0.55, 0.2, 0.55]}
    plain = policy_alerts(hourly(hovering), 0.5, AlertRule(exit_ratio=1.0), HOUR)
    sticky = policy_alerts(hourly(hovering), 0.5, AlertRule(exit_ratio=0.6), HOUR)
    assert plain.height == 4
    assert sticky.height == 2  # leaves only when it drops below 0.3, at h6


def test_ties_are_broken_by_the_raw_margin():
    rows = [("a", T0, 0.9999999), ("b", T0, 0.9999999), ("c", T0, 0.9999999)]
    alerts = policy_alerts(frame(rows, margin=[3.0, 9.0, 5.0]), 0.5, AlertRule(daily_cap=1), DAY)
    assert alerts.get_column("unit_id").to_list() == ["b"]


def test_budget_floor_spends_the_budget_on_the_data_it_was_chosen_on(rng):
    units = {f"u{i}": list(rng.beta(0.5, 8.0, 24 * 6)) for i in range(40)}
    scores = hourly(units)
    rule = AlertRule(exit_ratio=0.6, daily_cap=3)
    floor = budget_threshold(scores, 3, rule, HOUR)
    assert floor > 0.0
    spent = policy_alerts(scores, floor, rule, HOUR).height / 6
    assert 0.95 * 3 <= spent <= 3
    assert policy_alerts(scores, floor * 1.5, rule, HOUR).height / 6 < spent


def test_prospective_threshold_never_sees_its_own_period(rng):
    """Each period's threshold depends only on scores before it: rewriting a period and
    everything after it leaves that period's threshold unchanged."""
    config = load_config().with_overrides({"backtest": {"entry_floor": 0.05}})
    settings = OperatingPoints.from_config(config)
    days = 12
    units = [f"u{i}" for i in range(30)]
    rows = [(u, T0 + h * HOUR, float(rng.beta(0.5, 6.0))) for u in units for h in range(24 * days)]
    scores = frame(rows)
    failures = pl.DataFrame(
        {"unit_id": units[:8], "failed_at": [T0 + timedelta(days=2 + i, hours=5) for i in range(8)]}
    ).with_columns(pl.col("failed_at").cast(UTC_TS))
    periods = [Period(T0 + timedelta(days=d), T0 + timedelta(days=d + 3)) for d in (3, 6, 9)]
    series = scores.filter(pl.col("ts") >= pl.lit(periods[0].start).cast(UTC_TS))

    seen = []

    def spy(earlier, start):
        seen.append((earlier.get_column("ts").max(), start))
        return 0.5

    prospective(series, periods, spy, first=NO_FLOOR)
    assert len(seen) == 2 and all(last < start for last, start in seen)

    base = choose_thresholds(series, failures, "24h", periods, settings, HOUR)
    for k, period in enumerate(periods):
        later = pl.col("ts") >= pl.lit(period.start).cast(UTC_TS)
        changed = series.with_columns(pl.when(later).then(pl.col("risk") * 0.1 + 0.9).otherwise(pl.col("risk")))
        moved_failures = failures.with_columns(
            pl.when(pl.col("failed_at") > pl.lit(period.start).cast(UTC_TS))
            .then(pl.col("failed_at") + timedelta(hours=7))
            .otherwise(pl.col("failed_at"))
        )
        other = choose_thresholds(changed, moved_failures, "24h", periods, settings, HOUR)
        for point in ("budget", "budget_floor", "target_precision"):
            assert base[point].periods[k][1] == other[point].periods[k][1], (point, k)
        # ... while the hindsight upper bound does move: it is chosen on the test period itself.
        if k == 0:
            floors = [p.periods[0][1] for p in base["budget_upper_bound"].hindsight]
            assert floors != [p.periods[0][1] for p in other["budget_upper_bound"].hindsight]
    # The budget fits nothing: every period runs the day's top k.
    assert [t for _, t in base["budget"].periods] == [NO_FLOOR] * len(periods)
    assert base["target_precision"].periods[0][1] is None  # ... and no precision history


@pytest.mark.parametrize("cap", [1.0, 2.0])
def test_alert_rate_under_the_cap_on_a_saturated_model(cap):
    """Every snapshot at the same risk (a saturated model): the cap still holds the rate."""
    units = {f"u{i}": [0.9999999] * 10 for i in range(50)}
    scores = frame([(u, T0 + d * DAY, r) for u, values in units.items() for d, r in enumerate(values)])
    alerts = policy_alerts(scores, 0.5, AlertRule(exit_ratio=0.6, daily_cap=cap), DAY)
    assert alerts.height == pytest.approx(10 * cap)
    assert np.all(alerts.group_by("unit_id").len().get_column("len").to_numpy() == 1)
