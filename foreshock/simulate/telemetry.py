"""Per-node telemetry consistent with the failure schedule (vectorised over GPUs x samples).

A node is simulated as a whole because workload, reboots and scrape gaps are node
events: the GPUs of one node run the same job, reset their volatile counters together
and go silent together.  Each node draws from its own random stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from foreshock.simulate.fleet import DAY_S, HOUR_S, PRECURSOR_MODES, Fleet, Life
from foreshock.simulate.params import SimulationParams

# Increments of counters are the errors in (t[k-1], t[k]]; an SBE rate of 0.3 per hour
# is where a degrading HBM stack starts, growing exponentially to its peak at failure.
SBE_ONSET_PER_H = 0.3
AMBIENT_C = 26.0
APP_XID_PER_DAY = 0.05  # application-caused XIDs (13, 31, 45): noise, not hardware


@dataclass
class NodeTelemetry:
    """Everything one node reports.  Arrays are (GPUs of the node, samples)."""

    node_index: int
    slots: np.ndarray
    t_s: np.ndarray  # sample grid, epoch seconds
    ts_ms: np.ndarray  # the timestamp each row carries (grid + collector jitter), ms
    present: np.ndarray  # a row exists (GPU installed, node up and scraped)
    life_of: np.ndarray  # global index into the lives list, -1 when the slot is empty
    values: dict[str, np.ndarray]
    boots_s: np.ndarray  # boot times of the node, the first one before the simulation
    down: list[tuple[float, float, str]]  # (from, to, why) intervals with no telemetry
    xids: list[tuple[int, float, int]] = field(default_factory=list)  # (slot, time, code)


def _cum_since(inc: np.ndarray, reset: np.ndarray) -> np.ndarray:
    """Cumulative sum along time that restarts (at that sample's increment) where ``reset``."""
    cs = np.cumsum(inc, axis=1)
    idx = np.where(reset, np.arange(inc.shape[1])[None, :], 0)
    last = np.maximum.accumulate(idx, axis=1)
    base = np.take_along_axis(cs, last, axis=1) - np.take_along_axis(inc, last, axis=1)
    has_reset = np.maximum.accumulate(reset, axis=1)
    return cs - np.where(has_reset, base, 0)


def _intervals_mask(t: np.ndarray, intervals: list[tuple[float, float, str]]) -> np.ndarray:
    mask = np.zeros(t.shape, dtype=bool)
    for a, b, _ in intervals:
        mask |= (t >= a) & (t < b)
    return mask


def _workload(rng: np.random.Generator, n_samples: int, step_s: int) -> np.ndarray:
    """Node utilisation: jobs of a few hours at high load, with idle stretches between."""
    level = np.empty(n_samples)
    k = 0
    while k < n_samples:
        length = max(1, int(rng.exponential(6 * HOUR_S) / step_s))
        busy = rng.random() < 0.8
        level[k : k + length] = rng.uniform(75, 99) if busy else rng.uniform(0, 4)
        k += length
    return level


@dataclass
class _Occupancy:
    """Which GPU life fills each (slot row, sample) of a node."""

    local: list[Life]  # the node's lives
    life_global: np.ndarray  # index of each local life in the fleet's list
    idx: np.ndarray  # (GPUs, samples) local life index; len(local) where the slot is empty
    spans: list[tuple[int, int, int]]  # (row, k0, k1) per local life
    life_start: np.ndarray  # first sample of each life

    @property
    def alive(self) -> np.ndarray:
        return self.idx < len(self.local)

    def per_life(self, attribute: str, empty: float = 0.0) -> np.ndarray:
        """A life attribute spread over (GPUs, samples)."""
        values = [float(getattr(life, attribute)) for life in self.local]
        return np.append(np.asarray(values, dtype=np.float64), empty)[self.idx]


def _occupancy(
    slots: np.ndarray, lives: list[Life], lives_by_slot: dict[int, list[int]], params: SimulationParams
) -> _Occupancy:
    step, n_t = params.sample_every_s, params.samples
    local: list[Life] = []
    life_global: list[int] = []
    idx = np.full((len(slots), n_t), -1, dtype=np.int64)
    life_start = np.zeros((len(slots), n_t), dtype=bool)
    spans: list[tuple[int, int, int]] = []
    for i, slot in enumerate(slots):
        for li in lives_by_slot[int(slot)]:
            life = lives[li]
            k0 = max(0, math.ceil((life.start_s - params.start_s) / step))
            k1 = n_t
            if life.failed_at_s is not None:
                kf = math.ceil((life.failed_at_s - params.start_s) / step)
                # The double-bit error is visible in one last sample; other failures
                # take the GPU off the bus before the next sample.
                k1 = min(n_t, kf + 1 if life.mode == "memory" else kf)
            spans.append((i, k0, k1))
            if k0 < k1:
                idx[i, k0:k1] = len(local)
                life_start[i, k0] = True
            local.append(life)
            life_global.append(li)
    idx[idx < 0] = len(local)
    return _Occupancy(local, np.asarray(life_global, dtype=np.int64), idx, spans, life_start)


def _node_events(
    rng: np.random.Generator, occ: _Occupancy, params: SimulationParams
) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """Boot times (the first before the simulation) and intervals with no telemetry."""
    boots = [params.start_s - rng.uniform(2, 40) * DAY_S]
    down: list[tuple[float, float, str]] = []
    for r in np.sort(rng.uniform(params.start_s, params.end_s, rng.poisson(params.reboots_per_node_day * params.days))):
        down.append((r - rng.uniform(5, 20) * 60, r, "reboot"))
        boots.append(float(r))
    for life in occ.local:
        if life.back_s is not None and life.back_s < params.end_s:
            # Swapping a GPU means powering the node off: a longer outage, then a boot.
            down.append((life.back_s - rng.uniform(30, 90) * 60, life.back_s, "gpu swap"))
            boots.append(life.back_s)
    for g0 in rng.uniform(params.start_s, params.end_s, rng.poisson(params.scrape_gaps_per_node_day * params.days)):
        down.append((g0, g0 + rng.uniform(2, 10) * HOUR_S, "scrape gap"))
    return np.sort(np.array(boots)), sorted(down)


def _degradation(occ: _Occupancy, t: np.ndarray, step: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Progress p in [0, 1] from precursor onset to failure, and whether it has begun, per mode."""
    shape = occ.idx.shape
    progress = {m: np.zeros(shape) for m in PRECURSOR_MODES}
    active = {m: np.zeros(shape, dtype=bool) for m in PRECURSOR_MODES}
    for life, (i, k0, k1) in zip(occ.local, occ.spans):
        if life.mode in progress and life.onset_s is not None and k0 < k1:
            tk = t[k0:k1]
            span = max(life.failed_at_s - life.onset_s, step)
            progress[life.mode][i, k0:k1] = np.clip((tk - life.onset_s) / span, 0.0, 1.0)
            active[life.mode][i, k0:k1] = tk >= life.onset_s
    return progress, active


def _xid_events(
    rng: np.random.Generator,
    occ: _Occupancy,
    slots: np.ndarray,
    t: np.ndarray,
    rows_c_inc: np.ndarray,
    memory_active: np.ndarray,
    params: SimulationParams,
) -> list[tuple[int, float, int]]:
    """Row remaps / page retirements (63, sometimes 64 when recording fails), each
    failure's own code, and application-caused codes that say nothing about hardware."""
    step = params.sample_every_s
    xids: list[tuple[int, float, int]] = []
    ri, rk = np.nonzero(rows_c_inc > 0)
    for i, k in zip(ri, rk):
        for _ in range(int(min(rows_c_inc[i, k], 5))):
            code = 64 if memory_active[i, k] and rng.random() < 0.1 else 63
            xids.append((int(slots[i]), float(t[k] - rng.uniform(1, step - 1)), code))
    for life in occ.local:
        if life.failure_xid is not None and life.failed_at_s is not None and life.failed_at_s < params.end_s:
            xids.append((life.slot, life.failed_at_s, life.failure_xid))
            if life.mode == "memory":  # the row behind the double-bit error is remapped
                xids.append((life.slot, life.failed_at_s + 0.4, 63))
    alive = occ.alive
    for i, slot in enumerate(slots):
        for when in rng.uniform(params.start_s, params.end_s, rng.poisson(APP_XID_PER_DAY * params.days)):
            k = min(len(t) - 1, math.ceil((when - params.start_s) / step))
            if alive[i, k]:
                xids.append((int(slot), float(when), int(rng.choice([13, 31, 45], p=[0.4, 0.4, 0.2]))))
    xids.sort(key=lambda x: (x[1], x[0]))
    return xids


def simulate_node(
    node_index: int,
    fleet: Fleet,
    lives: list[Life],
    lives_by_slot: dict[int, list[int]],
    params: SimulationParams,
) -> NodeTelemetry:
    """Generate the telemetry of one node over the whole simulated span."""
    # Over 80 lines on purpose: one random stream drawn in a fixed order (the same seed gives
    # the same bytes), each signal built from the ones before it (workload -> power ->
    # temperature -> clocks; ECC -> remaps); split up, a dozen arrays would pass between pieces.
    rng = np.random.default_rng([params.seed, 3, node_index])
    step = params.sample_every_s
    step_h = step / HOUR_S
    n_t = params.samples
    t = params.start_s + np.arange(n_t, dtype=np.float64) * step
    slots = np.flatnonzero(fleet.slot_node == node_index)
    shape = (len(slots), n_t)
    model = fleet.node_model[node_index]
    hot = fleet.rack[int(fleet.node_rack[node_index])] == fleet.hot_rack

    occ = _occupancy(slots, lives, lives_by_slot, params)
    alive, life_start, per_life = occ.alive, occ.life_start, occ.per_life
    boots_s, down = _node_events(rng, occ, params)
    node_down = _intervals_mask(t, down)
    node_reset = np.zeros(n_t, dtype=bool)
    first_after = np.ceil((boots_s[1:] - params.start_s) / step).astype(np.int64)
    node_reset[first_after[first_after < n_t]] = True
    reset = life_start | node_reset[None, :]  # volatile counters restart here
    progress, active = _degradation(occ, t, step)

    # Workload drives power, power drives temperature.
    util = np.clip(_workload(rng, n_t, step)[None, :] + rng.normal(0, 2.5, shape), 0, 100)
    util = np.rint(util) * alive
    tdp, idle = model.tdp_w, model.idle_w
    power = idle + (tdp - idle) * util / 100.0 * per_life("power_efficiency")
    power += rng.normal(0, 0.012 * tdp, shape)
    # Power-delivery fault: variance, spikes and dips growing for hours before XID 79.
    act_pow, p_pow = active["power"], progress["power"]
    power += rng.normal(0, 1, shape) * per_life("power_noise_frac") * tdp * act_pow * (0.3 + 0.7 * p_pow)
    spike_p = per_life("power_spike_prob") * act_pow
    power += (rng.random(shape) < spike_p) * rng.uniform(0.2, 0.5, shape) * tdp
    dips = rng.random(shape) < spike_p / 2
    power = np.where(dips, idle * rng.uniform(1.0, 1.5, shape), power)
    power = np.clip(power, 0.8 * idle, 1.15 * tdp)
    power_cw = np.rint(power * 100).astype(np.int64)  # nvidia-smi prints 2 decimals
    power = power_cw / 100.0

    diurnal = 1.5 * np.sin(2 * np.pi * (t / DAY_S - 0.375))
    ambient = AMBIENT_C + (params.hot_rack_extra_c if hot else 0.0) + diurnal
    drift = per_life("drift_c") * progress["thermal"] ** 1.5 * active["thermal"]
    temp = ambient[None, :] + per_life("temp_offset_c") + model.watts_to_c * power + drift
    temp_gpu = np.rint(temp + rng.normal(0, 0.7, shape))
    temp_mem = np.rint(temp + 5.0 + 0.3 * drift + rng.normal(0, 0.8, shape))
    slowdown = temp_gpu >= model.slowdown_c

    busy = util >= 10
    clock = np.where(busy, model.max_sm_mhz - rng.integers(0, 30, shape), model.idle_sm_mhz)
    clock = np.where(busy & (power > 0.97 * tdp), clock - 120, clock)
    clock = np.where(slowdown, np.rint(model.max_sm_mhz * rng.uniform(0.55, 0.75, shape)), clock)

    # ECC: healthy background, benign bursts, HBM degradation; then the double-bit error.
    peak = np.maximum(per_life("sbe_peak_per_h"), SBE_ONSET_PER_H)
    sbe_rate = (
        per_life("base_sbe_per_h") + active["memory"] * SBE_ONSET_PER_H * (peak / SBE_ONSET_PER_H) ** progress["memory"]
    )
    dbe_inc = np.zeros(shape, dtype=np.int64)
    for life, (i, k0, k1) in zip(occ.local, occ.spans):
        for b0, hours, rate in life.sbe_bursts:
            in_burst = (t >= b0) & (t < b0 + hours * HOUR_S)
            in_burst[:k0] = False
            in_burst[k1:] = False
            sbe_rate[i] += rate * in_burst
        if life.mode == "memory" and k0 < k1 and life.failed_at_s <= t[-1]:
            dbe_inc[i, k1 - 1] = 1
    sbe_inc = rng.poisson(sbe_rate * step_h) * alive
    life_sbe = _cum_since(sbe_inc, life_start)
    rows_c = np.floor(life_sbe / per_life("sbes_per_remap", empty=1.0)).astype(np.int64) * alive
    rows_u = _cum_since(dbe_inc, life_start) * alive
    rows_c_inc = np.where(life_start, 0, np.diff(rows_c, axis=1, prepend=0)) * alive
    pending = _cum_since(rows_c_inc + dbe_inc, reset) > 0  # a remap waits for a GPU reset

    # Link and violation counters (all volatile: reset when the driver reloads).
    pcie_rate = per_life("pcie_replay_per_h") + act_pow * per_life("pcie_replay_peak_per_h") * p_pow**2
    pcie_inc = rng.poisson(pcie_rate * step_h) * alive
    crc_inc = rng.poisson(per_life("nvlink_crc_per_h") * step_h) * alive
    step_us = step * 1_000_000
    near_limit = temp_gpu >= model.slowdown_c - 2
    thermal_inc = (
        np.rint(slowdown * step_us * rng.uniform(0.4, 1.0, shape) + near_limit * step_us * 0.03).astype(np.int64)
        * alive
    )
    power_inc = np.rint((power > 0.95 * tdp) * step_us * rng.uniform(0.1, 0.6, shape)).astype(np.int64) * alive

    values = {
        "temperature.gpu": temp_gpu.astype(np.int64),
        "temperature.memory": temp_mem.astype(np.int64),
        "power_cw": power_cw,
        "utilization.gpu": util.astype(np.int64),
        "clocks.sm": clock.astype(np.int64),
        "ecc.errors.corrected.volatile.total": _cum_since(sbe_inc, reset),
        "ecc.errors.uncorrected.volatile.total": _cum_since(dbe_inc, reset),
        "ecc.errors.corrected.aggregate.total": per_life("prior_sbe").astype(np.int64) + life_sbe,
        "ecc.errors.uncorrected.aggregate.total": rows_u,
        "remap.correctable": rows_c,
        "remap.uncorrectable": rows_u,
        "remap.pending": pending.astype(np.int64),
        "hw_thermal_slowdown": slowdown.astype(np.int64),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": _cum_since(pcie_inc, reset),
        "DCGM_FI_DEV_THERMAL_VIOLATION": _cum_since(thermal_inc, reset),
        "DCGM_FI_DEV_POWER_VIOLATION": _cum_since(power_inc, reset),
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": _cum_since(crc_inc, reset),
    }
    xids = _xid_events(rng, occ, slots, t, rows_c_inc, active["memory"], params)

    # nvidia-smi -l prints all GPUs of a node within a few ms of each loop tick.
    jitter = rng.integers(0, 900, n_t)
    ts_ms = (np.rint(t * 1000).astype(np.int64) + jitter)[None, :] + 3 * fleet.gpu_index[slots][:, None]
    life_of = np.where(alive, np.append(occ.life_global, -1)[occ.idx], -1)
    return NodeTelemetry(
        node_index=node_index,
        slots=slots,
        t_s=t,
        ts_ms=ts_ms,
        present=alive & ~node_down[None, :],
        life_of=life_of,
        values=values,
        boots_s=boots_s,
        down=down,
        xids=xids,
    )
