"""Operating points chosen the way operations would have chosen them: from the past only.

A model is judged at a threshold.  Picking that threshold on the very period it is judged
on flatters every model (the threshold "knows" the test period's risk distribution and
failures), so each operating point here is chosen **prospectively**: the threshold used in
a test period is computed from scores before that period (the earlier periods' out-of-sample
scores), never from the period itself.  The period-optimal threshold is still computed, by
the same function on the test period, but only as an *upper bound*.

Alerts are raised as operations run the drain policy (entry, hysteresis, a daily cap or
share, weights): :mod:`foreshock.models.evaluation.alert_replay`.

Operating points (:func:`choose_thresholds`):

``budget``
    The daily cap ``k`` alone: each day the ``k`` highest-risk units not already in alert
    enter it.  Nothing is fitted to any period, so the point is prospective by construction
    and spends exactly its budget whenever ``k`` units are waiting.  (An entry floor chosen
    on the earlier periods was tried and dropped: every fold refits the model, the refit's
    risk scale differs from the earlier folds' scores, and the floor left a third of the
    budget unspent on some fleets.  Measured again with calibrated LightGBM, it still
    fails: ``benchmarks/bench_entry_floors.py``.)
``budget_floor``
    The daily cap with an **entry floor** fixed in advance: each day the ``k`` highest-risk
    units not already in alert enter it, but only those whose risk is at least ``[backtest]
    entry_floor``.  The budget is a cap operations may spend, not a quota: a unit below the
    floor is not drained because budget is left.  The floor is a calibrated risk (the
    models' risks are probabilities of failing within the horizon), set in the
    configuration before any fold, so nothing about any test period chose it: prospective
    by construction, and the same number on every refit's scale.  Reported only when the
    floor is above 0 (off by default: no floor won on every data set measured,
    ``docs/real_data.md``).
``target_precision``
    The lowest threshold whose alert precision on the earlier periods, with outcomes known
    at the period's start, reaches ``[backtest] target_precision``.  No alerts in a period
    without such history (the first one); those periods are not judged.
``policy``
    ``[policy] enter_risk`` / ``exit_risk`` and the hold ``enter_for`` (with the policy's other
    ways in at the decision horizon): fixed in advance, so also a calibration test.  A model
    with an entry of its own (``[policy.models.<name>]``) is judged at it.

The operators' binary rules (:meth:`~foreshock.models.estimators.baseline.ThresholdBaseline.fires`)
are scored as they run today: an alert at each rising edge of "some rule fires", no cap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from foreshock.budget import DailyBudget
from foreshock.contract import UTC_TS
from foreshock.durations import format_duration
from foreshock.hold import Entry, ModelEntries, ModelEntry
from foreshock.models.estimators.training import snapshot_step
from foreshock.models.evaluation.alert_replay import AlertRule, Period, RiskReplay, alert_count
from foreshock.models.evaluation.alerts import threshold_for_precision

# The hindsight upper bound tries entry floors that keep these shares of the cap's alerts
# (1.0: no floor) and keeps whichever catches the most failures in the test period.
UPPER_BOUND_FILLS = (1.0, 0.9, 0.75, 0.5)
# The binary rules as operators run them: a pseudo-model in the scores table (risk 1.0
# while some rule fires, else 0.0), written by the backtest next to the ranked baseline.
RULES_MODEL = "rules"
NO_FLOOR = -math.inf


def _days(scores: pl.DataFrame, step: timedelta) -> float:
    ts = scores.get_column("ts")
    return max((ts.max() + step - ts.min()).total_seconds() / 86400.0, 1e-9)


def budget_threshold(
    scores: pl.DataFrame,
    alerts_per_day: float,
    rule: AlertRule,
    step: timedelta | None = None,
    fill: float = 0.95,
    *,
    replay: RiskReplay | None = None,
) -> float:
    """The entry floor of the capped rule on ``scores``: the highest threshold at which it
    still raises ``fill`` of the alerts per day it raises with no floor at all.

    The capped alert rate falls (almost) monotonically as the floor rises, so a bisection
    over the distinct risks finds it in about 20 replays of the rule.  ``replay``: the
    same series prepared by :meth:`~foreshock.models.evaluation.alert_replay.RiskReplay.of` (shared by the calls for several fills).
    """
    if scores.height == 0:
        return NO_FLOOR
    step = step or snapshot_step(scores)
    capped = rule if rule.daily_share is not None else AlertRule(rule.exit_ratio, alerts_per_day)
    days = _days(scores, step)
    replay = replay or RiskReplay.of(scores)

    def rate(threshold: float) -> float:
        return alert_count(replay, threshold, capped, step) / days

    if fill >= 1.0:
        return NO_FLOOR
    target = fill * rate(NO_FLOOR)
    if target <= 0:
        return NO_FLOOR
    values = np.unique(scores.get_column("risk").cast(pl.Float64).drop_nulls().drop_nans().to_numpy())
    lo, hi = 0, values.size - 1  # invariant: rate(values[lo]) >= target
    if rate(values[lo]) < target:
        return NO_FLOOR
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if rate(values[mid]) >= target:
            lo = mid
        else:
            hi = mid - 1
    return float(values[lo])


Chooser = Callable[[pl.DataFrame, datetime], float | None]


def prospective(
    scores: pl.DataFrame, periods: Sequence[Period], choose: Chooser, first: float | None
) -> list[tuple[Period, float | None]]:
    """Each period's threshold, chosen by ``choose`` from the scores before the period.

    ``choose(earlier_scores, period_start)`` never sees a row at or after ``period_start``;
    ``first`` is the threshold of a period with no earlier scores.
    """
    out = []
    for period in periods:
        earlier = scores.filter(pl.col("ts") < pl.lit(period.start).cast(UTC_TS))
        out.append((period, choose(earlier, period.start) if earlier.height else first))
    return out


@dataclass(frozen=True)
class OperatingPoints:
    """The settings the operating points are chosen with (``[backtest]``, ``[policy]``)."""

    alerts_per_day: float
    target_precision: float
    exit_risk: float
    min_lead_time: timedelta
    # [policy]'s way into drain at [models] horizon (enter_risk, the ways in) and its hold
    # (enter_for): the policy point's
    policy_entry: ModelEntry
    daily_share: float | None = None  # replaces alerts_per_day when set
    entry_floor: float = 0.0  # the budget_floor point's calibrated risk floor (0: no such point)
    entries: ModelEntries | None = None  # the models' own ([policy.models.<name>]): for_model

    @classmethod
    def from_config(cls, config) -> OperatingPoints:
        backtest, policy = config.section("backtest"), config.section("policy")
        share = backtest.get("daily_budget_share")
        default = ModelEntry.of(config)
        return cls(
            alerts_per_day=float(backtest["drain_budget_per_day"]),
            target_precision=float(backtest["target_precision"]),
            exit_risk=float(policy["exit_risk"]),
            min_lead_time=config.duration("backtest", "min_lead_time"),
            policy_entry=default,
            daily_share=None if share is None else float(share),
            entry_floor=float(backtest.get("entry_floor", 0.0)),
            entries=ModelEntries.of(default, policy),
        )

    def for_model(self, model: str | None) -> OperatingPoints:
        """These settings with ``model``'s way into drain for the policy point: its own
        (``[policy.models.<name>]``), else ``[policy]``'s (None: ``[policy]``'s)."""
        if self.entries is None:
            return self
        return replace(self, policy_entry=self.entries[model])

    @property
    def enter_risk(self) -> float:
        """The policy point's threshold (``[policy] enter_risk``, or the model's own)."""
        return self.policy_entry.entry.enter_risk

    @property
    def hold(self) -> timedelta:
        """The policy point's hold before entry (``[policy] enter_for``, or the model's own)."""
        return self.policy_entry.hold

    def entry(self, horizon: str) -> Entry:
        """The policy's entry at the decision ``horizon`` (with its second horizon, if any)."""
        return replace(self.policy_entry.entry, horizon=horizon)

    @property
    def budget(self) -> DailyBudget:
        """The daily budget of the budget point (the share when set: it takes precedence)."""
        return DailyBudget(share=self.daily_share) if self.daily_share is not None else DailyBudget(self.alerts_per_day)

    @property
    def exit_ratio(self) -> float:
        return self.exit_risk / self.enter_risk

    @property
    def budget_rule(self) -> AlertRule:
        if self.daily_share is not None:
            return AlertRule(self.exit_ratio, None, self.daily_share)
        return AlertRule(self.exit_ratio, self.alerts_per_day)

    @property
    def threshold_rule(self) -> AlertRule:
        return AlertRule(self.exit_ratio, None)

    @property
    def policy_rule(self) -> AlertRule:
        """The drain policy's own rule: hysteresis and the hold ``[policy] enter_for``."""
        return AlertRule(self.exit_ratio, None, hold=self.hold)


