r"""Survival risk: a Cox model with time-varying covariates on start/stop intervals.

Each feature snapshot of a unit's life covers the interval from its age at the snapshot to
its age at the next snapshot (or the failure, or the training cutoff); the interval ends
in an event when the life ends in a failure there.  lifelines' ``CoxTimeVaryingFitter``
estimates the log hazard ratios :math:`\beta`; the probability of failing within a horizon
:math:`h` for a unit at age :math:`t` with covariates :math:`z` is

.. math::

    P(T \le t + h \mid T > t, z) = 1 - \exp\big(-(H_0(t + h) - H_0(t))\, e^{\beta^\top z}\big)

with :math:`H_0` the baseline cumulative hazard.  By default (``baseline_knots=1``) it is
the maximum-likelihood constant-rate :math:`H_0(t) = \lambda_0 t`, :math:`\lambda_0 =
\text{events} / \sum_i e^{\beta^\top z_i} (\text{stop}_i - \text{start}_i)`: a backtest spans
weeks of a fleet installed over years, so each age is seen by a handful of units (the
intervals are left-truncated) and Breslow's age-shaped staircase from a few dozen
failures is noise.  With more knots, Breslow's estimator is smoothed linearly over that
many equal-width age bins and extended at its mean rate.  Because :math:`H_0` never
decreases, the probability is monotone in the horizon.

Stability (docs/design.md, pitfalls): heavy-tailed non-negative covariates (error counts: skewness
above 2) are log-compressed (``log1p``) and every covariate is standardised; constant and near-duplicate columns are dropped;
at most ``max_features`` covariates are kept, chosen by their standardised difference
between snapshots that precede a failure and those that do not; the penalizer stays at or
below 1e-4 because a stronger one shrinks real effects towards nothing when there are
many intervals and few events.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from foreshock.contract import label_column, weight_column
from foreshock.features.labels import outcome_labels
from foreshock.models.estimators.base import (
    RISK_SCHEMA,
    feature_matrix,
    frame_feature_columns,
    horizon_hours,
    horizon_names,
    risk_frame,
    sample_weights,
    top_contributions,
)
from foreshock.models.estimators.recipes import recipe_default
from foreshock.models.estimators.training import intervals_until

MAX_PENALIZER = 1e-4
_Z_CLIP = 8.0


def compress(x: np.ndarray, columns: np.ndarray | None = None) -> np.ndarray:
    """``sign(x) * log1p(|x|)`` on the chosen columns (all by default): keeps order and
    sign, tames heavy tails."""
    out = np.array(x, dtype=np.float64, copy=True)
    mask = np.ones(out.shape[1], dtype=bool) if columns is None else np.asarray(columns, dtype=bool)
    out[:, mask] = np.sign(out[:, mask]) * np.log1p(np.abs(out[:, mask]))
    return out


# Columns per block of the column statistics: a block's temporaries stay in cache, where a
# whole 10^5 x 400 matrix's would be allocated (page-faulted) and streamed several times.
# Every column's sums run down its rows in the same order either way: the same values.
_BLOCK_COLUMNS = 32


def _nan_moments(x: np.ndarray, third: bool = False) -> tuple[np.ndarray, ...]:
    """Per column, ignoring NaN: mean, standard deviation (and the mean cubed deviation).

    The same sums numpy's ``nanmean`` / ``nanstd`` do (so the same values), with one
    NaN mask and one deviation array for all of them instead of a copy per call,
    :data:`_BLOCK_COLUMNS` columns at a time."""
    if x.shape[1] <= _BLOCK_COLUMNS:
        return _block_moments(x, third)
    parts = [_block_moments(x[:, j : j + _BLOCK_COLUMNS], third) for j in range(0, x.shape[1], _BLOCK_COLUMNS)]
    return tuple(np.concatenate(values) for values in zip(*parts))


def _block_moments(x: np.ndarray, third: bool) -> tuple[np.ndarray, ...]:
    with np.errstate(invalid="ignore", divide="ignore"):
        missing = np.isnan(x)
        count = np.sum(~missing, axis=0)
        deviation = np.where(missing, 0.0, x)
        mean = np.sum(deviation, axis=0) / count
        np.subtract(deviation, mean, out=deviation)
        deviation[missing] = 0.0
        std = np.sqrt(np.sum(deviation * deviation, axis=0) / count)
        if not third:
            return mean, std
        cube = deviation * deviation * deviation  # (numpy's ** 3 calls pow: several times slower)
        undefined = missing | np.isnan(cube)  # NaN cubes are left out, as nanmean does
        cube[undefined] = 0.0
        return mean, std, np.sum(cube, axis=0) / np.sum(~undefined, axis=0)


def heavy_tailed(x: np.ndarray) -> np.ndarray:
    """Columns that are non-negative with skewness above 2 (counts of rare errors)."""
    out = np.zeros(x.shape[1], dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-null columns
        for j in range(0, x.shape[1], _BLOCK_COLUMNS):
            block = x[:, j : j + _BLOCK_COLUMNS]
            low = np.nanmin(np.where(np.isfinite(block), block, np.inf), axis=0)
            candidate = low >= 0  # only non-negative columns can be heavy-tailed counts
            _, std, third = _block_moments(block[:, candidate], third=True)
            skew = third / np.where(std > 0, std, np.nan) ** 3
            out[j : j + _BLOCK_COLUMNS][candidate] = np.nan_to_num(skew, nan=0.0) > 2.0
    return out


def life_age_hours(frame: pl.DataFrame) -> np.ndarray:
    """Hours since the start of each row's life (``life_start``; else the life's first snapshot)."""
    if "life_start" in frame.columns:
        start = pl.col("life_start")
    else:
        keys = ["unit_id", "life"] if "life" in frame.columns else ["unit_id"]
        start = pl.col("ts").min().over(keys)
    age = frame.select(((pl.col("ts") - start).dt.total_seconds(fractional=True) / 3600.0).alias("age"))
    return np.maximum(age.get_column("age").fill_null(0.0).to_numpy(), 0.0)


@dataclass
class CoxTimeVaryingRisk:
    """Cox proportional hazards with time-varying covariates (lifelines), as a risk model.

    Defaults are the recipe's, ``models/cox.toml``.

    Parameters
    ----------
    horizons
        Horizons, e.g. ``["24h", "72h"]``.
    penalizer
        L2 penalizer of lifelines (at most 1e-4, see the module docstring).
    max_features
        Covariates kept after screening.
    max_correlation
        A candidate more correlated than this with a kept covariate is dropped.
    screening_horizon
        Horizon whose label screens candidate covariates (default: the longest).
    baseline_knots
        1: constant baseline hazard rate; more: Breslow's H0 linear over that many bins.
    max_log_hazard_ratio
        A covariate whose fitted log hazard ratio per standard deviation exceeds this is a
        sign of quasi-separation (a rare count seen only before failures): it is dropped
        and the model refitted, at most ``max_separation_passes`` fits in all.
    screening_rows
        Rows (besides every positive one) the covariates are screened on.
    """

    horizons: list[str]
    penalizer: float = recipe_default("cox", "penalizer")
    max_features: int = recipe_default("cox", "max_features")
    max_correlation: float = recipe_default("cox", "max_correlation")
    screening_horizon: str | None = None
    baseline_knots: int = recipe_default("cox", "baseline_knots")
    max_log_hazard_ratio: float = recipe_default("cox", "max_log_hazard_ratio")
    max_separation_passes: int = recipe_default("cox", "max_separation_passes")
    screening_rows: int = recipe_default("cox", "screening_rows")
    kind: str = "cox"
    feature_names_: list[str] = field(default_factory=list)
    centers_: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scales_: np.ndarray = field(default_factory=lambda: np.zeros(0))
    coefficients_: np.ndarray = field(default_factory=lambda: np.zeros(0))
    knots_h_: np.ndarray = field(default_factory=lambda: np.zeros(0))
    knots_cum_hazard_: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tail_rate_: float = 0.0
    compressed_: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    summary_: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.horizons = horizon_names(self.horizons)
        if not 0 <= self.penalizer <= MAX_PENALIZER:
            raise ValueError(
                f"penalizer {self.penalizer} outside [0, {MAX_PENALIZER}]: a stronger L2 penalty erases the "
                "effects of rare failures (docs/design.md, known pitfalls)"
            )

    # -- covariates --------------------------------------------------------------------
    def _standardised(
        self, frame: pl.DataFrame, names: list[str], centers: np.ndarray, scales: np.ndarray
    ) -> np.ndarray:
        x = compress(feature_matrix(frame, names), self.compressed_)
        z = (x - centers) / scales
        return np.clip(np.nan_to_num(z, nan=0.0), -_Z_CLIP, _Z_CLIP)

    def _screen(self, x: np.ndarray, y: np.ndarray, names: list[str]) -> list[int]:
        """Indices of covariates to keep: informative, not constant, not near-duplicates."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-null columns
            return self._screen_columns(x, y)

    def _screen_columns(self, x: np.ndarray, y: np.ndarray) -> list[int]:
        centers, scales = _nan_moments(x)
        usable = np.isfinite(scales) & (scales > 1e-9)
        z = np.nan_to_num((x - centers) / np.where(usable, scales, 1.0), nan=0.0)
        pos = y > 0.5
        if pos.any() and (~pos).any():
            effect = np.abs(z[pos].mean(axis=0) - z[~pos].mean(axis=0))
        else:
            effect = np.zeros(x.shape[1])
        effect[~usable] = -1.0
        chosen: list[int] = []
        for j in np.argsort(-effect, kind="stable"):
            if effect[j] < 0 or len(chosen) >= self.max_features or (effect[j] == 0 and chosen):
                break
            if chosen:
                corr = np.abs([np.corrcoef(z[:, j], z[:, k])[0, 1] for k in chosen])
                if np.nanmax(corr) > self.max_correlation:
                    continue
            chosen.append(int(j))
        return chosen

    # -- estimator ---------------------------------------------------------------------
    def fit(self, frame: pl.DataFrame, failures: pl.DataFrame, *, until: datetime | None = None) -> CoxTimeVaryingRisk:
        """Fit on the intervals known at ``until`` (default: the last snapshot).

        ``frame`` may carry ``sample_weight`` (subsampled healthy rows weighted by the
        inverse rate: the partial likelihood then runs over sampled risk sets, each
        interval weighted) and ``censored_at`` (drains end the observation).
        """
        if until is None:
            until = frame.get_column("ts").max()
        candidates = frame_feature_columns(frame)
        if not candidates:
            raise ValueError("no numeric feature columns to train on")
        compressed, chosen = self._screen_sample(frame, failures, until, candidates)
        intervals = intervals_until(frame, failures, until)
        event = intervals.get_column("event").to_numpy().astype(bool)
        if not event.any():
            raise ValueError("no failure among the training intervals; cannot fit a Cox model")
        rows = intervals.get_column("row").to_numpy()
        weight = sample_weights(frame)[rows]
        # Only the screened covariates are materialised for the intervals (memory: a fleet
        # has hundreds of feature columns and 10^5-10^6 intervals).
        pool = {j: i for i, j in enumerate(chosen)}
        x_pool = compress(feature_matrix(frame, [candidates[j] for j in chosen])[rows], compressed[chosen])
        start = intervals.get_column("start").to_numpy()
        stop = intervals.get_column("stop").to_numpy()
        ids = intervals.select(pl.format("{}#{}", "unit_id", "life")).to_series().to_numpy()
        del intervals

        # Drop quasi-separated covariates and refit, at most ``max_separation_passes`` fits.
        # The loop only ever shrinks ``chosen`` before a fit, so what is saved (names,
        # coefficients, standardisation, compression mask) is always what was fitted.
        passes = 0
        while True:
            fitter, chosen, centers, scales, z = self._fit_lifelines(
                chosen, pool, x_pool, ids, start, stop, event, weight
            )
            passes += 1
            beta = fitter.params_.to_numpy(dtype=np.float64) if chosen else np.zeros(0)
            separated = [j for j, b in zip(chosen, beta) if abs(b) > self.max_log_hazard_ratio]
            if not separated or len(separated) == len(chosen) or passes >= self.max_separation_passes:
                break
            chosen = [j for j in chosen if j not in separated]
        names = [candidates[j] for j in chosen]
        self.feature_names_ = names
        self.centers_, self.scales_, self.coefficients_ = centers, scales, beta
        self.compressed_ = compressed[chosen] if chosen else np.zeros(0, dtype=bool)
        self._fit_baseline(start, stop, event, z @ beta if names else np.zeros(len(start)), weight)
        self.summary_ = {
            "n_intervals": int(len(start)),
            "n_events": int(event.sum()),
            "separation_passes": passes,
            "log_hazard_ratio": dict(zip(names, map(float, beta))),
            "penalizer": self.penalizer,
            "baseline_rate_per_h": self.tail_rate_,
        }
        return self

    def _screen_sample(
        self, frame: pl.DataFrame, failures: pl.DataFrame, until: datetime, candidates: list[str]
    ) -> tuple[np.ndarray, list[int]]:
        """Heavy-tail mask and screened covariates from every positive row and at most
        ``screening_rows`` others (a fixed-seed sample: screening needs means, not every row)."""
        screen_h = horizon_names([self.screening_horizon])[0] if self.screening_horizon else self.horizons[-1]
        labels = outcome_labels(frame, failures, [screen_h], until)
        y = labels.get_column(label_column(screen_h)).fill_null(False).to_numpy()
        usable = labels.get_column(weight_column(screen_h)).to_numpy() > 0
        negatives = np.flatnonzero(usable & ~y)
        if negatives.size > self.screening_rows:
            negatives = np.random.default_rng(0).choice(negatives, self.screening_rows, replace=False)
        rows = np.sort(np.concatenate([np.flatnonzero(usable & y), negatives]))
        x = feature_matrix(frame[rows], candidates)
        compressed = heavy_tailed(x)
        return compressed, self._screen(compress(x, compressed), y[rows].astype(float), candidates)

    def _fit_lifelines(self, chosen, pool, x_pool, ids, start, stop, event, weight):
        """lifelines on the chosen covariates; halves them until the Newton steps converge."""
        from lifelines import CoxTimeVaryingFitter
        from lifelines.exceptions import ConvergenceError

        while True:
            x = x_pool[:, [pool[j] for j in chosen]]
            centers = np.nanmean(x, axis=0) if chosen else np.zeros(0)
            scales = np.nanstd(x, axis=0) if chosen else np.zeros(0)
            scales = np.where(np.isfinite(scales) & (scales > 1e-9), scales, 1.0)
            z = np.clip(np.nan_to_num((x - centers) / scales, nan=0.0), -_Z_CLIP, _Z_CLIP)
            data = pd.DataFrame(z, columns=[f"x{i}" for i in range(len(chosen))])
            data["id"], data["start"], data["stop"], data["event"] = ids, start, stop, event
            data["weight"] = weight
            fitter = CoxTimeVaryingFitter(penalizer=self.penalizer)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # non-integer weights are intended
                    fitter.fit(
                        data, id_col="id", event_col="event", start_col="start", stop_col="stop", weights_col="weight"
                    )
                break
            except (ConvergenceError, np.linalg.LinAlgError) as exc:
                if len(chosen) <= 1:
                    raise ValueError(f"Cox model did not converge even with one covariate: {exc}") from exc
                chosen = chosen[: max(1, len(chosen) // 2)]  # fewer covariates, steadier fit
        return fitter, chosen, centers, scales, z

    def _fit_baseline(
        self, start: np.ndarray, stop: np.ndarray, event: np.ndarray, lp: np.ndarray, weight: np.ndarray
    ) -> None:
        """H0 on knots: a constant rate (one bin) or Breslow's estimator over equal bins
        (intervals weighted by their sampling weight)."""
        risk = weight * np.exp(np.clip(lp, -30, 30))
        lo, hi = float(start.min()), float(stop.max())
        span = max(hi - lo, 1e-6)
        if self.baseline_knots <= 1:
            rate = float(np.sum(weight[event]) / max(np.sum(risk * (stop - start)), 1e-300))
            self.knots_h_ = np.array([lo, hi])
            self.knots_cum_hazard_ = np.array([0.0, rate * span])
            self.tail_rate_ = rate
            return
        event_times = np.sort(np.unique(stop[event]))
        order_start, order_stop = np.argsort(start), np.argsort(stop)
        cum_start = np.concatenate([[0.0], np.cumsum(risk[order_start])])
        cum_stop = np.concatenate([[0.0], np.cumsum(risk[order_stop])])
        sorted_start, sorted_stop = start[order_start], stop[order_stop]
        increments = []
        for t in event_times:
            # at risk at t: start < t <= stop
            began = cum_start[np.searchsorted(sorted_start, t, side="left")]
            ended = cum_stop[np.searchsorted(sorted_stop, t, side="left")]
            deaths = float(np.sum(weight[event & (stop == t)]))
            increments.append(deaths / max(began - ended, 1e-300))
        cumulative = np.concatenate([[0.0], np.cumsum(increments)])
        knots = np.linspace(lo, hi, self.baseline_knots + 1)
        self.knots_h_ = knots
        self.knots_cum_hazard_ = cumulative[np.searchsorted(event_times, knots, side="right")]
        self.tail_rate_ = float(self.knots_cum_hazard_[-1] / span)

    def baseline_cumulative_hazard(self, age_h: np.ndarray) -> np.ndarray:
        """Smoothed H0 at ages (hours of life); linear at the mean rate outside the knots."""
        age_h = np.asarray(age_h, dtype=np.float64)
        lo, hi = self.knots_h_[0], self.knots_h_[-1]
        inside = np.interp(np.clip(age_h, lo, hi), self.knots_h_, self.knots_cum_hazard_)
        return inside + self.tail_rate_ * (np.maximum(age_h - hi, 0.0) - np.maximum(lo - age_h, 0.0))

    def log_partial_hazard(self, frame: pl.DataFrame) -> np.ndarray:
        """:math:`\\beta^\\top z` per row (0 = the average training snapshot)."""
        self._check()
        if not self.feature_names_:
            return np.zeros(frame.height)
        return self._standardised(frame, self.feature_names_, self.centers_, self.scales_) @ self.coefficients_

    def _check(self) -> None:
        if self.knots_h_.size == 0:
            raise RuntimeError("CoxTimeVaryingRisk is not fitted: call fit() or load()")

    def predict_risk(self, frame: pl.DataFrame) -> pl.DataFrame:
        self._check()
        age = life_age_hours(frame)
        partial = np.exp(np.clip(self.log_partial_hazard(frame), -30, 30))
        h0_now = self.baseline_cumulative_hazard(age)
        parts = []
        for h in self.horizons:
            increase = self.baseline_cumulative_hazard(age + horizon_hours(h)) - h0_now
            parts.append(risk_frame(frame, h, -np.expm1(-increase * partial)))
        return pl.concat(parts) if parts else pl.DataFrame(schema=RISK_SCHEMA)

    def explain(self, frame: pl.DataFrame, top: int = 3) -> pl.DataFrame:
        """The largest terms :math:`\\beta_j z_j` of the linear predictor."""
        self._check()
        z = self._standardised(frame, self.feature_names_, self.centers_, self.scales_)
        values = feature_matrix(frame, self.feature_names_)
        terms = z * self.coefficients_
        return pl.concat([top_contributions(frame, h, self.feature_names_, values, terms, top) for h in self.horizons])

    def save(self, path: Path) -> None:
        self._check()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {
            "kind": self.kind,
            "horizons": self.horizons,
            "penalizer": self.penalizer,
            "max_features": self.max_features,
            "max_correlation": self.max_correlation,
            "screening_horizon": self.screening_horizon,
            "baseline_knots": self.baseline_knots,
            "max_log_hazard_ratio": self.max_log_hazard_ratio,
            "max_separation_passes": self.max_separation_passes,
            "screening_rows": self.screening_rows,
            "feature_names_": self.feature_names_,
            "centers_": self.centers_.tolist(),
            "scales_": self.scales_.tolist(),
            "coefficients_": self.coefficients_.tolist(),
            "knots_h_": self.knots_h_.tolist(),
            "knots_cum_hazard_": self.knots_cum_hazard_.tolist(),
            "tail_rate_": self.tail_rate_,
            "compressed_": self.compressed_.tolist(),
            "summary_": self.summary_,
        }
        (path / "cox.json").write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, path: Path) -> CoxTimeVaryingRisk:
        state = json.loads((Path(path) / "cox.json").read_text())
        model = cls(
            horizons=state["horizons"],
            penalizer=state["penalizer"],
            max_features=state["max_features"],
            max_correlation=state["max_correlation"],
            screening_horizon=state["screening_horizon"],
            baseline_knots=state["baseline_knots"],
            max_log_hazard_ratio=state["max_log_hazard_ratio"],
            max_separation_passes=int(state.get("max_separation_passes", 4)),
            screening_rows=int(state.get("screening_rows", 50_000)),
        )
        model.feature_names_ = list(state["feature_names_"])
        for name in ("centers_", "scales_", "coefficients_", "knots_h_", "knots_cum_hazard_"):
            setattr(model, name, np.asarray(state[name], dtype=np.float64))
        model.tail_rate_ = float(state["tail_rate_"])
        model.compressed_ = np.asarray(state["compressed_"], dtype=bool)
        model.summary_ = state["summary_"]
        return model
