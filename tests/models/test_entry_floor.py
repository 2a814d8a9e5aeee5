"""The entry floor at the budget: the budget is a cap, not a quota.

``[backtest] entry_floor`` is a calibrated risk set in advance: the budget_floor point (and
the top of the list with ``floor``) flags only units at or above it.  These cases check
what a user would notice: a quiet day's budget is left unspent instead of draining
low-risk units; the floor is the same on every fold whatever the test period holds; and
when a refit moves the risk scale, the fixed floor keeps catching what the earlier folds'
floor (the attempt dropped before) misses.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from foreshock.budget import DailyBudget
from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.models.evaluation.alert_replay import AlertRule, Period, policy_alerts
from foreshock.models.evaluation.backtest_report import render_markdown
from foreshock.models.evaluation.judging import judge_scores
from foreshock.models.evaluation.operating_points import budget_threshold
from foreshock.models.evaluation.top_of_list import top_of_list

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
DAYS = 20
FLOOR = 0.05


def _shifted_fleet() -> tuple[pl.DataFrame, pl.DataFrame, list[Period]]:
    """40 healthy units at a calibrated 0.2 % to 1 %, daily scores for 20 days in two folds
    of 10 days.  Fourteen units fail: one a day in the first fold, four in the second,
    each at risk 0.5 on its last three days.  The second fold's refit is more cautious:
    every risk is 0.4 times the first fold's scale, so a failing unit shows 0.2 instead
    of 0.5 (still far above the healthy units, and above the floor of 0.05)."""
    fails = {f"f{k:02d}": k for k in range(1, 11)} | {"f11": 14, "f12": 16, "f13": 18, "f14": 19}
    rows = [(f"h{i:02d}", d, 0.002 + 0.008 * ((i * 7 + d) % 10) / 10) for i in range(40) for d in range(DAYS)]
    rows += [(u, d, 0.5 if d >= day - 2 else 0.004) for u, day in fails.items() for d in range(day + 1)]
    scores = pl.DataFrame(
        {
            "unit_id": [u for u, _, _ in rows],
            "ts": [T0 + d * DAY for _, d, _ in rows],
            "risk": [r * (0.4 if d >= 10 else 1.0) for _, d, r in rows],
        }
    ).with_columns(pl.col("ts").cast(UTC_TS))
    failures = pl.DataFrame(
        {"unit_id": list(fails), "failed_at": [T0 + d * DAY + timedelta(hours=6) for d in fails.values()]},
        schema={"unit_id": pl.String, "failed_at": UTC_TS},
    )
    return scores, failures, [Period(T0, T0 + 10 * DAY), Period(T0 + 10 * DAY, T0 + DAYS * DAY)]


def _judged(floor: float) -> dict:
    scores, failures, periods = _shifted_fleet()
    config = load_config().with_overrides(
        {"backtest": {"entry_floor": floor, "drain_budget_per_day": 1, "alert_window": "5d", "min_lead_time": "1h"}}
    )
    # The ranked rules: the same order every day (so at the bare budget they tie with the
    # model), on a scale thirty times higher (so at the floor they drain healthy units too).
    rules = scores.with_columns(pl.min_horizontal(pl.col("risk") * 30, pl.lit(1.0)).alias("risk"))
    series = pl.concat(
        [
            scores.with_columns(pl.lit("gbm").alias("model"), pl.lit("72h").alias("horizon")),
            rules.with_columns(pl.lit("baseline").alias("model"), pl.lit("72h").alias("horizon")),
        ]
    )
    return judge_scores(series, failures, config, periods=periods)


@pytest.fixture(scope="module")
def judged() -> dict:
    return _judged(FLOOR)


def test_the_floor_leaves_a_quiet_day_unspent_and_keeps_every_catch(judged):
    points = judged["models"]["gbm"]["72h"]["operating_points"]
    budget, floor = points["budget"], points["budget_floor"]
    # The cap alone drains a unit every day, healthy or not; the floor drains only the
    # units whose calibrated risk reached it: the same failures caught, fewer alerts.
    assert floor["caught"] == budget["caught"] == 14
    assert floor["alerts"] == 14 < budget["alerts"] == 20
    assert floor["precision"] == 1.0 > budget["precision"]
    assert floor["thresholds"] == [FLOOR, FLOOR]
    assert "fixed in advance" in floor["chosen_on"]


def test_a_floor_chosen_on_the_earlier_fold_misses_what_the_refit_moved(judged):
    """The attempt dropped before: a floor taken from the first fold's alerts (the level
    that keeps 90 % of them) lies above the second fold's whole scale after the refit, so
    the second fold raises nothing and misses its failures; the fixed floor catches them."""
    scores, failures, periods = _shifted_fleet()
    rule = AlertRule(exit_ratio=0.6, daily_cap=1)
    first = scores.filter(pl.col("ts") < pl.lit(periods[1].start).cast(UTC_TS))
    earlier_floor = budget_threshold(first, 1, rule, DAY, fill=0.9)
    second = scores.filter(pl.col("ts") >= pl.lit(periods[1].start).cast(UTC_TS))
    assert earlier_floor > second.get_column("risk").max()
    assert policy_alerts(second, earlier_floor, rule, DAY).height == 0
    fixed = policy_alerts(second, FLOOR, rule, DAY)
    assert set(fixed.get_column("unit_id")) == {"f10", "f11", "f12", "f13", "f14"}


def test_the_floor_never_depends_on_the_test_period(judged):
    """Rewriting the second fold's scores and outcomes changes its figures, never the floor."""
    scores, failures, periods = _shifted_fleet()
    config = load_config().with_overrides({"backtest": {"entry_floor": FLOOR, "drain_budget_per_day": 3}})
    later = pl.col("ts") >= pl.lit(periods[1].start).cast(UTC_TS)
    changed = scores.with_columns(pl.when(later).then(pl.col("risk") * 3).otherwise(pl.col("risk")))
    moved = failures.filter(pl.col("unit_id") != "f14")
    series = changed.with_columns(pl.lit("gbm").alias("model"), pl.lit("72h").alias("horizon"))
    other = judge_scores(series, moved, config, periods=periods)["models"]["gbm"]["72h"]["operating_points"]
    assert (
        other["budget_floor"]["thresholds"]
        == judged["models"]["gbm"]["72h"]["operating_points"]["budget_floor"]["thresholds"]
    )


