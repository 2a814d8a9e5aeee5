"""Budgets that scale with the fleet, and weights of subsampled healthy units.

Each case is small enough to count by hand: the expected alerts, flags, precision and
recall are worked out in the comments.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from foreshock.budget import DailyBudget, fleet_weights
from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.models.evaluation.alert_replay import AlertRule, policy_alerts
from foreshock.models.evaluation.alerts import AlertWindow
from foreshock.models.evaluation.metrics import REWEIGHTED, judge_alerts
from foreshock.models.evaluation.operating_points import OperatingPoints
from foreshock.models.evaluation.top_of_list import daily_flags, top_of_list

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def daily(values: dict[str, list[float | None]]) -> pl.DataFrame:
    """One score per unit and day (None: the unit did not report that day)."""
    rows = [(u, T0 + d * DAY, r) for u, rs in values.items() for d, r in enumerate(rs) if r is not None]
    return pl.DataFrame(
        {"unit_id": [u for u, _, _ in rows], "ts": [t for _, t, _ in rows], "risk": [r for *_, r in rows]}
    ).with_columns(pl.col("ts").cast(UTC_TS))


def failures(rows: list[tuple[str, datetime]]) -> pl.DataFrame:
    return pl.DataFrame(
        {"unit_id": [u for u, _ in rows], "failed_at": [t for _, t in rows]},
        schema={"unit_id": pl.String, "failed_at": UTC_TS},
    )


def per_day(alerts: pl.DataFrame, days: int) -> list[int]:
    counts = alerts.group_by(pl.col("alert_start").dt.date().alias("d")).len()
    found = dict(zip(counts.get_column("d").to_list(), counts.get_column("len").to_list()))
    return [found.get((T0 + d * DAY).date(), 0) for d in range(days)]


class TestShareOfTheUnitsReporting:
    def test_a_share_is_the_same_as_its_count_on_a_fixed_fleet(self):
        values = {f"u{i:03d}": [0.5 + i / 1000] * 5 for i in range(200)}
        by_share = policy_alerts(daily(values), float("-inf"), AlertRule(daily_share=0.01), DAY)
        by_count = policy_alerts(daily(values), float("-inf"), AlertRule(daily_cap=2), DAY)
        assert per_day(by_share, 5) == [2, 2, 2, 2, 2]
        assert by_share.equals(by_count)

    def test_fractional_days_carry_the_remainder(self):
        """1 % of 150 units is 1.5 a day: 1, 2, 1, 2, ... (10 over 7 days is within one of 10.5)."""
        values = {f"u{i:03d}": [0.9] * 7 for i in range(150)}
        alerts = policy_alerts(daily(values), float("-inf"), AlertRule(daily_share=0.01), DAY)
        assert per_day(alerts, 7) == [1, 2, 1, 2, 1, 2, 1]

    def test_a_growing_fleet_gets_a_budget_that_follows_it(self):
        """100 units on days 0-1, 300 from day 2, 500 from day 4: 1 %, so 1, 1, 3, 3, 5, 5."""
        values = {
            f"u{i:03d}": [0.9 if i < 100 or (i < 300 and d >= 2) or d >= 4 else None for d in range(6)]
            for i in range(500)
        }
        alerts = policy_alerts(daily(values), float("-inf"), AlertRule(daily_share=0.01), DAY)
        assert per_day(alerts, 6) == [1, 1, 3, 3, 5, 5]

    def test_a_rule_has_a_count_or_a_share_not_both(self):
        with pytest.raises(ValueError, match="not both"):
            AlertRule(daily_cap=2, daily_share=0.01)
        with pytest.raises(ValueError, match="daily_budget_share"):
            AlertRule(daily_share=1.5)

    def test_the_share_takes_precedence_in_the_configuration(self, tmp_path):
        file = tmp_path / "foreshock.toml"
        file.write_text("[backtest]\ndrain_budget_per_day = 3\ndaily_budget_share = 0.001\n")
        points = OperatingPoints.from_config(load_config(file))
        assert points.budget == DailyBudget(share=0.001)
        assert points.budget_rule == AlertRule(points.exit_ratio, None, 0.001)
        default = OperatingPoints.from_config(load_config(None))
        assert default.budget == DailyBudget(per_day=2) and default.budget_rule.daily_share is None

    def test_budgets_say_which_they_are(self):
        assert DailyBudget(per_day=2).describe() == "2 a day"
        assert DailyBudget(share=0.001).describe(21.44) == (
            "0.1 % of the units reporting that day, 21.4 a day on average"
        )


class TestWeights:
    """Two healthy units standing for 10 fleet units each, two failing units (weight 1)."""

    WEIGHTS = pl.DataFrame({"unit_id": ["h1", "h2", "f1", "f2"], "fleet_weight": [10.0, 10.0, 1.0, 1.0]})

    def test_the_budget_is_spent_by_weight(self):
        """The weighted fleet is 22 units; 10 % of it is 2.2 a day.  Day 0 ranks h1, f1, h2, f2:
        h1 is taken with 2.2 left (overdraft -7.8), so nothing else until the overdraft is
        repaid: 2.2 a day for 4 days brings it back to 1.0 on day 4 (f1 waits its turn), and
        day 5's 2.2 goes to h2, the next in line (overdraft again)."""
        values = {"h1": [0.9] * 6, "f1": [0.8] * 6, "h2": [0.7] * 6, "f2": [0.6] * 6}
        rule = AlertRule(daily_share=0.1)
        alerts = policy_alerts(_with_weights(daily(values), self.WEIGHTS), float("-inf"), rule, DAY)
        assert alerts.select("unit_id", pl.col("alert_start").dt.date()).rows() == [
            ("f1", (T0 + 4 * DAY).date()),
            ("h1", T0.date()),
            ("h2", (T0 + 5 * DAY).date()),
        ]
        # unweighted, 10 % of 4 units is 0.4 a day, carried up to ceil(0.4) = 1: h1 on day 2
        # (0.4, 0.8, 1.0), f1 on day 5 (0.4, 0.8, 1.0)
        unweighted = policy_alerts(daily(values), float("-inf"), rule, DAY)
        assert unweighted.select("unit_id", pl.col("alert_start").dt.date()).rows() == [
            ("f1", (T0 + 5 * DAY).date()),
            ("h1", (T0 + 2 * DAY).date()),
        ]

    def test_precision_and_fleet_rates_count_false_alerts_by_weight(self):
        """Alerts on h1 (false) and f1 (true): 1 of 2 alerts true unweighted, 1 of 11 weighted."""
        scores = daily({"h1": [0.9] * 10, "f1": [0.9] * 10, "h2": [0.1] * 10, "f2": [0.1] * 10})
        fails = failures([("f1", T0 + 2 * DAY), ("f2", T0 + 5 * DAY)])
        alerts = pl.DataFrame(
            {"unit_id": ["h1", "f1"], "alert_start": [T0, T0]}, schema={"unit_id": pl.String, "alert_start": UTC_TS}
        )
        window = AlertWindow(timedelta(days=7), timedelta(hours=1))
        plain = judge_alerts(scores, alerts, fails, "72h", window, step=DAY)
        weighted = judge_alerts(scores, alerts, fails, "72h", window, step=DAY, weights=self.WEIGHTS)
        assert plain.precision == pytest.approx(1 / 2) and weighted.precision == pytest.approx(1 / 11)
        # 40 unit-days unweighted; 10 days x 22 fleet units weighted
        assert plain.false_alerts_per_1000_unit_days == pytest.approx(1000 * 1 / 40)
        assert weighted.false_alerts_per_1000_unit_days == pytest.approx(1000 * 10 / 220)
        # recall counts failures, unweighted either way: f1 caught, f2 not
        assert (weighted.caught, weighted.failures, weighted.recall) == (1, 2, 0.5)
        assert (weighted.alerts, weighted.false_alerts) == (2, 1)  # the raw counts stay counts
        assert weighted.reweighted == list(REWEIGHTED) and "reweighted" not in plain.to_dict()

    def test_weights_come_from_the_inventory(self):
        inventory = pl.DataFrame({"unit_id": ["a", "b"], "model": ["x", "y"], "fleet_weight": ["10.0", None]})
        assert fleet_weights(inventory).rows() == [("a", 10.0), ("b", 1.0)]
        assert fleet_weights(inventory.drop("fleet_weight")) is None


