"""The drain policy: from per-unit risk to one action per unit, within capacity guards.

Actions, least to most severe::

    none < watch < run_diagnostics < drain_at_checkpoint < drain_now

How a unit's action is chosen (``DrainPolicy.decide``):

1. **Left alone.** A unit on a node another tool drained or took down (a Slurm reason not
   starting with ``foreshock:``), a unit down after a recorded failure, or a unit listed as
   out of service gets ``none``; it still counts as out of service for the guards.
2. **Hardware admission.** A unit seen back after a recorded failure is held with
   ``run_diagnostics`` (``dcgmi diag -r 3``) for ``burn_in`` before it is trusted.
3. **Risk level with hysteresis.** The decision risk ``p`` (P(fail within the decision
   horizon)) places the unit on a level: watch at ``watch_risk``, diagnostics at
   ``diagnostics_risk``, drain at ``enter_risk``.  A unit keeps its level until ``p`` falls
   below that level's exit threshold (its entry threshold times ``exit_risk / enter_risk``),
   so a risk series that oscillates around a threshold does not flap the action.  A unit
   enters the drain level only once its risk has been at or above ``enter_risk`` for
   ``enter_for`` (its held risk, :mod:`foreshock.hold`); until then it gets diagnostics.
   With ``second_horizon`` the level is placed by the entry risk instead: the larger of
   ``p`` and the second horizon's risk scaled by ``enter_risk / second_enter_risk``, so a
   unit also enters once its 24-hour risk has held at ``second_enter_risk``; with
   ``second_only`` only that risk enters drain (``p`` places the lower levels); with
   ``decision_enter_risk`` and ``decision_enter_for`` (the default) ``p`` is scaled by
   ``enter_risk / decision_enter_risk`` and held for its own hold, so a unit enters once
   either risk has held at or above its own threshold for its own hold.
4. **Expected cost.** A drain is recommended only when the expected loss of not draining,
   ``p * job_gpus * (checkpoint_interval/2 + restart_time)``, exceeds the expected drain
   cost, ``job_gpus * drain_overhead + (1 - p) * repair_turnaround`` (see
   :class:`~foreshock.costs.DrainCosts`); otherwise the unit gets diagnostics.  With a
   second horizon, ``p`` is at least that horizon's risk.
5. **Now or at the next checkpoint.** The expected lead time (expected time to failure,
   from the hazard implied by the risks at every horizon) decides: shorter than one
   checkpoint interval means the failure is expected before the next checkpoint, so
   ``drain_now``; otherwise ``drain_at_checkpoint``.  A drain never de-escalates from
   ``drain_now`` while it lasts.
6. **Guards.** New drains are granted in order of expected saving while (a) fewer than
   ``max_new_drains_per_run`` were granted this run, (b) the cluster stays within
   ``max_drained_share_cluster`` out of service and (c) every fault domain of the unit
   (``[fleet] fault_domains``: node, rack, lot, any inventory column) stays within
   ``max_drained_share_per_domain``, counting units already out.  A domain may always have
   one unit out (``floor(share * size)`` with a minimum of one), or small domains could
   never be drained.  A refused drain becomes ``watch`` with the guard named.
   With a daily budget (``[policy] drain_budget_per_day`` or ``daily_budget_share`` of the
   units reporting that day, :mod:`foreshock.budget`), (d) the day's new drains stay within
   it: its whole units per day by the day-index rule of :func:`foreshock.budget.allowed_on_day`,
   less the drains granted earlier that day (units whose remembered drain started that day).
7. **Repeat offenders** (:mod:`foreshock.drain.lemons`) it would newly drain get ``replace``
   (hardware replacement / RMA) instead, through the same guards.
8. **Learned chooser** (:mod:`foreshock.drain.learned`): step 4 gives way to the band's
   learned arm, plus at most ``explore_per_day`` exploratory drains, through the same guards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

import polars as pl

from foreshock.drain.actions import (
    ACTIONS,
    DIAGNOSTICS_COMMAND,
    FORESHOCK_REASON_PREFIX,
    OUT_STATES,
    SEVERITY,
)
from foreshock.drain.capacity import Capacity
from foreshock.drain.learned import LearnedChoice
from foreshock.drain.lemons import LEMON_SCHEMA, REPLACE, lemon_reason
from foreshock.drain.reasons import Reasons
from foreshock.drain.risk_table import entry_held_of, entry_of, failure_risk, fleet_table
from foreshock.drain.settings import LEVEL_DIAGNOSTICS, LEVEL_DRAIN, LEVEL_NONE, LEVEL_WATCH, PolicySettings
from foreshock.drain.state import PolicyState, UnitState


@dataclass
class Decision:
    """What one policy run decided.

    Attributes
    ----------
    recommendations
        One row per unit: ``unit_id, node, rack, action, risk, horizon, risk_<h>...,
        lead_time_h, expected_loss_gpu_h, drain_cost_gpu_h, reason, guard, top_signals,
        model_name, model_version, run_id, score_ts`` (sorted most severe first).
    state
        The state to persist for the next run.
    new_drains
        Units whose drain was granted by this run (not already draining).
    released
        Units whose drain ended in this run because their risk fell below ``exit_risk``
        (their nodes may be resumed / uncordoned, see :mod:`foreshock.drain.release`).
    notes
        Messages about the inputs (e.g. a fault-domain column that is absent).
    """

    recommendations: pl.DataFrame
    state: PolicyState
    new_drains: list[str]
    notes: list[str]
    released: list[str] = field(default_factory=list)


def _out_node_reason(state: str | None, reason: str | None) -> str | None:
    """The other tool's reason when a node is out of service and not by foreshock."""
    text = (state or "").lower()
    if not any(word in text for word in OUT_STATES):
        return None
    reason = (reason or "").strip()
    if reason.lower().startswith(FORESHOCK_REASON_PREFIX):
        return None
    return reason or f"state {state}"


