"""The drain policy's settings (``[policy]``): thresholds, hysteresis, guards, budget, costs."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from foreshock.budget import DailyBudget
from foreshock.config import builtin_default, builtin_field, section_values
from foreshock.config_schema import ConfigError
from foreshock.costs import DrainCosts, policy_default
from foreshock.drain.learned import LearnedSettings
from foreshock.drain.lemons import LemonSettings
from foreshock.durations import parse_duration
from foreshock.hold import Entry, ModelEntries, ModelEntry

LEVEL_NONE, LEVEL_WATCH, LEVEL_DIAGNOSTICS, LEVEL_DRAIN = 0, 1, 2, 3
# The keys of the built-in drain entry, measured with LightGBM as the primary model.
_ENTRY_KEYS = ("second_enter_risk", "decision_enter_risk", "decision_enter_for")
_WARNED: set[str] = set()  # primary models already warned about by this process

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicySettings:
    """Thresholds, budgets and costs of the drain policy (``[policy]``).

    Parameters
    ----------
    enter_risk, exit_risk
        Hysteresis of the drain level: a unit enters at ``enter_risk`` and leaves below
        ``exit_risk``.  The ratio ``exit_risk / enter_risk`` sets every lower level's exit
        threshold too.
    enter_for
        The hold: a unit enters drain only once its risk has been at or above
        ``enter_risk`` at each of its snapshots over this long (its held risk,
        :mod:`foreshock.hold`; the scores carry it).
    entry
        How a unit's risk enters the drain level (:class:`foreshock.hold.Entry`): its ways in
        beside the decision risk at ``enter_risk`` (a second horizon's risk, the second one
        alone, the decision risk's own threshold and hold).  Its horizon and ``enter_risk``
        are always these settings' own.  None (the default of settings built in code): the
        decision risk alone; the configuration's built-in ``24h`` second way in is resolved
        against its ``[labels]`` by :meth:`from_config`.
    snapshot_every
        The snapshot interval (``[features] snapshot_every``), which sizes the hold.
    watch_risk, diagnostics_risk
        Entry thresholds of the watch and diagnostics levels.
    max_drained_share_cluster, max_drained_share_per_domain
        Largest share of the cluster, and of each fault domain, out of service at once.
    max_new_drains_per_run
        Rate limit on drains granted by one run.
    burn_in
        How long a repaired unit returning to service is held for diagnostics.
    horizon
        The horizon drains are decided on (``[models] horizon``).
    fault_domains
        Inventory columns that fail together (``[fleet] fault_domains``).
    costs
        The cost figures (:class:`DrainCosts`).
    daily_budget
        New drains allowed per UTC day (``[policy] drain_budget_per_day`` or
        ``daily_budget_share``); None: no daily budget, only ``max_new_drains_per_run``.
    lemons
        Repeat offenders and the ``replace`` action (``[lemon]``).
    learned
        The learned chooser's settings (``[policy] chooser`` and the keys after it).
    entries
        Each model's own way into drain (``[policy.models.<name>]``), for
        :meth:`for_model`; None: every model enters as above.
    entry_table
        Where the entry was set, for reasons: ``[policy]``, or a model's
        ``[policy.models.<name>]`` over it (:meth:`for_model`).
    """

    enter_risk: float = policy_default("enter_risk", float)
    exit_risk: float = policy_default("exit_risk", float)
    enter_for: timedelta = policy_default("enter_for", timedelta)
    entry: Entry | None = None  # an Entry once built (None: the decision risk alone)
    snapshot_every: timedelta = builtin_field("features", "snapshot_every", timedelta)
    watch_risk: float = policy_default("watch_risk", float)
    diagnostics_risk: float = policy_default("diagnostics_risk", float)
    max_drained_share_cluster: float = policy_default("max_drained_share_cluster", float)
    max_drained_share_per_domain: float = policy_default("max_drained_share_per_domain", float)
    max_new_drains_per_run: int = policy_default("max_new_drains_per_run", int)
    burn_in: timedelta = policy_default("burn_in", timedelta)
    horizon: str = builtin_field("models", "horizon", str)
    fault_domains: tuple[str, ...] = builtin_field("fleet", "fault_domains", tuple)
    costs: DrainCosts = field(default_factory=DrainCosts)
    daily_budget: DailyBudget | None = None
    lemons: LemonSettings = field(default_factory=LemonSettings)
    learned: LearnedSettings = field(default_factory=LearnedSettings)
    entries: ModelEntries | None = None
    entry_table: str = "[policy]"

    def __post_init__(self) -> None:
        for name in ("enter_risk", "exit_risk", "watch_risk", "diagnostics_risk"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"[policy] {name} must be in (0, 1], got {value}")
        if self.exit_risk > self.enter_risk:
            raise ValueError(f"[policy] exit_risk ({self.exit_risk}) must not exceed enter_risk ({self.enter_risk})")
        if not self.watch_risk <= self.diagnostics_risk <= self.enter_risk:
            raise ValueError("[policy] thresholds must satisfy watch_risk <= diagnostics_risk <= enter_risk")
        for name in ("max_drained_share_cluster", "max_drained_share_per_domain"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"[policy] {name} must be in [0, 1], got {value}")
        if self.max_new_drains_per_run < 0:
            raise ValueError("[policy] max_new_drains_per_run must not be negative")
        parse_duration(self.horizon)
        # the entry's horizon and threshold are these settings' own (Entry validates the rest)
        entry = replace(
            self.entry or Entry(self.horizon, self.enter_risk), horizon=self.horizon, enter_risk=self.enter_risk
        )
        object.__setattr__(self, "entry", entry)
        if entry.second_horizon:
            try:
                second = parse_duration(entry.second_horizon)
            except ValueError as exc:
                raise ValueError(f"[policy] second_horizon: {exc}") from None
            if second >= parse_duration(self.horizon):
                raise ValueError(
                    f"[policy] second_horizon = {entry.second_horizon!r} must be shorter than the decision horizon "
                    f"{self.horizon!r} ([models] horizon)"
                )

    @classmethod
    def from_config(cls, config: Any) -> PolicySettings:
        """Read ``[policy]``, ``[models] horizon``, ``[fleet] fault_domains`` and ``[features]
        snapshot_every`` (the schema has checked their types; the built-in file supplies
        every key a user leaves out), with the entry of ``[models] primary``: its own
        (``[policy.models.<name>]``) where it has one."""
        policy = dict(config.section("policy"))
        default = ModelEntry.of(config)
        entries = ModelEntries.of(default, policy)
        primary = str(config.section("models").get("primary", "gbm"))
        _warn_builtin_entry(primary, policy, default.entry, entries)
        settings = cls(
            entry=default.entry,
            entries=entries,
            **section_values(cls, "policy", policy),
            **section_values(cls, "models", config.section("models")),
            **section_values(cls, "fleet", config.section("fleet")),
            **section_values(cls, "features", config.section("features")),
            costs=DrainCosts.from_policy(policy),
            daily_budget=DailyBudget.from_section(policy),
            lemons=LemonSettings.from_config(config),
            learned=LearnedSettings.from_policy(policy),
        )
        for name in entries.own if entries else ():
            try:
                settings.for_model(name)
            except ValueError as exc:
                raise ConfigError(f"[policy.models.{name}]: {exc}") from None
        return settings.for_model(primary)

    def for_model(self, model: str | None) -> PolicySettings:
        """These settings with ``model``'s way into drain: its own (``[policy.models.<name>]``),
        else ``[policy]``'s (None: ``[policy]``'s; the same settings when no model has one of
        its own)."""
        if self.entries is None:
            return self
        own = self.entries[model]
        return replace(
            self, enter_risk=own.entry.enter_risk, enter_for=own.hold, entry=own.entry, entry_table=own.table
        )

    @property
    def hysteresis_ratio(self) -> float:
        return self.exit_risk / self.enter_risk

    def entry_threshold(self, level: int) -> float:
        return {LEVEL_WATCH: self.watch_risk, LEVEL_DIAGNOSTICS: self.diagnostics_risk, LEVEL_DRAIN: self.enter_risk}[
            level
        ]

    def exit_threshold(self, level: int) -> float:
        if level == LEVEL_DRAIN:
            return self.exit_risk
        return self.entry_threshold(level) * self.hysteresis_ratio


def _warn_builtin_entry(primary: str, policy: dict, entry: Entry, entries: ModelEntries | None) -> None:
    """Say once when a primary model other than LightGBM drains on the built-in entry (no
    entry of its own, ``[policy.models.<name>]``): it was measured with LightGBM, and Cox's
    risks rarely reach it (docs/drain.md, *One entry per model*)."""
    builtin = all(policy.get(key) == builtin_default("policy", key) for key in _ENTRY_KEYS)
    own = entries is not None and primary in entries.own
    if primary == "gbm" or own or not entry.second_horizon or not builtin or primary in _WARNED:
        return
    _WARNED.add(primary)
    log.warning(
        "[models] primary = %r drains on the built-in entry ([policy] decision_enter_risk %s held %s, "
        "second_enter_risk %s), which was measured with LightGBM: a Cox model's risks rarely hold it, so it "
        "drains few units (docs/drain.md, 'One entry per model'); judge its own entry on your history "
        '(benchmarks/rejudge_policy.py, e.g. decision_enter_risk = 0.5, decision_enter_for = "6h", '
        "second_enter_risk = 0.5) and set what wins in a table [policy.models.%s]",
        primary,
        *(policy.get(key) for key in ("decision_enter_risk", "decision_enter_for", "second_enter_risk")),
        primary,
    )