def _with_weights(scores: pl.DataFrame, weights: pl.DataFrame) -> pl.DataFrame:
    return scores.join(weights, on="unit_id", how="left")


class TestTopOfList:
    """The day's top of the list for any score, e.g. a SMART rule's raw value."""

    def test_precision_recall_and_lead_by_hand(self):
        """Four drives, 6 days, top 1 a day (25 %).  d1 fails on day 4 and is on top on days
        1-3 (days 1 and 2 true, day 3 late: less than one day before); day 0's flag is on
        d2, which never fails (false).  Days 4-5 have 3 drives reporting, 0.75 a day: day 4
        flags nobody, day 5 (1.5, at most ceil(0.75) = 1 carried) flags d3, whose outcome is
        still open at the end (unresolved).  Precision 2 / 4; d1 caught 2.5 days ahead."""
        scores = daily(
            {
                "d1": [1.0, 9.0, 9.0, 9.0, None, None],
                "d2": [5.0, 1.0, 1.0, 1.0, 1.0, 1.0],
                "d3": [0.0, 0.0, 0.0, 0.0, 4.0, 4.0],
                "d4": [0.0] * 6,
            }
        )
        fails = failures([("d1", T0 + 3 * DAY + timedelta(hours=12))])
        result = top_of_list(scores, fails, DailyBudget(share=0.25), "72h", timedelta(days=1))
        assert (result.flags, result.true_flags, result.false_flags, result.late_flags) == (5, 2, 1, 1)
        assert result.unresolved_flags == 1
        assert result.precision == pytest.approx(2 / 4)
        assert (result.caught, result.failures, result.recall) == (1, 1, 1.0)
        assert result.lead_time_p50_h == pytest.approx(2.5 * 24)  # first flag in [fail - 72h, fail - 1d]: day 1
        assert result.budget == "25 % of the units reporting that day, 0.9 a day on average"
        assert result.reweighted == []

    def test_a_unit_stays_on_the_list_every_day_it_ranks_on_top(self):
        scores = daily({"a": [3.0] * 4, "b": [2.0] * 4, "c": [1.0] * 4})
        flags, days = daily_flags(scores, DailyBudget(per_day=2))
        assert flags.get_column("unit_id").to_list() == ["a", "b"] * 4
        assert days.get_column("reporting").to_list() == [3.0] * 4

    def test_weighted_precision_and_rates(self):
        """h1 stands for 10 healthy drives, f1 (weight 1) fails on day 1 at noon.  Half the
        weighted fleet of 11 is 5.5 a day.  Day 0 flags h1 (false; 5.5 - 10 = -4.5 left);
        day 1 has 1.0: f1 (true, 12 h ahead), nothing left for h1.  Precision by weight
        1 / 11 (1 / 2 by count); 11 fleet units flagged over 2 days."""
        scores = daily({"h1": [0.9, 0.1], "f1": [0.8, 0.8]})
        fails = failures([("f1", T0 + DAY + timedelta(hours=12))])
        weights = pl.DataFrame({"unit_id": ["h1", "f1"], "fleet_weight": [10.0, 1.0]})
        result = top_of_list(scores, fails, DailyBudget(share=0.5), "24h", timedelta(hours=1), weights=weights)
        assert result.flags == 2 and (result.true_flags, result.false_flags) == (1, 1)
        assert result.precision == pytest.approx(1 / 11)
        assert (result.caught, result.recall, result.lead_time_p50_h) == (1, 1.0, pytest.approx(12.0))
        assert result.flags_per_day == pytest.approx(11 / 2)
        assert "counted by its fleet_weight" in result.budget and "precision" in result.reweighted
        plain = top_of_list(scores, fails, DailyBudget(share=0.5), "24h", timedelta(hours=1))
        assert plain.precision == pytest.approx(1 / 2) and plain.reweighted == []
