"""Probability calibration on held-out time.

Platt scaling (Platt, 1999): fit ``P(y=1 | s) = 1 / (1 + exp(-(a * f(s) + b)))`` on scores
``s`` of rows the model did not train on, with ``f`` the logit for probability-like scores
or ``log`` for positive severities.  Two parameters do not overfit a handful of failures
the way isotonic regression does, and the map is strictly increasing, so the ranking (and
every alert-budget operating point) of the model is unchanged by calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_EPS = 1e-7
# A slope this steep on the logit scale means the held-out classes separate; steeper adds
# nothing but overflow.
MAX_SLOPE = 20.0


def _transform(score: np.ndarray, link: str) -> np.ndarray:
    score = np.asarray(score, dtype=np.float64)
    if link == "logit":
        p = np.clip(score, _EPS, 1 - _EPS)
        return np.log(p / (1 - p))
    if link == "log":
        return np.log(np.maximum(score, _EPS))
    if link == "identity":
        return score
    raise ValueError(f"unknown calibration link {link!r} (logit, log, identity)")


@dataclass
class PlattCalibrator:
    """Logistic calibration of a score.

    Parameters
    ----------
    link
        ``"logit"`` for scores in (0, 1), ``"log"`` for positive severities,
        ``"identity"`` for raw margins.
    """

    link: str = "logit"
    slope_: float = 1.0
    intercept_: float = 0.0

    def fit(self, score: np.ndarray, outcome: np.ndarray) -> PlattCalibrator:
        """Maximum-likelihood slope and intercept (Newton steps, a tiny ridge on the slope).

        With no positive or no negative outcome the calibrator keeps the base rate.
        """
        x = _transform(score, self.link)
        y = np.asarray(outcome, dtype=np.float64)
        if y.size == 0:
            raise ValueError("cannot calibrate on zero rows")
        rate = float(np.clip(y.mean(), _EPS, 1 - _EPS))
        if y.min() == y.max() or np.ptp(x) == 0:
            self.slope_, self.intercept_ = 0.0, float(np.log(rate / (1 - rate)))
            return self
        # Centre x for a well-conditioned Newton solve; Platt's target smoothing keeps
        # the fit finite when the classes separate.
        n_pos, n_neg = y.sum(), y.size - y.sum()
        target = np.where(y > 0.5, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
        mean_x = x.mean()
        xc = x - mean_x
        a, b = 1.0, float(np.log(rate / (1 - rate)))
        ridge = 1e-6 * y.size

        def loss(a_: float, b_: float) -> float:
            z = np.clip(a_ * xc + b_, -35, 35)
            return float(np.sum(np.logaddexp(0, z) - target * z) + 0.5 * ridge * a_ * a_)

        current = loss(a, b)
        for _ in range(100):
            z = np.clip(a * xc + b, -35, 35)
            p = 1 / (1 + np.exp(-z))
            w = p * (1 - p)
            g_a = np.dot(xc, p - target) + ridge * a
            g_b = np.sum(p - target)
            h_aa = np.dot(w * xc, xc) + ridge
            h_ab = np.dot(w, xc)
            h_bb = w.sum() + 1e-12
            det = h_aa * h_bb - h_ab * h_ab
            if det <= 0:
                break
            step_a = (h_bb * g_a - h_ab * g_b) / det
            step_b = (h_aa * g_b - h_ab * g_a) / det
            # Damped Newton: halve the step until the loss falls (separable held-out
            # classes would otherwise send the slope to infinity).
            scale = 1.0
            while scale > 1e-6:
                trial_a = float(np.clip(a - scale * step_a, -MAX_SLOPE, MAX_SLOPE))
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
        z = np.clip(self.slope_ * _transform(score, self.link) + self.intercept_, -35, 35)
        return 1 / (1 + np.exp(-z))

    def to_dict(self) -> dict:
        return {"link": self.link, "slope": self.slope_, "intercept": self.intercept_}

    @classmethod
    def from_dict(cls, data: dict) -> PlattCalibrator:
        return cls(link=data["link"], slope_=float(data["slope"]), intercept_=float(data["intercept"]))
