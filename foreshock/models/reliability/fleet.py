"""Fleet reliability by cohort and location: Kaplan–Meier, Weibull and Cox on unit lives.

Works from the canonical ``inventory`` and ``failures`` tables alone, so it applies to any
fleet history, including ones with no telemetry (e.g. the Titan GPU lifetimes of
Ostrouchov et al., SC '20).  A *life* runs from installation (or the previous failure of
the same slot) to its failure, or is censored at the unit's ``retired_at`` (an optional
inventory column: removed from service without failing) or at the end of observation.

Competing failure modes are handled two ways: cause-specific hazards (when analysing one
mode, lives ending in another mode are censored at that time) and cumulative incidence
(Aalen–Johansen: the probability of having failed *of this mode* by an age, which, unlike
1 − KM of a cause-specific fit, does not pretend the other modes could not happen).

Beyond cohorts: a Cox model with several covariates and a stratum, the interruption rate
of a synchronous job of N units implied by the fitted hazard (checked against the
interruptions the history actually shows), and a dispersion test of independence per
fault domain.  Rendering lives in :mod:`foreshock.models.reliability.reliability_report`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import polars as pl
from lifelines import AalenJohansenFitter, CoxPHFitter, KaplanMeierFitter, WeibullFitter
from lifelines.exceptions import StatError
from scipy import stats

from foreshock.contract import UTC_TS

DAY_S = 86400.0


def unit_lives(
    inventory: pl.DataFrame,
    failures: pl.DataFrame,
    observed_until: datetime | None = None,
    mode: str | None = None,
    observed_from: datetime | None = None,
) -> pl.DataFrame:
    """One row per unit life: ``unit_id, life, start, stop, duration_days, event, mode`` plus
    the inventory's cohort columns.

    Parameters
    ----------
    inventory, failures
        Canonical tables (see :mod:`foreshock.contract`).
    observed_until
        End of observation for lives still running; default the latest failure time.
    mode
        Count only failures of this mode as events (others censor the life).
    observed_from
        Start of observation.  Lives that began before it enter the risk set late
        (``entry_days`` > 0: left truncation), so survivors of the unobserved years do
        not look immortal.  Default: observed since installation.
    """
    failures = failures.sort("unit_id", "failed_at")
    if observed_until is None:
        latest = failures["failed_at"].max() if failures.height else None
        if latest is None:
            raise ValueError("no failures and no observed_until: the end of observation is unknown")
        observed_until = latest
    ends = failures.with_columns(
        pl.int_range(pl.len()).over("unit_id").cast(pl.Int32).alias("life"),
        pl.col("failed_at").alias("stop"),
    )
    retired = (
        pl.col("retired_at").str.to_datetime(time_zone="UTC", strict=False).cast(UTC_TS)
        if "retired_at" in inventory.columns
        else pl.lit(None, dtype=UTC_TS)
    )
    inv = inventory.with_columns(retired.alias("_retired"))
    counts = ends.group_by("unit_id").agg(pl.len().cast(pl.Int32).alias("n_failures"))
    open_lives = (
        inv.select("unit_id", "_retired")
        .join(counts, on="unit_id", how="left")
        .with_columns(
            pl.col("n_failures").fill_null(0).alias("life"),
            pl.coalesce("_retired", pl.lit(observed_until).cast(UTC_TS)).alias("stop"),
            pl.lit(None, dtype=pl.String).alias("mode"),
        )
        .select("unit_id", "life", "stop", "mode")
    )
    lives = pl.concat([ends.select("unit_id", "life", "stop", "mode"), open_lives], how="vertical_relaxed")
    lives = lives.sort("unit_id", "life").with_columns(pl.col("stop").shift(1).over("unit_id").alias("_prev_stop"))
    lives = lives.join(inv.drop("_retired"), on="unit_id", how="inner")
    lives = lives.with_columns(
        pl.when(pl.col("life") == 0).then(pl.col("installed_at")).otherwise(pl.col("_prev_stop")).alias("start"),
        pl.col("mode").is_not_null().alias("_failed"),
    )
    is_event = pl.col("_failed") if mode is None else pl.col("_failed") & (pl.col("mode") == mode)
    lives = lives.with_columns(
        ((pl.col("stop") - pl.col("start")).dt.total_seconds() / DAY_S).alias("duration_days"),
        is_event.cast(pl.Int8).alias("event"),
    )
    entry = pl.lit(0.0)
    if observed_from is not None:
        entry = ((pl.lit(observed_from).cast(UTC_TS) - pl.col("start")).dt.total_seconds() / DAY_S).clip(
            lower_bound=0.0
        )
    lives = lives.with_columns(entry.alias("entry_days")).filter(
        (pl.col("duration_days") > 0) & (pl.col("duration_days") > pl.col("entry_days"))
    )
    cohort_cols = [c for c in inventory.columns if c not in ("unit_id", "installed_at", "retired_at")]
    return lives.select(
        "unit_id", "life", "start", "stop", "duration_days", "entry_days", "event", "mode", *cohort_cols
    )


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
        durations = part["duration_days"].to_numpy()
        code = part["_code"].to_numpy()
        entry = part["entry_days"].to_numpy()
        for mode, k in codes.items():
            n_events = int((code == k).sum())
            if n_events == 0:
                continue
            ajf = AalenJohansenFitter(seed=seed, calculate_variance=True)
            try:
                with np.errstate(all="ignore"):
                    ajf.fit(durations, code, event_of_interest=k, entry=entry if (entry > 0).any() else None)
            except StatError:
                continue  # late entries leave the early risk set empty: not estimable by age
            curve = ajf.cumulative_density_.iloc[:, 0]
            bounds = ajf.confidence_interval_
            idx = np.searchsorted(curve.index.to_numpy(), ages, side="right") - 1
            for age, i in zip(ages, idx):
                inside = i >= 0
                rows.append(
                    {
                        "cohort": cohort,
                        "mode": mode,
                        "age_days": float(age),
                        "incidence": float(curve.iloc[i]) if inside else 0.0,
                        "ci_low": float(bounds.iloc[i, 0]) if inside else 0.0,
                        "ci_high": float(bounds.iloc[i, 1]) if inside else 0.0,
                        "failures": n_events,
                    }
                )
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


def _poisson_interval(count: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact (Garwood) confidence interval of a Poisson mean from one count."""
    low = stats.chi2.ppf(alpha / 2, 2 * count) / 2 if count > 0 else 0.0
    high = stats.chi2.ppf(1 - alpha / 2, 2 * (count + 1)) / 2
    return float(low), float(high)


