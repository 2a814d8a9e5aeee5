"""Precision and recall at the top of each day's list, for any ranking of units.

Operators act on the few units at the top of a day's list.  :func:`top_of_list` judges any
score (a model's risk, a SMART rule's raw value) that way: each UTC day the units reporting
that day are ranked by their score and the top of the list, a daily budget
(:class:`~foreshock.budget.DailyBudget`: ``k`` a day or a share of the units reporting),
is **flagged**.  Unlike an alert (:mod:`~foreshock.models.evaluation.operating_points`), a
flag is a day's decision: a unit at the top on five days is flagged five times.
Definitions (``docs/metrics.md``, *Top of the list*):

* the day's score of a unit is its highest score that day, and the flag is at that
  snapshot;
* a flag is **true** when its unit fails within ``H`` after it and at least ``L_min``
  after it; **late** when it fails sooner than ``L_min``; **unresolved** when ``H`` reaches
  past the end of observation and no failure is known; **false** otherwise;
* ``precision`` = true / (true + false + late) over the resolved flags (a late flag is a
  flag whose drain comes too late, so it counts against the list);
* a failure is **caught** when its unit was flagged on some day in
  ``[failed_at - H, failed_at - L_min]``; ``recall`` = caught / failures of the scored units
  in the scored period; ``lead_time`` = ``failed_at`` minus the first flag in that window.

**Weights** (``fleet_weight`` of a subsampled inventory, :func:`foreshock.budget.fleet_weights`):
a unit standing for ``w`` fleet units counts ``w`` times in the units reporting, spends
``w`` of the day's budget when flagged (the carry rule of :mod:`foreshock.budget`), and
counts ``w`` times among the flags of ``precision`` and of the fleet-level rates
(``flags_per_day``, ``false_flags_per_1000_unit_days``).  Recall and lead times count
failures, which have weight 1, and are not reweighted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from foreshock.budget import WEIGHT_COLUMN, DailyBudget, accrue, spend
from foreshock.contract import UTC_TS
from foreshock.models.estimators.base import horizon_hours
from foreshock.models.evaluation.alerts import AlertWindow
from foreshock.models.evaluation.caught import match_failures
from foreshock.models.evaluation.metrics import classify_alerts

REWEIGHTED = ("flags_per_day", "precision", "false_flags_per_1000_unit_days", "budget_per_day")


@dataclass
class TopOfList:
    """Metrics of one ranking at one daily budget (names as in ``docs/metrics.md``)."""

    budget: str
    budget_per_day: float
    days: int
    flags: int
    flags_per_day: float
    true_flags: int
    false_flags: int
    late_flags: int
    unresolved_flags: int
    precision: float | None
    failures: int
    caught: int
    recall: float | None
    lead_time_p10_h: float | None
    lead_time_p50_h: float | None
    lead_time_p90_h: float | None
    unit_days: float
    false_flags_per_1000_unit_days: float
    reweighted: list[str] = field(default_factory=list)
    entry_floor: float | None = None  # the floor the flags were raised above (None: none)

    def to_dict(self) -> dict:
        return asdict(self)


def _weighted(scores: pl.DataFrame, weights: pl.DataFrame | None) -> pl.DataFrame:
    """``scores`` with ``fleet_weight`` (1.0 where the unit has none)."""
    if weights is None:
        if WEIGHT_COLUMN in scores.columns:
            return scores.with_columns(pl.col(WEIGHT_COLUMN).cast(pl.Float64).fill_null(1.0))
        return scores.with_columns(pl.lit(1.0).alias(WEIGHT_COLUMN))
    return (
        scores.drop(WEIGHT_COLUMN, strict=False)
        .join(weights.select(pl.col("unit_id").cast(pl.String), WEIGHT_COLUMN), on="unit_id", how="left")
        .with_columns(pl.col(WEIGHT_COLUMN).fill_null(1.0))
    )


@dataclass(frozen=True)
class DailyLists:
    """Each day's ranked units and allowance, and the flags the carry rule takes from them.

    Attributes
    ----------
    days
        ``day, reporting, allowance`` of every day with a unit reporting (``reporting``:
        weighted units reporting that day).
    by_day
        Day -> the day's eligible units (a score, at or above the floor), each at its best
        snapshot, highest score first (ties by ``unit_id``, then ``ts``): ``unit_id, ts,
        score, fleet_weight`` and the extra columns asked for.
    weighted
        Whether any unit weighs other than 1 (then flags spend their weights).
    keep
        The most units a day can take (``ceil`` of the largest allowance over the lightest
        weight, plus one): more of a day's list is never reached.
    schema
        The columns of a day's list (an empty list has them too).
    """

    days: pl.DataFrame
    by_day: dict
    weighted: bool
    keep: int
    schema: pl.Schema

    def flagged(self, passing=None) -> Iterator[tuple[object, pl.DataFrame]]:
        """``(day, flags)`` of each day with a unit eligible, in order: the top of the day's
        list the carry rule's tokens reach (each day's allowance accrues; a flag spends its
        unit's weight).  ``passing(day, part)``, if given, returns the part of the day's list
        that may be flagged (a replay that passes over some units); it is called for a day
        only after the previous day's flags were taken, so it can depend on them."""
        tokens = 0.0
        for day, today in zip(self.days.get_column("day"), self.days.get_column("allowance"), strict=True):
            tokens = accrue(tokens, today, today)
            part = self.by_day.get(day)
            if part is None:
                continue
            if passing is not None:
                part = passing(day, part).head(self.keep)
            w = part.get_column(WEIGHT_COLUMN).to_numpy() if self.weighted else None
            taken, tokens = spend(tokens, w, part.height)
            yield day, part.head(taken)


