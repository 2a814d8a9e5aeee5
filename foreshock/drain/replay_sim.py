"""The policy run snapshot by snapshot over a score history (the replay's engine).

Each snapshot's risks go to :class:`~foreshock.drain.policy.DrainPolicy` with its guards
and state exactly as in production.  Granted drains take effect when decided (``drain_now``,
``replace``) or half a checkpoint interval later (``drain_at_checkpoint``); the unit is
then out for ``repair_turnaround`` (``[lemon] replace_turnaround`` for a replacement) and
comes back through burn-in.  A failed unit is out for ``repair_turnaround``.

Repeat offenders (:mod:`foreshock.drain.lemons`) are found at every snapshot from the
failures up to it and the drains granted before it.  **Replacement assumption:** a
replaced unit's recorded failures from ``min_lead_time`` after the replacement on belonged
to the hardware taken out, so they are *avoided* (neither caught nor missed, no cost); the
new hardware is scored with the old hardware's recorded risks (which may drain it again,
as healthy), and is not given failures of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from foreshock.budget import epoch_day
from foreshock.drain.learned import LearnedChoice
from foreshock.drain.learned_history import DECISIONS_SCHEMA, taken_on_risk
from foreshock.drain.lemons import REPLACE, lemons_at, node_map
from foreshock.drain.policy import DrainPolicy
from foreshock.drain.settings import PolicySettings
from foreshock.drain.state import PolicyState

DRAIN_LOG = {
    "unit_id": pl.String(),
    "decided_at": pl.Datetime("us", "UTC"),
    "action": pl.String(),
    "effective_at": pl.Datetime("us", "UTC"),
    "risk": pl.Float64(),
    "returned_at": pl.Datetime("us", "UTC"),
}
FAILURES = {"unit_id": pl.String(), "failed_at": pl.Datetime("us", "UTC")}


@dataclass
class Simulation:
    """What one run of the policy over the history did.

    Attributes
    ----------
    drains
        The drains (and replacements) granted: ``unit_id, decided_at, action, effective_at, risk``.
    avoided
        Failures of replaced units that the replacement avoided (``unit_id, failed_at``).
    decisions
        Decisions taken on risk (``unit_id, ts, risk, action``), for the learned chooser.
    """

    drains: pl.DataFrame
    avoided: pl.DataFrame
    decisions: pl.DataFrame


def simulate_policy(
    risks: pl.DataFrame,
    failures: pl.DataFrame,
    settings: PolicySettings,
    *,
    fleet: pl.DataFrame,
    min_lead_time: timedelta = timedelta(0),
    chooser: LearnedChoice | None = None,
    recorded_drains: pl.DataFrame | None = None,
) -> Simulation:
    """Run the policy snapshot by snapshot.

    Parameters
    ----------
    risks
        :func:`~foreshock.drain.risk_table.unit_risk_table` with ``latest_only=False``.
    failures
        ``unit_id, failed_at`` of every recorded failure.
    fleet
        Every unit with its fault-domain columns (sizes the guards).
    min_lead_time
        A replaced unit's failures this long after its replacement on are avoided.
    chooser
        A learned chooser to decide with (None: the fixed policy).
    recorded_drains
        Drains operations recorded (the ``drains`` table): incidents of repeat offenders too.
    """
    # Over 80 lines: the replay's loop (failures, returns, lemons, decision, drains) is
    # one sequence over time whose steps share its running state.
    policy = DrainPolicy(settings, chooser)
    costs = settings.costs
    state = PolicyState()
    out_until: dict[str, datetime] = {}
    replaced: dict[str, datetime] = {}
    drains: list[dict] = []
    avoided: list[dict] = []
    logged: list[pl.DataFrame] = []
    failures = failures.sort("failed_at").select(pl.col("unit_id").cast(pl.String), pl.col("failed_at"))
    fail_rows = list(failures.iter_rows())
    known = failures  # the failures the policy sees: without those a replacement avoided
    next_failure = 0
    nodes = node_map(fleet)
    lemon_cache: tuple[tuple, pl.DataFrame] | None = None
    recorded = None
    if recorded_drains is not None and recorded_drains.height:
        recorded = recorded_drains.select(
            pl.col("unit_id").cast(pl.String),
            pl.col("drained_at").cast(pl.Datetime("us", "UTC")),
            *(
                pl.col(c).cast(t) if c in recorded_drains.columns else pl.lit(None, dtype=t).alias(c)
                for c, t in (("returned_at", pl.Datetime("us", "UTC")), ("action", pl.String()))
            ),
        )
    # Units below the lowest exit threshold, with no state and not out, can only be
    # "none": skipping them keeps a replay over months of hourly snapshots fast.
    floor = settings.watch_risk * settings.hysteresis_ratio
    reporting = units_reporting(risks) if settings.daily_budget is not None else {}
    for (ts,), snapshot in risks.sort("ts").group_by(["ts"], maintain_order=True):
        while next_failure < len(fail_rows) and fail_rows[next_failure][1] <= ts:
            unit_id, failed_at = fail_rows[next_failure]
            next_failure += 1
            if unit_id in replaced and failed_at >= replaced[unit_id] + min_lead_time:
                avoided.append({"unit_id": unit_id, "failed_at": failed_at})
                known = known.filter(~((pl.col("unit_id") == unit_id) & (pl.col("failed_at") == failed_at)))
                continue
            if out_until.get(unit_id, failed_at) <= failed_at:  # failed in service: in repair
                out_until[unit_id] = failed_at + costs.repair_turnaround
        for unit_id in [u for u, until in out_until.items() if until <= ts]:
            del out_until[unit_id]
            unit = state.get(unit_id)
            unit.level, unit.drain_action, unit.drain_since = 0, None, None
            unit.returned_at = ts  # back from repair: hardware admission
            state.units[unit_id] = unit
        keep = pl.col("risk") >= floor
        interesting = set(state.units) | set(out_until)
        if interesting:
            keep = keep | pl.col("unit_id").is_in(list(interesting))
        active = snapshot.filter(keep)
        key = (ts.date(), next_failure, len(avoided), len(drains))
        if lemon_cache is None or lemon_cache[0] != key:  # incidents change with a day, a failure, a drain
            granted = pl.DataFrame(drains, schema=DRAIN_LOG).select(
                "unit_id", pl.col("effective_at").alias("drained_at"), "returned_at", "action"
            )
            if recorded is not None:
                granted = pl.concat([recorded, granted], how="vertical_relaxed")
            lemon_cache = (key, lemons_at(ts, known.filter(pl.col("failed_at") <= ts), granted, nodes, settings.lemons))
        decision = policy.decide(
            active,
            ts,
            state,
            inventory=fleet,
            failures=known,
            out_of_service={u: f"in repair until {t:%Y-%m-%d %H:%M}" for u, t in out_until.items()},
            reporting=reporting.get(epoch_day(ts)),
            lemons=lemon_cache[1],
        )
        state = decision.state
        recs = decision.recommendations
        logged.append(recs.filter(taken_on_risk()).select("unit_id", pl.lit(ts).alias("ts"), "risk", "action"))
        if decision.new_drains:
            granted_now = recs.filter(pl.col("unit_id").is_in(decision.new_drains))
            for row in granted_now.select("unit_id", "action", "risk").iter_rows(named=True):
                delay = costs.checkpoint_interval / 2 if row["action"] == "drain_at_checkpoint" else timedelta(0)
                effective = ts + delay
                replace = row["action"] == REPLACE
                back = effective + (settings.lemons.replace_turnaround if replace else costs.repair_turnaround)
                drains.append({"decided_at": ts, "effective_at": effective, "returned_at": back, **row})
                out_until[row["unit_id"]] = back
                if replace:
                    replaced[row["unit_id"]] = effective
    decisions = (
        pl.concat(logged, how="vertical_relaxed").cast(DECISIONS_SCHEMA)
        if logged
        else pl.DataFrame(schema=DECISIONS_SCHEMA)
    )
    return Simulation(
        drains=pl.DataFrame(drains, schema=DRAIN_LOG),
        avoided=pl.DataFrame(avoided, schema=FAILURES),
        decisions=decisions,
    )


def units_reporting(risks: pl.DataFrame) -> dict[int, int]:
    """Units with a score on each UTC day (days since the epoch): what a
    ``daily_budget_share`` is a share of."""
    per_day = risks.group_by((pl.col("ts").cast(pl.Datetime("us", "UTC")).dt.epoch("s") // 86400).alias("day")).agg(
        pl.col("unit_id").n_unique().alias("units")
    )
    return dict(zip(per_day.get_column("day").to_list(), per_day.get_column("units").to_list()))