def test_the_report_says_which_floor_and_none_without_one(judged):
    text = render_markdown(judged)
    assert judged["settings"]["entry_floor"] == FLOOR
    assert f"only units with risk >= {FLOOR:g} enter alert" in text
    # At the bare budget the model ties with the ranked rules (said under that table);
    # at the floor it beats them: the same catches without the rules' healthy drains.
    assert not judged["against_rules"]["72h"]["beats_rules"]
    assert judged["against_rules_at_floor"]["72h"]["beats_rules"]
    floor_table = text.split("entry floor fixed in advance")[1].split("At the target precision")[0]
    assert text.count("No model beats the ranked rules") == 1 and "No model beats" not in floor_table
    without = _judged(0.0)
    assert "budget_floor" not in without["models"]["gbm"]["72h"]["operating_points"]
    assert "fixed in advance: only units" not in render_markdown(without)


def test_top_of_the_list_with_a_floor_counts_every_unit_reporting_but_flags_only_above_it():
    """1,000 units report each day; 0.5 % is 5 flags a day.  Two units, both failing, are
    above the floor: with it, only they are flagged (2 a day, all true) while the budget
    stays 5; without it, 3 healthy units a day fill the rest."""
    risky = {"a": 0.4, "b": 0.2}
    rows = [(f"u{i:04d}", d, 0.001 + i * 1e-5) for i in range(998) for d in range(10)]
    rows += [(u, d, r) for u, r in risky.items() for d in range(9)]
    frame = pl.DataFrame(
        {"unit_id": [u for u, _, _ in rows], "ts": [T0 + d * DAY for _, d, _ in rows], "risk": [r for *_, r in rows]}
    ).with_columns(pl.col("ts").cast(UTC_TS))
    fails = pl.DataFrame(
        {"unit_id": list(risky), "failed_at": [T0 + 9 * DAY + timedelta(hours=h) for h in (12, 18)]},
        schema={"unit_id": pl.String, "failed_at": UTC_TS},
    )
    budget, lead, until = DailyBudget(share=0.005), timedelta(days=1), T0 + 30 * DAY
    floored = top_of_list(frame, fails, budget, "14d", lead, until=until, floor=FLOOR)
    plain = top_of_list(frame, fails, budget, "14d", lead, until=until)
    assert floored.budget_per_day == plain.budget_per_day == pytest.approx(5.0, abs=0.01)
    assert floored.flags_per_day == pytest.approx(1.8) and plain.flags_per_day == pytest.approx(5.0, abs=0.2)
    assert floored.precision == 1.0 and plain.precision < 0.4
    assert floored.caught == plain.caught == 2
    assert floored.entry_floor == FLOOR and plain.entry_floor is None