def daily_lists(
    scores: pl.DataFrame,
    budget: DailyBudget,
    weights: pl.DataFrame | None = None,
    floor: float | None = None,
    *,
    columns: tuple[str, ...] = (),
    whole: bool = False,
) -> DailyLists:
    """Each day's ranking of ``scores`` and its allowance at ``budget`` (see :func:`daily_flags`
    for the parameters); ``columns``: more columns of ``scores`` kept with each unit;
    ``whole``: every eligible unit of a day, not only the ``keep`` a day can take (for a
    replay that passes over some of them)."""
    column = "score" if "score" in scores.columns else "risk"
    frame = _weighted(scores, weights).select(
        pl.col("unit_id").cast(pl.String),
        pl.col("ts").cast(UTC_TS),
        pl.col(column).cast(pl.Float64).fill_nan(None).alias("score"),
        WEIGHT_COLUMN,
        *columns,
    )
    eligible = frame.drop_nulls("score")
    if floor is not None:
        eligible = eligible.filter(pl.col("score") >= floor)
    best = (
        eligible.with_columns(pl.col("ts").dt.truncate("1d").alias("day"))
        .sort(["day", "score", "unit_id", "ts"], descending=[False, True, False, False])
        .unique(["day", "unit_id"], keep="first", maintain_order=True)
    )
    days = (
        frame.with_columns(pl.col("ts").dt.truncate("1d").alias("day"))
        .unique(["day", "unit_id"])
        .group_by("day")
        .agg(pl.col(WEIGHT_COLUMN).sum().alias("reporting"))
        .sort("day")
    )
    allowance = np.asarray(budget.allowance(days.get_column("reporting").to_numpy()), dtype=np.float64)
    days = days.with_columns(pl.Series("allowance", allowance))
    weighted = bool((frame.get_column(WEIGHT_COLUMN) != 1.0).any())
    # A day never takes more than ceil(largest allowance / lightest weight) units (the carry
    # is capped at ceil of the day's allowance): only the top of each day's list is kept.
    lightest = min(1.0, float(frame.get_column(WEIGHT_COLUMN).min() or 1.0))
    keep = int(np.ceil(float(allowance.max(initial=0.0)) / lightest)) + 1
    if not whole:
        best = best.filter(pl.int_range(pl.len()).over("day") < keep)
    by_day = {d: part for (d,), part in best.group_by(["day"], maintain_order=True)}
    return DailyLists(days, by_day, weighted, keep, best.schema)


