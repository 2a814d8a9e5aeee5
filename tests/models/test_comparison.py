"""Champion against challenger: trained before the window, paired unit bootstrap, guardrails."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl

from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.models.estimators import bundle as bundle_module
from foreshock.models.evaluation.comparison import (
    ReviewSettings,
    bootstrap,
    check_guardrails,
    fit_before_window,
    training_cut,
    unit_table,
)
from foreshock.models.evaluation.metrics import snapshot_metrics
from tests.models.synthetic_fleet import T0, synthetic_fleet

HORIZON = "24h"


def window_case(rng, units: int = 120, days: int = 12):
    """A window of hourly risks: failing units rise before their failure, others stay low."""
    hours = days * 24
    rows, failures = [], []
    for u in range(units):
        unit = f"u{u:03d}"
        fail_h = int(rng.integers(48, hours)) if rng.random() < 0.25 else None
        for h in range(hours if fail_h is None else fail_h):
            near = fail_h is not None and fail_h - h <= 30
            signal = 0.6 + 0.3 * rng.random() if near else 0.2 * rng.random()
            rows.append({"unit_id": unit, "ts": T0 + timedelta(hours=h), "signal": signal})
        if fail_h is not None:
            failures.append({"unit_id": unit, "failed_at": T0 + timedelta(hours=fail_h, minutes=30)})
    frame = pl.DataFrame(rows).with_columns(pl.col("ts").cast(UTC_TS))
    fails = pl.DataFrame(failures).with_columns(pl.col("failed_at").cast(UTC_TS))
    return frame, fails


def test_a_constant_base_rate_predictor_fails_the_base_rate_guardrail(rng):
    config = load_config()
    settings = ReviewSettings.from_config(config)
    frame, fails = window_case(rng)
    informed = frame.select("unit_id", "ts", pl.col("signal").alias("risk"))
    base_rate = snapshot_metrics(informed, fails, HORIZON)["failure_rate"]
    constant = frame.select("unit_id", "ts", pl.lit(base_rate).alias("risk"))
    for series, should_pass in ((constant, False), (informed, True)):
        table = unit_table(series, fails, HORIZON, config)
        intervals = bootstrap(table, None, settings.bootstrap, settings.confidence)
        calibration = snapshot_metrics(series, fails, HORIZON)["calibration_error"]
        checks = {c.name: c for c in check_guardrails(intervals, calibration, settings)}
        assert checks["PR-AUC above the base rate"].passed is should_pass
    # The constant predictor is well calibrated: the calibration guardrail alone lets it through.
    assert snapshot_metrics(constant, fails, HORIZON)["calibration_error"] <= settings.max_calibration_error


def test_guardrails_read_the_interval_not_the_point(rng):
    config = load_config()
    settings = ReviewSettings.from_config(config)
    frame, fails = window_case(rng)
    good = frame.select("unit_id", "ts", pl.col("signal").alias("risk"))
    same = unit_table(good, fails, HORIZON, config)
    intervals = bootstrap(same, same, 100, 0.95)
    diff = intervals["difference"]["recall"]
    assert (diff.estimate, diff.low, diff.high) == (0.0, 0.0, 0.0)  # paired: the same draw for both
    checks = {c.name: c for c in check_guardrails(intervals, 0.01, settings)}
    assert checks["recall at drain budget"].passed and checks["precision at drain budget"].passed
    # A challenger whose ranking is reversed catches far fewer: the whole interval is a drop.
    reversed_ = unit_table(good.with_columns((1.0 - pl.col("risk")).alias("risk")), fails, HORIZON, config)
    worse = bootstrap(reversed_, same, 100, 0.95)
    assert worse["difference"]["recall"].high < 0
    checks = {c.name: c for c in check_guardrails(worse, 0.01, settings)}
    assert not checks["recall at drain budget"].passed


def test_the_review_challenger_is_trained_before_the_window(rng, monkeypatch):
    fleet = synthetic_fleet(rng, units=48, days=16)
    config = load_config()
    window_start = T0 + timedelta(days=11)
    seen = {}
    real_fit = bundle_module.fit_models

    def spy(frame, failures, factories, until):
        seen.update(last_ts=frame.get_column("ts").max(), last_failure=failures.get_column("failed_at").max())
        seen["until"] = until
        return real_fit(frame, failures, factories, until)

    monkeypatch.setattr(bundle_module, "fit_models", spy)
    challenger = fit_before_window(fleet.features, fleet.failures, config, window_start, "72h")
    assert seen["last_ts"] < training_cut(window_start, "72h") == window_start - timedelta(hours=72)
    assert seen["last_failure"] <= window_start and seen["until"] == window_start
    assert challenger.trained_range[1] == window_start
    # ... and it scores the window it never saw.
    window = fleet.features.filter(pl.col("ts") >= pl.lit(window_start).cast(UTC_TS))
    scores = challenger.score(window)
    assert scores.height > 0 and np.isfinite(scores.get_column("risk").to_numpy()).all()


def test_intervals_hold_their_point_estimates_and_widen_with_confidence(rng):
    config = load_config()
    frame, fails = window_case(rng)
    good = unit_table(frame.select("unit_id", "ts", pl.col("signal").alias("risk")), fails, HORIZON, config)
    noisy = unit_table(
        frame.select("unit_id", "ts", (pl.col("signal") + pl.lit(rng.random(frame.height))).alias("risk")),
        fails,
        HORIZON,
        config,
    )
    wide = bootstrap(noisy, good, 200, 0.95, seed=3)
    narrow = bootstrap(noisy, good, 200, 0.5, seed=3)
    for role, metrics in wide.items():
        for metric, interval in metrics.items():
            assert interval.low <= interval.estimate <= interval.high, (role, metric, interval)
            inner = narrow[role][metric]
            assert interval.low <= inner.low <= inner.high <= interval.high
    assert wide["difference"]["recall"].high > wide["difference"]["recall"].low  # not degenerate
    # The point estimates are the unit table's totals: recall = caught / failures over all units.
    assert wide["champion"]["recall"].estimate == good.caught.sum() / good.failures.sum()


def test_the_review_keys_of_the_configuration_set_the_guardrails(rng):
    frame, fails = window_case(rng)
    base = load_config()
    good = unit_table(frame.select("unit_id", "ts", pl.col("signal").alias("risk")), fails, HORIZON, base)
    bad = unit_table(frame.select("unit_id", "ts", (1.0 - pl.col("signal")).alias("risk")), fails, HORIZON, base)

    def checks(**review):
        settings = ReviewSettings.from_config(base.with_overrides({"review": review}))
        intervals = bootstrap(bad, good, settings.bootstrap, settings.confidence)
        return {c.name: c.passed for c in check_guardrails(intervals, 0.01, settings)}

    default = checks()
    assert not default["recall at drain budget"] and not default["PR-AUC above the base rate"]
    tolerant = checks(max_recall_drop=1.0, max_precision_drop=1.0, min_pr_auc_lift=0.0)
    assert tolerant["recall at drain budget"] and tolerant["precision at drain budget"]
    assert tolerant["PR-AUC above the base rate"]
    assert not checks(max_calibration_error=0.001)["calibration error"]
