"""The cost figures a drain decision is priced with, in GPU-hours.

A unit (one GPU) sits inside a synchronous training job of ``job_gpus`` GPUs.  When it fails
unplanned, the whole job loses the work since its last checkpoint (on average half a
checkpoint interval) plus the time to restart.  A planned drain costs the job one
reschedule (``drain_overhead``).  A drain of a healthy unit additionally keeps that unit out
of service for ``repair_turnaround`` while it is diagnosed and returned.

These are the same figures the policy decides with and the replay reports with, so a
replay's "GPU-hours saved" is the quantity the policy optimises.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from foreshock.config import builtin_field, section_values


def policy_default(key: str, kind: Any = str) -> Any:
    """A dataclass field whose default is ``[policy] key`` of the built-in configuration."""
    return builtin_field("policy", key, kind)


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0


@dataclass(frozen=True)
class DrainCosts:
    """Configurable cost figures (``[policy]`` in ``foreshock.toml``).

    Parameters
    ----------
    job_gpus
        GPUs in the synchronous job a unit belongs to.
    checkpoint_interval
        Time between the job's checkpoints.
    checkpoint_write
        Time the job spends writing one checkpoint (with ``restart_time``: the restart
        cost of the Young/Daly checkpoint interval).
    restart_time
        Time for the job to restart after an interruption.
    drain_overhead
        Time the whole job loses to a planned drain (checkpoint, reschedule).
    repair_turnaround
        Time a drained unit stays out of service (diagnosis, repair or return).
    """

    job_gpus: int = policy_default("job_gpus", int)
    checkpoint_interval: timedelta = policy_default("checkpoint_interval", timedelta)
    checkpoint_write: timedelta = policy_default("checkpoint_write", timedelta)
    restart_time: timedelta = policy_default("restart_time", timedelta)
    drain_overhead: timedelta = policy_default("drain_overhead", timedelta)
    repair_turnaround: timedelta = policy_default("repair_turnaround", timedelta)

    @classmethod
    def from_policy(cls, policy: dict) -> DrainCosts:
        """Build from a whole ``[policy]`` settings dict (``Config.section("policy")``)."""
        job_gpus = int(policy["job_gpus"])
        if job_gpus < 1:
            raise ValueError(f"[policy] job_gpus must be at least 1, got {job_gpus}")
        return cls(**section_values(cls, "policy", policy))

    @property
    def failure_loss_gpu_hours(self) -> float:
        """GPU-hours one unplanned failure costs: ``job_gpus * (checkpoint_interval/2 + restart_time)``."""
        return self.job_gpus * (_hours(self.checkpoint_interval) / 2.0 + _hours(self.restart_time))

    @property
    def restart_cost_hours(self) -> float:
        """Restart cost ``tau`` of an interruption in hours: one checkpoint write plus a restart."""
        return _hours(self.checkpoint_write) + _hours(self.restart_time)

    @property
    def drain_cost_gpu_hours(self) -> float:
        """GPU-hours one planned drain costs the job: ``job_gpus * drain_overhead``."""
        return self.job_gpus * _hours(self.drain_overhead)

    @property
    def idle_unit_gpu_hours(self) -> float:
        """GPU-hours of capacity a healthy unit loses while out for ``repair_turnaround``."""
        return _hours(self.repair_turnaround)

    def expected_loss(self, risk: float) -> float:
        """Expected GPU-hours lost by *not* draining: ``risk * failure_loss_gpu_hours``."""
        return risk * self.failure_loss_gpu_hours

    def expected_drain_cost(self, risk: float) -> float:
        """Expected GPU-hours a drain costs: the job's overhead, plus the unit's capacity
        for the repair turnaround when it turns out healthy (probability ``1 - risk``)."""
        return self.drain_cost_gpu_hours + (1.0 - risk) * self.idle_unit_gpu_hours

    @property
    def break_even_risk(self) -> float:
        """The risk above which a drain is expected to pay for itself.

        Solves ``p * F = D + (1 - p) * R`` for ``p``, with ``F`` the failure loss, ``D`` the
        drain cost and ``R`` the idle capacity of a healthy drained unit.
        """
        loss = self.failure_loss_gpu_hours
        idle = self.idle_unit_gpu_hours
        return (self.drain_cost_gpu_hours + idle) / (loss + idle)
