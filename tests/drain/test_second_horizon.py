"""A second way into drain (``[policy] second_horizon``): a unit whose 24-hour risk has held
at or above its own threshold enters drain although its 72-hour risk is below
``enter_risk``, the same in the live policy and in the backtest's policy point; a burst
shorter than the hold still drains nothing, and the setting off changes nothing."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from drain_helpers import T0, score_rows

from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.drain.policy import DrainPolicy
from foreshock.drain.risk_table import unit_risk_table
from foreshock.drain.settings import PolicySettings
from foreshock.hold import Entry, entry_series, with_held_risk
from foreshock.models.evaluation.alert_replay import AlertRule, Period, policy_alerts
from foreshock.models.evaluation.backtest_report import render_markdown
from foreshock.models.evaluation.judging import judge_scores

HOUR = timedelta(hours=1)
SOON, BURST, QUIET = "gpu-node001-gpu0", "gpu-node002-gpu0", "gpu-node003-gpu0"
HOLD = 6 * HOUR


def _settings(second: str = "24h", second_only: bool = False) -> PolicySettings:
    return PolicySettings(
        max_drained_share_cluster=1.0,
        max_drained_share_per_domain=1.0,
        enter_for=HOLD,
        entry=Entry("72h", 0.5, second, 0.4, second_only=second_only),
    )


def _live(hours: int, settings: PolicySettings, risks: tuple[float, float] = (0.6, 0.3)) -> dict:
    """The live path for one unit whose 24-hour and 72-hour risks are ``risks`` for
    ``hours`` snapshots: scores -> held risk per horizon -> risk table -> policy."""
    frames = [score_rows({SOON: risks}, T0 + h * HOUR) for h in range(hours)]
    scores = with_held_risk(pl.concat(frames), settings.enter_for, HOUR, by=("unit_id", "horizon"))
    risks = unit_risk_table(scores, settings.horizon, entry=settings.entry)
    decision = DrainPolicy(settings).decide(risks, T0 + (hours - 1) * HOUR, None)
    return decision.recommendations.row(0, named=True)


def test_the_live_policy_drains_on_a_held_24_hour_risk_and_names_both_risks():
    held = _live(6, _settings())
    assert held["action"] in ("drain_now", "drain_at_checkpoint")
    assert "P(fail<72h)=0.30" in held["reason"] and "P(fail<24h)=0.60" in held["reason"]
    # the costs read at least the 24-hour risk: failing within 24 h is failing within 72 h
    assert held["expected_loss_gpu_h"] == pytest.approx(_settings().costs.expected_loss(0.6))
    waiting = _live(4, _settings())
    assert waiting["action"] == "run_diagnostics"
    assert "0.50 (or 0.40 at 24h)" in waiting["reason"] and "for less than 6h" in waiting["reason"]
    # without the second horizon the same unit is at 0.30: diagnostics, never a drain
    alone = _live(6, _settings(second=""))
    assert alone["action"] == "run_diagnostics" and "P(fail<24h)" not in alone["reason"]


def test_with_second_only_the_decision_risk_never_drains_by_itself():
    only = _settings(second_only=True)
    # a 72-hour risk of 0.8 held for a day with a low 24-hour risk: diagnostics, not drain
    high_72h = _live(24, only, risks=(0.1, 0.8))
    assert high_72h["action"] == "run_diagnostics"
    assert "drains wait for P(fail<24h) >= 0.40 held 6h ([policy] second_only)" in high_72h["reason"]
    # a 72-hour risk below the drain level reads as before
    assert "above 0.25" in _live(24, only, risks=(0.1, 0.3))["reason"]
    assert _live(24, _settings(), risks=(0.1, 0.8))["action"] in ("drain_now", "drain_at_checkpoint")
    # the held 24-hour risk drains, and the wait names the 24-hour threshold alone
    assert _live(6, only)["action"] in ("drain_now", "drain_at_checkpoint")
    waiting = _live(4, only)
    assert waiting["action"] == "run_diagnostics" and "above 0.40 at 24h for less than 6h" in waiting["reason"]
    # the decision risk still places the lower levels
    assert _live(2, only, risks=(0.02, 0.15))["action"] == "watch"
    with pytest.raises(ValueError, match="second_only = true needs a second_horizon"):
        _settings(second="", second_only=True)


def test_a_second_horizon_must_be_shorter_and_scored():
    with pytest.raises(ValueError, match="shorter than the decision horizon"):
        _settings(second="96h")
    with pytest.raises(ValueError, match="second_enter_risk"):
        PolicySettings(entry=Entry("72h", 0.5, "24h", 0.0))
    scores = score_rows({SOON: (0.6, 0.3)}, T0).filter(pl.col("horizon") == "72h")
    with pytest.raises(ValueError, match="second_horizon '24h'"):
        unit_risk_table(scores, "72h", entry=_settings().entry)
    # "1d" in the configuration is the scores' "24h"
    risks = unit_risk_table(score_rows({SOON: (0.6, 0.3)}, T0), "72h", entry=Entry("72h", 0.5, "1d", 0.4))
    assert risks.get_column("entry_risk").to_list() == [pytest.approx(0.75)]


def _long_scores() -> pl.DataFrame:
    """48 hourly snapshots of three units at both horizons: SOON's 24-hour risk is 0.6 from
    hour 20 on (72-hour 0.3), BURST's 24-hour risk 0.9 for 3 hours, QUIET low throughout."""
    rows = []
    for h in range(48):
        for unit, r24, r72 in (
            (SOON, 0.6 if h >= 20 else 0.02, 0.3 if h >= 20 else 0.05),
            (BURST, 0.9 if 30 <= h < 33 else 0.02, 0.05),
            (QUIET, 0.02, 0.05),
        ):
            rows += [(unit, h, "24h", r24), (unit, h, "72h", r72)]
    return pl.DataFrame(
        {
            "unit_id": [r[0] for r in rows],
            "ts": [T0 + r[1] * HOUR for r in rows],
            "horizon": [r[2] for r in rows],
            "risk": [r[3] for r in rows],
        }
    ).with_columns(pl.col("ts").cast(UTC_TS))


