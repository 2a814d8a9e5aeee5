"""Policy replay: the drain policy run over the backtest's score history.

Each model's backtest scores (``data/backtest/scores.parquet``) are fed snapshot by
snapshot, in time order, to :class:`~foreshock.drain.policy.DrainPolicy`, with its guards
and state exactly as in production.  Drains and failures are then matched:

- a drain takes effect when recommended (``drain_now``) or half a checkpoint interval later
  (``drain_at_checkpoint``, the expected wait for the next checkpoint); the unit is then
  out of service for ``repair_turnaround`` and comes back through burn-in;
- a failure is **drained ahead** when a drain of its unit took effect within the alert
  window ``W`` before it and at least ``L_min`` before it (``[backtest] alert_window``,
  ``min_lead_time``: the definitions of the lead-time metrics);
- a drain is a **drain of a healthy unit** when its unit does not fail within ``W`` after it;
- a failed unit is out of service for ``repair_turnaround`` after the failure.

GPU-hours (``F`` = failure loss, ``D`` = drain cost, ``R`` = idle capacity of a healthy
drained unit over the repair turnaround, see :class:`~foreshock.costs.DrainCosts`)::

    lost     = (failures - drained_ahead) * F + drains * D + healthy_drains * R
    saved    = lost(no prediction) - lost = drained_ahead * F - drains * D - healthy_drains * R
    effective training time = 1 - lost / (fleet units * replay hours)

"No prediction" never drains: every failure is unplanned.

Checkpoint interval (Young 1974, Daly 2006, first order): a synchronous job of ``N`` GPUs
(``job_gpus``) on a fleet of ``U`` units observed for ``h`` hours is interrupted unplanned
at ``lambda = N * (failures - drained_ahead) / (U * h)`` per hour and drained at
``lambda_p = N * drains / (U * h)``.  With restart cost ``tau`` (one checkpoint write plus
a restart, :attr:`~foreshock.costs.DrainCosts.restart_cost_hours`) the interval that
minimises the waste is ``T* = sqrt(2 tau / lambda)``, and the share of time the job
trains at interval ``T`` is::

    effective(T) = 1 - (C / T + lambda * (T / 2 + R) + lambda_p * D)

(``C`` checkpoint write, ``R`` restart, ``D`` drain overhead: checkpoints written, work
lost and restarts after unplanned interruptions, planned drains).  Prediction lowers
``lambda`` by the failures drained ahead, so the job can checkpoint less often.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from foreshock.costs import DrainCosts
from foreshock.drain.learned_history import judge_learned
from foreshock.drain.lemons import REPLACE
from foreshock.drain.replay_sim import Simulation, simulate_policy, units_reporting
from foreshock.drain.risk_table import fleet_table, unit_risk_table
from foreshock.drain.settings import PolicySettings
from foreshock.hold import with_held_risks
from foreshock.models.evaluation.alerts import AlertWindow  # the lead-time metrics' own definition
from foreshock.models.evaluation.caught import match_failures, split_drained, with_precursor_flags
from foreshock.models.evaluation.metrics import gpu_hours_saved

NO_PREDICTION = "no prediction"


@dataclass
class ReplayOutcome:
    """The replay figures of one policy variant (a model, or no prediction)."""

    variant: str
    failures: int
    drained_ahead: int
    healthy_drains: int
    drains: int
    drains_per_day: float
    gpu_hours_lost: float
    gpu_hours_saved: float
    effective_training_time: float
    precursor_failures: int | None = None
    precursor_drained_ahead: int | None = None
    median_lead_time_h: float | None = None
    drained_then_failed: int = 0
    replacements: int = 0  # drains that were replacements of repeat offenders
    avoided_by_replacement: int = 0  # later failures of replaced units, not replayed (replay_sim)

    @property
    def recall(self) -> float | None:
        return self.drained_ahead / self.failures if self.failures else None


def young_daly_interval(tau_h: float, interruptions_per_h: float) -> float:
    """The checkpoint interval ``T* = sqrt(2 tau / lambda)`` in hours (``inf`` when
    ``lambda`` is 0: never interrupted, never worth a checkpoint for failures)."""
    if interruptions_per_h <= 0:
        return math.inf
    return math.sqrt(2.0 * tau_h / interruptions_per_h)


@dataclass
class CheckpointPlan:
    """The checkpoint interval of one policy variant's interruption rates."""

    variant: str
    unplanned_per_day: float
    planned_per_day: float
    optimal_interval_h: float
    effective_at_optimum: float
    effective_at_configured: float


