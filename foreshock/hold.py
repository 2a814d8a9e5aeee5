"""The hold before a unit enters drain (``[policy] enter_for``): the ``for`` of an alert rule.

A risk that crosses the drain threshold for an hour or two should not drain a unit; one
that stays above it should.  A benign burst of corrected memory errors lifts a GPU's
short-window features for a few hours, and its risk with them, where a failing GPU's risk
stays up for days.  Prometheus alerting rules carry the same idea as ``for``: the condition
must hold at every evaluation for that long before the alert fires.

A unit's **held risk** at a snapshot is the lowest of its risks at its last
``k = ceil(enter_for / step)`` snapshots when they are consecutive (no gap over 1.5 snapshot
intervals), and null when it has fewer: the unit enters drain once its held risk reaches the
threshold, that is once its risk has been at or above it at each of its last ``k``
snapshots.  Each snapshot stands for its interval, so a hold no longer than one snapshot
interval changes nothing (``k = 1``: the held risk is the risk), and daily snapshots are
never delayed by an hours-long hold.

One function computes it (per horizon: :func:`with_held_risks`) for the three places that decide entry: the backtest's replay of
the policy (:mod:`foreshock.models.evaluation.alert_replay`), live scoring (which scores
each unit's last ``k`` snapshots) and the drain replay, so all three agree.

**A second way in** (``[policy] second_horizon``, :class:`Entry`): a unit may also enter drain
once its risk at a shorter horizon (``24h`` beside the decision horizon ``72h``) has held at
or above its own threshold ``second_enter_risk`` for the same ``enter_for``.  Both readings
are put on the decision threshold's scale, the second one multiplied by ``enter_risk /
second_enter_risk``, and the larger is the unit's **entry risk**: it reaches ``enter_risk``
exactly when one of the two reaches its own threshold, and the hysteresis (leave below
``exit_risk``) applies to it the same way.  Its held value is the larger of the two held
risks (each held on its own horizon's series).

**The decision risk's own way in** (``[policy] decision_enter_risk``, ``decision_enter_for``):
beside a second way in, the decision horizon's risk may enter on its own threshold and hold
(a 72-hour risk held at or above 0.6 for 48 hours) instead of ``enter_risk`` and
``enter_for``.  It is put on the entry scale the same way (multiplied by ``enter_risk /
decision_enter_risk``) and held on its own series for its own hold, so a unit enters once
either risk has held at or above its own threshold for its own hold.  A slow failure (a
temperature drifting up over days) lifts the 72-hour risk for days while the 24-hour
risk cannot tell which day; a benign burst lifts it for hours.  Without a second way in
the decision risk enters on ``enter_risk`` and ``enter_for`` as always.

**The second horizon alone** (``[policy] second_only``): only the second risk enters drain.
The decision risk still places the lower levels (watch, diagnostics) and keeps a drained
unit in drain while it stays at or above ``exit_risk``, but it is held just below
``enter_risk`` in the entry risk, so it never enters a unit by itself.  A fleet whose
72-hour risk is too coarse to drain on at a real failure rate can then drain on its 24-hour
risk and still be judged, and watched, at 72 hours.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import polars as pl

from foreshock.config import builtin_default
from foreshock.durations import format_duration, parse_duration, spelled_as

log = logging.getLogger(__name__)

HELD_COLUMN = "risk_held"
# The entry risk and its held value (the decision risk and held risk without a second horizon).
ENTRY_COLUMN = "entry_risk"
ENTRY_HELD_COLUMN = "entry_risk_held"
# A gap longer than this many snapshot intervals breaks a run (the replay's own rule for
# "the unit was out").
MAX_GAP_STEPS = 1.5


def hold_snapshots(hold: timedelta, step: timedelta) -> int:
    """How many consecutive snapshots a hold spans: ``ceil(hold / step)``, at least 1."""
    if step <= timedelta(0):
        raise ValueError(f"snapshot interval must be positive, got {step}")
    return max(1, math.ceil(hold / step - 1e-9))


def with_held_risk(
    frame: pl.DataFrame,
    hold: timedelta,
    step: timedelta,
    *,
    by: Sequence[str] = ("unit_id",),
    risk: str = "risk",
    ts: str = "ts",
) -> pl.DataFrame:
    """``frame`` with :data:`HELD_COLUMN` added (rows in their original order).

    Parameters
    ----------
    frame
        One row per series (``by``) and snapshot ``ts`` (a datetime), with its ``risk``.
    hold, step
        ``[policy] enter_for`` and the snapshot interval.
    by
        The columns naming one risk series (a unit; a unit and horizon for long scores).
    """
    k = hold_snapshots(hold, step)
    if k == 1:
        return frame.with_columns(pl.col(risk).alias(HELD_COLUMN))
    keys = list(by)
    lowest = pl.col(risk).rolling_min(window_size=k).over(keys)
    # the k snapshots are consecutive when none of their k - 1 gaps is over the limit
    widest_gap = pl.col("_gap").rolling_max(window_size=k - 1).over(keys)
    held = pl.when(widest_gap <= step * MAX_GAP_STEPS).then(lowest).otherwise(None)
    return (
        frame.with_row_index("_order")
        .sort([*keys, ts])
        .with_columns(pl.col(ts).diff().over(keys).alias("_gap"))
        .with_columns(held.alias(HELD_COLUMN))
        .sort("_order")
        .drop("_order", "_gap")
    )


def with_held_risks(
    scores: pl.DataFrame,
    hold: timedelta,
    step: timedelta,
    holds: Mapping[str, timedelta] | None = None,
    *,
    by: Sequence[str] = ("unit_id", "horizon"),
) -> pl.DataFrame:
    """Long scores (a row per unit, snapshot and ``horizon``) with :data:`HELD_COLUMN`
    added, each horizon's series held for its own hold: ``holds`` by horizon (any spelling
    of the duration: ``1d`` is the scores' ``24h``; :meth:`Entry.holds`), ``hold`` for the
    rest.  Rows in their original order."""
    present = scores.get_column("horizon").unique().to_list() if scores.height else []
    own = {}
    for horizon, its_hold in (holds or {}).items():
        spelled = spelled_as(horizon, present)
        if spelled is not None and hold_snapshots(its_hold, step) != hold_snapshots(hold, step):
            own[spelled] = its_hold
    if not own:
        return with_held_risk(scores, hold, step, by=by)
    ordered = scores.with_row_index("_row")
    parts = [
        with_held_risk(ordered.filter(pl.col("horizon") == horizon), its_hold, step, by=by)
        for horizon, its_hold in own.items()
    ]
    parts.append(with_held_risk(ordered.filter(~pl.col("horizon").is_in(list(own))), hold, step, by=by))
    return pl.concat(parts, how="vertical_relaxed").sort("_row").drop("_row")


@dataclass(frozen=True)
class Entry:
    """How a unit's risk enters the drain level: the decision horizon's risk against
    ``enter_risk``, or also (``second_horizon`` set) the second horizon's risk against
    ``second_enter_risk`` (see the module docstring)."""

    horizon: str
    enter_risk: float
    second_horizon: str = ""
    second_enter_risk: float = 1.0
    second_only: bool = False
    # the decision risk's own way in beside a second one (None: enter_risk, the hold)
    decision_enter_risk: float | None = None
    decision_enter_for: timedelta | None = None

    def __post_init__(self) -> None:
        if self.second_horizon and not 0.0 < self.second_enter_risk <= 1.0:
            raise ValueError(f"[policy] second_enter_risk must be in (0, 1], got {self.second_enter_risk}")
        if self.decision_enter_risk is not None and not 0.0 < self.decision_enter_risk <= 1.0:
            raise ValueError(f"[policy] decision_enter_risk must be in (0, 1], got {self.decision_enter_risk}")
        if self.decision_enter_for is not None and self.decision_enter_for < timedelta(0):
            raise ValueError(f"[policy] decision_enter_for must not be negative, got {self.decision_enter_for}")
        if self.second_only and not self.second_horizon:
            raise ValueError("[policy] second_only = true needs a second_horizon: it names the risk that enters drain")

    @classmethod
    def of(cls, policy: Mapping[str, Any], labels: Sequence[str], horizon: str) -> Entry:
        """``[policy]``'s entry at the decision ``horizon`` of a fleet whose models score the
        ``[labels]`` horizons ``labels`` (:func:`second_way_in`): the drain policy's and the
        backtest's policy point's."""
        second = float(policy.get("second_enter_risk", 1.0))
        return cls(
            horizon, float(policy["enter_risk"]), second_enter_risk=second, **second_way_in(policy, labels, horizon)
        )

    @property
    def horizons(self) -> tuple[str, ...]:
        """The horizons the entry reads, the decision horizon first."""
        return (self.horizon, self.second_horizon) if self.second_horizon else (self.horizon,)

    @property
    def decision_way(self) -> bool:
        """The decision risk has a way in of its own beside the second one (not second_only)."""
        return bool(self.second_horizon) and not self.second_only

    def holds(self, hold: timedelta) -> dict[str, timedelta]:
        """The hold of each horizon the entry reads, ``hold`` (``[policy] enter_for``) but
        for the decision risk's own ``decision_enter_for`` beside a second way in."""
        own = self.decision_enter_for if self.decision_way and self.decision_enter_for is not None else hold
        return {self.horizon: own, **({self.second_horizon: hold} if self.second_horizon else {})}

    def on(self, horizon: str, horizons: Sequence[str]) -> Entry | None:
        """This entry at the decision ``horizon``, its second horizon spelled as the scores'
        ``horizons`` spell it (``1d`` is their ``24h``); None when they lack it."""
        if not self.second_horizon:
            return replace(self, horizon=horizon)
        second = spelled_as(self.second_horizon, horizons)
        return None if second is None else replace(self, horizon=horizon, second_horizon=second)

    def risk(self, of: Callable[[str], pl.Expr]) -> pl.Expr:
        """The entry risk from ``of(horizon)``, each horizon's risk (or held risk) column:
        the larger of the decision risk and the second one on its scale (a missing second
        reading leaves the decision risk)."""
        first = of(self.horizon)
        if not self.second_horizon:
            return first
        if self.second_only:  # held just below enter_risk: the decision risk never enters alone
            first = pl.min_horizontal(first, pl.lit(math.nextafter(self.enter_risk, 0.0)))
        elif self.decision_enter_risk is not None:  # its own threshold, on the entry scale
            first = first * (self.enter_risk / self.decision_enter_risk)
        return pl.max_horizontal(first, of(self.second_horizon) * (self.enter_risk / self.second_enter_risk))

    @property
    def decision_threshold(self) -> float:
        """The decision risk's own threshold to enter drain."""
        return (
            self.decision_enter_risk if self.decision_way and self.decision_enter_risk is not None else self.enter_risk
        )

    def describe(self, hold: timedelta | None = None) -> str:
        """``risk >= 0.5``, ``risk_72h >= 0.6 or risk_24h >= 0.4`` or ``risk_24h >= 0.4``
        (for reports and reasons); with ``hold`` (``enter_for``) each way in says how long
        it must hold: ``risk_72h >= 0.6 held 48h or risk_24h >= 0.4 held 6h``."""
        holds = {} if hold is None else self.holds(hold)

        def held(horizon: str) -> str:
            return f" held {format_duration(holds[horizon])}" if holds and holds[horizon] > timedelta(0) else ""

        if not self.second_horizon:
            return f"risk >= {self.enter_risk:g}{held(self.horizon)}"
        second = f"risk_{self.second_horizon} >= {self.second_enter_risk:g}{held(self.second_horizon)}"
        if self.second_only:
            return second
        return f"risk_{self.horizon} >= {self.decision_threshold:g}{held(self.horizon)} or {second}"


