"""Daily budgets: how many units may be flagged (alerted, drained) a day.

A budget takes one of two forms, read from a configuration section by
:meth:`DailyBudget.from_section`:

``drain_budget_per_day = k``
    ``k`` units a day, whatever the size of the fleet.
``daily_budget_share = s``
    ``s`` times the units reporting that day (units with at least one snapshot on that UTC
    day; each counted by its ``fleet_weight`` when the inventory carries one, see
    :func:`fleet_weights`), so the budget follows a fleet that grows or shrinks.

**Precedence**: when ``daily_budget_share`` is set it applies and ``drain_budget_per_day``
is not used (``[backtest]`` has an absolute default, so setting the share is how a fleet
switches to a share).  Every report names the budget it used (:meth:`DailyBudget.describe`).

A day's allowance is rarely a whole number (0.1 % of 1,500 units is 1.5 a day).  Two rules
turn it into whole units, both exact on average:

* **carry** (:func:`accrue`, :func:`spend`: the backtest's operating points, which replay a
  whole history): the allowance accrues day by day; units are taken from the top of the
  day's ranking while at least one whole unit of budget is left, each spending its weight
  (1 without weights); what is unspent carries over, up to ``ceil`` of the day's allowance.
  A unit heavier than what is left (a subsampled healthy unit standing for 10) is still
  taken once one whole unit is left, and the overdraft is repaid by the following days, so
  over a period the weight flagged matches the budget.  1.5 a day gives 1, 2, 1, 2, ...
* **day index** (:func:`allowed_on_day`: the drain policy, which runs one decision at a time
  and keeps no ledger): day ``d`` (days since 1970-01-01) allows
  ``floor((d + 1) * c) - floor(d * c)`` units for an allowance ``c``; the sum over any run of
  days is within one of ``c`` times their number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

# A budget of 0.999999999 units is one unit: the allowance is a sum of floats.
_EPS = 1e-9
WEIGHT_COLUMN = "fleet_weight"


@dataclass(frozen=True)
class DailyBudget:
    """A daily budget: ``per_day`` units, or ``share`` of the units reporting that day.

    Exactly one of the two is set.
    """

    per_day: float | None = None
    share: float | None = None

    def __post_init__(self) -> None:
        if (self.per_day is None) == (self.share is None):
            raise ValueError("a daily budget is either per_day or share, exactly one")
        if self.per_day is not None and not self.per_day > 0:
            raise ValueError(f"drain_budget_per_day must be positive, got {self.per_day}")
        if self.share is not None and not 0 < self.share <= 1:
            raise ValueError(f"daily_budget_share must be in (0, 1], got {self.share}")

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> DailyBudget | None:
        """``daily_budget_share`` when set (it takes precedence), else ``drain_budget_per_day``,
        else None (no daily budget)."""
        share = section.get("daily_budget_share")
        if share is not None:
            return cls(share=float(share))
        count = section.get("drain_budget_per_day")
        return None if count is None else cls(per_day=float(count))

    @property
    def scales_with_fleet(self) -> bool:
        return self.share is not None

    def allowance(self, reporting: float | np.ndarray) -> float | np.ndarray:
        """Units allowed on a day with ``reporting`` units (weighted) reporting."""
        if self.share is None:
            return (
                np.full_like(reporting, self.per_day, dtype=float)
                if isinstance(reporting, np.ndarray)
                else self.per_day
            )
        return self.share * reporting

    def describe(self, mean_per_day: float | None = None, *, weighted: bool = False) -> str:
        """The budget in words, e.g. ``2 a day`` or ``0.1 % of the units reporting that day,
        21.4 a day on average``."""
        if self.share is None:
            return f"{self.per_day:g} a day"
        units = (
            "units reporting that day (each counted by its fleet_weight)" if weighted else "units reporting that day"
        )
        text = f"{self.share * 100:g} % of the {units}"
        return text if mean_per_day is None else f"{text}, {mean_per_day:.1f} a day on average"

    def to_dict(self, mean_per_day: float | None = None, *, weighted: bool = False) -> dict[str, Any]:
        return {
            "drain_budget_per_day": self.per_day,
            "daily_budget_share": self.share,
            "mean_per_day": self.per_day if self.share is None else mean_per_day,
            "weighted": weighted,
            "text": self.describe(mean_per_day, weighted=weighted),
        }


def accrue(tokens: float, earned: float, allowance_today: float) -> float:
    """The carry rule: add what the days since the last spend earned, keep at most
    ``ceil`` of today's allowance (an overdraft stays)."""
    return min(tokens + earned, math.ceil(allowance_today - _EPS))


def spend(tokens: float, weights: np.ndarray | None, waiting: int) -> tuple[int, float]:
    """The carry rule's spending: how many of ``waiting`` ranked units to take, and the
    tokens left.

    Units are taken in order while at least one whole unit of budget is left, each
    spending its weight (``weights`` None: 1 each, so ``floor(tokens)`` units).
    """
    if weights is None:
        taken = max(0, min(waiting, int(tokens + _EPS)))
        return taken, tokens - taken
    taken = 0
    while taken < waiting and tokens >= 1.0 - _EPS:
        tokens -= float(weights[taken])
        taken += 1
    return taken, tokens


def allowed_on_day(day: int, allowance: float) -> int:
    """The day-index rule: whole units allowed on day ``day`` (days since the epoch) for
    an allowance of ``allowance`` a day."""
    return int(math.floor((day + 1) * allowance + _EPS) - math.floor(day * allowance + _EPS))


def epoch_day(moment: datetime) -> int:
    """Days since 1970-01-01 of a UTC instant."""
    return int(moment.timestamp() // 86400)


def fleet_weights(inventory: pl.DataFrame | None) -> pl.DataFrame | None:
    """``unit_id, fleet_weight`` from an inventory that carries ``fleet_weight`` (how many
    fleet units a subsampled unit stands for; null = 1), else None (unweighted)."""
    if inventory is None or WEIGHT_COLUMN not in inventory.columns:
        return None
    weights = inventory.select(
        pl.col("unit_id").cast(pl.String), pl.col(WEIGHT_COLUMN).cast(pl.Float64).fill_null(1.0)
    ).unique("unit_id", keep="first", maintain_order=True)
    bad = weights.filter(~(pl.col(WEIGHT_COLUMN) > 0))
    if bad.height:
        raise ValueError(f"inventory: {WEIGHT_COLUMN} must be positive (unit {bad.get_column('unit_id')[0]})")
    return weights
