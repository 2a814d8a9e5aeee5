"""Alerts raised from a risk series as operations run the drain policy.

:func:`policy_alerts` replays a series snapshot by snapshot:

* a unit **enters** alert when its risk is at or above the entry threshold;
* with a **hold** (``[policy] enter_for``), a unit enters only once its risk has been at or
  above the entry threshold at each of its last ``ceil(hold / step)`` snapshots, with no gap
  between them (its held risk, :mod:`foreshock.hold`);
* it **stays** in alert until its risk falls below ``exit_ratio`` times that threshold
  (the policy's hysteresis, ``[policy] exit_risk / enter_risk``), or its snapshots stop for
  more than 1.5 intervals (it was taken out);
* with a **daily cap** of ``k`` (``[backtest] drain_budget_per_day``), at most ``k`` units
  enter alert per UTC day: at each snapshot the waiting candidates are taken from the
  highest risk down (ties broken by the model's raw ``margin`` when the scores carry one,
  then by unit id) until the day's budget is spent.  A fractional ``k`` accrues: 0.5 is
  one alert every other day, 1.5 one and two on alternate days (the unspent budget carries
  over up to ``ceil(k)``); a series that starts during a day gets that day's remaining
  share.  With daily snapshots this is exactly the day's top ``k``.
* with a **daily share** ``s`` instead (``[backtest] daily_budget_share``, which takes
  precedence over ``drain_budget_per_day``), a day's budget is ``s`` times the units
  reporting that day (units with a snapshot that UTC day), so it follows a fleet that
  grows; it accrues and carries over the same way (:mod:`foreshock.budget`);
* with **weights** (``fleet_weight``: how many fleet units a subsampled unit stands for),
  the units reporting are counted by weight and each unit entering alert spends its weight
  of the budget: the day's ranking is walked down while one whole unit of budget is left,
  an overdraft being repaid by the next days (:func:`foreshock.budget.spend`).

The thresholds themselves are chosen in :mod:`foreshock.models.evaluation.operating_points`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from foreshock.budget import WEIGHT_COLUMN, DailyBudget, accrue, spend
from foreshock.contract import UTC_TS
from foreshock.hold import HELD_COLUMN, MAX_GAP_STEPS, hold_snapshots, with_held_risk
from foreshock.models.estimators.base import require_columns
from foreshock.models.estimators.training import snapshot_step

_US_PER_DAY = 86_400_000_000


@dataclass(frozen=True)
class Period:
    """A stretch of scores ``[start, end)`` that shares one threshold (a walk-forward fold)."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class AlertRule:
    """How alerts are raised from a risk series.

    Attributes
    ----------
    exit_ratio
        A unit leaves alert when its risk falls below ``exit_ratio * threshold`` (1.0: no
        hysteresis, an alert is a run of snapshots at or above the threshold).
    daily_cap
        At most this many units enter alert per UTC day (None: no cap).
    daily_share
        Instead of ``daily_cap``: at most this share of the units reporting that day.
    hold
        How long the risk must have stayed at or above the entry threshold before the unit
        enters (``[policy] enter_for``; zero: at once).
    """

    exit_ratio: float = 1.0
    daily_cap: float | None = None
    daily_share: float | None = None
    hold: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        if not 0.0 < self.exit_ratio <= 1.0:
            raise ValueError(f"exit_ratio must be in (0, 1], got {self.exit_ratio}")
        if self.daily_cap is not None and self.daily_cap <= 0:
            raise ValueError(f"daily_cap must be positive, got {self.daily_cap}")
        if self.daily_cap is not None and self.daily_share is not None:
            raise ValueError("an alert rule has a daily_cap or a daily_share, not both")
        if self.hold < timedelta(0):
            raise ValueError(f"hold must not be negative, got {self.hold}")
        self.budget  # noqa: B018 -- validates the share

    @property
    def budget(self) -> DailyBudget | None:
        """The daily budget of the rule (None: no cap)."""
        if self.daily_share is not None:
            return DailyBudget(share=self.daily_share)
        return None if self.daily_cap is None else DailyBudget(per_day=self.daily_cap)