@dataclass(frozen=True)
class ModelEntry:
    """One model's way into drain: its :class:`Entry`, its hold (``enter_for``) and the table
    that set them (``[policy]``, or a model's ``[policy.models.<name>]`` over it), which
    reasons and reports name."""

    entry: Entry
    hold: timedelta
    table: str = "[policy]"

    @classmethod
    def of(cls, config: Any) -> ModelEntry:
        """``[policy]``'s entry (``enter_risk``, ``enter_for`` and the ways in) at ``[models]
        horizon``, for the ``[labels]`` horizons."""
        policy = config.section("policy")
        labels = list(config.settings["labels"]["horizons"])
        entry = Entry.of(policy, labels, str(config.section("models")["horizon"]))
        return cls(entry, config.duration("policy", "enter_for"))

    def with_own(self, model: str, keys: Mapping[str, Any]) -> ModelEntry:
        """This entry with ``model``'s own ``keys`` (``[policy.models.<name>]``: the thresholds
        and holds of :class:`foreshock.config_schema.ModelEntryTable`, checked there) in
        place.  The decision risk's own threshold and hold apply only where the decision risk
        has its own way in (:attr:`Entry.decision_way`), as ``[policy]``'s do."""
        risks = {k: float(keys[k]) for k in ("enter_risk", "second_enter_risk") if k in keys}
        if self.entry.decision_way and "decision_enter_risk" in keys:
            risks["decision_enter_risk"] = float(keys["decision_enter_risk"])
        if self.entry.decision_way and "decision_enter_for" in keys:
            risks["decision_enter_for"] = parse_duration(keys["decision_enter_for"])
        hold = parse_duration(keys["enter_for"]) if "enter_for" in keys else self.hold
        return ModelEntry(replace(self.entry, **risks), hold, f"[policy.models.{model}]")

    def describe(self) -> str:
        """How a unit enters, each way in with its hold (:meth:`Entry.describe`)."""
        return self.entry.describe(self.hold)


