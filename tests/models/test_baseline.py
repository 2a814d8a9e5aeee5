"""Threshold rules: configurable, severity-ranked, fire where operators expect."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.models.estimators.baseline import ThresholdBaseline
from tests.models.synthetic_fleet import T0, synthetic_fleet


def snapshot(**features) -> pl.DataFrame:
    row = {"unit_id": "gpu-node001-gpu0", "ts": datetime(2026, 1, 5, tzinfo=UTC), **features}
    return pl.DataFrame([row]).with_columns(pl.col("ts").cast(UTC_TS))


GPU_COLUMNS = {
    "ecc_sbe_volatile_total_increase_1d": 0.0,
    "ecc_sbe_volatile_total_increase_1h": 0.0,
    "ecc_dbe_volatile_total_increase_1d": 0.0,
    "retired_pages_sbe_last": 0.0,
    "retired_pages_dbe_last": 0.0,
    "remapped_rows_correctable_last": 0.0,
    "remapped_rows_pending_max_1d": 0.0,
    "xid_79_count_1d": 0.0,
    "xid_13_count_1d": 0.0,
}


class TestThresholdBaseline:
    def fitted(self, rng, rules=None):
        fleet = synthetic_fleet(rng, units=40, days=12)
        frame = fleet.features.with_columns(
            [pl.lit(0.0).alias(c) for c in GPU_COLUMNS if c not in fleet.features.columns]
        )
        return ThresholdBaseline(horizons=["24h"], rules=rules or {}).fit(frame, fleet.failures)

    def test_each_rule_fires_past_its_threshold(self, rng):
        model = self.fitted(rng)
        quiet = snapshot(**GPU_COLUMNS)
        assert not model.fires(quiet)[0]
        for column, value in [
            ("ecc_dbe_volatile_total_increase_1d", 1.0),  # any DBE
            ("retired_pages_dbe_last", 3.0),  # retired pages over 2
            ("remapped_rows_correctable_last", 3.0),  # remapped rows over 2
            ("remapped_rows_pending_max_1d", 1.0),  # remap pending
            ("ecc_sbe_volatile_total_increase_1d", 51.0),  # SBE over 50 a day
            ("xid_79_count_1d", 1.0),  # a listed XID
        ]:
            assert model.fires(snapshot(**{**GPU_COLUMNS, column: value}))[0], column
        assert not model.fires(snapshot(**{**GPU_COLUMNS, "retired_pages_dbe_last": 2.0}))[0]
        assert not model.fires(snapshot(**{**GPU_COLUMNS, "xid_13_count_1d": 5.0}))[0]  # application XID

    def test_thresholds_come_from_config(self, rng):
        config = load_config().with_overrides({"baseline": {"sbe_increase_per_day": 500}})
        model = ThresholdBaseline.from_config(config)
        fleet = synthetic_fleet(rng, units=40, days=12)
        model.fit(fleet.features, fleet.failures)
        sbe_100 = snapshot(**{**GPU_COLUMNS, "ecc_sbe_volatile_total_increase_1d": 100.0})
        assert not model.fires(sbe_100)[0]
        assert self.fitted(rng).fires(sbe_100)[0]

    def test_severity_ranks_further_and_faster(self, rng):
        model = self.fitted(rng)
        rows = pl.concat(
            [snapshot(**{**GPU_COLUMNS, "ecc_sbe_volatile_total_increase_1d": v}) for v in (10.0, 60.0, 600.0)]
        )
        severity = model.severity(rows)
        assert np.all(np.diff(severity) > 0)
        risk = model.predict_risk(rows).get_column("risk").to_numpy()
        assert np.all(np.diff(risk) > 0)  # calibration keeps the rules' ranking
        assert np.all((risk >= 0) & (risk <= 1))

    def test_growth_threshold_weights_a_subsampled_frame(self, rng):
        """The generic growth rule's 'usual growth' is a quantile over the fleet's rows: a
        training sample that keeps every failure-adjacent row and a tenth of the healthy
        ones (weight 10) gives about the full frame's threshold, not a far higher one."""
        from foreshock.models.estimators.base import SAMPLE_WEIGHT

        healthy, failing = 20_000, 60
        column = "widget_errors_total_increase_1d"
        frame = pl.DataFrame(
            {
                "unit_id": [f"u{i % 500}" for i in range(healthy + failing)],
                "ts": [T0 + timedelta(hours=i // 500) for i in range(healthy + failing)],
                column: np.r_[rng.exponential(2.0, healthy), rng.uniform(50, 500, failing)],
            }
        )
        near_failure = np.r_[np.zeros(healthy, bool), np.ones(failing, bool)]
        keep = near_failure | (rng.random(healthy + failing) < 0.1)
        sampled = frame.filter(pl.Series(keep)).with_columns(
            pl.Series(SAMPLE_WEIGHT, np.where(near_failure, 1.0, 10.0)[keep], dtype=pl.Float32)
        )

        def limit(part):
            model = ThresholdBaseline(horizons=["24h"], error_counters=["widget_errors_total"])
            model.resolve(part)
            (rule,) = [r for r in model.rules_ if r.name == "widget_errors_total_growth"]
            return rule.limit

        full, weighted, unweighted = limit(frame), limit(sampled), limit(sampled.drop(SAMPLE_WEIGHT))
        assert abs(weighted / full - 1) < 0.3
        assert unweighted > 3 * full

    def test_calibration_weights_a_subsampled_frame(self, rng):
        """Trained on a quarter of the rows without a failure ahead, each weighted 4 (the
        training sample of models.dataset), the rules' risk keeps the fleet's mean; unweighted
        it would roughly quadruple."""
        from foreshock.features.labels import outcome_labels
        from foreshock.models.estimators.base import SAMPLE_WEIGHT

        fleet = synthetic_fleet(rng, units=40, days=12)
        frame = fleet.features.with_columns(
            [pl.lit(0.0).alias(c) for c in GPU_COLUMNS if c not in fleet.features.columns]
        ).sort("unit_id", "ts")
        until = frame.get_column("ts").max()
        ahead = outcome_labels(frame, fleet.failures, ["24h"], until).get_column("time_to_failure_h").is_not_null()
        keep = ahead.to_numpy() | (np.random.default_rng(3).random(frame.height) < 0.25)
        sampled = frame.filter(pl.Series(keep)).with_columns(
            pl.Series(SAMPLE_WEIGHT, np.where(ahead.to_numpy(), 1.0, 4.0)[keep], dtype=pl.Float32)
        )
        full = ThresholdBaseline(horizons=["24h"]).fit(frame, fleet.failures)
        weighted = ThresholdBaseline(horizons=["24h"]).fit(sampled, fleet.failures)
        unweighted = ThresholdBaseline(horizons=["24h"]).fit(sampled.drop(SAMPLE_WEIGHT), fleet.failures)

        def mean(model):
            return model.predict_risk(frame).get_column("risk").mean()

        assert abs(mean(weighted) / mean(full) - 1) < 0.25
        assert mean(unweighted) / mean(full) > 1.5
