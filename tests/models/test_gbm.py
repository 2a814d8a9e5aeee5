"""LightGBM risk: beats random on a synthetic precursor signal, calibrated on held-out time."""

from __future__ import annotations

import numpy as np
import polars as pl

from foreshock.contract import label_column
from foreshock.models.estimators.gbm import GradientBoostedRisk
from foreshock.models.estimators.training import labelled_until
from foreshock.models.evaluation.metrics import calibration_error, pr_auc
from tests.models.synthetic_fleet import synthetic_fleet


def split(fleet, fraction: float = 0.6):
    ts = fleet.features.get_column("ts")
    cutoff = ts.min() + (ts.max() - ts.min()) * fraction
    return cutoff, fleet.features.filter(pl.col("ts") < cutoff), fleet.features.filter(pl.col("ts") >= cutoff)


class TestGradientBoostedRisk:
    def test_beats_random_and_is_calibrated_out_of_time(self, rng):
        fleet = synthetic_fleet(rng, units=120, days=24)
        cutoff, train, test = split(fleet)
        model = GradientBoostedRisk(horizons=["24h"]).fit(train, fleet.failures, until=cutoff)
        labelled = labelled_until(test, fleet.failures, ["24h"])
        known = labelled.filter(pl.col(label_column("24h")).is_not_null())
        risk = model.predict_risk(known).get_column("risk").to_numpy()
        y = known.get_column(label_column("24h")).to_numpy().astype(float)
        ap, ece = pr_auc(risk, y), calibration_error(risk, y)
        print(f"failures={fleet.failures.height} base rate={y.mean():.4f} PR-AUC={ap:.3f} ECE={ece:.4f}")
        assert y.sum() > 0
        assert ap > 4 * y.mean()  # random ranking scores the base rate
        assert ece < 0.05

    def test_explanations_name_the_precursor(self, rng):
        fleet = synthetic_fleet(rng, units=80, days=20)
        model = GradientBoostedRisk(horizons=["24h"]).fit(fleet.features, fleet.failures)
        risk = model.predict_risk(fleet.features)
        riskiest = fleet.features.join(
            risk.sort("risk", descending=True).head(20).select("unit_id", "ts"), on=["unit_id", "ts"]
        )
        why = model.explain(riskiest, top=1)
        assert why.height == 20
        # the signal the simulator planted: single-/double-bit ECC growth
        assert why.get_column("signal").str.contains("ecc_").mean() >= 0.8
        # contributions are LightGBM's own: with the bias they add up to the raw log-odds
        x = riskiest.head(1)
        contrib = np.asarray(model.boosters_["24h"].predict(model_matrix(model, x), pred_contrib=True))
        raw = model.predict_raw(x, "24h")
        assert np.allclose(1 / (1 + np.exp(-contrib.sum(axis=1))), raw)

    def test_save_load_gives_identical_risk(self, rng, tmp_path):
        fleet = synthetic_fleet(rng, units=60, days=16)
        model = GradientBoostedRisk(horizons=["24h", "72h"]).fit(fleet.features, fleet.failures)
        model.save(tmp_path / "gbm")
        assert sorted(p.name for p in (tmp_path / "gbm").iterdir()) == [
            "booster_24h.txt",
            "booster_72h.txt",
            "gbm.json",
        ]
        again = GradientBoostedRisk.load(tmp_path / "gbm")
        assert again.predict_risk(fleet.features).equals(model.predict_risk(fleet.features))


def model_matrix(model, frame):
    from foreshock.models.estimators.base import feature_matrix

    return feature_matrix(frame, model.feature_names_)