def checkpoint_plan(outcome: ReplayOutcome, costs: DrainCosts, fleet_units: int, hours: float) -> CheckpointPlan:
    """Young/Daly interval and effective training time of a job of ``costs.job_gpus`` GPUs
    with the failure and drain rates one variant showed over the replay."""
    share = costs.job_gpus / (fleet_units * hours)  # per-unit-hour rate -> the job's rate per hour
    unplanned = (outcome.failures - outcome.drained_ahead) * share
    planned = outcome.drains * share
    write_h = costs.checkpoint_write.total_seconds() / 3600
    restart_h = costs.restart_time.total_seconds() / 3600
    drain_h = costs.drain_overhead.total_seconds() / 3600

    def effective(interval_h: float) -> float:
        if math.isinf(interval_h):
            return max(0.0, 1.0 - planned * drain_h)
        waste = write_h / interval_h + unplanned * (interval_h / 2 + restart_h) + planned * drain_h
        return max(0.0, 1.0 - waste)

    optimum = young_daly_interval(costs.restart_cost_hours, unplanned)
    return CheckpointPlan(
        variant=outcome.variant,
        unplanned_per_day=unplanned * 24,
        planned_per_day=planned * 24,
        optimal_interval_h=optimum,
        effective_at_optimum=effective(optimum),
        effective_at_configured=effective(costs.checkpoint_interval.total_seconds() / 3600),
    )


@dataclass
class ReplayReport:
    """All variants of one replay, plus the drain log and the settings it ran with."""

    start: datetime
    end: datetime
    fleet_units: int
    outcomes: list[ReplayOutcome]
    drains: pl.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)
    checkpoint: list[CheckpointPlan] = field(default_factory=list)
    lemons: list[dict[str, Any]] = field(default_factory=list)  # per model: what replacing saved
    learned: list[dict[str, Any]] = field(default_factory=list)  # per model: learned vs fixed chooser

    @property
    def days(self) -> float:
        return max((self.end - self.start).total_seconds() / 86400.0, 1.0 / 24)

    def table(self) -> pl.DataFrame:
        rows = []
        for o in self.outcomes:
            row = asdict(o)
            row["recall"] = o.recall
            rows.append(row)
        return pl.DataFrame(rows)


def _drain_log_schema() -> dict[str, pl.DataType]:
    return {
        "variant": pl.String(),
        "unit_id": pl.String(),
        "decided_at": pl.Datetime("us", "UTC"),
        "action": pl.String(),
        "effective_at": pl.Datetime("us", "UTC"),
        "risk": pl.Float64(),
        "failed_at": pl.Datetime("us", "UTC"),
        "lead_time_h": pl.Float64(),
        "outcome": pl.String(),
    }


def daily_budget_setting(settings: PolicySettings, risks: dict[str, pl.DataFrame]) -> dict[str, Any] | None:
    """The daily drain budget the replay ran with, and its mean allowance over the replayed days."""
    budget = settings.daily_budget
    if budget is None:
        return None
    # Every model scores the same units on the same days: the first one's counts serve.
    reporting = list(units_reporting(next(iter(risks.values()))).values()) if risks else []
    mean = float(sum(budget.allowance(float(n)) for n in reporting) / len(reporting)) if reporting else None
    return budget.to_dict(mean)


