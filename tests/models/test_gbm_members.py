"""Averaged members (models/lightgbm.toml ``members``): several boosters a horizon, each from
its own bagging and feature-sampling seed, one booster whose margin is their mean."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest

from foreshock.models.estimators.boosting import averaged, member_params
from foreshock.models.estimators.gbm import GradientBoostedRisk
from tests.models.synthetic_fleet import synthetic_fleet

PARAMS = {
    "objective": "binary",
    "num_leaves": 6,
    "verbose": -1,
    "seed": 7,
    "deterministic": True,
    "bagging_fraction": 0.7,
    "bagging_freq": 1,
    "feature_fraction": 0.6,
    "force_row_wise": True,
}


def test_the_averaged_booster_predicts_and_explains_the_members_mean(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2_000, 5))
    y = (x[:, 0] + 0.5 * x[:, 1] + rng.normal(size=2_000) > 1.2).astype(int)
    data = lgb.Dataset(x, y, params=PARAMS).construct()
    members = [lgb.train(member_params(PARAMS, k), data, num_boost_round=15 + 5 * k) for k in range(3)]
    one = averaged(members)
    margins = np.array([m.predict(x, raw_score=True) for m in members])
    assert not np.allclose(margins[0], margins[1])  # the members differ: their own draws
    assert one.num_trees() == 15 + 20 + 25
    assert np.allclose(one.predict(x, raw_score=True), margins.mean(axis=0), atol=1e-9)
    contributions = np.mean([m.predict(x, pred_contrib=True) for m in members], axis=0)
    assert np.allclose(one.predict(x, pred_contrib=True), contributions, atol=1e-9)
    one.save_model(str(tmp_path / "booster.txt"))  # saved and read back as LightGBM's own text
    again = lgb.Booster(model_file=str(tmp_path / "booster.txt"))
    assert np.allclose(again.predict(x, raw_score=True), margins.mean(axis=0), atol=1e-9)
    assert averaged(members[:1]) is members[0]
    assert member_params(PARAMS, 0) is PARAMS and member_params(PARAMS, 2)["seed"] == 9


def _disagreement(fleet, **settings) -> tuple[float, GradientBoostedRisk]:
    """Mean absolute difference of the margins (the trees' log-odds, before calibration) two
    models of other seeds give every row of the fleet."""
    first, second = (
        GradientBoostedRisk(horizons=["24h"], seed=seed, **settings).fit(fleet.features, fleet.failures)
        for seed in (7, 1_007)
    )
    a, b = (m.predict_margin(fleet.features, "24h") for m in (first, second))
    return float(np.mean(np.abs(a - b))), first


@pytest.mark.filterwarnings("ignore")
def test_members_make_the_ranking_depend_less_on_the_seed(tmp_path):
    fleet = synthetic_fleet(np.random.default_rng(11), units=60, days=14)
    alone, _ = _disagreement(fleet)
    together, model = _disagreement(fleet, members=5)
    # five members of each seed disagree far less than one booster of each (about 4x here)
    assert together < 0.5 * alone, (together, alone)
    rounds = model.holdouts_["24h"]["member_rounds"]
    assert len(rounds) == 5 and model.boosters_["24h"].num_trees() == sum(rounds)
    model.save(tmp_path / "m")
    again = GradientBoostedRisk.load(tmp_path / "m")
    assert again.members == 5
    assert again.predict_risk(fleet.features).equals(model.predict_risk(fleet.features))


@pytest.mark.filterwarnings("ignore")
def test_members_given_a_dask_cluster_are_fitted_here_and_say_so():
    fleet = synthetic_fleet(np.random.default_rng(11), units=60, days=14)
    # an address nothing listens on: averaged members never reach for the cluster
    model = GradientBoostedRisk(horizons=["24h"], members=2, dask_client="tcp://127.0.0.1:9", dask_min_rows=1)
    model.fit(fleet.features, fleet.failures)
    assert any("2 members fitted in this process" in note for note in model.notes_)
    assert len(model.holdouts_["24h"]["member_rounds"]) == 2
