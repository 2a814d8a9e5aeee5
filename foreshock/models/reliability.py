"""Fleet reliability by cohort and location: Kaplan–Meier, Weibull and Cox on unit lives.

Works from the canonical ``inventory`` and ``failures`` tables alone, so it applies to any
fleet history, including ones with no telemetry (e.g. the Titan GPU lifetimes of
Ostrouchov et al., SC '20).  A *life* runs from installation (or the previous failure of
the same slot) to its failure, or is censored at the unit's ``retired_at`` (an optional
inventory column: removed from service without failing) or at the end of observation.

Competing failure modes are handled as cause-specific hazards: when analysing one mode,
lives ending in another mode are censored at that time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import pandas as pd
import polars as pl
from lifelines import CoxPHFitter, KaplanMeierFitter, WeibullFitter
from lifelines.exceptions import StatError

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


def cox_hazard_ratios(lives: pl.DataFrame, covariates: list[str], penalizer: float = 1e-4) -> pl.DataFrame:
    """Hazard ratios (with 95% CI) of categorical cohort columns, first level as reference."""
    frame = lives.select("duration_days", "entry_days", "event", *covariates).to_pandas()
    design = pd.get_dummies(frame[covariates].astype(str), drop_first=True, dtype=float)
    design["duration_days"] = frame["duration_days"].to_numpy()
    design["event"] = frame["event"].to_numpy()
    fit_args = {"duration_col": "duration_days", "event_col": "event"}
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


def _days(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return "not reached" if math.isinf(value) else f"{value:,.0f}"


def reliability_markdown(
    lives: pl.DataFrame, by: list[str], ages_days: tuple[float, ...] = (365, 730, 1095, 1460)
) -> str:
    """A Markdown report: KM and Weibull per cohort column, then a Cox model over all of them."""
    lines = [
        "# Fleet reliability",
        "",
        f"{lives.height:,} lives, {int(lives['event'].sum()):,} failures, "
        f"{(lives['duration_days'] - lives['entry_days']).sum() / 365.25:,.1f} unit-years observed.",
        "",
    ]
    for column in by:
        lines += [
            f"## By {column}",
            "",
            "| cohort | units | failures | "
            + " | ".join(f"S({a:g} d)" for a in ages_days)
            + " | KM median (d) | Weibull shape | Weibull scale (d) | MTTF (d) |",
            "|---|---:|---:|" + "---:|" * (len(ages_days) + 4),
        ]
        for row in cohort_reliability(lives, column, ages_days):
            cells = " | ".join(f"{row.km_survival[a]:.3f}" for a in ages_days)
            lines.append(
                f"| {row.cohort} | {row.units:,} | {row.failures:,} | {cells} | {_days(row.km_median_days)} | "
                f"{row.weibull_shape:.2f} | {row.weibull_scale_days:,.0f} | {row.mttf_days:,.0f} |"
            )
        lines.append("")
    if by:
        hr = cox_hazard_ratios(lives, by)
        lines += [
            "## Cox proportional hazards (reference: first level of each column)",
            "",
            "| covariate | hazard ratio | 95% CI | p |",
            "|---|---:|---|---:|",
        ]
        for r in hr.iter_rows(named=True):
            lines.append(
                f"| {r['covariate']} | {r['hazard_ratio']:.2f} | {r['ci_low']:.2f}–{r['ci_high']:.2f} | {r['p']:.2g} |"
            )
        lines.append("")
    return "\n".join(lines)
