"""Training aimed at the top of the list: per-snapshot ranking and fleet-weighted rows."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from foreshock.contract import label_column
from foreshock.models.estimators.gbm import GradientBoostedRisk
from foreshock.models.estimators.ranking import query_groups, unit_weight_of, varying_columns
from foreshock.models.estimators.training import labelled_until
from foreshock.models.evaluation.metrics import pr_auc
from tests.models.synthetic_fleet import synthetic_fleet

RANK = {"rank_by_snapshot": True, "params": {"objective": "lambdarank"}}


@pytest.fixture(scope="module")
def fleet():
    return synthetic_fleet(np.random.default_rng(11), units=80, days=18)


def test_query_groups_are_runs_of_one_snapshot_time():
    ts = np.array([1, 1, 1, 2, 5, 5], dtype="datetime64[h]")
    assert query_groups(ts).tolist() == [3, 1, 2]
    assert query_groups(None) is None
    with pytest.raises(ValueError, match="sorted"):
        query_groups(np.array([2, 1, 1], dtype="datetime64[h]"))


def test_unit_weights_follow_the_unit_and_default_to_one():
    frame = pl.DataFrame({"unit_id": ["a", "b", "a", "c"]})
    weights = pl.DataFrame({"unit_id": ["a", "b"], "fleet_weight": [20.0, 1.0]})
    assert unit_weight_of(frame, weights).tolist() == [20.0, 1.0, 20.0, 1.0]
    assert unit_weight_of(frame, None).tolist() == [1.0] * 4


def test_ranking_by_snapshot_puts_the_failing_units_on_top(fleet, tmp_path):
    ts = fleet.features.get_column("ts")
    cutoff = ts.min() + (ts.max() - ts.min()) * 0.6
    train, test = fleet.features.filter(pl.col("ts") < cutoff), fleet.features.filter(pl.col("ts") >= cutoff)
    model = GradientBoostedRisk(horizons=["24h"], **RANK).fit(train, fleet.failures, until=cutoff)
    known = labelled_until(test, fleet.failures, ["24h"]).filter(pl.col(label_column("24h")).is_not_null())
    risk = model.predict_risk(known).get_column("risk").to_numpy()
    y = known.get_column(label_column("24h")).to_numpy().astype(float)
    assert 0 < y.sum() and np.all((risk >= 0) & (risk <= 1))
    assert pr_auc(risk, y) > 4 * y.mean()  # random ranking scores the base rate
    model.save(tmp_path / "gbm")
    again = GradientBoostedRisk.load(tmp_path / "gbm")
    assert again.rank_by_snapshot and again.predict_risk(test).equals(model.predict_risk(test))


def test_fleet_weights_train_on_the_fleet_a_sample_stands_for(fleet):
    failed = set(fleet.failures.get_column("unit_id").to_list())
    units = fleet.features.get_column("unit_id").unique().to_list()
    # every healthy unit kept stands for 20: the fleet's failure rate is 20 times lower
    weights = pl.DataFrame({"unit_id": units, "fleet_weight": [1.0 if u in failed else 20.0 for u in units]})
    plain = GradientBoostedRisk(horizons=["72h"], fleet_weighted=False).fit(fleet.features, fleet.failures)
    unweighted = GradientBoostedRisk(horizons=["72h"], fleet_weighted=True).fit(fleet.features, fleet.failures)
    weighted = GradientBoostedRisk(horizons=["72h"], fleet_weighted=True, unit_weights=weights).fit(
        fleet.features, fleet.failures
    )
    # without weights the setting changes nothing; with them the calibrated risk follows the fleet's rate
    assert unweighted.predict_risk(fleet.features).equals(plain.predict_risk(fleet.features))
    healthy = fleet.features.filter(~pl.col("unit_id").is_in(list(failed)))
    mean = {m: float(m_.predict_risk(healthy).get_column("risk").mean()) for m, m_ in (("p", plain), ("w", weighted))}
    assert mean["w"] < mean["p"] / 3


def test_empty_and_constant_features_are_left_out_when_asked(fleet):
    frame = fleet.features.with_columns(pl.lit(3.0).alias("flat_last"), pl.lit(None, pl.Float64).alias("empty_last"))
    kept = GradientBoostedRisk(horizons=["24h"], drop_constant=True).fit(frame, fleet.failures).feature_names_
    assert "flat_last" not in kept and "empty_last" not in kept and any(n.startswith("ecc_") for n in kept)
    ecc = next(n for n in kept if n.startswith("ecc_"))
    assert varying_columns(frame, ["flat_last", ecc, "empty_last"]) == [ecc]


def test_num_leaves_chosen_on_the_purged_holdout(fleet):
    model = GradientBoostedRisk(horizons=["24h"], tune_num_leaves=[2, 15]).fit(fleet.features, fleet.failures)
    assert model.holdouts_["24h"]["num_leaves"] in (2, 15)
    assert model.boosters_["24h"].dump_model()["tree_info"][0]["num_leaves"] <= model.holdouts_["24h"]["num_leaves"]