@dataclass(frozen=True)
class ModelEntries:
    """Each model's way into drain: ``[policy]``'s, and the models' own
    (``[policy.models.<name>]``) where a model has one.  Which ways in there are
    (``second_horizon``, ``second_only``) is the fleet's, the same for every model.  The
    drain policy resolves it for the primary model, the backtest's policy point and the
    drain replay for each model they judge."""

    default: ModelEntry
    own: Mapping[str, ModelEntry]

    @classmethod
    def of(cls, default: ModelEntry, policy: Mapping[str, Any]) -> ModelEntries | None:
        """From ``[policy]``'s ``models`` table; None when no model has an entry of its own."""
        tables = policy.get("models") or {}
        return cls(default, {name: default.with_own(name, keys) for name, keys in tables.items()}) if tables else None

    def __getitem__(self, model: str | None) -> ModelEntry:
        """``model``'s own entry, else ``[policy]``'s (None: ``[policy]``'s)."""
        return self.default if model is None else self.own.get(model, self.default)


def second_way_in(policy: Mapping[str, Any], labels: Sequence[str], horizon: str) -> dict[str, Any]:
    """``[policy] second_horizon``, ``second_only``, ``decision_enter_risk`` and
    ``decision_enter_for`` as they apply to a fleet whose models score the ``[labels]``
    horizons ``labels`` and decide at ``horizon`` (``second_enter_risk`` is read as it is).

    The second horizon is spelled as ``labels`` spell it (``1d`` is their ``24h``).  The
    built-in second horizon (``24h``) applies only where it is one of ``labels`` and shorter
    than ``horizon``: elsewhere (a daily disk fleet labelled ``14d``, a fleet deciding at
    ``24h``) the policy enters drain on the decision risk alone, and says so once in the
    log.  A second horizon the configuration names itself must be one of ``labels``.  The
    decision risk's own threshold and hold apply only beside a second way in (not with
    ``second_only``); elsewhere they are None (``enter_risk`` and ``enter_for`` decide).
    """
    second = str(policy.get("second_horizon", "") or "")
    spelled = spelled_as(second, labels) if second else None
    if second and spelled is None and second != builtin_default("policy", "second_horizon"):
        raise ValueError(
            f"[policy] second_horizon = {second!r} is not one of [labels] horizons {list(labels)}: "
            "the models score only those"
        )
    # a named horizon that is not shorter is kept: PolicySettings names that error
    builtin_misfits = second == builtin_default("policy", "second_horizon") and (
        spelled is None or parse_duration(spelled) >= parse_duration(horizon)
    )
    if not second or builtin_misfits:
        if second and (second, tuple(labels), horizon) not in _SAID:
            _SAID.add((second, tuple(labels), horizon))
            reason = (
                "is not one of [labels] horizons" if spelled is None else "is not shorter than the decision horizon"
            )
            log.info(
                "[policy] second_horizon %s (built in) %s %s (decision horizon %s): drains enter on the %s risk alone",
                *(second, reason, list(labels), horizon, horizon),
            )
        return {"second_horizon": "", "second_only": False, "decision_enter_risk": None, "decision_enter_for": None}
    only = bool(policy.get("second_only", False))
    own_risk, own_hold = policy.get("decision_enter_risk"), policy.get("decision_enter_for")
    return {
        "second_horizon": spelled,
        "second_only": only,
        "decision_enter_risk": None if only or own_risk is None else float(own_risk),
        "decision_enter_for": None if only or own_hold is None else parse_duration(own_hold),
    }


