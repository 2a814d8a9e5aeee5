"""The policy's guards: who is out of service and how many more units may go (cluster and
fault-domain quotas, the rate limit per run, the daily budget and its allowance today)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from foreshock.budget import allowed_on_day, epoch_day
from foreshock.contract import UTC_TS

if TYPE_CHECKING:
    from foreshock.drain.settings import PolicySettings


def _quota(size: int, share: float) -> int:
    """Units a group of ``size`` may have out: ``floor(share * size)``, at least one."""
    return max(1, math.floor(share * size)) if size > 0 else 0


@dataclass
class Capacity:
    """The guards' bookkeeping: who is out of service and how many more may go.

    Built once per run from the fleet (:func:`fleet_table`).  Units are marked out as the
    run finds them (held by another tool, in repair or burn-in, continuing drains) and as
    new drains are granted; :meth:`refusal` names the guard a new drain would break.
    """

    settings: PolicySettings
    cluster_size: int
    domains: list[str]
    domain_of: dict[str, dict]
    domain_size: dict[str, Counter]
    missing_domains: list[str] = field(default_factory=list)
    daily_room: int | None = None  # new drains the day's budget still allows (None: no budget)
    daily_text: str = ""
    out: set[str] = field(default_factory=set)
    granted: list[str] = field(default_factory=list)
    out_by_domain: dict[str, Counter] = field(init=False)

    def __post_init__(self) -> None:
        self.out_by_domain = {d: Counter() for d in self.domains}

    @classmethod
    def of_fleet(cls, fleet: pl.DataFrame, settings: PolicySettings) -> Capacity:
        domains = [d for d in settings.fault_domains if d in fleet.columns]
        lookup = ["unit_id", *dict.fromkeys([c for c in ("node",) if c in fleet.columns] + domains)]
        return cls(
            settings=settings,
            cluster_size=fleet.height,
            domains=domains,
            domain_of={row["unit_id"]: row for row in fleet.select(lookup).to_dicts()},
            domain_size={d: Counter(fleet.get_column(d).to_list()) for d in domains},
            missing_domains=[d for d in settings.fault_domains if d not in fleet.columns],
        )

    def node_of(self, unit_id: str) -> str | None:
        return self.domain_of.get(unit_id, {}).get("node")

    def mark_out(self, unit_id: str) -> None:
        if unit_id in self.out:
            return
        self.out.add(unit_id)
        for d in self.domains:
            self.out_by_domain[d][self.domain_of.get(unit_id, {}).get(d)] += 1

    def grant(self, unit_id: str) -> None:
        self.granted.append(unit_id)
        self.mark_out(unit_id)

    def refusal(self, unit_id: str) -> str | None:
        """The guard (``name: details``) that holds a new drain of ``unit_id`` back, if any."""
        s = self.settings
        if len(self.granted) >= s.max_new_drains_per_run:
            return f"rate limit: {s.max_new_drains_per_run} new drains per run already granted"
        if self.daily_room is not None and len(self.granted) >= self.daily_room:
            return f"daily budget: {self.daily_text}"
        cluster_quota = _quota(self.cluster_size, s.max_drained_share_cluster)
        if len(self.out) + 1 > cluster_quota:
            return (
                f"cluster quota: {len(self.out)} of {self.cluster_size} units out "
                f"(max {s.max_drained_share_cluster:.0%} = {cluster_quota})"
            )
        for d in self.domains:
            value = self.domain_of.get(unit_id, {}).get(d)
            if value is None:
                continue
            size, out = self.domain_size[d][value], self.out_by_domain[d][value]
            quota = _quota(size, s.max_drained_share_per_domain)
            if out + 1 > quota:
                return (
                    f"{d} quota: {d} {value} has {out} of {size} "
                    f"units out (max {s.max_drained_share_per_domain:.0%} = {quota})"
                )
        return None

    def open_daily_budget(
        self, risks: pl.DataFrame, now: datetime, previous: Iterable[Any], reporting: float | None
    ) -> str:
        """Set the day's room for new drains (``[policy]`` daily budget); the sentence saying so.

        ``previous`` are the unit states the policy remembers: drains that started earlier
        on ``now``'s UTC day count against the day.  ``reporting`` is the units reporting
        that day (default: the rows of ``risks`` with a risk scored that day).
        """
        budget, day = self.settings.daily_budget, epoch_day(now)
        if reporting is None:
            scored = risks.filter(pl.col("risk").is_not_null() & pl.col("risk").is_finite())
            if "ts" in scored.columns:
                start = datetime.fromtimestamp(day * 86400, UTC)
                scored = scored.filter(pl.col("ts").cast(UTC_TS) >= start)
            reporting = scored.get_column("unit_id").n_unique()
        allowance = float(budget.allowance(float(reporting)))
        allowed = allowed_on_day(day, allowance)
        day_start = datetime.fromtimestamp(day * 86400, UTC)

        def started(u: Any) -> datetime | None:
            since = u.drain_since
            return None if since is None else (since if since.tzinfo else since.replace(tzinfo=UTC))

        earlier = sum(1 for u in previous if started(u) is not None and started(u) >= day_start)
        self.daily_room = max(0, allowed - earlier)
        self.daily_text = (
            f"{budget.describe()}: {allowance:.2f} today ({reporting:g} units reporting), "
            f"{allowed} whole on {day_start:%Y-%m-%d}, {earlier} granted earlier that day"
        )
        return f"daily drain budget {self.daily_text}"