def test_the_backtest_replay_enters_once_the_24_hour_risk_has_held():
    entry = Entry("72h", 0.5, "24h", 0.4)
    series = entry_series(_long_scores(), entry, HOLD, HOUR)
    alerts = policy_alerts(series, 0.5, AlertRule(0.6, None, hold=HOLD), HOUR)
    # SOON enters at its sixth snapshot above 0.4 (hour 25); the 3-hour burst never holds
    assert alerts.select("unit_id", "alert_start").rows() == [(SOON, T0 + 25 * HOUR)]
    alone = entry_series(_long_scores(), Entry("72h", 0.5), HOLD, HOUR)
    assert policy_alerts(alone, 0.5, AlertRule(0.6, None, hold=HOLD), HOUR).height == 0


def test_the_backtest_policy_point_is_the_two_horizon_policy_when_set():
    scores = _long_scores().with_columns(pl.lit("gbm").alias("model"))
    failures = pl.DataFrame(
        {"unit_id": [SOON], "failed_at": [T0 + 46 * HOUR]}, schema={"unit_id": pl.String, "failed_at": UTC_TS}
    )
    periods = [Period(T0, T0 + 48 * HOUR)]
    base = {"backtest": {"alert_window": "3d", "min_lead_time": "1h"}, "policy": {"enter_for": "6h"}}
    off_config = load_config().with_overrides({**base, "policy": {"enter_for": "6h", "second_horizon": ""}})
    off = judge_scores(scores, failures, off_config, periods=periods)
    assert off["models"]["gbm"]["72h"]["operating_points"]["policy"]["caught"] == 0
    on_config = load_config().with_overrides(
        {
            **base,
            "policy": {
                **{"enter_for": "6h", "second_horizon": "24h", "second_enter_risk": 0.4, "second_only": False},
                **{"decision_enter_risk": 0.5, "decision_enter_for": "6h"},  # the decision risk as without a second
            },
        }
    )
    on = judge_scores(scores, failures, on_config, periods=periods)
    point = on["models"]["gbm"]["72h"]["operating_points"]["policy"]
    assert (point["caught"], point["alerts"], point["entry"]) == (1, 1, "risk_72h >= 0.5 or risk_24h >= 0.4")
    # the 24-hour series keeps its own policy point (one horizon), and the report says which
    assert "entry" not in on["models"]["gbm"]["24h"]["operating_points"]["policy"]
    assert "the 24h risk >= 0.4" in render_markdown(on)
    # only the 24-hour risk enters: a unit whose 72-hour risk alone holds high is never alerted
    high_72h = scores.with_columns(
        pl.when((pl.col("unit_id") == QUIET) & (pl.col("horizon") == "72h")).then(0.9).otherwise("risk").alias("risk")
    )
    only = {**base, "policy": {"enter_for": "6h", "second_horizon": "24h", "second_enter_risk": 0.4}}
    only["policy"]["second_only"] = True
    judged = judge_scores(high_72h, failures, load_config().with_overrides(only), periods=periods)
    point = judged["models"]["gbm"]["72h"]["operating_points"]["policy"]
    assert (point["caught"], point["alerts"], point["entry"]) == (1, 1, "risk_24h >= 0.4")
    assert "the 24h risk >= 0.4 alone" in render_markdown(judged)
    both = judge_scores(high_72h, failures, on_config, periods=periods)
    assert both["models"]["gbm"]["72h"]["operating_points"]["policy"]["alerts"] == 2