@dataclass
class ChosenPoint:
    """One operating point of one series: per-period thresholds, the rule, where they came from."""

    name: str
    periods: list[tuple[Period, float | None]]
    rule: AlertRule
    chosen_on: str
    # Alternatives judged on the test period, the one catching most failures kept: only
    # for the hindsight upper bound (empty for every operating point used in operation).
    hindsight: tuple[ChosenPoint, ...] = ()

    @property
    def judged(self) -> list[Period]:
        """The periods with a threshold (the others raise no alert and are not judged)."""
        return [p for p, t in self.periods if t is not None]

    def thresholds(self) -> list[float | str | None]:
        """Per period: the threshold, ``"top-k"`` for the cap alone, None for no alerts."""
        return [None if t is None else ("top-k" if math.isinf(t) else float(t)) for _, t in self.periods]


def choose_thresholds(
    series: pl.DataFrame,
    failures: pl.DataFrame,
    horizon: str,
    periods: Sequence[Period],
    settings: OperatingPoints,
    step: timedelta,
    replay: RiskReplay | None = None,
) -> dict[str, ChosenPoint]:
    """The prospective operating points of one model's series, plus the test-period upper bound.

    The upper bound is the capped rule with entry floors chosen on the test period itself
    (one per share in ``UPPER_BOUND_FILLS``); the judge keeps the best of them.

    Parameters
    ----------
    series
        ``unit_id, ts, risk`` (+ ``margin``) of one model and horizon, all periods.
    failures
        Every failure; a choice for a period only sees those by the period's start.
    periods
        The test periods in time order (walk-forward folds; one period for a review window).
    settings
        The operating points' settings for the series' model
        (:meth:`OperatingPoints.for_model`: the policy point enters at its own entry where it
        has one; the other points do not read the entry).
    replay
        ``series`` prepared by :meth:`~foreshock.models.evaluation.alert_replay.RiskReplay.of`, when the caller has it already.
    """

    def precision(earlier: pl.DataFrame, start: datetime) -> float | None:
        known = failures.filter(pl.col("failed_at") <= pl.lit(start).cast(UTC_TS))
        return threshold_for_precision(
            earlier,
            known,
            horizon,
            settings.target_precision,
            step,
            until=start,
            min_lead_time=settings.min_lead_time,
        )

    whole = Period(periods[0].start, periods[-1].end)
    replay = replay or RiskReplay.of(series)
    hindsight = tuple(
        ChosenPoint(
            "budget_upper_bound",
            [
                (
                    whole,
                    budget_threshold(series, settings.alerts_per_day, settings.budget_rule, step, fill, replay=replay),
                )
            ],
            settings.budget_rule,
            f"the test period itself (upper bound; floor keeping {fill:.0%} of the cap's alerts)",
        )
        for fill in UPPER_BOUND_FILLS
    )
    floor = {}
    if settings.entry_floor > 0:
        floor["budget_floor"] = ChosenPoint(
            "budget_floor",
            [(p, settings.entry_floor) for p in periods],
            settings.budget_rule,
            f"fixed in advance ([backtest] entry_floor = {settings.entry_floor:g}, a calibrated risk; "
            "prospective by construction)",
        )
    return {
        "budget": ChosenPoint(
            "budget",
            [(p, NO_FLOOR) for p in periods],
            settings.budget_rule,
            "nothing (the day's top k: prospective by construction)",
        ),
        **floor,
        "target_precision": ChosenPoint(
            "target_precision",
            prospective(series, periods, precision, None),
            settings.threshold_rule,
            "earlier periods",
        ),
        "policy": ChosenPoint(
            "policy",
            [(p, settings.enter_risk) for p in periods],
            settings.policy_rule,
            f"fixed ({settings.policy_entry.table} enter_risk"
            + (f", held {format_duration(settings.hold)})" if settings.hold else ")"),
        ),
        "budget_upper_bound": ChosenPoint(
            "budget_upper_bound", hindsight[0].periods, settings.budget_rule, hindsight[0].chosen_on, hindsight
        ),
    }


def rules_point(periods: Sequence[Period]) -> dict[str, ChosenPoint]:
    """The binary rules as run today: an alert at each rising edge of "a rule fires", no cap."""
    return {
        "as_run_today": ChosenPoint(
            "as_run_today", [(p, 1.0) for p in periods], AlertRule(1.0, None), "the rules' own thresholds"
        )
    }
