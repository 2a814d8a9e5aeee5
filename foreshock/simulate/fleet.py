"""Fleet layout and failure schedule: which GPU sits in which slot, and when and how it fails.

The schedule is drawn first, per slot, from competing hazards (one per failure mode);
the telemetry (:mod:`foreshock.simulate.telemetry`) is then generated to be consistent
with it.  Every slot draws from its own random stream, so a slot's history does not
depend on how many other slots the fleet has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from foreshock.simulate.params import SimulationParams

DAY_S = 86_400.0
HOUR_S = 3_600.0

MODES = ("memory", "thermal", "power", "sudden")
PRECURSOR_MODES = ("memory", "thermal", "power")
# Relative hazards of the precursor modes in a normal rack (HBM dominates GPU hardware
# failures in published fleet studies; the mix matters less than having all three).
MODE_WEIGHTS = {"memory": 0.45, "thermal": 0.25, "power": 0.30}

# A failed GPU's slot stays empty for a repair of this many days (uniform), then a new
# GPU starts in it.
REPAIR_DAYS = (1.0, 3.0)

LOTS = ("LOT-2025-05A", "LOT-2025-06B", "LOT-2025-07A", "LOT-2025-08C")
LOT_SHARES = (0.30, 0.30, 0.15, 0.25)
BAD_LOT = "LOT-2025-07A"

# PCI bus numbers of the eight GPUs on an HGX baseboard, in nvidia-smi index order.
HGX_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


@dataclass(frozen=True)
class GpuModel:
    """What differs between GPU generations in the telemetry."""

    name: str
    tdp_w: float
    idle_w: float
    max_sm_mhz: int
    idle_sm_mhz: int
    slowdown_c: float  # hw_thermal_slowdown engages at this GPU temperature
    watts_to_c: float  # steady-state temperature rise per watt drawn
    row_remapping: bool  # Ampere and later remap HBM rows; older GPUs retire pages


H100 = GpuModel("NVIDIA H100 80GB HBM3", 700.0, 70.0, 1980, 345, 87.0, 0.055, True)
V100 = GpuModel("Tesla V100-SXM2-32GB", 300.0, 40.0, 1530, 135, 85.0, 0.125, False)


@dataclass(frozen=True)
class Fleet:
    """Static layout: one entry per slot (``unit_id``) and per node."""

    unit_id: list[str]
    slot_node: np.ndarray  # node index of each slot
    gpu_index: np.ndarray
    pci_bus_id: list[str]  # nvidia-smi form 00000000:3B:00.0
    lot: list[str]
    lot_multiplier: np.ndarray
    installed_at_s: np.ndarray  # epoch seconds the slot was first populated
    node: list[str]
    node_rack: np.ndarray  # rack index of each node
    node_model: list[GpuModel]
    rack: list[str]
    hot_rack: str
    bad_lot: str

    @property
    def units(self) -> int:
        return len(self.unit_id)

    def slot_rack(self, slot: int) -> str:
        return self.rack[int(self.node_rack[self.slot_node[slot]])]

    def slot_model(self, slot: int) -> GpuModel:
        return self.node_model[int(self.slot_node[slot])]


@dataclass
class Life:
    """One GPU's time in a slot: from installation to failure (or beyond the horizon)."""

    slot: int
    life: int
    uuid: str
    start_s: float
    failed_at_s: float | None = None
    mode: str | None = None
    onset_s: float | None = None
    back_s: float | None = None  # the replacement GPU starts here
    failure_xid: int | None = None
    category: str | None = None
    # Healthy behaviour of this GPU.
    base_sbe_per_h: float = 0.0
    sbe_bursts: list[tuple[float, float, float]] = field(default_factory=list)  # start, hours, rate
    prior_sbe: int = 0  # aggregate SBE count accumulated before the simulation
    nvlink_crc_per_h: float = 0.0
    pcie_replay_per_h: float = 0.0
    temp_offset_c: float = 0.0
    power_efficiency: float = 1.0
    # Degradation parameters (used only for the matching mode).
    sbe_peak_per_h: float = 0.0
    sbes_per_remap: float = 200.0
    drift_c: float = 0.0
    power_noise_frac: float = 0.0
    power_spike_prob: float = 0.0
    pcie_replay_peak_per_h: float = 0.0

    @property
    def has_precursor(self) -> bool:
        return self.mode in PRECURSOR_MODES


def gpu_uuid(rng: np.random.Generator) -> str:
    h = rng.bytes(16).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def pci_bus_for(index: int) -> str:
    bus = HGX_BUSES[index] if index < len(HGX_BUSES) else f"{0xC0 + index:02X}"
    return f"00000000:{bus}:00.0"


