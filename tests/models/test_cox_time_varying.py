"""The Cox time-varying risk model: recovers a simulated effect, probabilities monotone in h."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from foreshock.contract import UTC_TS
from foreshock.models.estimators.cox_time_varying import CoxTimeVaryingRisk
from tests.models.synthetic_fleet import T0, synthetic_fleet


def proportional_hazards_fleet(rng: np.random.Generator, units: int = 300, hours: int = 360):
    """Hourly snapshots; two covariates change every day; hazard 0.0012/h * exp(0.8 a + 0.5 b)."""
    days = hours // 24
    a = rng.normal(size=(units, days)).repeat(24, axis=1)
    b = rng.normal(size=(units, days)).repeat(24, axis=1)
    noise = rng.normal(size=(units, hours))
    hazard = 0.0012 * np.exp(0.8 * a + 0.5 * b)
    fails = rng.random((units, hours)) < -np.expm1(-hazard)  # failure during hour (t, t+1]
    first = np.where(fails.any(axis=1), fails.argmax(axis=1), hours)
    keep = np.arange(hours)[None, :] <= np.minimum(first, hours - 1)[:, None]
    unit_idx, hour_idx = np.nonzero(keep)
    frame = pl.DataFrame(
        {
            "unit_id": [f"u{i:03d}" for i in unit_idx],
            "ts": [T0 + timedelta(hours=int(h)) for h in hour_idx],
            "life_start": [T0] * unit_idx.size,
            "risk_factor_a": a[unit_idx, hour_idx],
            "risk_factor_b": b[unit_idx, hour_idx],
            "noise_level": noise[unit_idx, hour_idx],
        }
    ).with_columns(pl.col("ts").cast(UTC_TS), pl.col("life_start").cast(UTC_TS))
    failed = np.flatnonzero(first < hours)
    failures = pl.DataFrame(
        {
            "unit_id": [f"u{i:03d}" for i in failed],
            "failed_at": [T0 + timedelta(hours=int(first[i]) + 0.5) for i in failed],
            "mode": ["memory"] * failed.size,
        },
        schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String},
    )
    return frame, failures


class TestCoxTimeVaryingRisk:
    def test_recovers_simulated_log_hazard_ratios(self, rng):
        frame, failures = proportional_hazards_fleet(rng)
        model = CoxTimeVaryingRisk(horizons=["24h"]).fit(frame, failures)
        beta = model.summary_["log_hazard_ratio"]
        print("events", failures.height, "beta", beta)
        assert failures.height > 60
        # Covariates are standardised (sd ~ 1 here), so the fitted values are the true ones.
        assert 0.55 < beta["risk_factor_a"] < 1.05
        assert 0.3 < beta["risk_factor_b"] < 0.75
        assert abs(beta.get("noise_level", 0.0)) < 0.3

    def test_probability_is_monotone_in_the_horizon(self, rng):
        fleet = synthetic_fleet(rng, units=60, days=16)
        model = CoxTimeVaryingRisk(horizons=["6h", "24h", "72h", "7d"]).fit(fleet.features, fleet.failures)
        risk = model.predict_risk(fleet.features).pivot(on="horizon", index=["unit_id", "ts"], values="risk")
        p = risk.select("6h", "24h", "72h", "7d").to_numpy()
        assert np.all((p >= 0) & (p <= 1))
        assert np.all(np.diff(p, axis=1) >= -1e-12)
        assert np.any(np.diff(p, axis=1) > 0)

    def test_rejects_a_penalizer_that_erases_effects(self):
        with pytest.raises(ValueError, match="penalizer"):
            CoxTimeVaryingRisk(horizons=["24h"], penalizer=0.01)

    def test_save_load_and_explanations(self, rng, tmp_path):
        fleet = synthetic_fleet(rng, units=60, days=16)
        model = CoxTimeVaryingRisk(horizons=["24h"]).fit(fleet.features, fleet.failures)
        model.save(tmp_path / "cox")
        again = CoxTimeVaryingRisk.load(tmp_path / "cox")
        assert again.predict_risk(fleet.features).equals(model.predict_risk(fleet.features))
        why = model.explain(fleet.features.head(5), top=2)
        # the fit may keep a single covariate (screening drops weak and duplicate ones)
        assert why.height == 5 * min(2, len(model.feature_names_))
        assert set(why.get_column("signal")) <= set(model.feature_names_)
