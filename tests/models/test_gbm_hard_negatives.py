"""Extra weight on the hardest negatives: rows of units that fail, but later than the horizon."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from foreshock.contract import TIME_TO_FAILURE, UTC_TS, label_column
from foreshock.models.estimators.gbm import GradientBoostedRisk
from foreshock.models.estimators.training import labelled_until
from foreshock.models.estimators.training_weights import class_weights, hard_negative_rows, horizon_targets
from foreshock.models.evaluation.metrics import pr_auc
from tests.models.synthetic_fleet import synthetic_fleet

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def test_hard_negatives_weigh_k_times_the_positives_and_only_failures_known_at_the_cutoff_count():
    # daily snapshots of a (fails on day 10), b (fails on day 30, after the cutoff) and c (never)
    days = list(range(20))
    keys = pl.DataFrame(
        {"unit_id": [u for u in "abc" for _ in days], "ts": [T0 + timedelta(days=d) for _ in "abc" for d in days]}
    ).with_columns(pl.col("ts").cast(UTC_TS))
    failures = pl.DataFrame(
        {"unit_id": ["a", "b"], "failed_at": [T0 + timedelta(days=10), T0 + timedelta(days=30)]}
    ).with_columns(pl.col("failed_at").cast(UTC_TS))
    until = T0 + timedelta(days=20)
    labelled = labelled_until(keys, failures, ["24h"], until, weighted=True)
    rows, y, w = horizon_targets(labelled, ["24h"], None)["24h"]
    ttf = labelled.get_column(TIME_TO_FAILURE).to_numpy()[rows]
    unit, day = labelled.get_column("unit_id").to_numpy()[rows], labelled.get_column("ts").dt.day().to_numpy()[rows]

    hard = hard_negative_rows(y, ttf, 24.0, window=3.0)
    # a's snapshots 2 and 3 days before its failure; never b's (its failure is not known yet)
    assert sorted(day[hard] - 1) == [7, 8] and set(unit[hard]) == {"a"}
    pos_weight, plain = class_weights(y, w, ttf, 24.0, 10.0)
    _, weighted = class_weights(y, w, ttf, 24.0, 10.0, strength=2.0, window=3.0)
    assert np.array_equal(plain, np.where(y > 0, pos_weight, 1.0))
    assert np.dot(w[hard], weighted[hard]) == pytest.approx(2.0 * np.dot(w[y > 0], weighted[y > 0]))
    assert np.array_equal(weighted[~hard], plain[~hard])  # every other row as before
    with pytest.raises(ValueError, match="window"):
        class_weights(y, w, ttf, 24.0, 10.0, strength=1.0, window=1.0)


def test_the_weighted_model_ranks_the_rows_long_before_a_failure_lower():
    fleet = synthetic_fleet(np.random.default_rng(11), units=80, days=18)
    known = labelled_until(fleet.features, fleet.failures, ["24h"]).filter(pl.col(label_column("24h")).is_not_null())
    y = known.get_column(label_column("24h")).to_numpy().astype(float)
    hard = hard_negative_rows(y, known.get_column(TIME_TO_FAILURE).to_numpy(), 24.0, 6.0)
    ratio = {}
    for k in (0.0, 3.0):
        model = GradientBoostedRisk(horizons=["24h"], hard_negative_weight=k).fit(fleet.features, fleet.failures)
        risk = model.predict_risk(known).get_column("risk").to_numpy()
        assert pr_auc(risk, y) > 4 * y.mean()  # still ranks the failures high
        ratio[k] = risk[y > 0].mean() / risk[hard].mean()
    # the rows 1 to 6 days ahead of a failure fall further below the rows within a day of it
    assert ratio[3.0] > 1.15 * ratio[0.0]