def _to_utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@dataclass
class _Run:
    """One decision run: its inputs, looked up once, and what it has decided so far."""

    now: datetime
    previous: PolicyState
    capacity: Capacity
    other_tool: dict[str, str]  # node -> the reason another tool set
    out_of_service: dict[str, str]  # unit -> why it is out
    last_failure: dict[str, datetime]  # unit -> its latest recent failure
    decided: dict[str, dict] = field(default_factory=dict)
    candidates: list[dict] = field(default_factory=list)  # rows asking for a new drain
    released: list[str] = field(default_factory=list)  # drains ended: risk below exit_risk
    state: PolicyState = field(default_factory=PolicyState)
    lemon: dict[str, dict] = field(default_factory=dict)  # unit -> its repeat-offender row
    explored: set[str] = field(default_factory=set)  # units asking for an exploratory drain

    def mark_held_units(self) -> None:
        """Units on nodes another tool holds, or out for another reason, count as out even
        when they are not scored."""
        for unit_id in self.capacity.domain_of:
            if self.capacity.node_of(unit_id) in self.other_tool or unit_id in self.out_of_service:
                self.capacity.mark_out(unit_id)

    def record(self, decision: dict, unit: UnitState | None = None) -> None:
        """Keep a unit's decision (and its state for the next run when given)."""
        self.decided[decision["unit_id"]] = decision
        if unit is not None:
            self.state.units[unit.unit_id] = unit

    def hold(self, decision: dict, unit: UnitState) -> None:
        """A unit out of service for a reason of its own: counted out, remembered."""
        self.capacity.mark_out(unit.unit_id)
        self.record(decision, unit)


def _other_tool_nodes(node_states: pl.DataFrame | None) -> dict[str, str]:
    if node_states is None or node_states.height == 0:
        return {}
    out = {}
    for row in node_states.to_dicts():
        reason = _out_node_reason(row.get("state"), row.get("reason"))
        if reason is not None:
            out[row["node"]] = reason
    return out


def _has_risk(row: dict) -> bool:
    return row.get("risk") is not None and math.isfinite(row["risk"])