_SAID: set[tuple[str, tuple[str, ...], str]] = set()  # fallbacks already logged by this process


def entry_series(scores: pl.DataFrame, entry: Entry, hold: timedelta, step: timedelta) -> pl.DataFrame:
    """One unit's entry risk per snapshot from long scores (``unit_id, ts, horizon, risk``
    with a row per horizon): ``unit_id, ts, risk`` (the entry risk) and :data:`HELD_COLUMN`
    (its held value, each horizon held on its own series for its own hold,
    :meth:`Entry.holds`), on the decision horizon's snapshots.  The backtest replays the
    two-horizon policy on it."""
    held = with_held_risks(scores.filter(pl.col("horizon").is_in(list(entry.horizons))), hold, step, entry.holds(hold))
    wide = held.filter(pl.col("horizon") == entry.horizon).select("unit_id", "ts", "risk", HELD_COLUMN)
    if entry.second_horizon:
        second = held.filter(pl.col("horizon") == entry.second_horizon).select(
            "unit_id", "ts", pl.col("risk").alias("_risk2"), pl.col(HELD_COLUMN).alias("_held2")
        )
        wide = wide.join(second, on=["unit_id", "ts"], how="left")
    return wide.select(
        "unit_id",
        "ts",
        entry.risk(lambda h: pl.col("risk" if h == entry.horizon else "_risk2")).alias("risk"),
        entry.risk(lambda h: pl.col(HELD_COLUMN if h == entry.horizon else "_held2")).alias(HELD_COLUMN),
    )
