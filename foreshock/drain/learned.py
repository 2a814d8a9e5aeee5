"""Drain actions learned from outcomes: per risk band, what drains and no drains realised.

Full description: ``docs/drain.md``, *Actions learned from outcomes*.  In short:

- a **record** is one unit-day's most severe decision taken on risk (from earlier risk
  lists, or a replay), with its band (``[policy] learned_bands``), arm (``drain``,
  ``replace``, ``none``) and propensity (1 for the fixed policy; ``explore_rate`` for an
  exploratory drain);
- its **realised GPU-hours**: ``none`` costs ``F`` when the unit failed within the horizon
  after; a drain costs ``D``, plus the time out when the unit did not fail, plus ``F`` when
  it failed too soon to drain or again after its return.  The cost of ``none`` is known for
  every record (a drain moves a failure out of the job, it does not cause or prevent it),
  so only the drain arm needs an off-policy estimate;
- **estimator: doubly robust** (Dudik, Langford & Li 2011): the direct model ``q(b) = D +
  (1 - y_b) R + F late_b`` (the cost model with the band's observed outcomes) plus the
  clipped inverse-propensity-weighted residuals of the recorded drains.  Plain IPS/SNIPS is
  undefined where the deterministic fixed policy never drains (propensity 0); the direct
  model alone would ignore what recorded drains really cost.  Bounded exploration gives the
  residual records below the fixed threshold;
- **comparison**: fitted on the earlier half of the records, valued on the later half
  against what the fixed policy's decisions realised there, bootstrap over units; the
  learned chooser decides only when the whole interval lies below zero.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from foreshock.config import builtin_field, section_values
from foreshock.contract import UTC_TS
from foreshock.costs import DrainCosts
from foreshock.durations import parse_duration

_ARM_OF_ACTION = {"drain_now": "drain", "drain_at_checkpoint": "drain", "replace": "replace"}
SEVERITY_OF_ARM = {"none": 0, "drain": 1, "replace": 2}

RECORD_SCHEMA: dict[str, pl.DataType] = {
    "unit_id": pl.String(),
    "ts": UTC_TS,
    "risk": pl.Float64(),
    "band": pl.Int32(),
    "arm": pl.String(),
    "propensity": pl.Float64(),
    "failed": pl.Boolean(),
    "late": pl.Boolean(),  # failed sooner than min_lead_time after the decision: too soon to drain
    "cost": pl.Float64(),  # realised GPU-hours of the logged arm
    "cost_none": pl.Float64(),  # realised GPU-hours had the unit not been drained
}


def _default(key: str, kind: Any) -> Any:
    """A field whose default is ``[policy] key`` of the built-in configuration."""
    return builtin_field("policy", key, kind)


@dataclass(frozen=True)
class LearnedSettings:
    """``[policy]`` keys of the learned chooser (see the module docstring)."""

    chooser: str = _default("chooser", str)
    bands: tuple[float, ...] = _default("learned_bands", lambda v: tuple(sorted(float(b) for b in v)))
    history: timedelta = _default("learned_history", parse_duration)
    min_drains: int = _default("learned_min_drains", int)
    explore_rate: float = _default("explore_rate", float)
    explore_per_day: int = _default("explore_per_day", int)
    max_weight: float = _default("max_weight", float)
    bootstrap: int = _default("bootstrap", int)
    confidence: float = _default("confidence", float)

    @classmethod
    def from_policy(cls, policy: dict[str, Any]) -> LearnedSettings:
        """From a whole ``[policy]`` section (the built-in file supplies every key)."""
        return cls(**section_values(cls, "policy", policy))


def band_expr(risk: pl.Expr, bands: tuple[float, ...]) -> pl.Expr:
    """Band index: 0 below ``bands[0]``, ``i`` in ``[bands[i-1], bands[i])``, ``len(bands)`` above."""
    out = pl.lit(0, dtype=pl.Int32)
    for edge in bands:
        out = out + (risk >= edge).cast(pl.Int32)
    return out


def band_of(risk: float, bands: tuple[float, ...]) -> int:
    return sum(1 for edge in bands if risk >= edge)


def band_label(band: int, bands: tuple[float, ...]) -> str:
    low = 0.0 if band == 0 else bands[band - 1]
    high = 1.0 if band >= len(bands) else bands[band]
    return f"[{low:g}, {high:g}{']' if band >= len(bands) else ')'}"


# --- records ------------------------------------------------------------------------


def decision_records(
    decisions: pl.DataFrame,
    failures: pl.DataFrame,
    costs: DrainCosts,
    settings: LearnedSettings,
    *,
    horizon: timedelta,
    min_lead_time: timedelta,
    until: datetime,
    replace_turnaround: timedelta | None = None,
) -> pl.DataFrame:
    """Recorded decisions as :data:`RECORD_SCHEMA` records with their realised GPU-hours.

    Parameters
    ----------
    decisions
        ``unit_id, ts, risk, action`` (policy actions) of decisions taken on risk;
        ``propensity`` (default 1) and ``returned_at`` (when a drained unit came back;
        default: ``ts`` plus the repair or replacement turnaround) optional.
    failures
        ``unit_id, failed_at`` of every recorded failure.
    horizon
        The outcome window (the decision horizon): a unit "failed" when it failed within
        it after the decision.
    until
        The end of what is known: decisions whose horizon reaches past it are dropped
        (their outcome is not known yet).
    """
    d = decisions.filter(pl.col("risk") >= settings.bands[0]).filter(pl.col("ts") <= until - horizon)
    if "propensity" not in d.columns:
        d = d.with_columns(pl.lit(1.0).alias("propensity"))
    arm = pl.col("action").replace_strict(_ARM_OF_ACTION, default="none", return_dtype=pl.String)
    d = d.with_columns(arm.alias("arm"), pl.col("ts").cast(UTC_TS))
    d = (
        d.with_columns(
            pl.col("arm").replace_strict(SEVERITY_OF_ARM, return_dtype=pl.Int32).alias("_sev"),
            pl.col("ts").dt.truncate("1d").alias("_day"),
        )
        .sort("unit_id", "_day", "_sev", "ts", descending=[False, False, True, False])
        .unique(["unit_id", "_day"], keep="first", maintain_order=True)
    )
    turnaround = {
        "drain": costs.repair_turnaround,
        "replace": replace_turnaround or costs.repair_turnaround,
        "none": timedelta(0),
    }
    default_return = pl.col("ts") + pl.col("arm").replace_strict(turnaround, return_dtype=pl.Duration("us"))
    if "returned_at" in d.columns:
        d = d.with_columns(pl.coalesce(pl.col("returned_at").cast(UTC_TS), default_return).alias("returned_at"))
    else:
        d = d.with_columns(default_return.alias("returned_at"))
    fails = failures.select(pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS)).sort("failed_at")
    d = _next_failure(d, fails, "ts", "_failed_at")
    d = _next_failure(d, fails, "returned_at", "_refailed_at")
    hours = 3600.0
    lead_h = (pl.col("_failed_at") - pl.col("ts")).dt.total_seconds() / hours
    failed = pl.col("_failed_at").is_not_null() & (lead_h <= horizon.total_seconds() / hours)
    late = failed & (lead_h < min_lead_time.total_seconds() / hours)
    refail = pl.col("_refailed_at").is_not_null() & (
        (pl.col("_refailed_at") - pl.col("returned_at")).dt.total_seconds() <= horizon.total_seconds()
    )
    idle_h = (pl.col("returned_at") - pl.col("ts")).dt.total_seconds() / hours
    F, D = costs.failure_loss_gpu_hours, costs.drain_cost_gpu_hours
    drained_cost = (
        D + pl.when(failed).then(0.0).otherwise(idle_h) + late.cast(pl.Float64) * F + refail.cast(pl.Float64) * F
    )
    d = d.with_columns(
        failed.fill_null(False).alias("failed"),
        late.fill_null(False).alias("late"),
        (failed.cast(pl.Float64) * F).fill_null(0.0).alias("cost_none"),
    )
    d = d.with_columns(
        pl.when(pl.col("arm") == "none").then(pl.col("cost_none")).otherwise(drained_cost).alias("cost"),
        band_expr(pl.col("risk"), settings.bands).alias("band"),
    )
    return d.select(list(RECORD_SCHEMA)).cast(RECORD_SCHEMA).sort("ts", "unit_id")


def _next_failure(frame: pl.DataFrame, fails: pl.DataFrame, at: str, name: str) -> pl.DataFrame:
    """Each row with the unit's first failure strictly after its ``at`` column (or null)."""
    keyed = frame.with_row_index("_r").sort(at)
    later = fails.with_columns(pl.col("failed_at").alias(name))
    joined = keyed.join_asof(
        later.rename({"failed_at": "_key"}),
        left_on=at,
        right_on="_key",
        by="unit_id",
        strategy="forward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    return joined.sort("_r").drop("_r", "_key")


# --- estimates and the chooser ------------------------------------------------------


@dataclass
class Estimates:
    """Per band: records, failures, and the doubly robust GPU-hours of each arm."""

    # band, label, records, failure_share, drains, none_gpu_h, drain_gpu_h, drain_model_gpu_h,
    # replacements, replace_gpu_h (null without a recorded replacement)
    table: pl.DataFrame
    bands: tuple[float, ...]

    def cost(self, band: int, arm: str) -> float | None:
        row = self.table.filter(pl.col("band") == band)
        if row.height == 0:
            return None
        return float(row[f"{arm}_gpu_h"][0])


def _direct_drain(costs: DrainCosts, failure_share: pl.Expr, late_share: pl.Expr) -> pl.Expr:
    """The direct model: the cost model's drain cost with the band's observed outcomes."""
    return (
        costs.drain_cost_gpu_hours
        + (1.0 - failure_share) * costs.idle_unit_gpu_hours
        + late_share * (costs.failure_loss_gpu_hours)
    )


def fit(records: pl.DataFrame, costs: DrainCosts, settings: LearnedSettings) -> Estimates:
    """Per band, the doubly robust mean GPU-hours of ``none`` and ``drain`` per record."""
    weight = (1.0 / pl.col("propensity").clip(1.0 / settings.max_weight, 1.0)).alias("w")
    per_band = records.group_by("band").agg(
        pl.len().alias("records"),
        pl.col("failed").mean().alias("failure_share"),
        pl.col("late").sum().alias("_late"),
        (pl.col("arm") == "drain").sum().alias("drains"),
        pl.col("cost_none").mean().alias("none_gpu_h"),
        # replacements are the repeat-offender rule's, not the chooser's: their realised
        # GPU-hours are shown (self-normalised: the mean of those recorded), not chosen from
        (pl.col("arm") == "replace").sum().alias("replacements"),
        pl.col("cost").filter(pl.col("arm") == "replace").mean().alias("replace_gpu_h"),
    )
    per_band = per_band.with_columns(
        _direct_drain(costs, pl.col("failure_share"), pl.col("_late") / pl.col("records")).alias("drain_model_gpu_h")
    )
    residual = (
        records.join(per_band.select("band", "drain_model_gpu_h"), on="band")
        .with_columns(weight)
        .group_by("band")
        .agg(
            (
                pl.when(pl.col("arm") == "drain")
                .then(pl.col("w") * (pl.col("cost") - pl.col("drain_model_gpu_h")))
                .otherwise(0.0)
            )
            .sum()
            .alias("_residual")
        )
    )
    table = (
        per_band.join(residual, on="band")
        .with_columns((pl.col("drain_model_gpu_h") + pl.col("_residual") / pl.col("records")).alias("drain_gpu_h"))
        .with_columns(
            pl.col("band").map_elements(lambda b: band_label(b, settings.bands), return_dtype=pl.String).alias("label")
        )
        .select(
            "band",
            "label",
            "records",
            "failure_share",
            "drains",
            "none_gpu_h",
            "drain_gpu_h",
            "drain_model_gpu_h",
            "replacements",
            "replace_gpu_h",
        )
        .sort("band")
    )
    return Estimates(table=table, bands=settings.bands)


@dataclass
class LearnedChoice:
    """The learned chooser: a band's arm (``drain`` or ``none``) and where it explores.

    ``threshold_band`` is the lowest band from which every band up is cheaper drained
    (None: no band is); ``explore_bands`` are the bands below it with fewer than
    ``min_drains`` recorded drains, where a unit is drained with ``explore_rate``.
    """

    settings: LearnedSettings
    threshold_band: int | None
    explore_bands: frozenset[int] = frozenset()
    fixed_band: int | None = None  # the fixed policy's first drained band: decides bands without records
    estimates: Estimates | None = None
    notes: list[str] = field(default_factory=list)

    def arm(self, risk: float) -> str:
        band = band_of(risk, self.settings.bands)
        if band == 0:
            return "none"
        if self.estimates is not None and self.estimates.cost(band, "none") is None:
            return "drain" if self.fixed_band is not None and band >= self.fixed_band else "none"
        return "drain" if self.threshold_band is not None and band >= self.threshold_band else "none"

    def threshold(self) -> float | None:
        """The risk the learned chooser starts draining at."""
        if self.threshold_band is None:
            return None
        return self.settings.bands[self.threshold_band - 1]

    def explores(self, unit_id: str, risk: float, now: datetime) -> bool:
        """Whether this unit is drained to explore today (a fixed draw per unit and day,
        so every publish of a day agrees)."""
        if self.settings.explore_rate <= 0 or band_of(risk, self.settings.bands) not in self.explore_bands:
            return False
        return explore_draw(unit_id, now) < self.settings.explore_rate

    def explore_room(self, previous: Iterable[Any], now: datetime) -> int:
        """Exploratory drains still allowed on ``now``'s UTC day: ``explore_per_day`` less
        the drains of ``previous`` unit states (the policy's memory) explored that day."""
        earlier = sum(
            1 for u in previous if u.explored and u.drain_since is not None and u.drain_since.date() == now.date()
        )
        return max(0, self.settings.explore_per_day - earlier)

    def note(self, risk: float, exploring: bool) -> str:
        """What a drain's reason adds: exploration, or the band's realised GPU-hours."""
        if exploring:
            return f"exploration: drained with probability {self.settings.explore_rate:g} to learn this band"
        return self.describe(risk)

    def describe(self, risk: float) -> str:
        band = band_of(risk, self.settings.bands)
        label = band_label(band, self.settings.bands)
        if self.estimates is None or self.estimates.cost(band, "none") is None:
            return f"learned: band {label}"
        none, drain = self.estimates.cost(band, "none"), self.estimates.cost(band, "drain")
        return f"learned: band {label} realised {drain:.0f} GPU-h drained vs {none:.0f} not, per decision"


def explore_draw(unit_id: str, now: datetime) -> float:
    """A uniform number in [0, 1) fixed by the unit and the UTC day."""
    digest = hashlib.sha256(f"{unit_id}|{now:%Y-%m-%d}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def fixed_band(settings: LearnedSettings, enter_risk: float) -> int | None:
    """The first band the fixed policy drains all of (its lower edge at ``enter_risk`` or above)."""
    for band, edge in enumerate(settings.bands, start=1):
        if edge >= enter_risk:
            return band
    return None


def choose(estimates: Estimates, settings: LearnedSettings, fixed: int | None = None) -> LearnedChoice:
    """The lowest band from which draining is cheaper in it and every band above.

    A band without records keeps the fixed policy's arm (``fixed``: its first drained band).
    """
    bands = range(1, len(settings.bands) + 1)
    cheaper = {}
    for band in bands:
        none, drain = estimates.cost(band, "none"), estimates.cost(band, "drain")
        if none is None:  # no record: the fixed policy's arm
            cheaper[band] = fixed is not None and band >= fixed
        else:
            cheaper[band] = drain is not None and drain < none
    threshold = None
    for band in reversed(bands):
        if not cheaper[band]:
            break
        threshold = band
    table = estimates.table
    short = set(table.filter(pl.col("drains") < settings.min_drains).get_column("band").to_list())
    short |= {b for b in bands if estimates.cost(b, "none") is None}
    explore = frozenset(b for b in short if threshold is None or b < threshold)
    return LearnedChoice(
        settings=settings, threshold_band=threshold, explore_bands=explore, estimates=estimates, fixed_band=fixed
    )


# --- learned against fixed, out of sample -----------------------------------------------


@dataclass
class Comparison:
    """Learned chooser against the fixed policy on the later records (GPU-hours, lower is better)."""

    split_at: datetime | None
    train_records: int
    test_records: int
    fixed_gpu_h: float
    learned_gpu_h: float
    difference_gpu_h: float  # learned - fixed: negative = the learned chooser saves
    interval: tuple[float, float]
    confidence: float
    learned_threshold: float | None
    estimates: pl.DataFrame
    better: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "split_at": self.split_at.isoformat() if self.split_at else None,
            "train_records": self.train_records,
            "test_records": self.test_records,
            "fixed_gpu_h": self.fixed_gpu_h,
            "learned_gpu_h": self.learned_gpu_h,
            "difference_gpu_h": self.difference_gpu_h,
            "interval": list(self.interval),
            "confidence": self.confidence,
            "learned_threshold": self.learned_threshold,
            "better": self.better,
            "estimates": self.estimates.to_dicts(),
        }


def dr_terms(records: pl.DataFrame, choice: LearnedChoice, costs: DrainCosts) -> np.ndarray:
    """Each record's doubly robust GPU-hours under ``choice`` (a replacement stays one:
    the repeat-offender rule applies whichever chooser decides)."""
    est = choice.estimates
    if est is None:
        raise ValueError("a learned choice without estimates cannot be valued")
    model = {b: m for b, m in est.table.select("band", "drain_model_gpu_h").iter_rows()}
    out = np.empty(records.height)
    for i, row in enumerate(records.iter_rows(named=True)):
        arm = "replace" if row["arm"] == "replace" else choice.arm(row["risk"])
        if arm == "replace" or (arm == "drain" and row["arm"] == "drain" and row["band"] not in model):
            out[i] = row["cost"]
        elif arm == "none":
            out[i] = row["cost_none"]
        else:
            q = model.get(row["band"], costs.drain_cost_gpu_hours + costs.idle_unit_gpu_hours)
            weight = min(1.0 / max(row["propensity"], 1e-12), choice.settings.max_weight)
            out[i] = q + (weight * (row["cost"] - q) if row["arm"] == "drain" else 0.0)
    return out


def compare(
    records: pl.DataFrame, costs: DrainCosts, settings: LearnedSettings, *, fixed: int | None = None, seed: int = 0
) -> Comparison | None:
    """Fit on the earlier half of the records (by time), value learned and fixed on the later.

    The fixed policy's value on a record is its realised GPU-hours (it made the recorded
    decision); the learned chooser's is :func:`dr_terms`.  The interval of the difference
    resamples units of the later half.  None when either half is empty.
    """
    if records.height < 2:
        return None
    split_at = records.get_column("ts").sort()[records.height // 2]
    train, test = records.filter(pl.col("ts") < split_at), records.filter(pl.col("ts") >= split_at)
    if train.height == 0 or test.height == 0:
        return None
    choice = choose(fit(train, costs, settings), settings, fixed)
    learned = dr_terms(test, choice, costs)
    fixed = test.get_column("cost").to_numpy()
    diff = learned - fixed
    units = test.get_column("unit_id").to_numpy()
    _, index = np.unique(units, return_inverse=True)
    per_unit = np.bincount(index, weights=diff)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, per_unit.size, size=(settings.bootstrap, per_unit.size))
    totals = per_unit[draws].sum(axis=1)
    tail = (1.0 - settings.confidence) / 2.0
    low, high = (float(v) for v in np.quantile(totals, [tail, 1.0 - tail]))
    return Comparison(
        split_at=split_at,
        train_records=train.height,
        test_records=test.height,
        fixed_gpu_h=float(fixed.sum()),
        learned_gpu_h=float(learned.sum()),
        difference_gpu_h=float(diff.sum()),
        interval=(low, high),
        confidence=settings.confidence,
        learned_threshold=choice.threshold(),
        estimates=choice.estimates.table if choice.estimates is not None else pl.DataFrame(),
        better=high < 0.0,
    )
