"""Fleet reliability by cohort and location: the whole analysis of a fleet's unit lives.

Works from the canonical ``inventory`` and ``failures`` tables alone, so it applies to any
fleet history, including ones with no telemetry (e.g. the Titan GPU lifetimes of
Ostrouchov et al., SC '20).  :func:`analyse_fleet` puts together the lives
(:mod:`foreshock.models.reliability.lives`), survival by cohort with competing failure
modes (:mod:`foreshock.models.reliability.survival`: Kaplan–Meier, Weibull, a Cox model
with several covariates and a stratum, cumulative incidence) and what failures do to jobs
and fault domains (:mod:`foreshock.models.reliability.interruptions`).  Rendering lives in
:mod:`foreshock.models.reliability.reliability_report`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from foreshock.models.reliability.interruptions import DomainDispersion, domain_dispersion, job_interruptions
from foreshock.models.reliability.lives import DAY_S
from foreshock.models.reliability.survival import (
    CohortReliability,
    cohort_reliability,
    cox_hazard_ratios,
    cumulative_incidence,
    km_curves,
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
