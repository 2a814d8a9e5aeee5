"""The hold before entry (``[policy] enter_for``): a short rise drains nothing, a lasting one
drains once it has held, the same in the backtest's replay and in the live policy."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from drain_helpers import T0, score_rows

from foreshock.drain.policy import DrainPolicy
from foreshock.drain.risk_table import unit_risk_table
from foreshock.drain.settings import PolicySettings
from foreshock.hold import HELD_COLUMN, with_held_risk
from foreshock.models.evaluation.alert_replay import AlertRule, policy_alerts

HOUR = timedelta(hours=1)
BURST, FAILING, BROKEN = "gpu-node001-gpu0", "gpu-node002-gpu0", "gpu-node003-gpu0"


def _hourly() -> pl.DataFrame:
    """48 hourly snapshots: a 4-hour burst, a risk that rises at hour 10 and stays, and a
    rise broken by two missing snapshots."""
    rows = []
    for h in range(48):
        rows.append((BURST, h, 0.9 if 20 <= h < 24 else 0.05))
        rows.append((FAILING, h, 0.9 if h >= 10 else 0.05))
        if h not in (4, 5):
            rows.append((BROKEN, h, 0.9 if h < 11 else 0.05))
    return pl.DataFrame(
        {"unit_id": [r[0] for r in rows], "ts": [T0 + r[1] * HOUR for r in rows], "risk": [r[2] for r in rows]}
    ).with_columns(pl.col("ts").dt.cast_time_unit("us"))


def _starts(scores: pl.DataFrame, hold: timedelta, step: timedelta = HOUR) -> dict[str, list[int]]:
    alerts = policy_alerts(scores, 0.5, AlertRule(0.6, None, hold=hold), step)
    out: dict[str, list[int]] = {}
    for unit, start in alerts.select("unit_id", "alert_start").rows():
        out.setdefault(unit, []).append(int((start - T0) / step))
    return out


def test_the_backtest_replay_waits_for_the_hold_and_a_burst_never_enters():
    scores = _hourly()
    # Without a hold every rise enters at its first snapshot (the gap ends an alert).
    assert _starts(scores, HOUR) == {BURST: [20], FAILING: [10], BROKEN: [0, 6]}
    # With 6 h: the 4-hour burst never holds; the lasting rise enters at its sixth snapshot
    # (hour 15); the broken one never (hours 0-3 are four snapshots, 6-10 five).
    assert _starts(scores, 6 * HOUR) == {FAILING: [15]}
    assert _starts(scores, 5 * HOUR) == {FAILING: [14], BROKEN: [10]}


def test_daily_snapshots_are_not_delayed_by_an_hours_long_hold():
    days = pl.DataFrame(
        {"unit_id": ["d"] * 5, "ts": [T0 + timedelta(days=i) for i in range(5)], "risk": [0.1, 0.1, 0.8, 0.8, 0.8]}
    ).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    assert _starts(days, 6 * HOUR, timedelta(days=1)) == {"d": [2]}
    assert _starts(days, timedelta(days=2), timedelta(days=1)) == {"d": [3]}


def _live_decision(hours_above: int, hold: timedelta):
    """The live path: scores of the unit's last snapshots -> held risk -> policy."""
    frames = [score_rows({FAILING: 0.9}, T0 + h * HOUR) for h in range(hours_above)]
    scores = with_held_risk(pl.concat(frames), hold, HOUR, by=("unit_id", "horizon"))
    settings = PolicySettings(max_drained_share_cluster=1.0, max_drained_share_per_domain=1.0, enter_for=hold)
    risks = unit_risk_table(scores, settings.horizon)
    return DrainPolicy(settings).decide(risks, T0 + (hours_above - 1) * HOUR, None), risks


def test_the_live_policy_runs_diagnostics_until_the_risk_has_held_then_drains():
    waiting, risks = _live_decision(4, 6 * HOUR)
    assert risks.get_column(HELD_COLUMN).to_list() == [None]
    row = waiting.recommendations.row(0, named=True)
    assert row["action"] == "run_diagnostics"
    assert "enter_for" in row["reason"] and "for less than 6h" in row["reason"]
    held, risks = _live_decision(6, 6 * HOUR)
    assert risks.get_column(HELD_COLUMN).to_list() == [0.9]
    assert held.recommendations.row(0, named=True)["action"] in ("drain_now", "drain_at_checkpoint")
    # a hold of one snapshot interval is no hold: the first snapshot drains
    at_once, _ = _live_decision(1, HOUR)
    assert at_once.recommendations.row(0, named=True)["action"] in ("drain_now", "drain_at_checkpoint")
