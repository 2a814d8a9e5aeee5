"""The decision risk's own way into drain beside a second one (``[policy]
decision_enter_risk``, ``decision_enter_for``): a unit enters once its 72-hour risk has held at
or above its own threshold for its own (longer) hold, or its 24-hour risk at or above
``second_enter_risk`` for ``enter_for``; the live policy, the backtest's replay and the
drain replay read the same holds; lower settings or ``second_only`` change nothing."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from drain_helpers import T0, score_rows, write_scores

from foreshock.config import Config, load_config
from foreshock.config_schema import ConfigError
from foreshock.contract import UTC_TS
from foreshock.drain.outbox import publish
from foreshock.drain.policy import DrainPolicy
from foreshock.drain.replay import replay
from foreshock.drain.replay_report import write_report
from foreshock.drain.risk_table import unit_risk_table
from foreshock.drain.settings import PolicySettings
from foreshock.hold import HELD_COLUMN, Entry, entry_series, with_held_risks
from foreshock.models.evaluation.alert_replay import AlertRule, Period, policy_alerts
from foreshock.models.evaluation.backtest_report import render_markdown
from foreshock.models.evaluation.judging import judge_scores, policy_point_alerts

HOUR = timedelta(hours=1)
UNIT = "gpu-node001-gpu0"


def _settings(**more) -> PolicySettings:
    ways = {"second_enter_risk": 0.4, "decision_enter_risk": 0.6, "decision_enter_for": 48 * HOUR, **more}
    return PolicySettings(
        max_drained_share_cluster=1.0,
        max_drained_share_per_domain=1.0,
        enter_for=6 * HOUR,
        entry=Entry("72h", 0.5, "24h", **ways),
    )


def _live(hours: int, settings: PolicySettings, risks: tuple[float, float]) -> dict:
    """The live path for one unit whose 24-hour and 72-hour risks are ``risks`` for
    ``hours`` hourly snapshots: scores -> each horizon held for its own hold -> policy."""
    frames = [score_rows({UNIT: risks}, T0 + h * HOUR) for h in range(hours)]
    holds = settings.entry.holds(settings.enter_for)
    scores = with_held_risks(pl.concat(frames), settings.enter_for, HOUR, holds)
    table = unit_risk_table(scores, settings.horizon, entry=settings.entry)
    return DrainPolicy(settings).decide(table, T0 + (hours - 1) * HOUR, None).recommendations.row(0, named=True)


def _drained(row: dict) -> bool:
    return row["action"] in ("drain_now", "drain_at_checkpoint")


def test_a_72_hour_risk_drains_once_it_has_held_its_own_hold():
    settings = _settings()
    # 0.7 at 72 hours, 0.1 at 24 hours: a slow failure the 24-hour model cannot place
    waiting = _live(47, settings, (0.1, 0.7))
    assert not _drained(waiting) and waiting["action"] == "run_diagnostics"
    assert "drain once risk_72h >= 0.6 held 2d or risk_24h >= 0.4 held 6h" in waiting["reason"]
    assert _drained(_live(48, settings, (0.1, 0.7)))
    # below its own threshold it never drains, however long it holds
    assert not _drained(_live(72, settings, (0.1, 0.55)))
    # the 24-hour way in keeps its own 6-hour hold
    assert not _drained(_live(5, settings, (0.6, 0.1)))
    assert _drained(_live(6, settings, (0.6, 0.1)))
    # with second_only the decision risk never enters, whatever its own way in says
    assert not _drained(_live(72, _settings(second_only=True), (0.1, 0.9)))


def test_each_horizon_is_held_on_its_own_series_for_its_own_hold():
    hours = [h for h in range(60) if h != 52]  # no snapshot at hour 52: a gap breaks the 72-hour run
    frame = pl.concat([score_rows({UNIT: (0.5, 0.7)}, T0 + h * HOUR) for h in hours]).select(
        "unit_id", "ts", "horizon", "risk"
    )
    held = with_held_risks(frame, 6 * HOUR, HOUR, {"3d": 48 * HOUR})  # "3d" is the scores' "72h"
    at = {(r["horizon"], (r["ts"] - T0) // HOUR): r[HELD_COLUMN] for r in held.iter_rows(named=True)}
    assert at[("72h", 46)] is None and at[("72h", 47)] == pytest.approx(0.7)
    assert at[("72h", 51)] == pytest.approx(0.7)
    assert at[("72h", 53)] is None and at[("72h", 59)] is None  # after the gap: 48 consecutive again at hour 100
    assert at[("24h", 4)] is None and at[("24h", 5)] == pytest.approx(0.5) and at[("24h", 59)] == pytest.approx(0.5)
    assert held.select("unit_id", "ts", "horizon", "risk").equals(frame)  # rows in their order


def _scores(hours: int = 96) -> pl.DataFrame:
    """Hourly scores of two units over ``hours`` at both horizons: SLOW's 72-hour risk is 0.7
    from hour 10 on (24-hour 0.1); BLIP's 72-hour risk 0.9 for 30 hours (a long burst)."""
    rows = []
    for h in range(hours):
        rows += [("slow", h, "24h", 0.1), ("slow", h, "72h", 0.7 if h >= 10 else 0.05)]
        rows += [("blip", h, "24h", 0.02), ("blip", h, "72h", 0.9 if 20 <= h < 50 else 0.05)]
    return pl.DataFrame(
        {
            "unit_id": [r[0] for r in rows],
            "ts": [T0 + r[1] * HOUR for r in rows],
            "horizon": [r[2] for r in rows],
            "risk": [r[3] for r in rows],
            "model": "gbm",
        }
    ).with_columns(pl.col("ts").cast(UTC_TS))


