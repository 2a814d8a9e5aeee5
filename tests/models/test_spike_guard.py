"""The spike guard (models/lightgbm.toml ``spike_guard``): a row above anything a unit that
stayed healthy showed in training gets at least the risk the training rows above it had."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from foreshock.contract import TIME_TO_FAILURE
from foreshock.models.estimators.gbm import GradientBoostedRisk
from foreshock.models.estimators.spike_guard import SpikeGuard
from tests.models.synthetic_fleet import fitted_for_a_day, synthetic_fleet, with_power_jitter

DAY0 = datetime(2026, 11, 1, tzinfo=UTC)
JITTER = "power_w_jitter_max_1d"


def _row(unit: str, day: float, jitter: float | None, hours_to_failure: float | None) -> dict:
    return {"unit_id": unit, "ts": DAY0 + timedelta(days=day), JITTER: jitter, TIME_TO_FAILURE: hours_to_failure}


def test_the_limit_is_the_most_a_unit_that_stayed_healthy_showed_and_the_risk_what_rows_above_it_did():
    until = DAY0 + timedelta(days=10)
    rows = pl.DataFrame(
        [
            _row("calm", 1.0, 12.0, None),
            _row("calm", 2.0, 20.0, None),  # the most a unit known healthy for 7 days showed
            _row("late", 9.0, 50.0, None),  # a day before the cutoff: its 7-day outlook is open
            _row("failing", 1.0, 40.0, 48.0),  # fails two days later: not healthy
            _row("failing", 2.5, 60.0, 12.0),
            _row("quiet", 2.0, None, None),  # no reading: not counted either way
        ]
    )
    guard, notes = SpikeGuard.fit(rows, [JITTER], ["24h", "72h"], until, "7d")
    [limit] = guard.limits
    assert limit.limit == 20.0 and limit.rows_above == 3
    # 24 hours: the three rows above are closed; one failed within a day -> (1 + 1) / (3 + 2)
    # 72 hours: only the failing unit's rows are three days before the cutoff; both failed
    assert limit.risks == {"24h": 0.4, "72h": 0.75}
    assert "above 20" in notes[0] and "24h 0.40, 72h 0.75" in notes[0]

    scored = pl.DataFrame({JITTER: [10.0, 25.0, None, 20.0]})
    model = {"24h": np.full(4, 0.1), "72h": np.array([0.2, 0.9, 0.2, 0.2])}
    raised = guard.raise_risks(scored, model)
    assert raised["24h"].tolist() == [0.1, 0.4, 0.1, 0.1]  # only the row past the limit
    assert raised["72h"].tolist() == [0.2, 0.9, 0.2, 0.2]  # the model's higher risk is kept
    assert SpikeGuard.from_state(guard.state()) == guard


def test_a_feature_no_healthy_unit_showed_or_no_failing_unit_passed_is_not_guarded():
    until = DAY0 + timedelta(days=10)
    only_failing = pl.DataFrame([_row("failing", 1.0, 40.0, 12.0)])
    guard, notes = SpikeGuard.fit(only_failing, [JITTER], ["24h"], until, "7d")
    assert guard.limits == [] and "not guarded" in notes[0]
    assert guard.raise_risks(pl.DataFrame({JITTER: [99.0]}), {"24h": np.array([0.1])})["24h"].tolist() == [0.1]
    # the failing unit stayed below the healthy one: a row above would be read by nothing seen
    below = pl.DataFrame([_row("calm", 1.0, 50.0, None), _row("failing", 1.0, 40.0, 12.0)])
    guard, notes = SpikeGuard.fit(below, [JITTER], ["24h"], until, "7d")
    assert guard.limits == [] and "no training row" in notes[0] and "not guarded" in notes[0]


def test_the_default_model_raises_a_gpu_past_every_healthy_jitter_though_its_trees_leave_the_jitter_out(tmp_path):
    rng = np.random.default_rng(8)
    fleet = synthetic_fleet(rng, units=40, days=10)
    features = with_power_jitter(fleet.features, fleet.failures, rng)
    model, probe = fitted_for_a_day(features, fleet.failures)
    assert JITTER not in model.feature_names_  # the trees do not read it
    [limit] = model.guard_.limits
    assert limit.feature == JITTER and 10 < limit.limit < 40 and limit.risks["24h"] > 0.5
    assert any("spike guard" in note for note in model.notes_)

    noisy = probe.with_columns(pl.lit(100.0, dtype=pl.Float32).alias(JITTER))
    calm = probe.with_columns(pl.lit(3.0, dtype=pl.Float32).alias(JITTER))
    risk_noisy = model.predict_risk(noisy).get_column("risk").to_numpy()
    risk_calm = model.predict_risk(calm).get_column("risk").to_numpy()
    assert (risk_noisy >= limit.risks["24h"]).all() and (risk_calm < limit.risks["24h"]).all()

    # an operator reads why: the jitter is the first reason of every raised row, none of a calm one
    reasons = model.explain(noisy, top=3).sort("contribution", descending=True).group_by("unit_id", "ts").first()
    assert reasons.height == noisy.height and set(reasons.get_column("signal")) == {JITTER}
    assert (reasons.get_column("value") == 100.0).all() and (reasons.get_column("contribution") > 0).all()
    assert model.explain(noisy, top=3).group_by("unit_id", "ts").len().get_column("len").max() == 3
    assert JITTER not in set(model.explain(calm, top=3).get_column("signal"))

    model.save(tmp_path / "m")  # the limit is saved with the model: a loaded copy scores the same
    assert GradientBoostedRisk.load(tmp_path / "m").predict_risk(noisy).equals(model.predict_risk(noisy))

    off, _ = fitted_for_a_day(features, fleet.failures, spike_guard=[])
    assert off.guard_.limits == []
    assert off.predict_risk(noisy).equals(off.predict_risk(calm))


def test_a_fleet_without_the_guarded_feature_gets_no_guard_and_the_same_model():
    rng = np.random.default_rng(9)
    fleet = synthetic_fleet(rng, units=40, days=10)
    default, probe = fitted_for_a_day(fleet.features, fleet.failures)
    off, _ = fitted_for_a_day(fleet.features, fleet.failures, spike_guard=[])
    assert default.guard_.limits == [] and not any("spike guard" in note for note in default.notes_)
    assert default.predict_risk(probe).equals(off.predict_risk(probe))
