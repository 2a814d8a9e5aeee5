"""Platt calibration: right on average, keeps the ranking, survives separable classes."""

from __future__ import annotations

import numpy as np

from foreshock.models.estimators.calibration import PlattCalibrator


def test_recovers_true_probabilities(rng):
    logit = rng.normal(-3, 1.5, 20_000)
    truth = 1 / (1 + np.exp(-logit))
    y = (rng.random(truth.size) < truth).astype(float)
    overconfident = 1 / (1 + np.exp(-(2 * logit + 1)))  # a model twice too sure, biased up
    calibrated = PlattCalibrator().fit(overconfident, y).predict(overconfident)
    assert abs(calibrated.mean() - y.mean()) < 0.005
    assert np.max(np.abs(calibrated - truth)) < 0.05
    assert np.all(np.diff(calibrated[np.argsort(overconfident)]) >= 0)  # ranking kept


def test_separable_held_out_classes_stay_finite():
    score = np.r_[np.full(500, 0.01), np.full(5, 0.9)]
    y = np.r_[np.zeros(500), np.ones(5)]
    calibrator = PlattCalibrator().fit(score, y)
    p = calibrator.predict(np.array([0.01, 0.5, 0.9]))
    assert np.isfinite(calibrator.slope_) and abs(calibrator.slope_) <= 20
    assert 0 < p[0] < p[1] < p[2] < 1
    assert p[0] < 0.05 and p[2] > 0.5
