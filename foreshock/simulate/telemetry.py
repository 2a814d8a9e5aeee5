"""Per-node telemetry consistent with the failure schedule (vectorised over GPUs x samples).

A node is simulated as a whole because workload, reboots and scrape gaps are node
events: the GPUs of one node run the same job, reset their volatile counters together
and go silent together.  Each node draws from its own random stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from foreshock.simulate.fleet import DAY_S, HOUR_S, Fleet, Life
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


def simulate_node(
    node_index: int,
    fleet: Fleet,
    lives: list[Life],
    lives_by_slot: dict[int, list[int]],
    params: SimulationParams,
) -> NodeTelemetry:
    """Generate the telemetry of one node over the whole simulated span."""
    rng = np.random.default_rng([params.seed, 3, node_index])
    step = params.sample_every_s
    step_h = step / HOUR_S
    n_t = params.samples
    t = params.start_s + np.arange(n_t, dtype=np.float64) * step
    slots = np.flatnonzero(fleet.slot_node == node_index)
    n_g = len(slots)
    model = fleet.node_model[node_index]
    hot = fleet.rack[int(fleet.node_rack[node_index])] == fleet.hot_rack

    # Node events: reboots (volatile counters reset), downtime around them, scrape gaps.
    boots = [params.start_s - rng.uniform(2, 40) * DAY_S]
    down: list[tuple[float, float, str]] = []
    for r in np.sort(rng.uniform(params.start_s, params.end_s, rng.poisson(params.reboots_per_node_day * params.days))):
        down.append((r - rng.uniform(5, 20) * 60, r, "reboot"))
        boots.append(float(r))
    for slot in slots:
        for li in lives_by_slot[int(slot)]:
            back = lives[li].back_s
            if back is not None and back < params.end_s:
                # Swapping a GPU means powering the node off: a longer outage, then a boot.
                down.append((back - rng.uniform(30, 90) * 60, back, "gpu swap"))
                boots.append(back)
    for g0 in rng.uniform(params.start_s, params.end_s, rng.poisson(params.scrape_gaps_per_node_day * params.days)):
        down.append((g0, g0 + rng.uniform(2, 10) * HOUR_S, "scrape gap"))
    boots_s = np.sort(np.array(boots))
    node_down = _intervals_mask(t, down)
    node_reset = np.zeros(n_t, dtype=bool)
    first_after = np.ceil((boots_s[1:] - params.start_s) / step).astype(np.int64)
    node_reset[first_after[first_after < n_t]] = True

    # Which life occupies each slot at each sample.
    local: list[Life] = []
    life_global: list[int] = []
    life_local = np.full((n_g, n_t), -1, dtype=np.int64)
    life_start = np.zeros((n_g, n_t), dtype=bool)
    spans: list[tuple[int, int, int]] = []  # (row, k0, k1) per local life
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
                life_local[i, k0:k1] = len(local)
                life_start[i, k0] = True
            local.append(life)
            life_global.append(li)
    n_l = len(local)
    alive = life_local >= 0
    idx = np.where(alive, life_local, n_l)  # n_l: a dummy life for empty slots

    def per_life(values: list[float], empty: float = 0.0) -> np.ndarray:
        return np.append(np.asarray(values, dtype=np.float64), empty)[idx]

    # Degradation progress p in [0, 1] from precursor onset to failure, per mode.
    progress = {m: np.zeros((n_g, n_t)) for m in ("memory", "thermal", "power")}
    active = {m: np.zeros((n_g, n_t), dtype=bool) for m in ("memory", "thermal", "power")}
    for life, (i, k0, k1) in zip(local, spans):
        if life.mode in progress and life.onset_s is not None and k0 < k1:
            tk = t[k0:k1]
            span = max(life.failed_at_s - life.onset_s, step)
            progress[life.mode][i, k0:k1] = np.clip((tk - life.onset_s) / span, 0.0, 1.0)
            active[life.mode][i, k0:k1] = tk >= life.onset_s

    # Workload drives power, power drives temperature.
    util = np.clip(_workload(rng, n_t, step)[None, :] + rng.normal(0, 2.5, (n_g, n_t)), 0, 100)
    util = np.rint(util) * alive
    tdp, idle = model.tdp_w, model.idle_w
    power = idle + (tdp - idle) * util / 100.0 * per_life([x.power_efficiency for x in local])
    power += rng.normal(0, 0.012 * tdp, (n_g, n_t))
    # Power-delivery fault: variance, spikes and dips growing for hours before XID 79.
    act_pow, p_pow = active["power"], progress["power"]
    power += rng.normal(0, 1, (n_g, n_t)) * per_life([x.power_noise_frac for x in local]) * tdp * act_pow * (0.3 + 0.7 * p_pow)
    spike_p = per_life([x.power_spike_prob for x in local]) * act_pow
    power += (rng.random((n_g, n_t)) < spike_p) * rng.uniform(0.2, 0.5, (n_g, n_t)) * tdp
    dips = rng.random((n_g, n_t)) < spike_p / 2
    power = np.where(dips, idle * rng.uniform(1.0, 1.5, (n_g, n_t)), power)
    power = np.clip(power, 0.8 * idle, 1.15 * tdp)
    power_cw = np.rint(power * 100).astype(np.int64)  # nvidia-smi prints 2 decimals
    power = power_cw / 100.0

    diurnal = 1.5 * np.sin(2 * np.pi * (t / DAY_S - 0.375))
    ambient = AMBIENT_C + (params.hot_rack_extra_c if hot else 0.0) + diurnal
    drift = per_life([x.drift_c for x in local]) * progress["thermal"] ** 1.5 * active["thermal"]
    temp = ambient[None, :] + per_life([x.temp_offset_c for x in local]) + model.watts_to_c * power + drift
    temp_gpu = np.rint(temp + rng.normal(0, 0.7, (n_g, n_t)))
    temp_mem = np.rint(temp + 5.0 + 0.3 * drift + rng.normal(0, 0.8, (n_g, n_t)))
    slowdown = temp_gpu >= model.slowdown_c

    busy = util >= 10
    clock = np.where(busy, model.max_sm_mhz - rng.integers(0, 30, (n_g, n_t)), model.idle_sm_mhz)
    clock = np.where(busy & (power > 0.97 * tdp), clock - 120, clock)
    clock = np.where(slowdown, np.rint(model.max_sm_mhz * rng.uniform(0.55, 0.75, (n_g, n_t))), clock)

    # ECC: healthy background, benign bursts, HBM degradation; then the double-bit error.
    sbe_rate = per_life([x.base_sbe_per_h for x in local])
    peak = per_life([x.sbe_peak_per_h for x in local])
    sbe_rate = sbe_rate + active["memory"] * SBE_ONSET_PER_H * (np.maximum(peak, SBE_ONSET_PER_H) / SBE_ONSET_PER_H) ** progress["memory"]
    for life, (i, k0, k1) in zip(local, spans):
        for b0, hours, rate in life.sbe_bursts:
            in_burst = (t >= b0) & (t < b0 + hours * HOUR_S)
            in_burst[:k0] = False
            in_burst[k1:] = False
            sbe_rate[i] += rate * in_burst
    sbe_inc = rng.poisson(sbe_rate * step_h) * alive
    dbe_inc = np.zeros((n_g, n_t), dtype=np.int64)
    for life, (i, k0, k1) in zip(local, spans):
        if life.mode == "memory" and k0 < k1 and life.failed_at_s <= t[-1]:
            dbe_inc[i, k1 - 1] = 1
    reset = life_start | node_reset[None, :]
    life_sbe = _cum_since(sbe_inc, life_start)
    prior = per_life([x.prior_sbe for x in local]).astype(np.int64)
    rows_c = np.floor(life_sbe / per_life([x.sbes_per_remap for x in local], empty=1.0)).astype(np.int64) * alive
    rows_u = _cum_since(dbe_inc, life_start) * alive
    remap_total = rows_c + rows_u
    remap_inc = np.diff(remap_total, axis=1, prepend=0)
    remap_inc = np.where(life_start, remap_total, remap_inc)
    pending = _cum_since(np.maximum(remap_inc, 0), reset) > 0

    # Link and violation counters (all volatile: reset when the driver reloads).
    pcie_rate = per_life([x.pcie_replay_per_h for x in local]) + act_pow * per_life([x.pcie_replay_peak_per_h for x in local]) * p_pow**2
    pcie_inc = rng.poisson(pcie_rate * step_h) * alive
    crc_inc = rng.poisson(per_life([x.nvlink_crc_per_h for x in local]) * step_h) * alive
    step_us = step * 1_000_000
    near_limit = temp_gpu >= model.slowdown_c - 2
    thermal_inc = np.rint(slowdown * step_us * rng.uniform(0.4, 1.0, (n_g, n_t)) + near_limit * step_us * 0.03).astype(np.int64) * alive
    power_inc = np.rint((power > 0.95 * tdp) * step_us * rng.uniform(0.1, 0.6, (n_g, n_t))).astype(np.int64) * alive

    values = {
        "temperature.gpu": temp_gpu.astype(np.int64),
        "temperature.memory": temp_mem.astype(np.int64),
        "power_cw": power_cw,
        "utilization.gpu": util.astype(np.int64),
        "clocks.sm": clock.astype(np.int64),
        "ecc.errors.corrected.volatile.total": _cum_since(sbe_inc, reset),
        "ecc.errors.uncorrected.volatile.total": _cum_since(dbe_inc, reset),
        "ecc.errors.corrected.aggregate.total": prior + life_sbe,
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

    # XIDs: row remaps / page retirements (63, sometimes 64 when recording fails), the
    # failure's own code, and application-caused codes that say nothing about hardware.
    xids: list[tuple[int, float, int]] = []
    ri, rk = np.nonzero((remap_inc > 0) & alive & ~life_start)
    for i, k in zip(ri, rk):
        for _ in range(int(min(remap_inc[i, k], 5))):
            code = 64 if active["memory"][i, k] and rng.random() < 0.1 else 63
            xids.append((int(slots[i]), float(t[k] - rng.uniform(1, step - 1)), code))
    for life in local:
        if life.failure_xid is not None and life.failed_at_s is not None and life.failed_at_s < params.end_s:
            xids.append((life.slot, life.failed_at_s, life.failure_xid))
    for i, slot in enumerate(slots):
        for when in rng.uniform(params.start_s, params.end_s, rng.poisson(APP_XID_PER_DAY * params.days)):
            k = min(n_t - 1, math.ceil((when - params.start_s) / step))
            if alive[i, k]:
                xids.append((int(slot), float(when), int(rng.choice([13, 31, 45], p=[0.4, 0.4, 0.2]))))
    xids.sort(key=lambda x: (x[1], x[0]))

    # nvidia-smi -l prints all GPUs of a node within a few ms of each loop tick.
    jitter = rng.integers(0, 900, n_t)
    ts_ms = (np.rint(t * 1000).astype(np.int64) + jitter)[None, :] + 3 * fleet.gpu_index[slots][:, None]
    present = alive & ~node_down[None, :]
    life_of = np.where(alive, np.append(np.asarray(life_global, dtype=np.int64), -1)[idx], -1)
    return NodeTelemetry(
        node_index=node_index,
        slots=slots,
        t_s=t,
        ts_ms=ts_ms,
        present=present,
        life_of=life_of,
        values=values,
        boots_s=boots_s,
        down=sorted(down),
        xids=xids,
    )
