"""What failures do to jobs and fault domains.

The interruption rate of a synchronous job of N units implied by the fitted hazard,
checked against the interruptions the history shows, and a dispersion test of
independence per fault domain (do failures bunch in a node, a rack, a lot?).  Both read
:func:`~foreshock.models.reliability.lives.unit_lives`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl
from lifelines import WeibullFitter
from scipy import stats

from foreshock.contract import UTC_TS
from foreshock.models.reliability.lives import DAY_S


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
    rows = [_job_row(per_unit, n, window_days, rate) for n in job_gpus if per_unit.height // n > 0]
    return pl.DataFrame(rows)


def _job_row(per_unit: pl.DataFrame, n: int, window_days: float, rate: float) -> dict:
    """One row of :func:`job_interruptions`: the units (``_expected``, ``_ev`` each, in
    placement order) tiled into jobs of ``n``, expected against observed interruptions."""
    jobs = per_unit.height // n
    tiled = per_unit.head(jobs * n).with_row_index("_i").with_columns((pl.col("_i") // n).alias("_job"))
    per_job = tiled.group_by("_job").agg(pl.col("_expected").sum(), pl.col("_ev").sum())
    observed = int(per_job["_ev"].sum())
    expected_per_day = float(per_job["_expected"].sum()) / (jobs * window_days)
    low, high = _poisson_interval(observed)
    counts = per_job["_ev"].cast(pl.Float64)
    mean = float(counts.mean())
    return {
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
    # Over 80 lines for its docstring (the test's statistics); the body builds the cells,
    # their statistic and hands the simulation to _simulated_p_value.
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
        .sort(domain, "_w")  # group_by's order is arbitrary; the seeded draws below need a fixed one
    )
    cells = cells.with_columns(
        (pl.col("_o").sum().over("_w") / pl.col("_days").sum().over("_w") * pl.col("_days")).alias("_e")
    ).filter(pl.col("_e") > 0)
    used_windows = cells["_w"].n_unique()
    chi2 = float(((cells["_o"] - cells["_e"]) ** 2 / cells["_e"]).sum())
    dof = max(cells.height - used_windows, 1)
    p_value = _simulated_p_value(cells, chi2, simulations, seed)
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


def _simulated_p_value(cells: pl.DataFrame, chi2: float, simulations: int, seed: int) -> float:
    """Share of ``simulations`` spreads of each window's failures over its cells (in
    proportion to their expected counts ``_e``) whose ``X^2`` reaches ``chi2``."""
    rng = np.random.default_rng(seed)
    simulated = np.zeros(simulations)
    for (_,), part in cells.group_by(["_w"], maintain_order=True):
        expected = part["_e"].to_numpy()
        total = int(part["_o"].sum())
        if total == 0:
            simulated += expected.sum()  # every cell 0: X^2 = sum E
            continue
        draws = rng.multinomial(total, expected / expected.sum(), size=simulations)
        simulated += (((draws - expected) ** 2) / expected).sum(axis=1)
    return (1 + int((simulated >= chi2 - 1e-9).sum())) / (1 + simulations)
