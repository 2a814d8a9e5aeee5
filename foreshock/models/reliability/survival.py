"""Survival by cohort: Kaplan–Meier, Weibull, Cox and competing failure modes.

Each estimate reads :func:`~foreshock.models.reliability.lives.unit_lives` (with
``entry_days`` for lives observed late).  Competing failure modes are handled two ways:
cause-specific hazards (lives ending in another mode censored at that time) and
cumulative incidence (Aalen–Johansen: the probability of having failed *of this mode* by
an age, which, unlike 1 − KM of a cause-specific fit, does not pretend the other modes
could not happen).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import polars as pl
from lifelines import AalenJohansenFitter, CoxPHFitter, KaplanMeierFitter, WeibullFitter
from lifelines.exceptions import StatError


@dataclass
class CohortReliability:
    """Reliability of one cohort: KM survival at chosen ages, Weibull fit, counts."""

    cohort: str
    units: int
    failures: int
    km_survival: dict[float, float]
    km_median_days: float
    weibull_shape: float
    weibull_scale_days: float
    mttf_days: float


def cohort_reliability(
    lives: pl.DataFrame, by: str, ages_days: tuple[float, ...] = (365, 730, 1095, 1460)
) -> list[CohortReliability]:
    """Kaplan–Meier survival at ``ages_days`` and a Weibull fit per value of column ``by``.

    The Weibull shape tells the failure regime: < 1 infant mortality, ~1 random, > 1 wear-out.
    """
    out = []
    for (value,), part in lives.sort(by).group_by([by], maintain_order=True):
        durations = part["duration_days"].to_numpy()
        events = part["event"].to_numpy()
        entry = part["entry_days"].to_numpy()
        try:
            km = KaplanMeierFitter().fit(durations, events, entry=entry)
            surv = {age: float(km.survival_function_at_times(age).iloc[0]) for age in ages_days}
            median = float(km.median_survival_time_)
        except StatError:
            # late entries leave the early risk set empty: survival by age is not estimable
            surv, median = {age: float("nan") for age in ages_days}, float("nan")
        shape = scale = mttf = float("nan")
        if events.sum() >= 3:
            wf = WeibullFitter().fit(durations, events, entry=entry)
            # lifelines' WeibullFitter: S(t) = exp(-(t / lambda_) ** rho_)
            shape, scale = float(wf.rho_), float(wf.lambda_)
            mttf = float(scale * math.exp(math.lgamma(1 + 1 / shape)))  # mean of a Weibull
        out.append(
            CohortReliability(
                cohort=f"{by}={value}",
                units=part.height,
                failures=int(events.sum()),
                km_survival=surv,
                km_median_days=median,
                weibull_shape=shape,
                weibull_scale_days=scale,
                mttf_days=mttf,
            )
        )
    return out


def cox_hazard_ratios(
    lives: pl.DataFrame,
    covariates: list[str],
    penalizer: float = 1e-4,
    *,
    strata: list[str] | None = None,
    numeric: list[str] | None = None,
) -> pl.DataFrame:
    """Hazard ratios (with 95% CI) of several cohort columns fitted at once.

    Parameters
    ----------
    covariates
        Columns entered together.  Categorical ones get one indicator per level, the
        first (sorted) level the reference: ``cage_2`` is cage 2 against cage 0.
    strata
        Columns whose levels each get their own baseline hazard (no ratio estimated):
        the Titan model stratifies by batch, whose hazards are not proportional.
    numeric
        Covariates entered as numbers (one ratio per unit step) instead of levels.

    Returns
    -------
    ``covariate, hazard_ratio, ci_low, ci_high, p``, one row per estimated coefficient.
    """
    numeric = list(numeric or [])
    strata = list(strata or [])
    frame = lives.select("duration_days", "entry_days", "event", *dict.fromkeys([*covariates, *strata])).to_pandas()
    categorical = [c for c in covariates if c not in numeric]
    design = pd.get_dummies(frame[categorical].astype(str), drop_first=True, dtype=float)
    for column in numeric:
        design[column] = pd.to_numeric(frame[column]).astype(float)
    for column in strata:
        design[f"_stratum_{column}"] = frame[column].astype(str).to_numpy()
    design["duration_days"] = frame["duration_days"].to_numpy()
    design["event"] = frame["event"].to_numpy()
    fit_args = {"duration_col": "duration_days", "event_col": "event"}
    if strata:
        fit_args["strata"] = [f"_stratum_{c}" for c in strata]
    if (frame["entry_days"] > 0).any():
        design["entry_days"] = frame["entry_days"].to_numpy()
        fit_args["entry_col"] = "entry_days"
    cph = CoxPHFitter(penalizer=penalizer).fit(design, **fit_args)
    summary = cph.summary
    return pl.DataFrame(
        {
            "covariate": list(summary.index.astype(str)),
            "hazard_ratio": summary["exp(coef)"].to_numpy(),
            "ci_low": summary["exp(coef) lower 95%"].to_numpy(),
            "ci_high": summary["exp(coef) upper 95%"].to_numpy(),
            "p": summary["p"].to_numpy(),
        }
    )


def failure_rates(lives: pl.DataFrame, by: str) -> pl.DataFrame:
    """Failures per 1,000 unit-days observed, per value of ``by``, with the rate ratio to the
    rest of the fleet: the right summary for a short observation window, where survival by
    age is not estimable."""
    exposure = pl.col("duration_days") - pl.col("entry_days")
    total_events, total_days = lives["event"].sum(), lives.select(exposure.sum()).item()
    return (
        lives.group_by(by)
        .agg(pl.len().alias("lives"), pl.col("event").sum().alias("failures"), exposure.sum().alias("unit_days"))
        .with_columns((pl.col("failures") / pl.col("unit_days") * 1000).alias("per_1000_unit_days"))
        .with_columns(
            (
                pl.col("per_1000_unit_days")
                / ((total_events - pl.col("failures")) / (total_days - pl.col("unit_days")) * 1000)
            ).alias("rate_ratio_vs_rest")
        )
        .sort(by)
    )


def km_curves(lives: pl.DataFrame, by: str | None = None, points: int = 200) -> pl.DataFrame:
    """Kaplan–Meier survival curves ``cohort, age_days, survival`` (one per value of ``by``,
    or the whole fleet), on a common grid of ``points`` ages, for plotting."""
    grid = np.linspace(0.0, float(lives["duration_days"].max()), points)
    parts = lives.sort(by).group_by([by], maintain_order=True) if by else [(("fleet",), lives)]
    frames = []
    for (value,), part in parts:
        try:
            km = KaplanMeierFitter().fit(
                part["duration_days"].to_numpy(), part["event"].to_numpy(), entry=part["entry_days"].to_numpy()
            )
        except StatError:
            continue
        survival = km.survival_function_at_times(grid).to_numpy()
        frames.append(
            pl.DataFrame({"cohort": f"{by}={value}" if by else "fleet", "age_days": grid, "survival": survival})
        )
    return pl.concat(frames) if frames else pl.DataFrame(schema={"cohort": pl.String, "age_days": pl.Float64})


def cumulative_incidence(
    lives: pl.DataFrame,
    ages_days: tuple[float, ...] | None = None,
    *,
    by: str | None = None,
    seed: int = 0,
) -> pl.DataFrame:
    """Cumulative incidence of each failure mode with the others as competing risks.

    Aalen–Johansen estimator: ``CIF_k(t) = sum_{t_j <= t} S(t_j-) d_kj / n_j``, with ``S``
    the all-cause Kaplan–Meier survival.  The modes' incidences add up to ``1 - S(t)``.

    Parameters
    ----------
    lives
        :func:`unit_lives` with ``mode=None`` (every failure an event, its ``mode`` named).
    ages_days
        Ages to report; default a 50-point grid up to the longest life (for plotting).
    by
        Optional cohort column: one set of curves per value.
    seed
        lifelines breaks tied times with a small random jitter; fixed for repeatability.

    Returns
    -------
    ``cohort, mode, age_days, incidence, ci_low, ci_high, failures``.
    """
    failed = lives.filter(pl.col("event") == 1)
    modes = sorted(failed["mode"].fill_null("unknown").unique().to_list())
    if ages_days is None:
        ages = np.linspace(0.0, float(lives["duration_days"].max()), 50)
    else:
        ages = np.asarray(ages_days, dtype=float)
    codes = {mode: i + 1 for i, mode in enumerate(modes)}
    coded = lives.with_columns(
        pl.when(pl.col("event") == 1)
        .then(pl.col("mode").fill_null("unknown").replace_strict(codes, default=0, return_dtype=pl.Int64))
        .otherwise(0)
        .alias("_code")
    )
    parts = coded.sort(by).group_by([by], maintain_order=True) if by else [(("fleet",), coded)]
    rows: list[dict] = []
    for (value,), part in parts:
        cohort = f"{by}={value}" if by else "fleet"
        for mode, k in codes.items():
            rows += _incidence_rows(part, k, ages, seed, cohort=cohort, mode=mode)
    return pl.DataFrame(
        rows,
        schema={
            "cohort": pl.String,
            "mode": pl.String,
            "age_days": pl.Float64,
            "incidence": pl.Float64,
            "ci_low": pl.Float64,
            "ci_high": pl.Float64,
            "failures": pl.Int64,
        },
    )


def _incidence_rows(part: pl.DataFrame, k: int, ages: np.ndarray, seed: int, *, cohort: str, mode: str) -> list[dict]:
    """Aalen–Johansen incidence of mode code ``k`` in one cohort's lives, at ``ages``
    (none when the mode never ends a life there, or late entries leave the early risk set
    empty: not estimable by age)."""
    durations = part["duration_days"].to_numpy()
    code = part["_code"].to_numpy()
    entry = part["entry_days"].to_numpy()
    n_events = int((code == k).sum())
    if n_events == 0:
        return []
    ajf = AalenJohansenFitter(seed=seed, calculate_variance=True)
    try:
        with np.errstate(all="ignore"):
            ajf.fit(durations, code, event_of_interest=k, entry=entry if (entry > 0).any() else None)
    except StatError:
        return []
    curve = ajf.cumulative_density_.iloc[:, 0]
    bounds = ajf.confidence_interval_
    idx = np.searchsorted(curve.index.to_numpy(), ages, side="right") - 1
    return [
        {
            "cohort": cohort,
            "mode": mode,
            "age_days": float(age),
            "incidence": float(curve.iloc[i]) if i >= 0 else 0.0,
            "ci_low": float(bounds.iloc[i, 0]) if i >= 0 else 0.0,
            "ci_high": float(bounds.iloc[i, 1]) if i >= 0 else 0.0,
            "failures": n_events,
        }
        for age, i in zip(ages, idx)
    ]