class DrainPolicy:
    """Chooses an action per unit from risk, costs, guards and remembered state.

    Parameters
    ----------
    settings
        Thresholds, budgets and costs (:meth:`PolicySettings.from_config`).
    chooser
        The learned chooser to decide with instead of the cost rule (None: the fixed policy).
    """

    def __init__(self, settings: PolicySettings | None = None, chooser: LearnedChoice | None = None) -> None:
        self.settings = settings or PolicySettings()
        self.chooser = chooser
        self.reasons = Reasons(self.settings)

    def decide(
        self,
        risks: pl.DataFrame,
        now: datetime,
        state: PolicyState | None = None,
        *,
        inventory: pl.DataFrame | None = None,
        failures: pl.DataFrame | None = None,
        node_states: pl.DataFrame | None = None,
        out_of_service: dict[str, str] | None = None,
        reporting: float | None = None,
        lemons: pl.DataFrame | None = None,
    ) -> Decision:
        """Decide one run.

        Parameters
        ----------
        risks
            :func:`unit_risk_table` output (one row per unit).
        now
            The time of the decision (the scores' snapshot time in a replay).
        state
            State from the previous run (empty on the first run).
        inventory
            Inventory (``unit_id`` plus fault-domain columns); sizes the cluster and the
            domains.  Without it, the scored units stand in for the fleet.
        failures
            Recorded failures (``unit_id, failed_at``): a unit with a failure and no score
            since is down; one scored again after a failure is in burn-in.
        node_states
            Current scheduler state per node (``node, state, reason``), e.g. from
            :func:`foreshock.drain.slurm.read_sinfo`.  Nodes another tool took out are left
            alone.
        out_of_service
            Units known to be out for another reason (unit id -> reason).
        reporting
            Units reporting on ``now``'s UTC day, for a ``daily_budget_share`` (default:
            the rows of ``risks`` with a risk scored that day).
        lemons
            :func:`foreshock.drain.lemons.lemon_table` of the incidents before ``now``: its
            counts go on every row, and a repeat offender newly drained gets ``replace``.
        """
        now = _to_utc(now)
        capacity = Capacity.of_fleet(fleet_table(risks, inventory), self.settings)
        run = _Run(
            now=now,
            previous=state or PolicyState(),
            capacity=capacity,
            other_tool=_other_tool_nodes(node_states),
            out_of_service=dict(out_of_service or {}),
            last_failure=self._last_failures(failures, now),
            lemon={r["unit_id"]: r for r in lemons.to_dicts()} if lemons is not None else {},
        )
        run.mark_held_units()
        for row in risks.to_dicts():
            self._decide_unit(run, row)
        notes = [f"fault domain {d!r} is not an inventory column: not guarded" for d in capacity.missing_domains]
        if self.settings.daily_budget is not None:
            notes.append(capacity.open_daily_budget(risks, run.now, run.previous.units.values(), reporting))
        self._grant(run)
        return Decision(
            recommendations=self._frame(run.decided, risks, lemons),
            state=run.state,
            new_drains=capacity.granted,
            notes=notes,
            released=run.released,
        )

    def _decide_unit(self, run: _Run, row: dict) -> None:
        """Steps 1-5 for one unit; a new drain waits in ``run.candidates`` for the guards."""
        unit_id = row["unit_id"]
        prev = run.previous.get(unit_id)
        unit = UnitState(
            unit_id=unit_id,
            last_risk=row.get("risk"),
            last_seen=row.get("ts"),
            returned_after=prev.returned_after,
            returned_at=prev.returned_at,
        )
        held = self._left_alone(row, run)
        if held is not None:
            unit.drain_since = prev.drain_since  # a unit out since its drain still counts on the day's budget
            run.hold(self._row(row, "none", held, None), unit)
            return
        burn_in = self._burn_in(row, unit, run)
        if burn_in is not None:
            run.hold(self._row(row, "run_diagnostics", burn_in, None), unit)
            return
        if not _has_risk(row):
            run.record(self._row(row, "none", f"no risk score for horizon {self.settings.horizon}", None))
            return
        unit.level = self._chosen_level(row, self._level(entry_of(row), prev.level), prev.level, run)
        if unit.level == LEVEL_DRAIN and prev.level == LEVEL_DRAIN:
            run.capacity.mark_out(unit_id)
            unit.drain_since = prev.drain_since or run.now
            unit.drain_action = self._drain_action(row, prev.drain_action)
            run.record(
                self._row(
                    row, unit.drain_action, self.reasons.drain(row, unit.drain_action, True, self._saving(row)), None
                )
            )
        elif unit.level == LEVEL_DRAIN:
            run.candidates.append(row)
        else:
            reason = self.reasons.level(row, unit.level, prev.level, self._held(row))
            run.record(self._row(row, ACTIONS[unit.level], reason, None))
            if prev.level == LEVEL_DRAIN and entry_of(row) < self.settings.exit_risk:
                run.released.append(unit_id)
        if unit.level > LEVEL_NONE or self._remember_return(unit, run.now):
            run.state.units[unit_id] = unit

    # --- inputs -----------------------------------------------------------------------

    def _last_failures(self, failures: pl.DataFrame | None, now: datetime) -> dict[str, datetime]:
        """Each unit's latest failure at or before ``now`` that is recent enough to matter."""
        if failures is None or failures.height == 0:
            return {}
        window = self.settings.costs.repair_turnaround + self.settings.burn_in
        recent = failures.filter((pl.col("failed_at") <= now) & (pl.col("failed_at") > now - window))
        if recent.height == 0:
            return {}
        latest = recent.group_by("unit_id").agg(pl.col("failed_at").max())
        return dict(zip(latest.get_column("unit_id").to_list(), latest.get_column("failed_at").to_list()))

    # --- per-unit rules ---------------------------------------------------------------

    def _left_alone(self, row: dict, run: _Run) -> str | None:
        node = row.get("node")
        if node in run.other_tool:
            return f"left alone: node {node} is out of service by another tool ({run.other_tool[node]})"
        if row["unit_id"] in run.out_of_service:
            return f"left alone: out of service ({run.out_of_service[row['unit_id']]})"
        failed_at = run.last_failure.get(row["unit_id"])
        if failed_at is not None and (row.get("ts") is None or row["ts"] <= failed_at):
            return f"left alone: down since failure at {failed_at:%Y-%m-%d %H:%M} UTC (in repair)"
        return None

    def _burn_in(self, row: dict, unit: UnitState, run: _Run) -> str | None:
        """Hardware admission: a unit back from a failure (or a repair) is held for burn-in.

        Records the return on ``unit`` the first time it is seen back."""
        failed_at = run.last_failure.get(row["unit_id"])
        if failed_at is not None and unit.returned_after != failed_at:  # first seen back
            unit.returned_after, unit.returned_at = failed_at, row.get("ts") or run.now
        if unit.returned_at is None:
            return None
        until = unit.returned_at + self.settings.burn_in
        if run.now >= until:
            return None
        back_from = f"{unit.returned_after:%Y-%m-%d %H:%M} UTC" if unit.returned_after else "repair"
        return (
            f"hardware admission: back in service after failure or repair ({back_from}); "
            f"run `{DIAGNOSTICS_COMMAND}` during burn-in until {until:%Y-%m-%d %H:%M} UTC"
        )

    def _remember_return(self, unit: UnitState, now: datetime) -> bool:
        """Keep a return in the state while its failure can still be looked up, so the
        same failure does not start a second burn-in."""
        window = self.settings.costs.repair_turnaround + self.settings.burn_in
        return unit.returned_at is not None and now < unit.returned_at + window

    def _level(self, risk: float | None, previous: int) -> int:
        """The hysteresis ladder: the highest level entered, or the previous one kept."""
        s = self.settings
        if risk is None or not math.isfinite(risk):
            return previous
        entered = LEVEL_NONE
        for level in (LEVEL_WATCH, LEVEL_DIAGNOSTICS, LEVEL_DRAIN):
            if risk >= s.entry_threshold(level):
                entered = level
        kept = previous
        while kept > LEVEL_NONE and risk < s.exit_threshold(kept):
            kept -= 1
        return max(entered, kept)

    def _chosen_level(self, row: dict, level: int, previous: int, run: _Run) -> int:
        """Step 4 (or 8): whether a drain is worth it, by the cost rule or the learned arm."""
        if level == LEVEL_DRAIN and previous == LEVEL_DRAIN:
            return level  # a drain under way lasts until its risk falls below exit_risk
        if self.chooser is None:
            waits = not (self._held(row) and self._drain_pays(failure_risk(row, self.settings.entry)))
            return LEVEL_DIAGNOSTICS if level == LEVEL_DRAIN and waits else level
        if self.chooser.arm(row["risk"]) == "drain":
            return LEVEL_DRAIN
        if level >= LEVEL_WATCH and self.chooser.explores(row["unit_id"], row["risk"], run.now):
            run.explored.add(row["unit_id"])
            return LEVEL_DRAIN
        return min(level, LEVEL_DIAGNOSTICS)

    def _held(self, row: dict) -> bool:
        """The entry risk has stayed at or above ``enter_risk`` for ``enter_for`` (scores
        without a held risk, written before it existed, are taken as held)."""
        held = entry_held_of(row)
        return held is not None and held >= self.settings.enter_risk

    def _drain_pays(self, risk: float) -> bool:
        costs = self.settings.costs
        return costs.expected_loss(risk) > costs.expected_drain_cost(risk)

    def _drain_action(self, row: dict, previous: str | None) -> str:
        if previous in ("drain_now", REPLACE):
            return previous
        lead = row.get("lead_time_h")
        interval_h = self.settings.costs.checkpoint_interval.total_seconds() / 3600
        return "drain_now" if lead is not None and lead <= interval_h else "drain_at_checkpoint"

    # --- guards -----------------------------------------------------------------------

    def _saving(self, row: dict) -> float:
        costs, p = self.settings.costs, failure_risk(row, self.settings.entry)
        return costs.expected_loss(p) - costs.expected_drain_cost(p)

    def _grant(self, run: _Run) -> None:
        """Step 6: grant new drains, largest expected saving first, while the guards allow."""
        explore_room = self.chooser.explore_room(run.previous.units.values(), run.now) if self.chooser else 0
        for row in sorted(run.candidates, key=lambda r: (-self._saving(r), r["unit_id"])):
            unit = run.state.units[row["unit_id"]]
            exploring = unit.unit_id in run.explored
            guard = run.capacity.refusal(unit.unit_id)
            if guard is None and exploring and explore_room <= 0:
                guard = f"exploration budget: {self.settings.learned.explore_per_day} exploratory drains a day"
            if guard is None:
                run.capacity.grant(unit.unit_id)
                unit.drain_since = run.now
                unit.explored = exploring or None
                explore_room -= int(exploring)
                lemon = run.lemon.get(unit.unit_id, {})
                replace = self.settings.lemons.replace and lemon.get("lemon") is not None
                unit.drain_action = (
                    REPLACE if replace else self._drain_action(row, run.previous.get(unit.unit_id).drain_action)
                )
                reason = self.reasons.drain(row, unit.drain_action, False, self._saving(row))
                if replace:
                    reason = f"{lemon_reason(lemon, self.settings.lemons)}; {reason}"
                if self.chooser is not None:
                    reason += f" ({self.chooser.note(row['risk'], exploring)})"
                decided = self._row(row, unit.drain_action, reason, None)
                decided["propensity"] = self.settings.learned.explore_rate if exploring else 1.0
                run.record(decided, unit)
            else:
                unit.level = LEVEL_DIAGNOSTICS  # held back one level lower, so the next run asks again
                text = self.reasons.with_signals(f"drain deferred by {guard}; {self.reasons.risk_phrase(row)}", row)
                run.record(self._row(row, "watch", text, guard.split(":", 1)[0]), unit)

    # --- output -----------------------------------------------------------------------

    def _row(self, row: dict, action: str, reason: str, guard: str | None) -> dict:
        risk = None if row.get("risk") is None else failure_risk(row, self.settings.entry)
        costs = self.settings.costs
        return {
            "unit_id": row["unit_id"],
            "action": action,
            "reason": reason,
            "guard": guard,
            "expected_loss_gpu_h": costs.expected_loss(risk) if risk is not None else None,
            "drain_cost_gpu_h": costs.expected_drain_cost(risk) if risk is not None else None,
        }

    def _frame(self, decided: dict[str, dict], risks: pl.DataFrame, lemons: pl.DataFrame | None) -> pl.DataFrame:
        schema = {
            "unit_id": pl.String,
            "action": pl.String,
            "reason": pl.String,
            "guard": pl.String,
            "expected_loss_gpu_h": pl.Float64,
            "drain_cost_gpu_h": pl.Float64,
            "propensity": pl.Float64,
        }
        actions = pl.DataFrame([{"propensity": 1.0, **d} for d in decided.values()], schema=schema)
        counts = lemons if lemons is not None else pl.DataFrame(schema=LEMON_SCHEMA)
        counts = counts.select("unit_id", "repeat_offender", "node_repeat_offender")
        out = (
            risks.join(actions, on="unit_id", how="left")
            .join(counts, on="unit_id", how="left")
            .with_columns(pl.col("repeat_offender", "node_repeat_offender").fill_null(0))
        )
        out = out.with_columns(
            pl.lit(self.settings.horizon).alias("horizon"),
            pl.col("action").replace_strict(SEVERITY, return_dtype=pl.Int32).alias("severity"),
        )
        if "ts" in out.columns:
            out = out.rename({"ts": "score_ts"})
        return out.sort(["severity", "risk", "unit_id"], descending=[True, True, False], nulls_last=True)
