"""One binning for the refits of two horizons on the same rows (boosting.RefitBins)."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest

from foreshock.models.estimators.boosting import RefitBins, binning

PARAMS = {"objective": "binary", "num_leaves": 7, "min_data_in_leaf": 20, "max_bin": 31, "verbose": -1, "seed": 3}
PARAMS |= {"num_threads": 1, "deterministic": True, "force_row_wise": True, "feature_fraction": 0.7}


@pytest.fixture
def case():
    """Rows of two horizons (the long one's positives include the short one's), their weights,
    feature names, row ids, a fresh RefitBins and its first dataset (the short horizon's)."""
    rng = np.random.default_rng(0)
    rows, features = 3000, 8
    x = rng.normal(size=(rows, features)).astype(np.float32)
    short = (x[:, 0] + rng.normal(size=rows) > 1.5).astype(float)
    long = np.maximum(short, (x[:, 1] + rng.normal(size=rows) > 1.2).astype(float))
    weight = 1.0 + 4.0 * long
    names = [f"f{i}" for i in range(features)]
    ids = np.arange(rows)
    bins = RefitBins()
    first = bins.dataset(x, short, weight, None, PARAMS, names, ids)
    return x, short, long, weight, names, ids, bins, first


def _alone(x, y, weight, params, names):
    """What a refit grows on a binning of its own."""
    data = lgb.Dataset(x, y, weight=weight, feature_name=names, params=binning(params)).construct()
    return lgb.train(params, data, num_boost_round=20).model_to_string()


def test_second_horizon_on_the_same_rows_reuses_the_binning_and_grows_the_same_trees(case):
    x, short, long, weight, names, rows, bins, first = case
    grown_short = lgb.train(PARAMS, first, num_boost_round=20).model_to_string()
    second = bins.dataset(x, long, weight * 2, None, PARAMS, names, rows.copy())
    assert second is first  # no second binning
    grown_long = lgb.train(PARAMS, second, num_boost_round=20).model_to_string()
    assert grown_short == _alone(x, short, weight, PARAMS, names)
    assert grown_long == _alone(x, long, weight * 2, PARAMS, names)


def test_other_rows_parameters_or_unit_weights_are_binned_again(case):
    x, short, long, weight, names, rows, bins, first = case
    leafier = {**PARAMS, "min_data_in_leaf": 40}  # enters the binning's pre-filter
    assert bins.dataset(x, long, weight, None, leafier, names, rows) is not first
    kept = bins.dataset(x, long, weight, None, leafier, names, rows)
    assert bins.dataset(x[:-10], long[:-10], weight[:-10], None, leafier, names, rows[:-10]) is not kept
    ones = np.ones(x.shape[0])  # LightGBM leaves all-one weights unset: a reused binning would keep the old ones
    again = bins.dataset(x, long, weight, None, leafier, names, rows)
    unweighted = bins.dataset(x, long, ones, None, leafier, names, rows)
    assert unweighted is not again
    assert lgb.train(leafier, unweighted, num_boost_round=20).model_to_string() == _alone(x, long, ones, leafier, names)