def test_the_backtest_enters_when_the_live_policy_does():
    settings = _settings()
    series = entry_series(_scores(), settings.entry, settings.enter_for, HOUR)
    alerts = policy_alerts(series, 0.5, AlertRule(0.6, None, hold=settings.enter_for), HOUR)
    # SLOW's 48th snapshot at 0.7 is hour 57; BLIP's 30-hour burst never holds two days
    assert alerts.select("unit_id", "alert_start").rows() == [("slow", T0 + 57 * HOUR)]
    failures = pl.DataFrame(
        {"unit_id": ["slow"], "failed_at": [T0 + 95 * HOUR]}, schema={"unit_id": pl.String, "failed_at": UTC_TS}
    )
    policy = {"enter_for": "6h", "second_horizon": "24h", "second_enter_risk": 0.4, "second_only": False}
    config = load_config().with_overrides(
        {
            "backtest": {"alert_window": "3d", "min_lead_time": "1h"},
            "policy": {**policy, "decision_enter_risk": 0.6, "decision_enter_for": "48h"},
        }
    )
    judged = judge_scores(_scores(), failures, config, periods=[Period(T0, T0 + 96 * HOUR)])
    point = judged["models"]["gbm"]["72h"]["operating_points"]["policy"]
    assert (point["caught"], point["alerts"], point["entry"]) == (1, 1, "risk_72h >= 0.6 or risk_24h >= 0.4")
    assert "has held >= 0.6 for 2d or, at the decision horizon only, the 24h risk >= 0.4 for 6h" in render_markdown(
        judged
    )
    # the decision risk on its old footing (0.5 held 6 h) alerts BLIP too
    old = config.with_overrides({"policy": {"decision_enter_risk": 0.5, "decision_enter_for": "6h"}})
    before = judge_scores(_scores(), failures, old, periods=[Period(T0, T0 + 96 * HOUR)])
    assert before["models"]["gbm"]["72h"]["operating_points"]["policy"]["alerts"] == 2


def test_the_configuration_resolves_the_decision_way_in_only_beside_a_second_one():
    both = load_config().with_overrides({"policy": {"second_only": False}})
    policy = PolicySettings.from_config(both)
    assert policy.entry.describe(policy.enter_for) == "risk_72h >= 0.6 held 2d or risk_24h >= 0.4 held 6h"
    # second_only: the decision risk has no way in, so no hold of its own
    only = PolicySettings.from_config(both.with_overrides({"policy": {"second_only": True}}))
    assert (only.entry.decision_enter_risk, only.entry.decision_enter_for) == (None, None)
    # a daily fleet without a 24-hour label: enter_risk and enter_for decide, as always
    daily = both.with_overrides({"labels": {"horizons": ["14d"]}, "models": {"horizon": "14d"}})
    alone = PolicySettings.from_config(daily)
    assert alone.entry.describe(alone.enter_for) == "risk >= 0.5 held 6h"
    with pytest.raises(ValueError, match="decision_enter_risk must be in"):
        _settings(decision_enter_risk=1.5)


