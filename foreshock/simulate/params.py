"""Parameters of a simulated fleet (all the knobs of :func:`simulate_fleet` in one place)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from foreshock.durations import parse_duration

DEFAULT_START = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class SimulationParams:
    """Knobs of the fleet simulator; defaults are the demo fleet.

    ``failures_per_1000_unit_days`` defaults to 7, which gives the default 256-GPU fleet
    roughly 40-70 failures in 30 days.  That is more than ten times the rate of real
    fleets (Llama 3 training saw 419 unplanned interruptions in 54 days on 16,384 H100s,
    about 0.5 per 1,000 GPU-days, all causes; see docs/design.md): the demo needs enough
    failures for a walk-forward backtest to say anything.  It is the fleet-average hazard
    per GPU-day in service; the rate observed is slightly lower (about 1 % at 7, more at
    higher rates) because the GPUs most likely to fail spend more of the time in repair.

    ``failure_rate``, when given, replaces it with a rate to observe: the hazard is
    calibrated so that the expected failures per 1,000 unit-days in service (replacements
    included, empty slots awaiting repair not) equal it.  Left at ``None`` the schedule is
    exactly the one drawn from ``failures_per_1000_unit_days`` (the demo's bytes).
    """

    units: int = 256
    days: float = 30.0
    seed: int = 0
    sample_every_s: int = 600
    dcgm_step_s: int = 3600  # step of the Prometheus query_range exports
    start: datetime = DEFAULT_START
    gpus_per_node: int = 8
    racks: int = 4
    sudden_share: float = 1.0 / 3.0
    failures_per_1000_unit_days: float = 7.0
    failure_rate: float | None = None  # observed failures per 1,000 unit-days in service
    bad_lot_multiplier: float = 4.0
    hot_rack_thermal_multiplier: float = 3.0
    hot_rack_extra_c: float = 7.0
    benign_burst_share: float = 0.15  # healthy GPUs with correctable-error bursts
    reboots_per_node_day: float = 1.0 / 12.0
    scrape_gaps_per_node_day: float = 0.05
    messy_file_share: float = 0.05  # CSV files with duplicate / out-of-order rows
    legacy_nodes: bool = True  # one node in eight is pre-Ampere (retired pages)
    lookahead_days: float = 10.0

    def __post_init__(self) -> None:
        if self.units < 1:
            raise ValueError(f"units must be at least 1, got {self.units}")
        if self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed}")
        if self.days <= 0:
            raise ValueError(f"days must be positive, got {self.days}")
        if self.gpus_per_node < 1 or self.racks < 1:
            raise ValueError("gpus_per_node and racks must be at least 1")
        if not 0.0 <= self.sudden_share < 1.0:
            raise ValueError(f"sudden_share must be in [0, 1), got {self.sudden_share}")
        if self.sample_every_s < 1 or 86_400 % self.sample_every_s:
            raise ValueError(f"sample interval must divide a day, got {self.sample_every_s} s")
        if self.dcgm_step_s % self.sample_every_s:
            raise ValueError("the DCGM export step must be a multiple of the sample interval")
        if not self.failures_per_1000_unit_days > 0:
            raise ValueError(f"failures_per_1000_unit_days must be positive, got {self.failures_per_1000_unit_days}")
        if self.failure_rate is not None and not 0 < self.failure_rate < math.inf:
            raise ValueError(
                f"failure rate must be a positive number of failures per 1,000 unit-days, got {self.failure_rate}"
            )
        if self.start.tzinfo is None:
            raise ValueError("start must be timezone-aware (UTC)")

    @classmethod
    def build(cls, sample_every: str = "10m", dcgm_step: str | None = None, **kwargs: Any) -> SimulationParams:
        """Make parameters from durations written like ``"10m"``."""
        every = int(parse_duration(sample_every).total_seconds())
        step = int(parse_duration(dcgm_step).total_seconds()) if dcgm_step else max(every, 3600 // every * every)
        return cls(sample_every_s=every, dcgm_step_s=step, **kwargs)

    @property
    def start_s(self) -> float:
        return self.start.timestamp()

    @property
    def end_s(self) -> float:
        return self.start_s + self.days * 86_400.0

    @property
    def samples(self) -> int:
        return int(self.days * 86_400 // self.sample_every_s)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if out["failure_rate"] is None:  # absent, as before the option existed: same bytes
            del out["failure_rate"]
        out["start"] = self.start.strftime("%Y-%m-%dT%H:%M:%SZ")
        return out
