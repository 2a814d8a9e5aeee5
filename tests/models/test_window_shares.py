"""Window shares (``<m>_share_6h_1d``): a healthy GPU's burst of corrected errors told from
a failing GPU's steady rise (models/lightgbm.toml ``window_shares``)."""

from __future__ import annotations

import numpy as np
import polars as pl

from foreshock.contract import label_column
from foreshock.models.estimators.gbm import GradientBoostedRisk
from foreshock.models.estimators.training import labelled_until
from foreshock.models.estimators.window_shares import share_columns, share_names
from tests.models.synthetic_fleet import synthetic_fleet


def test_shares_of_consecutive_windows_are_named_and_computed_from_the_increases():
    names = ["sbe_increase_1d", "sbe_increase_1h", "sbe_increase_6h", "temp_mean_1d", "xid_count_1d"]
    assert share_names(names) == ["sbe_share_1h_6h", "sbe_share_6h_1d"]
    frame = pl.DataFrame({"sbe_increase_6h": [40.0, 10.0, 0.0], "sbe_increase_1d": [40.0, 40.0, 0.0]})
    shares = share_columns(frame, ["sbe_share_6h_1d", "sbe_share_1h_6h", "gone_share_6h_1d"])
    assert list(shares) == ["sbe_share_6h_1d"]  # the others' increases are not in the frame
    assert np.allclose(shares["sbe_share_6h_1d"], [1.0, 0.25, np.nan], equal_nan=True)


def test_with_shares_a_burst_shaped_copy_of_a_failing_gpu_ranks_lower_and_without_it_cannot(tmp_path):
    """Risk may only rise with an error increase (the recipe's monotone constraints), so
    without shares a day's errors packed into the last six hours can only look worse; with
    the share the trees learn from the fleet's healthy bursts that such a spike is benign."""
    fleet = synthetic_fleet(np.random.default_rng(5), units=80, days=18)
    known = labelled_until(fleet.features, fleet.failures, ["24h"]).filter(pl.col(label_column("24h")).is_not_null())
    near = known.filter((pl.col(label_column("24h")) == 1) & (pl.col("ecc_sbe_volatile_total_increase_1d") >= 10))
    day, six = "ecc_sbe_volatile_total_increase_1d", "ecc_sbe_volatile_total_increase_6h"
    burst = near.with_columns(pl.col(day).alias(six))  # the day's errors all in its last six hours
    assert near.height > 20
    ratio = {}
    for shares in (False, True):
        model = GradientBoostedRisk(horizons=["24h"], window_shares=shares).fit(fleet.features, fleet.failures)
        assert ("ecc_sbe_volatile_total_share_6h_1d" in model.feature_names_) is shares
        before = model.predict_risk(near).get_column("risk").to_numpy()
        after = model.predict_risk(burst).get_column("risk").to_numpy()
        ratio[shares] = np.median(after / before)
        if not shares:
            assert (after >= before - 1e-12).all()
    assert ratio[True] < 0.8 * ratio[False]
    # a saved model computes its shares again from the feature names alone
    model.save(tmp_path / "m")
    again = GradientBoostedRisk.load(tmp_path / "m")
    assert again.predict_risk(burst).equals(model.predict_risk(burst))