def test_a_primary_model_other_than_lightgbm_is_told_about_the_built_in_entry(caplog):
    import foreshock.drain.settings as settings_module

    settings_module._WARNED.clear()  # another test of this process may have been warned
    with caplog.at_level("WARNING", logger="foreshock.drain.settings"):
        PolicySettings.from_config(load_config())
        assert not caplog.records  # LightGBM: the entry was measured with it
        cox = load_config().with_overrides({"models": {"primary": "cox"}})
        PolicySettings.from_config(cox)
        PolicySettings.from_config(cox)
        settings_module._WARNED.clear()
        own = cox.with_overrides({"policy": {"decision_enter_risk": 0.5, "decision_enter_for": "6h"}})
        PolicySettings.from_config(own)  # its own entry: nothing to say
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "[models] primary = 'cox' drains on the built-in entry" in said[0], said


# One entry per model ([policy.models.<name>]): Cox's risks rarely hold LightGBM's levels.
COX_OWN = {"second_enter_risk": 0.5, "decision_enter_risk": 0.5, "decision_enter_for": "6h"}


def _per_model(primary: str = "cox") -> Config:
    guards = {"max_drained_share_cluster": 1.0, "max_drained_share_per_domain": 1.0}
    return load_config().with_overrides(
        {
            "models": {"primary": primary},
            "backtest": {"alert_window": "3d", "min_lead_time": "1h"},
            "policy": {**guards, "models": {"cox": COX_OWN}},
        }
    )


def test_a_cox_primary_enters_at_its_own_entry_and_lightgbm_keeps_the_default(caplog):
    import foreshock.drain.settings as settings_module

    settings_module._WARNED.clear()
    with caplog.at_level("WARNING", logger="foreshock.drain.settings"):
        cox = PolicySettings.from_config(_per_model())
    assert not caplog.records  # an entry of its own: nothing to warn about
    assert cox.entry.describe(cox.enter_for) == "risk_72h >= 0.5 held 6h or risk_24h >= 0.5 held 6h"
    gbm = PolicySettings.from_config(_per_model("gbm"))
    assert gbm.entry.describe(gbm.enter_for) == "risk_72h >= 0.6 held 2d or risk_24h >= 0.4 held 6h"
    assert cox.for_model("gbm") == gbm and gbm.for_model("cox") == cox
    # a 72-hour risk of 0.55 held six hours: Cox's own entry drains it, LightGBM's does not
    assert _drained(_live(6, cox, (0.1, 0.55)))
    waiting = _live(5, cox, (0.1, 0.55))["reason"]
    assert "above 0.50 (or 0.50 at 24h) for less than 6h ([policy.models.cox] enter_for)" in waiting, waiting
    assert not _drained(_live(6, gbm, (0.1, 0.55)))
    # the live scores hold the 72-hour risk for Cox's own 6 hours
    assert cox.entry.holds(cox.enter_for) == {"72h": 6 * HOUR, "24h": 6 * HOUR}


def test_a_models_own_entry_names_a_bad_key_or_value(tmp_path):
    site = tmp_path / "foreshock.toml"
    site.write_text('[models]\nprimary = "cox"\n[policy.models.cox]\nenter_rsk = 0.5\nsecond_horizon = "12h"\n')
    with pytest.raises(ConfigError) as bad:
        load_config(site)
    assert "[policy.models.cox]: unknown key enter_rsk (did you mean enter_risk?), second_horizon" in str(bad.value)
    assert "a model's own entry sets only enter_risk, enter_for" in str(bad.value)
    site.write_text("[policy.models.cox]\ndecision_enter_risk = 1.5\n")
    with pytest.raises(ConfigError, match=r"\[policy.models.cox\] decision_enter_risk: Input should be less"):
        load_config(site)
    site.write_text("[policy.models.cox]\nenter_risk = 0.2\n")  # below exit_risk 0.3
    with pytest.raises(ConfigError, match=r"\[policy.models.cox\]: \[policy\] exit_risk \(0.3\) must not exceed"):
        PolicySettings.from_config(load_config(site))


def _two_models(hours: int = 96) -> pl.DataFrame:
    return pl.concat([_scores(hours), _scores(hours).with_columns(pl.lit("cox").alias("model"))])


