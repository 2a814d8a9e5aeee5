"""Probability calibration on held-out time that keeps the model's ranking.

Platt scaling (Platt, 1999): ``P(y=1 | s) = 1 / (1 + exp(-(a * f(s) + b)))`` fitted on scores
``s`` of rows the model did not train on.  ``f`` is the identity for a raw margin (the
log-odds a booster outputs before its sigmoid: no probability is clipped, so the top of
the ranking stays spread out instead of tying at 1.0), the logit for probability-like
scores or ``log`` for positive severities.

The fit is a maximum a posteriori estimate with a Gaussian prior that keeps the slope near
``prior_slope`` (1: the model's margins are already log-odds) and the intercept near the
base rate of the calibration rows; with a handful of held-out failures the prior
dominates, with many the data do.  The slope is kept in ``[MIN_SLOPE, MAX_SLOPE]``: the map
is strictly increasing, so the ranking (and every alert-budget operating point) is
unchanged by calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

_EPS = 1e-12
# A slope this steep means the held-out classes separate; steeper adds nothing but overflow.
MAX_SLOPE = 20.0
# Calibration never reverses or flattens the ranking.
MIN_SLOPE = 0.05


def logit(p: np.ndarray) -> np.ndarray:
    """Log-odds of probabilities, kept finite at 0 and 1."""
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.log(p) - np.log1p(-p)


def _transform(score: np.ndarray, link: str) -> np.ndarray:
    score = np.asarray(score, dtype=np.float64)
    if link == "logit":
        return logit(score)
    if link == "log":
        return np.log(np.maximum(score, _EPS))
    if link in ("identity", "margin"):
        return score
    raise ValueError(f"unknown calibration link {link!r} (margin, logit, log, identity)")


def _logit(p: float) -> float:
    p = float(np.clip(p, _EPS, 1 - _EPS))
    return float(np.log(p / (1 - p)))


@dataclass
class PlattCalibrator:
    """Logistic calibration of a score with a prior on slope and intercept.

    Parameters
    ----------
    link
        ``"margin"`` (or ``"identity"``) for raw log-odds margins, ``"logit"`` for scores
        in (0, 1), ``"log"`` for positive severities.
    prior_slope
        Centre of the slope's prior.
    slope_sd, intercept_sd
        Standard deviations of the Gaussian priors (slope; intercept at the mean score,
        centred on the logit of the base rate).
    """

    link: str = "logit"
    prior_slope: float = 1.0
    slope_sd: float = 0.5
    intercept_sd: float = 2.0
    slope_: float = 1.0
    intercept_: float = 0.0

    def fit(self, score: np.ndarray, outcome: np.ndarray, weight: np.ndarray | None = None) -> PlattCalibrator:
        """MAP slope and intercept (damped Newton steps on the weighted log loss + prior).

        With no positive or no negative outcome the slope stays at the prior and the
        intercept at the base rate.
        """
        x = _transform(score, self.link)
        y = np.asarray(outcome, dtype=np.float64)
        w = np.ones_like(y) if weight is None else np.asarray(weight, dtype=np.float64)
        if y.size == 0 or w.sum() <= 0:
            raise ValueError("cannot calibrate on zero rows")
        rate = float(np.dot(w, y) / w.sum())
        mean_x = float(np.dot(w, x) / w.sum())
        xc = x - mean_x
        b0 = _logit(rate)
        if y.min() == y.max() or np.ptp(x) == 0:
            self.slope_, self.intercept_ = float(self.prior_slope), b0 - self.prior_slope * mean_x
            return self
        # Platt's target smoothing keeps the fit finite when the classes separate.
        n_pos, n_neg = np.dot(w, y), np.dot(w, 1 - y)
        target = np.where(y > 0.5, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
        prec_a, prec_b = 1 / self.slope_sd**2, 1 / self.intercept_sd**2

        def loss(a_: float, b_: float) -> float:
            z = a_ * xc + b_
            data = np.dot(w, np.logaddexp(0, z) - target * z)
            return float(data + 0.5 * prec_a * (a_ - self.prior_slope) ** 2 + 0.5 * prec_b * (b_ - b0) ** 2)

        a, b = float(self.prior_slope), b0
        current = loss(a, b)
        for _ in range(100):
            p = expit(a * xc + b)
            r = w * (p - target)
            h = w * p * (1 - p)
            g_a = np.dot(xc, r) + prec_a * (a - self.prior_slope)
            g_b = r.sum() + prec_b * (b - b0)
            h_aa = np.dot(h * xc, xc) + prec_a
            h_ab = np.dot(h, xc)
            h_bb = h.sum() + prec_b
            det = h_aa * h_bb - h_ab * h_ab
            if det <= 0:
                break
            step_a = (h_bb * g_a - h_ab * g_b) / det
            step_b = (h_aa * g_b - h_ab * g_a) / det
            scale = 1.0
            while scale > 1e-6:
                trial_a = float(np.clip(a - scale * step_a, MIN_SLOPE, MAX_SLOPE))
                trial_b = b - scale * step_b
                trial = loss(trial_a, trial_b)
                if trial <= current:
                    break
                scale /= 2
            else:
                break
            converged = abs(trial_a - a) + abs(trial_b - b) < 1e-10
            a, b, current = trial_a, trial_b, trial
            if converged:
                break
        self.slope_ = float(a)
        self.intercept_ = float(b - a * mean_x)
        return self

    def predict(self, score: np.ndarray) -> np.ndarray:
        return expit(self.slope_ * _transform(score, self.link) + self.intercept_)

    def shifted_to_mean(self, score: np.ndarray, target: float, weight: np.ndarray | None = None) -> PlattCalibrator:
        """The same slope with the intercept moved so the mean prediction on ``score`` is
        ``target`` (uses no outcome: the scores may come from a model that saw these rows)."""
        x = self.slope_ * _transform(score, self.link)
        w = np.ones_like(x) if weight is None else np.asarray(weight, dtype=np.float64)
        lo, hi = -50.0, 50.0
        for _ in range(100):  # the mean is increasing in the intercept: bisection
            mid = (lo + hi) / 2
            if np.average(expit(x + mid), weights=w) < target:
                lo = mid
            else:
                hi = mid
        return PlattCalibrator(
            link=self.link,
            prior_slope=self.prior_slope,
            slope_sd=self.slope_sd,
            intercept_sd=self.intercept_sd,
            slope_=self.slope_,
            intercept_=(lo + hi) / 2,
        )

    def to_dict(self) -> dict:
        return {
            "link": self.link,
            "slope": self.slope_,
            "intercept": self.intercept_,
            "prior_slope": self.prior_slope,
            "slope_sd": self.slope_sd,
            "intercept_sd": self.intercept_sd,
        }

    @classmethod
    def from_dict(cls, data: dict) -> PlattCalibrator:
        priors = {k: float(data[k]) for k in ("prior_slope", "slope_sd", "intercept_sd") if k in data}
        return cls(link=data["link"], slope_=float(data["slope"]), intercept_=float(data["intercept"]), **priors)


def uncalibrated(shift: float = 0.0) -> PlattCalibrator:
    """The rank-preserving map ``sigmoid(margin - shift)`` used when no held-out failures
    are available to calibrate on (``shift`` undoes a known class weighting: ``log w``)."""
    return PlattCalibrator(link="margin", slope_=1.0, intercept_=-float(shift))