def test_the_configuration_names_a_second_horizon_the_models_do_not_score():
    config = load_config().with_overrides({"policy": {"second_horizon": "12h"}})
    with pytest.raises(ValueError, match=r"second_horizon = '12h' is not one of \[labels\] horizons"):
        PolicySettings.from_config(config)
    spelled = PolicySettings.from_config(load_config().with_overrides({"policy": {"second_horizon": "1d"}}))
    assert spelled.entry.second_horizon == "24h"  # as the scores name it: reasons and costs find risk_24h


def test_the_built_in_second_horizon_applies_where_the_labels_score_it(caplog):
    """The default drains on the held 24-hour risk or the 72-hour risk on its own threshold
    and hold; a fleet whose labels lack 24 hours
    (a daily disk fleet) or that decides at 24 hours drains on its decision risk, logged once;
    the backtest's policy point reads the same."""
    import foreshock.hold as hold_module
    from foreshock.models.evaluation.operating_points import OperatingPoints

    config = load_config()
    both = "risk_72h >= 0.6 held 2d or risk_24h >= 0.4 held 6h"
    assert PolicySettings.from_config(config).entry.describe(timedelta(hours=6)) == both
    assert OperatingPoints.from_config(config).entry("72h").describe(timedelta(hours=6)) == both
    for labels, horizon in ((["14d"], "14d"), (["24h"], "24h")):
        daily = config.with_overrides({"labels": {"horizons": labels}, "models": {"horizon": horizon}})
        caplog.clear()
        hold_module._SAID.clear()  # another test of this process may have said it already
        with caplog.at_level("INFO", logger="foreshock.hold"):
            policy = PolicySettings.from_config(daily)
            points = OperatingPoints.from_config(daily)
            PolicySettings.from_config(daily)
        assert (policy.entry.second_horizon, policy.entry.second_only) == ("", False)
        assert points.entry(horizon).describe() == "risk >= 0.5"
        said = [r.getMessage() for r in caplog.records if "second_horizon 24h (built in)" in r.getMessage()]
        assert len(said) == 1, said  # three readings, said once
    # a second horizon the configuration names itself is still checked
    named = config.with_overrides(
        {"labels": {"horizons": ["14d"]}, "models": {"horizon": "14d"}, "policy": {"second_horizon": "2d"}}
    )
    with pytest.raises(ValueError, match="is not one of"):
        PolicySettings.from_config(named)