def job_interruptions(
    lives: pl.DataFrame,
    job_gpus: list[int],
    *,
    observed_from: datetime,
    observed_until: datetime,
    placement: tuple[str, ...] = ("rack", "node", "unit_id"),
    fitted_on: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Interruptions of a synchronous job of N units: expected from the fitted hazard
    against observed in the history.

    A synchronous job stops when any of its N units fails, so with independent units its
    interruption rate is the sum of theirs: ``MTTF_job ~ MTTF_device / N``.  Two expected
    figures:

    - ``mttf_job_h_constant``: ``MTTF_device / N`` with the fleet's constant failure rate
      (failures / unit-time observed);
    - ``expected_per_day``: from a Weibull fitted to the lives, each unit's cumulative
      hazard over the observed window ``H(age_end) - H(age_start)`` summed over the job's
      units (ageing or infant mortality moves it off the constant figure).

    The observed figure tiles the fleet into jobs of N units placed as a scheduler places
    them (consecutive units in ``placement`` order: rack, node), counts the failures of
    their units in the window, and gives a 95% Poisson interval.  ``jobs_dispersion`` is
    the variance over mean of the per-job counts (1 for independent units; clustering
    pushes it up).

    A Weibull fitted by maximum likelihood to the same lives it is checked on reproduces
    their total failure count exactly (the score equation of its scale), so over the whole
    fleet ``ratio`` is then 1 by construction.  Pass ``fitted_on`` — the lives of an
    earlier period (:func:`unit_lives` with an earlier ``observed_until``) — to check the
    hazard out of sample.

    Returns
    -------
    One row per N: ``job_gpus, jobs, expected_per_day, mttf_job_h, mttf_job_h_constant,
    observed, observed_per_day, observed_low, observed_high, ratio, jobs_dispersion``.
    """
    window_days = (observed_until - observed_from).total_seconds() / DAY_S
    if window_days <= 0:
        raise ValueError("observed_until must be after observed_from")
    start = pl.lit(observed_from).cast(UTC_TS)
    end = pl.lit(observed_until).cast(UTC_TS)
    clipped = lives.with_columns(
        ((pl.max_horizontal(pl.col("start"), start) - pl.col("start")).dt.total_seconds() / DAY_S).alias("_a0"),
        ((pl.min_horizontal(pl.col("stop"), end) - pl.col("start")).dt.total_seconds() / DAY_S).alias("_a1"),
        ((pl.col("stop") > start) & (pl.col("stop") <= end) & (pl.col("event") == 1)).cast(pl.Int64).alias("_ev"),
    ).filter(pl.col("_a1") > pl.col("_a0"))
    exposure = float((clipped["_a1"] - clipped["_a0"]).sum())
    events = int(clipped["_ev"].sum())
    rate = events / exposure if exposure > 0 else float("nan")  # per unit-day
    fit = lives if fitted_on is None else fitted_on
    weibull = WeibullFitter().fit(
        fit["duration_days"].to_numpy(), fit["event"].to_numpy(), entry=fit["entry_days"].to_numpy()
    )
    rho, lam = float(weibull.rho_), float(weibull.lambda_)
    per_unit = (
        clipped.with_columns(((pl.col("_a1") / lam) ** rho - (pl.col("_a0") / lam) ** rho).alias("_expected"))
        .group_by("unit_id")
        .agg(pl.col("_expected").sum(), pl.col("_ev").sum())
    )
    order = [c for c in placement if c in lives.columns]
    slots = lives.unique("unit_id").select(order).sort(order)
    per_unit = slots.join(per_unit, on="unit_id", how="left").with_columns(
        pl.col("_expected").fill_null(0.0), pl.col("_ev").fill_null(0)
    )
    rows = []
    for n in job_gpus:
        jobs = per_unit.height // n
        if jobs == 0:
            continue
        tiled = per_unit.head(jobs * n).with_row_index("_i").with_columns((pl.col("_i") // n).alias("_job"))
        per_job = tiled.group_by("_job").agg(pl.col("_expected").sum(), pl.col("_ev").sum())
        observed = int(per_job["_ev"].sum())
        expected_per_day = float(per_job["_expected"].sum()) / (jobs * window_days)
        low, high = _poisson_interval(observed)
        counts = per_job["_ev"].cast(pl.Float64)
        mean = float(counts.mean())
        rows.append(
            {
                "job_gpus": n,
                "jobs": jobs,
                "expected_per_day": expected_per_day,
                "mttf_job_h": 24.0 / expected_per_day if expected_per_day > 0 else float("inf"),
                "mttf_job_h_constant": 24.0 / (rate * n) if rate > 0 else float("inf"),
                "observed": observed,
                "observed_per_day": observed / (jobs * window_days),
                "observed_low": low / (jobs * window_days),
                "observed_high": high / (jobs * window_days),
                "ratio": observed / (expected_per_day * jobs * window_days) if expected_per_day > 0 else float("nan"),
                "jobs_dispersion": float(counts.var(ddof=1)) / mean if jobs > 1 and mean > 0 else float("nan"),
            }
        )
    return pl.DataFrame(rows)


@dataclass
class DomainDispersion:
    """Independence check of one fault domain (see :func:`domain_dispersion`)."""

    domain: str
    cells: int
    failures: int
    dispersion_index: float
    chi2: float
    dof: int
    p_value: float
    max_in_one_cell: int
    expected_max: float


def domain_dispersion(
    lives: pl.DataFrame,
    domain: str,
    *,
    window: timedelta,
    observed_from: datetime,
    observed_until: datetime,
    simulations: int = 999,
    seed: int = 0,
) -> DomainDispersion:
    """Do failures cluster in a fault domain more than independence allows?

    Time is cut into windows; in each, every value of ``domain`` (each node, each rack) is
    a cell with its observed failures ``O`` and unit-days of exposure.  Under independent
    units with one failure rate per window, ``O ~ Poisson(E)`` with ``E = r_w * exposure``
    and ``r_w`` the window's fleet rate (so ageing or a fleet-wide event does not count as
    clustering).  Pearson's ``X^2 = sum (O - E)^2 / E`` is then about chi-square with
    ``cells - windows`` degrees of freedom; the dispersion index ``X^2 / dof`` is ~1 under
    independence and above 1 when failures bunch in a node, a rack or a lot.

    Failures are rare, so most cells expect far less than one failure and the chi-square
    tail is then far too light (each term has variance ``2 + 1/E``, not 2).  The p-value is
    therefore exact by simulation: conditional on each window's total, independence spreads
    the failures over the cells in proportion to exposure (multinomial); ``p`` is the share
    of ``simulations`` spreads whose ``X^2`` is at least the observed one.

    Returns
    -------
    The statistic, its p-value (upper tail) and the largest count in one cell beside the
    largest expected.
    """
    if domain not in lives.columns:
        raise ValueError(f"{domain!r} is not a column of the lives (inventory columns: fault domains)")
    step = window.total_seconds() / DAY_S
    total = (observed_until - observed_from).total_seconds() / DAY_S
    n_windows = max(1, math.ceil(total / step))
    edges = [observed_from + timedelta(days=step * i) for i in range(n_windows + 1)]
    edges[-1] = observed_until
    win = pl.DataFrame(
        {"_w": list(range(n_windows)), "_w0": edges[:-1], "_w1": edges[1:]},
        schema={"_w": pl.Int64, "_w0": UTC_TS, "_w1": UTC_TS},
    )
    # A unit that fails inside a window and is not followed by a replacement life stays in
    # that window's exposure to its end: the expected count is then set by who was at risk
    # when the window opened, not lowered by the very failures it is compared with.
    spans = lives.select(
        pl.col(domain).cast(pl.String).fill_null("unknown"),
        "start",
        "stop",
        "event",
        (pl.col("life") == pl.col("life").max().over("unit_id")).alias("_last"),
    )
    fails_here = (pl.col("event") == 1) & (pl.col("stop") > pl.col("_w0")) & (pl.col("stop") <= pl.col("_w1"))
    exposure_end = pl.when(fails_here & pl.col("_last")).then(pl.col("_w1")).otherwise(pl.min_horizontal("stop", "_w1"))
    cells = (
        spans.join(win, how="cross")
        .with_columns(
            ((exposure_end - pl.max_horizontal("start", "_w0")).dt.total_seconds() / DAY_S).alias("_days"),
            fails_here.cast(pl.Int64).alias("_o"),
        )
        .filter(pl.col("_days") > 0)
        .group_by(domain, "_w")
        .agg(pl.col("_days").sum(), pl.col("_o").sum())
    )
    cells = cells.with_columns(
        (pl.col("_o").sum().over("_w") / pl.col("_days").sum().over("_w") * pl.col("_days")).alias("_e")
    ).filter(pl.col("_e") > 0)
    used_windows = cells["_w"].n_unique()
    chi2 = float(((cells["_o"] - cells["_e"]) ** 2 / cells["_e"]).sum())
    dof = max(cells.height - used_windows, 1)
    rng = np.random.default_rng(seed)
    simulated = np.zeros(simulations)
    for (_,), part in cells.group_by(["_w"]):
        expected = part["_e"].to_numpy()
        total = int(part["_o"].sum())
        if total == 0:
            simulated += expected.sum()  # every cell 0: X^2 = sum E
            continue
        draws = rng.multinomial(total, expected / expected.sum(), size=simulations)
        simulated += (((draws - expected) ** 2) / expected).sum(axis=1)
    p_value = (1 + int((simulated >= chi2 - 1e-9).sum())) / (1 + simulations)
    return DomainDispersion(
        domain=domain,
        cells=cells.height,
        failures=int(cells["_o"].sum()),
        dispersion_index=chi2 / dof,
        chi2=chi2,
        dof=dof,
        p_value=p_value,
        max_in_one_cell=int(cells["_o"].max()) if cells.height else 0,
        expected_max=float(cells["_e"].max()) if cells.height else 0.0,
    )


@dataclass(frozen=True)
class ReliabilitySettings:
    """What a fleet reliability analysis covers (``[reliability]`` in ``foreshock.toml``).

    Parameters
    ----------
    by
        Cohort columns: Kaplan–Meier and Weibull per value, then one Cox model over all.
    strata
        Columns the Cox model stratifies by (own baseline hazard, no ratio).
    numeric
        Cox covariates entered as numbers (per unit step) rather than levels.
    ages_days
        Ages survival is reported at; empty: four ages spread over the longest life.
    job_gpus
        Synchronous job sizes whose interruption rate is reported (those larger than the
        fleet are skipped).
    fault_domains
        Inventory columns checked for independence.
    independence_window
        Time window of the independence check's cells.
    """

    by: tuple[str, ...] = ("rack", "lot")
    strata: tuple[str, ...] = ()
    numeric: tuple[str, ...] = ()
    ages_days: tuple[float, ...] = ()
    job_gpus: tuple[int, ...] = (8, 64, 512, 1024)
    fault_domains: tuple[str, ...] = ("node", "rack")
    independence_window: timedelta = timedelta(days=7)

    @classmethod
    def from_config(cls, config, **overrides) -> ReliabilitySettings:
        """From ``[reliability]`` and ``[fleet] fault_domains`` of a loaded configuration."""
        section = config.section("reliability")
        values = {
            "by": tuple(section["by"]),
            "strata": tuple(section["strata"]),
            "numeric": tuple(section["numeric"]),
            "ages_days": tuple(config_duration_days(a) for a in section["ages"]),
            "job_gpus": tuple(int(n) for n in section["job_gpus"]),
            "fault_domains": tuple(config.fault_domains),
            "independence_window": config.duration("reliability", "independence_window"),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def config_duration_days(value: str) -> float:
    """A configuration duration (``365d``) in days."""
    from foreshock.durations import parse_duration

    return parse_duration(value).total_seconds() / DAY_S


@dataclass
class FleetReliability:
    """Everything :func:`analyse_fleet` found; rendered by ``reliability_report``."""

    settings: ReliabilitySettings
    lives: int
    failures: int
    unit_years: float
    observed_from: datetime
    observed_until: datetime
    ages_days: tuple[float, ...]
    cohorts: dict[str, list[CohortReliability]]
    cox: pl.DataFrame | None
    incidence: pl.DataFrame | None
    incidence_curves: pl.DataFrame | None
    survival_curves: dict[str, pl.DataFrame]
    jobs: pl.DataFrame | None
    independence: list[DomainDispersion]
    notes: list[str]


def _auto_ages(lives: pl.DataFrame) -> tuple[float, ...]:
    longest = float(lives["duration_days"].max())
    return tuple(float(f"{longest * q:.3g}") for q in (0.25, 0.5, 0.75, 1.0))


def analyse_fleet(
    lives: pl.DataFrame,
    settings: ReliabilitySettings,
    *,
    observed_from: datetime | None = None,
    observed_until: datetime | None = None,
) -> FleetReliability:
    """The whole fleet reliability analysis of :func:`unit_lives` (``mode=None``).

    Cohorts (KM, Weibull), one Cox model over ``by`` (stratified), cumulative incidence
    per failure mode when the history names more than one, job interruption rates and
    the independence check per fault domain.  Parts that the data cannot support (one
    cohort level, no failures in a window) are skipped with a note.
    """
    notes: list[str] = []
    observed_from = observed_from or lives["start"].min()
    observed_until = observed_until or lives["stop"].max()
    ages = settings.ages_days or _auto_ages(lives)
    by = [c for c in settings.by if c in lives.columns]
    notes += [f"--by {c}: not an inventory column, skipped" for c in settings.by if c not in lives.columns]
    cohorts = {column: cohort_reliability(lives, column, ages) for column in by}
    curves = {column: km_curves(lives, column) for column in by}
    cox = None
    varying = [c for c in by if lives[c].n_unique() > 1 and c not in settings.strata]
    if varying and int(lives["event"].sum()) > 0:
        try:
            cox = cox_hazard_ratios(
                lives,
                varying,
                strata=[s for s in settings.strata if s in lives.columns],
                numeric=list(settings.numeric),
            )
        except Exception as exc:  # lifelines: convergence on degenerate cohorts
            notes.append(f"Cox model not fitted: {exc}")
    modes = lives.filter(pl.col("event") == 1)["mode"].drop_nulls().unique()
    incidence = incidence_curves = None
    if modes.len() > 1:
        incidence = cumulative_incidence(lives, ages)
        incidence_curves = cumulative_incidence(lives)
        if incidence.height == 0:
            incidence = incidence_curves = None
            notes.append("competing risks by age not estimable: every life entered observation late")
    elif modes.len() == 1:
        notes.append(f"one failure mode ({modes[0]}): no competing risks")
    jobs = None
    units = lives["unit_id"].n_unique()
    sizes = [n for n in settings.job_gpus if n <= units]
    if sizes and int(lives["event"].sum()) >= 3:
        jobs = job_interruptions(lives, sizes, observed_from=observed_from, observed_until=observed_until)
    independence = []
    for domain in settings.fault_domains:
        if domain not in lives.columns or lives[domain].n_unique() < 2:
            continue
        result = domain_dispersion(
            lives,
            domain,
            window=settings.independence_window,
            observed_from=observed_from,
            observed_until=observed_until,
        )
        if result.failures:
            independence.append(result)
    return FleetReliability(
        settings=settings,
        lives=lives.height,
        failures=int(lives["event"].sum()),
        unit_years=float((lives["duration_days"] - lives["entry_days"]).sum()) / 365.25,
        observed_from=observed_from,
        observed_until=observed_until,
        ages_days=ages,
        cohorts=cohorts,
        cox=cox,
        incidence=incidence,
        incidence_curves=incidence_curves,
        survival_curves=curves,
        jobs=jobs,
        independence=independence,
        notes=notes,
    )
