"""Fleet reliability as people read it: a Markdown report and its figures.

The computation lives in :mod:`foreshock.models.reliability.fleet`; this module only renders.
Figures are built without ``pyplot`` (no global state, Agg rendering), as in
:mod:`foreshock.models.evaluation.plots`.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
from matplotlib.figure import Figure

from foreshock.lake.atomic import atomic_write_text
from foreshock.models.reliability.fleet import FleetReliability


def _days(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return "not reached" if math.isinf(value) else f"{value:,.0f}"


def _num(value: float, spec: str) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _hours(value: float) -> str:
    if math.isinf(value):
        return "∞"
    return f"{value / 24:,.1f} d" if value >= 72 else f"{value:,.1f} h"


def cohort_section(result: FleetReliability, column: str) -> list[str]:
    ages = result.ages_days
    lines = [
        f"## By {column}",
        "",
        "| cohort | lives | failures | "
        + " | ".join(f"S({a:g} d)" for a in ages)
        + " | KM median (d) | Weibull shape | Weibull scale (d) | MTTF (d) |",
        "|---|---:|---:|" + "---:|" * (len(ages) + 4),
    ]
    for row in result.cohorts[column]:
        cells = " | ".join(_num(row.km_survival[a], ".3f") for a in ages)
        lines.append(
            f"| {row.cohort} | {row.units:,} | {row.failures:,} | {cells} | {_days(row.km_median_days)} | "
            f"{_num(row.weibull_shape, '.2f')} | {_num(row.weibull_scale_days, ',.0f')} | {_num(row.mttf_days, ',.0f')} |"
        )
    return [*lines, ""]


def cox_section(result: FleetReliability) -> list[str]:
    if result.cox is None:
        return []
    strata = [s for s in result.settings.strata]
    title = "## Cox proportional hazards, all cohort columns at once"
    lines = [
        title,
        "",
        "Reference: the first level of each column"
        + (f"; stratified by {', '.join(strata)} (own baseline hazard each)" if strata else "")
        + (f"; per unit step of {', '.join(result.settings.numeric)}" if result.settings.numeric else "")
        + ".",
        "",
        "| covariate | hazard ratio | 95% CI | p |",
        "|---|---:|---|---:|",
    ]
    for r in result.cox.iter_rows(named=True):
        lines.append(
            f"| {r['covariate']} | {r['hazard_ratio']:.2f} | {r['ci_low']:.2f}–{r['ci_high']:.2f} | {r['p']:.2g} |"
        )
    return [*lines, ""]


def incidence_section(result: FleetReliability) -> list[str]:
    if result.incidence is None:
        return []
    ages = result.ages_days
    lines = [
        "## Competing failure modes (cumulative incidence, Aalen–Johansen)",
        "",
        "Probability of having failed of each mode by an age, the other modes competing; the modes add up to 1 − S(age).",
        "",
        "| mode | failures | " + " | ".join(f"by {a:g} d (95% CI)" for a in ages) + " |",
        "|---|---:|" + "---|" * len(ages),
    ]
    for (mode,), part in result.incidence.sort("mode", "age_days").group_by(["mode"], maintain_order=True):
        cells = " | ".join(
            f"{r['incidence']:.3f} ({r['ci_low']:.3f}–{r['ci_high']:.3f})" for r in part.iter_rows(named=True)
        )
        lines.append(f"| {mode} | {part['failures'][0]:,} | {cells} |")
    return [*lines, ""]


def jobs_section(result: FleetReliability) -> list[str]:
    if result.jobs is None or result.jobs.height == 0:
        return []
    lines = [
        "## Interruptions of a synchronous job of N GPUs",
        "",
        "Any unit's failure stops the job: MTTF_job ≈ MTTF_device / N under independence. Expected from the "
        "fitted (Weibull) hazard of the units the job occupies, against the interruptions the history shows "
        "for jobs placed on consecutive nodes; job dispersion is the variance/mean of interruptions per job "
        "(1 when units fail independently). Fitted on the same history, observed/expected is 1 over the whole "
        "fleet by construction of the fit: the job dispersion is the test here.",
        "",
        "| N GPUs | jobs | MTTF_job (fitted) | MTTF_device/N (constant rate) | expected / job-day | observed / job-day (95% CI) | observed / expected | job dispersion |",
        "|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in result.jobs.iter_rows(named=True):
        lines.append(
            f"| {r['job_gpus']:,} | {r['jobs']:,} | {_hours(r['mttf_job_h'])} | {_hours(r['mttf_job_h_constant'])} | "
            f"{r['expected_per_day']:.3g} | {r['observed_per_day']:.3g} ({r['observed_low']:.3g}–{r['observed_high']:.3g}) | "
            f"{_num(r['ratio'], '.2f')} | {_num(r['jobs_dispersion'], '.2f')} |"
        )
    return [*lines, ""]


def independence_section(result: FleetReliability) -> list[str]:
    if not result.independence:
        return []
    window = result.settings.independence_window
    lines = [
        "## Independence per fault domain",
        "",
        f"Failures per domain value per {window.days or window.total_seconds() / 3600:g}"
        f"{'-day' if window.days else '-hour'} window against a Poisson expectation from its exposure and the "
        "window's fleet rate. Dispersion index ≈ 1 under independence; above 1 failures cluster (a bad lot, a hot "
        "rack, a shared PDU) and MTTF/N overstates the time between job interruptions. p: exact, by simulation.",
        "",
        "| fault domain | cells | failures | dispersion index | p | most in one cell (largest expected) | verdict |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for d in result.independence:
        verdict = "clustered" if d.p_value < 0.01 else "consistent with independence"
        lines.append(
            f"| {d.domain} | {d.cells:,} | {d.failures:,} | {d.dispersion_index:.2f} | {d.p_value:.3g} | "
            f"{d.max_in_one_cell} ({d.expected_max:.2f}) | {verdict} |"
        )
    return [*lines, ""]


def reliability_markdown(result: FleetReliability, figures: dict[str, Path] | None = None) -> str:
    """The whole report in Markdown (figures linked by file name when given)."""
    lines = [
        "# Fleet reliability",
        "",
        f"{result.lives:,} lives, {result.failures:,} failures, {result.unit_years:,.1f} unit-years observed "
        f"({result.observed_from:%Y-%m-%d} to {result.observed_until:%Y-%m-%d}).",
        "",
    ]
    for column in result.cohorts:
        lines += cohort_section(result, column)
    lines += cox_section(result)
    lines += incidence_section(result)
    lines += jobs_section(result)
    lines += independence_section(result)
    if result.notes:
        lines += ["Notes:", "", *[f"- {n}" for n in result.notes], ""]
    lines += [f"![{name}]({path.name})" for name, path in (figures or {}).items()]
    return "\n".join(lines) + "\n"


# --- figures -------------------------------------------------------------------------


def survival_figure(result: FleetReliability, column: str) -> Figure:
    """Kaplan–Meier survival by the values of one cohort column."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for (cohort,), part in result.survival_curves[column].group_by(["cohort"], maintain_order=True):
        ax.step(part["age_days"].to_numpy(), part["survival"].to_numpy(), where="post", label=str(cohort))
    ax.set_xlabel("age (days)")
    ax.set_ylabel("survival")
    ax.set_title(f"Kaplan–Meier survival by {column}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    return fig


def incidence_figure(result: FleetReliability) -> Figure | None:
    """Cumulative incidence per failure mode, with 95% bands."""
    if result.incidence_curves is None:
        return None
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for (mode,), part in result.incidence_curves.group_by(["mode"], maintain_order=True):
        age = part["age_days"].to_numpy()
        (line,) = ax.step(age, part["incidence"].to_numpy(), where="post", label=str(mode))
        ax.fill_between(
            age, part["ci_low"].to_numpy(), part["ci_high"].to_numpy(), step="post", alpha=0.2, color=line.get_color()
        )
    ax.set_xlabel("age (days)")
    ax.set_ylabel("cumulative incidence")
    ax.set_title("Failure modes as competing risks")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def jobs_figure(result: FleetReliability) -> Figure | None:
    """MTTF of a synchronous job against its size, expected and observed (log-log)."""
    if result.jobs is None or result.jobs.height == 0:
        return None
    jobs = result.jobs.sort("job_gpus")
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    n = jobs["job_gpus"].to_numpy()
    ax.plot(n, jobs["mttf_job_h"].to_numpy(), "o-", label="fitted hazard")
    ax.plot(n, jobs["mttf_job_h_constant"].to_numpy(), "--", label="MTTF_device / N")
    observed = jobs.filter(pl.col("observed") > 0)
    if observed.height:
        mttf = 24.0 / observed["observed_per_day"].to_numpy()
        low = 24.0 / observed["observed_high"].to_numpy()
        high = 24.0 / observed["observed_low"].clip(lower_bound=1e-12).to_numpy()
        ax.errorbar(
            observed["job_gpus"].to_numpy(), mttf, yerr=[mttf - low, high - mttf], fmt="s", capsize=3, label="observed"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("GPUs in the job (N)")
    ax.set_ylabel("mean time between interruptions (h)")
    ax.set_title("Job interruptions against job size")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    return fig


def independence_figure(result: FleetReliability) -> Figure | None:
    """Dispersion index per fault domain (1 = independent)."""
    if not result.independence:
        return None
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    names = [d.domain for d in result.independence]
    values = [d.dispersion_index for d in result.independence]
    colours = ["tab:red" if d.p_value < 0.01 else "tab:blue" for d in result.independence]
    ax.bar(names, values, color=colours)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="independent")
    for i, d in enumerate(result.independence):
        ax.annotate(f"p={d.p_value:.2g}", (i, d.dispersion_index), ha="center", va="bottom", fontsize="small")
    ax.set_ylabel("dispersion index")
    ax.set_title("Do failures cluster by fault domain?")
    ax.legend()
    fig.tight_layout()
    return fig


def reliability_figures(result: FleetReliability) -> dict[str, Figure]:
    """Every figure of the report by file stem."""
    figures: dict[str, Figure | None] = {f"reliability_km_{c}": survival_figure(result, c) for c in result.cohorts}
    figures["reliability_modes"] = incidence_figure(result)
    figures["reliability_jobs"] = jobs_figure(result)
    figures["reliability_independence"] = independence_figure(result)
    return {name: fig for name, fig in figures.items() if fig is not None}


def write_reliability_report(result: FleetReliability, path: Path, *, plots: bool = True) -> dict[str, Path]:
    """Write the Markdown report at ``path`` and its figures beside it; returns the files."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Path] = {}
    if plots:
        for name, fig in reliability_figures(result).items():
            figures[name] = path.parent / f"{name}.png"
            fig.savefig(figures[name], dpi=100)
    atomic_write_text(path, reliability_markdown(result, figures))
    return {"report": path, **figures}