def build_fleet(params: SimulationParams) -> Fleet:
    """Place ``params.units`` GPUs on nodes of ``gpus_per_node`` in ``racks`` racks."""
    n_nodes = math.ceil(params.units / params.gpus_per_node)
    n_racks = min(params.racks, n_nodes)
    node = [f"gpu-node{i + 1:03d}" for i in range(n_nodes)]
    node_rack = np.array([i * n_racks // n_nodes for i in range(n_nodes)], dtype=np.int64)
    rack = [f"rack{r + 1:02d}" for r in range(n_racks)]
    # One node in eight is an older (pre-Ampere) system that retires pages instead of
    # remapping rows: ingest and features must handle both generations.
    node_model = [V100 if params.legacy_nodes and i % 8 == 3 else H100 for i in range(n_nodes)]
    slot_node = np.arange(params.units) // params.gpus_per_node
    gpu_index = np.arange(params.units) % params.gpus_per_node
    rng = np.random.default_rng([params.seed, 1])
    lot_idx = rng.choice(len(LOTS), size=params.units, p=LOT_SHARES)
    lots = [LOTS[i] for i in lot_idx]
    lot_multiplier = np.where(lot_idx == LOTS.index(BAD_LOT), params.bad_lot_multiplier, 1.0)
    installed = params.start_s - rng.uniform(60, 400, size=params.units).round() * DAY_S
    hot = rack[min(1, n_racks - 1)]
    return Fleet(
        unit_id=[f"{node[n]}-gpu{g}" for n, g in zip(slot_node, gpu_index)],
        slot_node=slot_node,
        gpu_index=gpu_index,
        pci_bus_id=[pci_bus_for(int(g)) for g in gpu_index],
        lot=lots,
        lot_multiplier=lot_multiplier,
        installed_at_s=installed,
        node=node,
        node_rack=node_rack,
        node_model=node_model,
        rack=rack,
        hot_rack=hot,
        bad_lot=BAD_LOT,
    )


def mode_hazards(fleet: Fleet, params: SimulationParams) -> np.ndarray:
    """Per-slot hazard of each mode in failures per day in service, shape (units, len(MODES)).

    The base rate is scaled so that the fleet-average total hazard equals
    ``params.failures_per_1000_unit_days``, or, when ``params.failure_rate`` is given, so
    that the expected observed rate equals it (:func:`calibrated_base`).  Scaling leaves
    each slot's mix of modes as it is; the sudden hazard is set so that about
    ``sudden_share`` of failures have no precursor.
    """
    hot = np.array([fleet.slot_rack(s) == fleet.hot_rack for s in range(fleet.units)])
    thermal_w = MODE_WEIGHTS["thermal"] * np.where(hot, params.hot_rack_thermal_multiplier, 1.0)
    precursor_w = MODE_WEIGHTS["memory"] + MODE_WEIGHTS["power"] + thermal_w
    share = params.sudden_share
    sudden_w = np.full(fleet.units, share / (1.0 - share) * precursor_w.mean()) if share < 1 else None
    if sudden_w is None:
        raise ValueError("sudden_share must be below 1")
    weights = (
        np.stack(
            [
                np.full(fleet.units, MODE_WEIGHTS["memory"]),
                thermal_w,
                np.full(fleet.units, MODE_WEIGHTS["power"]),
                sudden_w,
            ],
            axis=1,
        )
        * fleet.lot_multiplier[:, None]
    )
    total = weights.sum(axis=1)
    if params.failure_rate is None:
        base = params.failures_per_1000_unit_days / 1000.0 / total.mean()
    else:
        base = calibrated_base(total, params.failure_rate / 1000.0)
    return weights * base


def calibrated_base(weights: np.ndarray, rate_per_day: float) -> float:
    """The base hazard at which the fleet's expected observed failure rate is ``rate_per_day``.

    A slot of hazard ``h`` alternates a life in service (``1/h`` days on average) with a
    repair (``r`` days on average), so it is in service a share ``1 / (1 + h r)`` of the
    time, and the rate observed over the fleet, failures per unit-day in service, is the
    hazard averaged with those shares as weights.  Slots with a high hazard (the bad lot,
    the hot rack) are in repair more often, which pulls the observed rate below the plain
    average by up to ~8 % at 100 per 1,000 unit-days; this solves for the base instead.

    Parameters
    ----------
    weights
        Relative total hazard of each slot (its base multiplier).
    rate_per_day
        Failures per unit-day in service to expect.

    Returns
    -------
    float
        ``base`` such that the hazards are ``weights * base``.
    """
    repair = sum(REPAIR_DAYS) / 2.0

    def observed(base: float) -> float:
        in_service = 1.0 / (1.0 + weights * base * repair)
        return float((weights * base * in_service).sum() / in_service.sum())

    # The observed rate grows with the base and is at most the plain average, so the
    # plain-average base is a lower bound; double for an upper one, then bisect.
    low = high = rate_per_day / float(weights.mean())
    while observed(high) < rate_per_day:
        low, high = high, high * 2.0
    for _ in range(100):
        middle = (low + high) / 2.0
        if observed(middle) < rate_per_day:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2.0


def unit_days_in_service(lives: list[Life], params: SimulationParams) -> float:
    """GPU-days in service inside the simulated span: every life, replacements included,
    from its start (or the span's) to its failure (or the span's end); empty slots awaiting
    repair count nothing.  The denominator of the observed failure rate."""
    seconds = 0.0
    for life in lives:
        begin = max(life.start_s, params.start_s)
        end = params.end_s if life.failed_at_s is None else min(life.failed_at_s, params.end_s)
        seconds += max(0.0, end - begin)
    return seconds / DAY_S


def _ticket_category(mode: str, xid: int | None) -> str:
    if mode == "memory":
        return "HBM/ECC"
    if mode == "thermal":
        return "thermal"
    if mode == "power" or xid == 79:
        return "fell off bus"
    return "unknown"


def _healthy_traits(life: Life, rng: np.random.Generator, params: SimulationParams, first: bool) -> None:
    # Most GPUs log a correctable error now and then; a few are chatty all their life.
    life.base_sbe_per_h = float(10 ** rng.uniform(-3.5, -1.3))
    life.prior_sbe = int(rng.poisson(life.base_sbe_per_h * 24 * 200)) if first else 0
    life.nvlink_crc_per_h = float(2.0 if rng.random() < 0.05 else 0.01)
    # A few healthy GPUs sit on a marginal PCIe link and replay all the time.
    life.pcie_replay_per_h = float(rng.uniform(1, 5) if rng.random() < 0.03 else 0.02)
    life.temp_offset_c = float(rng.normal(0.0, 1.8))
    life.power_efficiency = float(rng.uniform(0.93, 1.04))
    if rng.random() < params.benign_burst_share:
        for _ in range(int(rng.integers(1, 3))):
            life.sbe_bursts.append(
                (float(rng.uniform(params.start_s, params.end_s)), float(rng.uniform(1, 8)), float(rng.uniform(5, 60)))
            )


def schedule_lives(fleet: Fleet, params: SimulationParams) -> list[Life]:
    """Draw every slot's lives: failure times and modes, repairs, replacements.

    Failures are drawn up to ``lookahead`` past the end so that GPUs degrading at the
    end of the simulation show their precursor without failing inside it (censoring).
    """
    hazards = mode_hazards(fleet, params)
    horizon = params.end_s + params.lookahead_days * DAY_S
    lives: list[Life] = []
    for slot in range(fleet.units):
        rng = np.random.default_rng([params.seed, 2, slot])
        total = hazards[slot].sum()
        t = params.start_s
        life_start = float(fleet.installed_at_s[slot])
        n = 0
        while True:
            life = Life(slot=slot, life=n, uuid=gpu_uuid(rng), start_s=life_start)
            _healthy_traits(life, rng, params, first=n == 0)
            lives.append(life)
            fail = t + rng.exponential(1.0 / total) * DAY_S
            if fail >= horizon:
                break
            mode = MODES[int(rng.choice(len(MODES), p=hazards[slot] / total))]
            life.failed_at_s = float(round(fail))  # tickets carry whole seconds
            life.mode = mode
            if mode == "memory":
                lead = rng.uniform(3, 10) * DAY_S
                life.sbe_peak_per_h = float(rng.uniform(40, 250))
                life.sbes_per_remap = float(rng.uniform(100, 300))
                life.failure_xid = 48
            elif mode == "thermal":
                lead = rng.uniform(3, 10) * DAY_S
                life.drift_c = float(rng.uniform(20, 32))
            elif mode == "power":
                lead = rng.uniform(6, 48) * HOUR_S
                life.power_noise_frac = float(rng.uniform(0.08, 0.18))
                life.power_spike_prob = float(rng.uniform(0.05, 0.15))
                # Only some power-delivery faults show up on the PCIe link first.
                life.pcie_replay_peak_per_h = float(rng.uniform(20, 60) if rng.random() < 0.6 else 0.0)
                life.failure_xid = 79
            else:
                lead = None
                life.failure_xid = (79, 43, None)[int(rng.choice(3, p=(0.45, 0.30, 0.25)))]
            if lead is not None:
                life.onset_s = float(max(fail - lead, life_start))
            life.category = _ticket_category(mode, life.failure_xid)
            repair = rng.uniform(*REPAIR_DAYS) * DAY_S
            life.back_s = float(round(fail + repair))
            if life.back_s >= params.end_s:
                break
            t = life_start = life.back_s
            n += 1
    return lives