def _thresholds_per_row(ts_us: np.ndarray, periods: Sequence[tuple[Period, float | None]]) -> np.ndarray:
    """Entry threshold of each row (NaN where no period covers it or its threshold is None)."""
    out = np.full(ts_us.size, np.nan)
    for period, threshold in periods:
        if threshold is None:
            continue
        lo = int(pl.Series([period.start]).cast(UTC_TS).dt.epoch("us")[0])
        hi = int(pl.Series([period.end]).cast(UTC_TS).dt.epoch("us")[0])
        out[(ts_us >= lo) & (ts_us < hi)] = threshold
    return out


@dataclass(frozen=True)
class RiskReplay:
    """A risk series prepared once for many replays of :func:`policy_alerts` (the
    bisections of :func:`budget_threshold` replay the same series dozens of times): rows
    in replay order (time, then highest risk, margin and unit first) as arrays."""

    ts_us: np.ndarray
    risk: np.ndarray
    unit_code: np.ndarray
    units: np.ndarray
    counts: dict = field(default_factory=dict, compare=False, repr=False)  # alert counts, held risks (memo)
    weight: np.ndarray | None = field(default=None, compare=False, repr=False)  # per row; None: every unit 1
    days: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), compare=False, repr=False)
    reporting: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)  # per day, weighted
    given_held: np.ndarray | None = field(default=None, compare=False, repr=False)  # per row: the series' own held risk

    @classmethod
    def of(cls, scores: pl.DataFrame, weights: pl.DataFrame | None = None) -> RiskReplay:
        """``unit_id, ts, risk`` (+ optional ``margin``, the raw score, to break ties, and
        ``fleet_weight``); ``weights``: ``unit_id, fleet_weight`` (a unit without one counts 1).

        A series that carries its own held risk (:data:`~foreshock.hold.HELD_COLUMN`: the
        two-horizon entry of :func:`foreshock.hold.entry_series`, held per horizon) enters
        on it, whatever hold a rule names."""
        require_columns(scores, ("unit_id", "ts", "risk"), "risk series")
        tiebreak = pl.col("margin").cast(pl.Float64) if "margin" in scores.columns else pl.lit(0.0)
        scores = with_weights(scores, weights)
        weighted = WEIGHT_COLUMN in scores.columns
        given = HELD_COLUMN in scores.columns
        frame = scores.select(
            pl.col("unit_id").cast(pl.String),
            pl.col("ts").cast(UTC_TS).dt.epoch("us").alias("ts_us"),
            pl.col("risk").cast(pl.Float64).fill_nan(None).fill_null(-np.inf),
            tiebreak.fill_nan(None).fill_null(-np.inf).alias("margin"),
            (pl.col(WEIGHT_COLUMN) if weighted else pl.lit(1.0)).alias("weight"),
            *([pl.col(HELD_COLUMN).cast(pl.Float64).fill_nan(None).fill_null(-np.inf)] if given else []),
        ).sort(["ts_us", "risk", "margin", "unit_id"], descending=[False, True, True, False])
        unit_id = frame.get_column("unit_id")
        # codes into the sorted distinct units (numpy's unique on strings sorts objects: slow)
        units = unit_id.unique().sort().to_numpy()
        unit_code = (unit_id.rank("dense") - 1).cast(pl.Int64).to_numpy() if frame.height else np.zeros(0, np.int64)
        # units reporting per UTC day (by weight): what a daily share is a share of
        per_day = (
            frame.select((pl.col("ts_us") // _US_PER_DAY).alias("day"), "unit_id", "weight")
            .unique(["day", "unit_id"])
            .group_by("day")
            .agg(pl.col("weight").sum())
            .sort("day")
        )
        return cls(
            frame.get_column("ts_us").to_numpy(),
            frame.get_column("risk").to_numpy(),
            unit_code,
            units,
            weight=frame.get_column("weight").to_numpy() if weighted else None,
            days=per_day.get_column("day").to_numpy(),
            reporting=per_day.get_column("weight").to_numpy().astype(np.float64),
            given_held=frame.get_column(HELD_COLUMN).to_numpy() if given else None,
        )

    def held(self, hold: timedelta, step: timedelta) -> np.ndarray:
        """The held risk of each row under ``hold`` (:mod:`foreshock.hold`; ``-inf`` where a
        unit has too few consecutive snapshots); the risk itself when the hold spans one
        snapshot; the series' own held risk when it carries one.  Remembered per hold and step."""
        if self.given_held is not None:
            return self.given_held
        if hold_snapshots(hold, step) == 1:
            return self.risk
        key = ("held", hold, step)
        if key not in self.counts:
            frame = pl.DataFrame(
                {
                    "unit_id": self.unit_code,
                    "ts": pl.Series(self.ts_us, dtype=pl.Int64).cast(pl.Datetime("us")),
                    "risk": self.risk,
                }
            )
            held = with_held_risk(frame, hold, step).get_column(HELD_COLUMN)
            self.counts[key] = held.fill_null(-np.inf).to_numpy()
        return self.counts[key]

    def allowances(self, budget: DailyBudget) -> np.ndarray:
        """The budget of each day of :attr:`days` (units that may enter alert)."""
        return np.asarray(budget.allowance(self.reporting), dtype=np.float64)

    @property
    def height(self) -> int:
        return self.ts_us.size


def policy_alerts(
    scores: pl.DataFrame | RiskReplay,
    periods: Sequence[tuple[Period, float | None]] | float,
    rule: AlertRule,
    step: timedelta | None = None,
) -> pl.DataFrame:
    """Alert starts of a risk series under ``rule`` (see the module docstring).

    Parameters
    ----------
    scores
        ``unit_id, ts, risk`` (+ optional ``margin``, the raw score, to break ties), or the
        same prepared by :meth:`RiskReplay.of`.
    periods
        One threshold for the whole series, or ``(Period, threshold)`` pairs; rows outside
        every period, or in a period whose threshold is None, raise no alert.
    rule
        Hysteresis and daily cap.
    step
        Snapshot interval (default: inferred; required with a :class:`RiskReplay`).

    Returns
    -------
    polars.DataFrame
        ``unit_id, alert_start, risk`` sorted by unit and time.
    """
    empty = pl.DataFrame(schema={"unit_id": pl.String, "alert_start": UTC_TS, "risk": pl.Float64})
    if scores.height == 0:
        return empty
    if isinstance(scores, pl.DataFrame):
        require_columns(scores, ("unit_id", "ts", "risk"), "risk series")
        step = step or snapshot_step(scores)
        scores = RiskReplay.of(scores)
    elif step is None:
        raise ValueError("policy_alerts: a prepared series needs its step")
    picked = _replay(scores, periods, rule, step)
    if picked.size == 0:
        return empty
    return pl.DataFrame(
        {
            "unit_id": scores.units[scores.unit_code[picked]].astype(str),
            "alert_start": pl.Series(scores.ts_us[picked], dtype=pl.Int64)
            .cast(pl.Datetime("us"))
            .dt.replace_time_zone("UTC"),
            "risk": scores.risk[picked],
        },
        schema={"unit_id": pl.String, "alert_start": UTC_TS, "risk": pl.Float64},
    ).sort("unit_id", "alert_start")


def _replay(
    series: RiskReplay,
    periods: Sequence[tuple[Period, float | None]] | float,
    rule: AlertRule,
    step: timedelta,
) -> np.ndarray:
    """Rows of ``series`` (in its replay order) where an alert starts."""
    ts_us, risk, unit_code, units = series.ts_us, series.risk, series.unit_code, series.units
    if isinstance(periods, (int, float)):
        entry = np.full(ts_us.size, float(periods))
    else:
        entry = _thresholds_per_row(ts_us, periods)
    exit_level = entry * rule.exit_ratio if rule.exit_ratio != 1.0 else entry
    exit_level = np.where(np.isneginf(entry), -np.inf, exit_level)
    max_gap = MAX_GAP_STEPS * step.total_seconds() * 1e6
    entering = series.held(rule.hold, step)  # the risk, or the held risk with a hold

    in_alert = np.zeros(units.size, dtype=bool)
    last_seen = np.full(units.size, -np.inf)
    starts: list[np.ndarray] = []
    budget = _DayBudget(series, rule)
    # The budget starts where the first threshold does: that day gets its remaining share.
    active = ts_us[~np.isnan(entry)]
    day = int(active[0] // _US_PER_DAY) if active.size else None
    tokens = budget.of(day) * (1.0 - (active[0] % _US_PER_DAY) / _US_PER_DAY) if active.size and budget else 0.0
    bounds = np.r_[0, np.flatnonzero(np.diff(ts_us)) + 1, ts_us.size]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        u = unit_code[lo:hi]
        now = ts_us[lo]
        # A gap ends an alert (the unit was out); falling below the exit level ends it too.
        in_alert[u] &= (now - last_seen[u]) <= max_gap
        in_alert[u] &= risk[lo:hi] >= exit_level[lo:hi]
        waiting = ~in_alert[u] & (entering[lo:hi] >= entry[lo:hi])  # NaN entry: never
        last_seen[u] = now
        if not waiting.any():
            continue
        rows = np.flatnonzero(waiting)  # already highest risk (then margin) first
        if budget:
            today = int(now // _US_PER_DAY)
            if today != day:
                # k accrues each day; what is unspent carries over up to ceil(k) (so 1.5 is
                # one alert, then two, ...).
                tokens = accrue(tokens, budget.earned(day, today), budget.of(today))
                day = today
            taken, tokens = spend(tokens, None if series.weight is None else series.weight[lo + rows], rows.size)
            rows = rows[:taken]
        in_alert[u[rows]] = True
        starts.append(lo + rows)
    return np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)


class _DayBudget:
    """The daily budget of one replay: each day's allowance and what days earn."""

    def __init__(self, series: RiskReplay, rule: AlertRule) -> None:
        self.cap, self.share = rule.daily_cap, rule.daily_share
        if self.share is not None:
            self.days = series.days
            self.allowance = series.allowances(rule.budget)
            self.cumulative = np.cumsum(self.allowance)

    def __bool__(self) -> bool:
        return self.cap is not None or self.share is not None

    def of(self, day: int) -> float:
        if self.share is None:
            return float(self.cap)
        i = np.searchsorted(self.days, day)
        return float(self.allowance[i]) if i < self.days.size and self.days[i] == day else 0.0

    def earned(self, since: int, today: int) -> float:
        """What the days after ``since`` up to ``today`` earn."""
        if self.share is None:
            return self.cap * (today - since)  # the absolute budget's own arithmetic, as before

        def upto(d: int) -> float:
            i = np.searchsorted(self.days, d, side="right")
            return float(self.cumulative[i - 1]) if i else 0.0

        return upto(today) - upto(since)


def with_weights(scores: pl.DataFrame, weights: pl.DataFrame | None) -> pl.DataFrame:
    """``scores`` with ``fleet_weight`` joined from ``weights`` (1.0 for a unit without
    one); unchanged without ``weights``."""
    if weights is None:
        return scores
    joined = scores.drop(WEIGHT_COLUMN, strict=False).join(
        weights.select(pl.col("unit_id").cast(scores.schema["unit_id"]), WEIGHT_COLUMN), on="unit_id", how="left"
    )
    return joined.with_columns(pl.col(WEIGHT_COLUMN).fill_null(1.0))


def mean_allowance(series: RiskReplay, budget: DailyBudget) -> float:
    """The budget's mean allowance per day over the days the series has snapshots."""
    allowance = series.allowances(budget)
    return float(allowance.mean()) if allowance.size else 0.0


def alert_count(series: RiskReplay, threshold: float, rule: AlertRule, step: timedelta) -> int:
    """How many alerts :func:`policy_alerts` raises on ``series`` at one entry threshold
    (remembered on the series: the bisections of several fills retry the same ones)."""
    key = (float(threshold), rule, step)
    if key not in series.counts:
        series.counts[key] = int(_replay(series, threshold, rule, step).size)
    return series.counts[key]