def match_drains(
    drains: pl.DataFrame,
    failures: pl.DataFrame,
    alert_window: timedelta,
    min_lead_time: timedelta,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Match drains to failures.

    Returns
    -------
    drains
        The drain log with ``failed_at``, ``lead_time_h`` and ``outcome``
        (``drained_ahead``, ``too_late`` or ``healthy``).
    failures
        The failures with ``drained_ahead`` (bool) and ``lead_time_h``.
    """
    alerts = drains.select("unit_id", pl.col("effective_at").alias("alert_start"))
    failures_out = match_failures(alerts, failures, AlertWindow(alert_window, min_lead_time)).rename(
        {"caught": "drained_ahead"}
    )
    pairs = drains.join(failures.select("unit_id", "failed_at"), on="unit_id", how="inner").filter(
        (pl.col("failed_at") > pl.col("effective_at")) & (pl.col("failed_at") <= pl.col("effective_at") + alert_window)
    )
    pairs = pairs.with_columns(
        ((pl.col("failed_at") - pl.col("effective_at")).dt.total_seconds() / 3600.0).alias("lead_time_h")
    )
    first_failure = (
        pairs.sort("failed_at")
        .group_by("unit_id", "decided_at")
        .agg(pl.col("failed_at").first(), pl.col("lead_time_h").first())
    )
    drains_out = drains.join(first_failure, on=["unit_id", "decided_at"], how="left").with_columns(
        pl.when(pl.col("failed_at").is_null())
        .then(pl.lit("healthy"))
        .when(pl.col("lead_time_h") >= min_lead_time.total_seconds() / 3600.0)
        .then(pl.lit("drained_ahead"))
        .otherwise(pl.lit("too_late"))
        .alias("outcome")
    )
    return drains_out.sort("decided_at", "unit_id"), failures_out


def outcome_of(
    variant: str,
    drains: pl.DataFrame,
    failures: pl.DataFrame,
    settings: PolicySettings,
    fleet_units: int,
    hours: float,
    avoided: int = 0,
) -> ReplayOutcome:
    """The replay figures of one variant from its matched drains and failures (``avoided``:
    failures its replacements avoided, not among ``failures``: each saves ``F``)."""
    costs = settings.costs
    n_fail = failures.height
    ahead = int(failures.get_column("drained_ahead").sum()) if n_fail else 0
    n_drains = drains.height
    healthy = int((drains.get_column("outcome") == "healthy").sum()) if n_drains else 0
    replaced = drains.filter(pl.col("action") == REPLACE) if n_drains else drains
    # A replacement keeps its unit out for [lemon] replace_turnaround whatever followed,
    # where a healthy drain's unit is out for the repair turnaround.
    healthy_replaced = int((replaced.get_column("outcome") == "healthy").sum()) if replaced.height else 0
    saved = gpu_hours_saved(ahead, n_drains, healthy - healthy_replaced, costs)
    saved -= replaced.height * settings.lemons.replace_turnaround.total_seconds() / 3600
    lost = n_fail * costs.failure_loss_gpu_hours - saved
    saved += avoided * costs.failure_loss_gpu_hours  # "no prediction" suffers them all
    capacity = fleet_units * hours
    precursor = precursor_ahead = None
    if "has_precursor" in failures.columns:
        with_precursor = failures.filter(pl.col("has_precursor").fill_null(False))
        precursor = with_precursor.height
        precursor_ahead = int(with_precursor.get_column("drained_ahead").sum()) if precursor else 0
    leads = failures.get_column("lead_time_h").drop_nulls() if n_fail else pl.Series([], dtype=pl.Float64)
    return ReplayOutcome(
        variant=variant,
        failures=n_fail,
        drained_ahead=ahead,
        healthy_drains=healthy,
        drains=n_drains,
        drains_per_day=n_drains / max(hours / 24.0, 1.0 / 24),
        gpu_hours_lost=lost,
        gpu_hours_saved=saved,
        effective_training_time=max(0.0, 1.0 - lost / capacity) if capacity > 0 else float("nan"),
        precursor_failures=precursor,
        precursor_drained_ahead=precursor_ahead,
        median_lead_time_h=float(leads.median()) if leads.len() else None,
        replacements=replaced.height,
        avoided_by_replacement=avoided,
    )


def replay(
    scores: pl.DataFrame,
    failures: pl.DataFrame,
    settings: PolicySettings,
    *,
    alert_window: timedelta,
    min_lead_time: timedelta,
    inventory: pl.DataFrame | None = None,
    ground_truth: pl.DataFrame | None = None,
    models: list[str] | None = None,
    drains: pl.DataFrame | None = None,
) -> ReplayReport:
    """Replay the policy for every model in the backtest scores, plus no prediction.

    Parameters
    ----------
    scores
        Backtest scores ``unit_id, ts, model, horizon, risk``.
    failures
        Recorded failures ``unit_id, failed_at``; those inside the replayed period count.
    settings
        The policy settings (thresholds, guards, costs).
    alert_window, min_lead_time
        ``W`` and ``L_min`` of the lead-time metrics.
    inventory
        Fleet inventory (fault domains, fleet size); the scored units otherwise.
    ground_truth
        Optional simulator truth (``unit_id, failed_at, has_precursor``) to split
        failures with and without a precursor.
    models
        Models to replay (default: every model in ``scores``).
    drains
        Drains that really happened (the ``drains`` table): a failure of a unit during
        one is *drained then failed*, reported apart and not replayed as a failure any
        variant could catch or miss.
    """
    # Over 80 lines for its docstring (24 lines): the body itself is 66 lines.
    if scores.height == 0:
        raise ValueError("backtest scores are empty: nothing to replay")
    if "model" not in scores.columns:
        scores = scores.with_columns(pl.lit("model").alias("model"))
    start, end = scores.get_column("ts").min(), scores.get_column("ts").max()
    in_period, drained_then_failed = split_drained(
        failures.filter((pl.col("failed_at") > start) & (pl.col("failed_at") <= end)).select("unit_id", "failed_at"),
        drains,
    )
    if ground_truth is not None and "has_precursor" in ground_truth.columns:
        in_period = with_precursor_flags(in_period, ground_truth)
    hours = max((end - start).total_seconds() / 3600.0, 1.0)
    all_risks = {}
    fleet_parts = []
    variants = models or sorted(scores.get_column("model").unique().to_list())
    own = {model: settings.for_model(model) for model in variants}  # each model at its own entry
    for model in variants:
        series = with_held_risks(
            scores.filter(pl.col("model") == model),
            own[model].enter_for,
            settings.snapshot_every,
            own[model].entry.holds(own[model].enter_for),
        )
        risks = unit_risk_table(series, settings.horizon, latest_only=False, entry=own[model].entry)
        all_risks[model] = risks
        fleet_parts.append(risks)
    fleet = fleet_table(pl.concat(fleet_parts, how="diagonal_relaxed"), inventory)
    units = fleet.height

    none_failures = in_period.with_columns(
        pl.lit(False).alias("drained_ahead"), pl.lit(None, dtype=pl.Float64).alias("lead_time_h")
    )
    empty_drains = pl.DataFrame(schema=_drain_log_schema())
    outcomes = [outcome_of(NO_PREDICTION, empty_drains, none_failures, settings, units, hours)]
    logs, lemons, learned = [], [], []
    window = (alert_window, min_lead_time)
    for model in variants:
        run = {"fleet": fleet, "min_lead_time": min_lead_time, "recorded_drains": drains}
        sim = simulate_policy(all_risks[model], failures, own[model], **run)
        outcome, matched = _variant(model, sim, failures, in_period, own[model], units, hours, window)
        outcomes.append(outcome)
        logs.append(matched.with_columns(pl.lit(model).alias("variant")))
        if outcome.replacements:  # what replacing saved: the same run with drain and return instead
            plain = dataclasses.replace(own[model], lemons=dataclasses.replace(settings.lemons, replace=False))
            sim_plain = simulate_policy(all_risks[model], failures, plain, **run)
            without, _ = _variant(model, sim_plain, failures, in_period, plain, units, hours, window)
            lemons.append(_lemon_summary(outcome, without))
        learned.append(_learned_summary(model, sim, failures, own[model], min_lead_time, end))
    for outcome in outcomes:
        outcome.drained_then_failed = drained_then_failed.height
    drain_log = pl.concat(logs, how="diagonal_relaxed").select(list(_drain_log_schema())) if logs else empty_drains
    costs, base = settings.costs, settings.for_model(None)  # [policy]'s entry: the models' without their own
    return ReplayReport(
        start=start,
        end=end,
        fleet_units=units,
        outcomes=outcomes,
        drains=drain_log,
        checkpoint=[checkpoint_plan(o, costs, units, hours) for o in outcomes],
        lemons=lemons,
        learned=[entry for entry in learned if entry is not None],
        settings={
            "horizon": settings.horizon,
            "enter_risk": base.enter_risk,
            "exit_risk": settings.exit_risk,
            "entry": base.entry.describe(base.enter_for),
            "enter_for_h": base.enter_for.total_seconds() / 3600,
            "model_entries": {
                model: own[model].entry.describe(own[model].enter_for)
                for model in variants
                if settings.entries is not None and model in settings.entries.own
            },
            "max_drained_share_cluster": settings.max_drained_share_cluster,
            "max_drained_share_per_domain": settings.max_drained_share_per_domain,
            "max_new_drains_per_run": settings.max_new_drains_per_run,
            "job_gpus": costs.job_gpus,
            "failure_loss_gpu_h": costs.failure_loss_gpu_hours,
            "drain_cost_gpu_h": costs.drain_cost_gpu_hours,
            "checkpoint_interval_h": costs.checkpoint_interval.total_seconds() / 3600,
            "restart_cost_h": costs.restart_cost_hours,
            "alert_window_h": alert_window.total_seconds() / 3600,
            "min_lead_time_h": min_lead_time.total_seconds() / 3600,
            "daily_budget": daily_budget_setting(settings, all_risks),
            "lemon": {
                "count": settings.lemons.count,
                "node_count": settings.lemons.node_count,
                "window_h": settings.lemons.window.total_seconds() / 3600,
                "replace": settings.lemons.replace,
                "replace_turnaround_h": settings.lemons.replace_turnaround.total_seconds() / 3600,
            },
            "chooser": settings.learned.chooser,
        },
    )


def _variant(
    model: str,
    sim: Simulation,
    failures: pl.DataFrame,
    in_period: pl.DataFrame,
    settings: PolicySettings,
    units: int,
    hours: float,
    window: tuple[timedelta, timedelta],
) -> tuple[ReplayOutcome, pl.DataFrame]:
    """One model's outcome from its simulation: drains matched to failures, and the
    failures its replacements avoided taken out of those it is judged on."""
    matched, failures_out = match_drains(sim.drains, failures, *window)
    caught = failures_out.filter(pl.col("drained_ahead")).select("unit_id", "failed_at")
    avoided = sim.avoided.join(caught, on=["unit_id", "failed_at"], how="anti")
    judged = in_period.join(avoided, on=["unit_id", "failed_at"], how="anti").join(
        failures_out.select("unit_id", "failed_at", "drained_ahead", "lead_time_h"),
        on=["unit_id", "failed_at"],
        how="left",
    )
    n_avoided = in_period.join(avoided, on=["unit_id", "failed_at"], how="semi").height
    return outcome_of(model, matched, judged, settings, units, hours, n_avoided), matched


def _lemon_summary(with_replace: ReplayOutcome, without: ReplayOutcome) -> dict[str, Any]:
    """What replacing repeat offenders saved against draining and returning them."""
    return {
        "variant": with_replace.variant,
        "replacements": with_replace.replacements,
        "avoided_failures": with_replace.avoided_by_replacement,
        "gpu_hours_saved_with_replace": with_replace.gpu_hours_saved,
        "gpu_hours_saved_drain_and_return": without.gpu_hours_saved,
        "replacing_saved_gpu_h": with_replace.gpu_hours_saved - without.gpu_hours_saved,
    }


def _learned_summary(
    model: str,
    sim: Simulation,
    failures: pl.DataFrame,
    settings: PolicySettings,
    min_lead_time: timedelta,
    end: datetime,
) -> dict[str, Any] | None:
    """The learned chooser against the fixed policy on this model's recorded decisions."""
    drains = sim.drains.select("unit_id", pl.col("decided_at").alias("ts"), "returned_at")
    decisions = sim.decisions.join(drains, on=["unit_id", "ts"], how="left")
    fails = failures.select("unit_id", "failed_at")
    _, result = judge_learned(decisions, fails, settings, min_lead_time=min_lead_time, until=end)
    return None if result is None else {"variant": model, **result.to_dict()}