def daily_flags(
    scores: pl.DataFrame, budget: DailyBudget, weights: pl.DataFrame | None = None, floor: float | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The units flagged each day at ``budget``.

    Parameters
    ----------
    scores
        ``unit_id, ts, score`` (or ``risk``); any number of snapshots per unit and day.
    budget
        ``k`` a day or a share of the units reporting that day.
    weights
        ``unit_id, fleet_weight``, or None (a ``fleet_weight`` column of ``scores`` is used
        when present, else every unit counts 1).
    floor
        An entry floor: a unit whose day's score is below it is not flagged, even with
        budget left (it still counts among the units reporting).  None: no floor.

    Returns
    -------
    tuple
        The flags ``unit_id, alert_start, score, fleet_weight`` and the days ``day,
        reporting, allowance`` (``reporting``: weighted units reporting that day).
    """
    lists = daily_lists(scores, budget, weights, floor)
    picked = [flags for _, flags in lists.flagged()]
    flags = pl.concat(picked) if picked else pl.DataFrame(schema=lists.schema)
    return flags.select("unit_id", pl.col("ts").alias("alert_start"), "score", WEIGHT_COLUMN), lists.days


def top_of_list(
    scores: pl.DataFrame,
    failures: pl.DataFrame,
    budget: DailyBudget,
    horizon: str,
    min_lead_time: timedelta,
    *,
    weights: pl.DataFrame | None = None,
    step: timedelta = timedelta(days=1),
    until: datetime | None = None,
    floor: float | None = None,
) -> TopOfList:
    """Precision, recall and lead time of a ranking flagged at ``budget`` each day.

    Parameters
    ----------
    scores
        ``unit_id, ts, score`` (or ``risk``): any ranking, higher = flagged first.
    failures
        ``unit_id, failed_at``; those of the scored units after the first snapshot and at
        most one ``step`` after the last are judged.
    budget
        The daily budget (:class:`~foreshock.budget.DailyBudget`).
    horizon
        ``H``: a flag is true when its unit fails within it.
    min_lead_time
        ``L_min``: a failure sooner than this after a flag makes the flag late.
    weights
        ``unit_id, fleet_weight`` of a subsampled fleet (None: a ``fleet_weight`` column
        of ``scores``, else unweighted).
    step
        The snapshot interval (the end of observation is the last snapshot plus one).
    until
        End of observation (default: the last snapshot plus ``step``).
    floor
        An entry floor on the score (:func:`daily_flags`); None: the whole budget is spent
        whenever enough units report.
    """
    # Over 80 lines for its docstring (23 lines): the body itself is 48 lines.
    flags, days = daily_flags(scores, budget, weights, floor)
    ts = scores.get_column("ts").cast(UTC_TS)
    start, end = ts.min(), ts.max() + step
    until = until or end
    fails = failures.select(pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS))
    window = AlertWindow(timedelta(hours=horizon_hours(horizon)), min_lead_time)
    classified = classify_alerts(flags, fails, horizon, window, until)
    w = classified.get_column(WEIGHT_COLUMN)
    outcome = classified.get_column("outcome")

    def weight_of(kind: str) -> float:
        return float(w.filter(outcome == kind).sum())

    true_w, false_w, late_w = weight_of("true"), weight_of("false"), weight_of("late")
    units = scores.get_column("unit_id").cast(pl.String).unique().implode()
    judged = fails.filter(pl.col("unit_id").is_in(units) & (pl.col("failed_at") > start) & (pl.col("failed_at") <= end))
    matched = match_failures(flags.select("unit_id", "alert_start"), judged, window)
    leads = matched.get_column("lead_time_h").drop_nulls().to_numpy()
    p10, p50, p90 = (float(v) for v in np.percentile(leads, [10, 50, 90])) if leads.size else (None,) * 3
    n_days = max(days.height, 1)
    unit_days = float(_weighted(scores, weights).get_column(WEIGHT_COLUMN).sum()) * step.total_seconds() / 86400.0
    weighted = bool((flags.get_column(WEIGHT_COLUMN) != 1.0).any()) or bool(
        (days.get_column("reporting") != days.get_column("reporting").round()).any()
    )
    resolved = true_w + false_w + late_w
    caught = int(matched.get_column("caught").sum())
    mean_budget = float(days.get_column("allowance").mean()) if days.height else 0.0
    return TopOfList(
        budget=budget.describe(mean_budget if budget.scales_with_fleet else None, weighted=weighted),
        budget_per_day=mean_budget,
        days=days.height,
        flags=flags.height,
        flags_per_day=float(flags.get_column(WEIGHT_COLUMN).sum()) / n_days,
        true_flags=int((outcome == "true").sum()),
        false_flags=int((outcome == "false").sum()),
        late_flags=int((outcome == "late").sum()),
        unresolved_flags=int((outcome == "unresolved").sum()),
        precision=true_w / resolved if resolved else None,
        failures=matched.height,
        caught=caught,
        recall=caught / matched.height if matched.height else None,
        lead_time_p10_h=p10,
        lead_time_p50_h=p50,
        lead_time_p90_h=p90,
        unit_days=unit_days,
        false_flags_per_1000_unit_days=1000.0 * false_w / unit_days if unit_days else 0.0,
        reweighted=list(REWEIGHTED) if weighted else [],
        entry_floor=floor,
    )