def test_the_backtest_judges_each_model_at_its_own_entry():
    failures = pl.DataFrame(
        {"unit_id": ["slow"], "failed_at": [T0 + 95 * HOUR]}, schema={"unit_id": pl.String, "failed_at": UTC_TS}
    )
    judged = judge_scores(_two_models(), failures, _per_model(), periods=[Period(T0, T0 + 96 * HOUR)])
    point = {m: judged["models"][m]["72h"]["operating_points"]["policy"] for m in ("gbm", "cox")}
    # the same risks: LightGBM's default lets SLOW in alone, Cox's own entry BLIP's burst too
    assert (point["gbm"]["alerts"], point["cox"]["alerts"]) == (1, 2)
    assert point["cox"]["entry"] == "risk_72h >= 0.5 or risk_24h >= 0.5"
    assert point["cox"]["chosen_on"] == "fixed ([policy.models.cox] enter_risk, held 6h)"
    text = render_markdown(judged)
    assert "cox is judged at its own entry ([policy.models.cox]): a unit enters once risk_72h >= 0.5 held 6h" in text
    assert judged["settings"]["decision_enter_risk"] == 0.6  # the report's settings stay [policy]'s


def test_the_drain_replay_runs_each_model_at_its_own_entry(tmp_path):
    failures = pl.DataFrame(
        {"unit_id": ["slow"], "failed_at": [T0 + 95 * HOUR]}, schema={"unit_id": pl.String, "failed_at": UTC_TS}
    )
    settings = PolicySettings.from_config(_per_model())
    report = replay(_two_models(), failures, settings, alert_window=4 * 24 * HOUR, min_lead_time=HOUR)
    drained = {o.variant: (o.drains, o.drained_ahead) for o in report.outcomes}
    assert drained["gbm"] == (1, 1) and drained["cox"] == (2, 1)
    assert report.settings["entry"] == "risk_72h >= 0.6 held 2d or risk_24h >= 0.4 held 6h"
    assert report.settings["model_entries"] == {"cox": "risk_72h >= 0.5 held 6h or risk_24h >= 0.5 held 6h"}
    text = write_report(report, tmp_path / "replay", plots=False)["replay.md"].read_text()
    assert "cox enters at its own entry ([policy.models.cox]): risk_72h >= 0.5 held 6h" in text


def test_publish_drains_on_the_entry_of_the_model_that_scored(drain_config):
    # the decision risk alone (drain_config): LightGBM enters at 0.5, Cox at its own 0.35
    config = drain_config.with_overrides({"policy": {"models": {"cox": {"enter_risk": 0.35}}}})
    actions = {}
    for model in ("gbm", "cox"):
        write_scores(config.data_dir, score_rows({UNIT: 0.4}).with_columns(pl.lit(model).alias("model")))
        actions[model] = publish(config).risk_list.row(0, named=True)
    assert actions["gbm"]["action"] == "run_diagnostics" and _drained(actions["cox"])


def test_the_policy_points_alerts_are_the_ones_the_judge_counted():
    # 200 hours: SLOW fails at hour 100; BLIP never does
    failures = pl.DataFrame(
        {"unit_id": ["slow"], "failed_at": [T0 + 100 * HOUR]}, schema={"unit_id": pl.String, "failed_at": UTC_TS}
    )
    scores, periods = _two_models(200), [Period(T0, T0 + 200 * HOUR)]
    judged = judge_scores(scores, failures, _per_model(), periods=periods)
    found = {}
    for model in ("gbm", "cox"):
        alerts = policy_point_alerts(scores, failures, _per_model(), model, periods)
        point = judged["models"][model]["72h"]["operating_points"]["policy"]
        assert alerts.height == point["alerts"]
        outcome = alerts.get_column("outcome")
        assert [int((outcome == o).sum()) for o in ("true", "false", "unresolved")] == [
            point["true_alerts"],
            point["false_alerts"],
            point["alerts_unresolved"],
        ]
        found[model] = alerts.sort("unit_id").select("unit_id", "alert_start", "outcome").rows()
    # LightGBM lets SLOW in two days into its 0.7 (the decision hold), 43 h before it fails;
    # Cox's own entry (held 6 h) lets SLOW in 85 h before it fails, past the 72-hour horizon,
    # and BLIP's burst, on a unit that never fails: two false alerts
    assert found["gbm"] == [("slow", T0 + 57 * HOUR, "true")]
    assert found["cox"] == [("blip", T0 + 25 * HOUR, "false"), ("slow", T0 + 15 * HOUR, "false")]
