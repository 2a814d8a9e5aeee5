"""Writers for the raw formats real fleets produce (see docs: simulator raw output layout).

nvidia-smi ``--query-gpu ... --format=csv`` dumps, kernel logs with NVRM Xid lines, RMA
tickets, an inventory CSV and the ground truth (the dcgm-exporter formats, Prometheus JSON and
a text scrape, are :mod:`foreshock.simulate.dcgm_formats`).  Byte-for-byte deterministic for
the same input.
"""

from __future__ import annotations

import bisect
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.simulate.fleet import Fleet, Life
from foreshock.simulate.params import SimulationParams
from foreshock.simulate.telemetry import NodeTelemetry

NVIDIA_SMI_FIELDS = (
    "timestamp",
    "index",
    "pci.bus_id",
    "uuid",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "utilization.gpu",
    "clocks.sm",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.sbe",
    "retired_pages.dbe",
    "retired_pages.pending",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "clocks_event_reasons.hw_thermal_slowdown",
)
_UNITS = {"power.draw": "W", "utilization.gpu": "%", "clocks.sm": "MHz"}
NVIDIA_SMI_HEADER = ", ".join(f"{f} [{_UNITS[f]}]" if f in _UNITS else f for f in NVIDIA_SMI_FIELDS)
NOT_SUPPORTED = "[N/A]"

_XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC 2, TPC 1, SM 0): Out Of Range Address",
    31: "Ch 0000001a, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    43: "Ch 00000008",
    45: "Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 3, subpartition 1.",
    63: "Row Remapper: New row (0x{addr:016x}) marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to record row remap (0x{addr:016x}), row remapping will not be possible.",
    79: "GPU has fallen off the bus.",
}
_XID_TEXT_PAGE_RETIREMENT = {
    63: "Dynamic Page Retirement: New page retired, reboot to activate (0x{addr:016x}).",
    64: "Dynamic Page Retirement: Failed to record page retirement (0x{addr:016x}).",
}
_NOISE = (
    "{host} systemd[1]: Started session-{n}.scope - Session {n} of User root.",
    "{host} CRON[{pid}]: (root) CMD (/usr/local/sbin/node-health-check --quiet)",
    "{host} kernel: [{up}] perf: interrupt took too long (2512 > 2500), lowering kernel.perf_event_max_sample_rate to 79500",
    "{host} nvidia-persistenced[{pid}]: device 0000:{bus}:00.0 - persistence mode enabled.",
    "{host} kernel: [{up}] mlx5_core 0000:c1:00.0 ibp193s0: Link up",
    "{host} slurmd[{pid}]: launch task StepId={n}.0 request from UID:1001 GID:1001",
    "{host} kernel: [{up}] EXT4-fs (nvme0n1p2): re-mounted. Quota mode: none.",
)


def iso_z(seconds: float) -> str:
    """ISO 8601 UTC with a ``Z``, to the second."""
    return datetime.fromtimestamp(round(seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_us_many(seconds: list[float]) -> list[str]:
    """Epoch seconds as RFC 3339 UTC to the microsecond (``2026-11-01T00:00:00.000000+00:00``)."""
    us = np.rint(np.asarray(seconds, dtype=np.float64) * 1_000_000).astype(np.int64)
    return [f"{text}+00:00" for text in np.datetime_as_string(us.astype("datetime64[us]"), unit="us").tolist()]


def _kernel_bus(pci_bus_id: str) -> str:
    """``00000000:3B:00.0`` as the kernel prints it in Xid lines: ``0000:3b:00``."""
    _, bus, dev = pci_bus_id.split(":")
    return f"0000:{bus.lower()}:{dev.split('.')[0]}"


def write_text(path: Path, text: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    path.write_bytes(data)
    return len(data)


def _yes_no(col: str) -> pl.Expr:
    return pl.when(pl.col(col) > 0).then(pl.lit("Yes")).otherwise(pl.lit("No"))


def nvidia_smi_frame(tel: NodeTelemetry, fleet: Fleet, lives: list[Life]) -> pl.DataFrame:
    """One row per reported sample, as nvidia-smi prints it: columns ``day`` and ``line``."""
    kk, ii = np.nonzero(tel.present.T)  # sample-major: one loop tick prints every GPU
    model = fleet.node_model[tel.node_index]
    uuids = pl.Series([life.uuid for life in lives])
    v = tel.values
    df = pl.DataFrame(
        {
            "ms": tel.ts_ms[ii, kk],
            "index": fleet.gpu_index[tel.slots][ii],
            "bus": pl.Series([fleet.pci_bus_id[s] for s in tel.slots]).gather(ii),
            "uuid": uuids.gather(tel.life_of[ii, kk]),
            **{
                name: v[name][ii, kk]
                for name in (
                    "temperature.gpu",
                    "temperature.memory",
                    "power_cw",
                    "utilization.gpu",
                    "clocks.sm",
                    "ecc.errors.corrected.volatile.total",
                    "ecc.errors.uncorrected.volatile.total",
                    "ecc.errors.corrected.aggregate.total",
                    "ecc.errors.uncorrected.aggregate.total",
                    "remap.correctable",
                    "remap.uncorrectable",
                    "remap.pending",
                    "hw_thermal_slowdown",
                )
            },
        }
    )
    na = pl.lit(NOT_SUPPORTED)
    remap = [
        pl.col("remap.correctable").cast(pl.String),
        pl.col("remap.uncorrectable").cast(pl.String),
        _yes_no("remap.pending"),
    ]
    pages, rows = ([na, na, na], remap) if model.row_remapping else (remap, [na, na, na])
    ts = pl.from_epoch(pl.col("ms"), time_unit="ms").dt.strftime("%Y/%m/%d %H:%M:%S%.3f")
    line = pl.concat_str(
        [
            ts,
            pl.col("index").cast(pl.String),
            pl.col("bus"),
            pl.col("uuid"),
            pl.col("temperature.gpu").cast(pl.String),
            pl.col("temperature.memory").cast(pl.String),
            pl.format("{}.{} W", pl.col("power_cw") // 100, (pl.col("power_cw") % 100).cast(pl.String).str.zfill(2)),
            pl.format("{} %", pl.col("utilization.gpu")),
            pl.format("{} MHz", pl.col("clocks.sm")),
            *(
                pl.col(c).cast(pl.String)
                for c in (
                    "ecc.errors.corrected.volatile.total",
                    "ecc.errors.uncorrected.volatile.total",
                    "ecc.errors.corrected.aggregate.total",
                    "ecc.errors.uncorrected.aggregate.total",
                )
            ),
            *pages,
            *rows,
            pl.when(pl.col("hw_thermal_slowdown") > 0).then(pl.lit("Active")).otherwise(pl.lit("Not Active")),
        ],
        separator=", ",
    )
    return df.select(ts.str.slice(0, 10).str.replace_all("/", "-").alias("day"), line.alias("line"))


def _mess_up(lines: list[str], rng: np.random.Generator) -> list[str]:
    """A collector that resent a block (duplicates) or flushed buffers late (out of order)."""
    n = len(lines)
    if n < 20:
        return lines
    a = int(rng.integers(0, n - 10))
    b = min(n, a + int(rng.integers(5, 60)))
    block = lines[a:b]
    if rng.random() < 0.5:
        at = int(rng.integers(b, n + 1))
        return lines[:at] + block + lines[at:]
    rest = lines[:a] + lines[b:]
    at = int(rng.integers(a, len(rest) + 1))
    return rest[:at] + block + rest[at:]


def write_nvidia_smi(
    out_dir: Path, tel: NodeTelemetry, fleet: Fleet, lives: list[Life], params: SimulationParams
) -> tuple[int, int, int]:
    """Write ``nvidia-smi/<node>/<day>.csv``; returns (files, rows, bytes)."""
    rng = np.random.default_rng([params.seed, 4, tel.node_index])
    frame = nvidia_smi_frame(tel, fleet, lives)
    node_dir = out_dir / "nvidia-smi" / fleet.node[tel.node_index]
    files = rows = size = 0
    for (day,), part in frame.partition_by("day", maintain_order=True, as_dict=True).items():
        lines = part["line"].to_list()
        if rng.random() < params.messy_file_share:
            lines = _mess_up(lines, rng)
        size += write_text(node_dir / f"{day}.csv", NVIDIA_SMI_HEADER + "\n" + "\n".join(lines) + "\n")
        files += 1
        rows += len(lines)
    return files, rows, size


def write_kernel_log(
    out_dir: Path, tel: NodeTelemetry, fleet: Fleet, lives: list[Life], params: SimulationParams
) -> tuple[int, int]:
    """``kernel/<node>.log``: rsyslog lines, mostly noise, boots, and NVRM Xid lines."""
    rng = np.random.default_rng([params.seed, 5, tel.node_index])
    host = fleet.node[tel.node_index]
    model = fleet.node_model[tel.node_index]
    buses = {int(s): _kernel_bus(fleet.pci_bus_id[s]) for s in tel.slots}
    slot_buses = [buses[int(s)].split(":")[1] for s in tel.slots]
    boots = tel.boots_s.tolist()  # sorted
    entries: list[tuple[float, str]] = []

    def uptime(when: float) -> str:
        return f"{when - boots[bisect.bisect_right(boots, when) - 1]:12.6f}"

    for boot in tel.boots_s[tel.boots_s >= params.start_s]:
        entries.append(
            (
                boot,
                f"{host} kernel: [{0.0:12.6f}] Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP PREEMPT_DYNAMIC",
            )
        )
        entries.append((boot + 4.118, f"{host} kernel: [{4.118:12.6f}] nvidia: module license 'NVIDIA' taints kernel."))
        entries.append(
            (
                boot + 4.532,
                f"{host} kernel: [{4.532:12.6f}] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024",
            )
        )
    n_noise = rng.poisson(1.5 * 24 * params.days)
    noise = np.sort(rng.uniform(params.start_s, params.end_s, n_noise))
    down = np.zeros(len(noise), dtype=bool)
    for a, b, why in tel.down:
        if why != "scrape gap":  # nothing logs while the node is down
            down |= (noise >= a) & (noise < b)
    for when, silent in zip(noise.tolist(), down.tolist(), strict=True):
        if silent:
            continue
        template = _NOISE[int(rng.integers(len(_NOISE)))]
        bus = slot_buses[int(rng.integers(len(tel.slots)))]
        entries.append(
            (
                when,
                template.format(
                    host=host,
                    n=int(rng.integers(1, 99999)),
                    pid=int(rng.integers(1000, 4_000_000)),
                    up=uptime(when),
                    bus=bus,
                ),
            )
        )
    for slot, when, code in tel.xids:
        texts = _XID_TEXT_PAGE_RETIREMENT if code in (63, 64) and not model.row_remapping else _XID_TEXT
        message = texts[code].format(addr=int(rng.integers(0, 2**28)))
        pid = int(rng.integers(1000, 4_000_000))
        name = "python3" if rng.random() < 0.8 else "pt_main_thread"
        entries.append(
            (
                when,
                f"{host} kernel: [{uptime(when)}] NVRM: Xid (PCI:{buses[slot]}): {code}, pid={pid}, name={name}, {message}",
            )
        )
        if code == 79:
            entries.append(
                (
                    when + 0.000412,
                    f"{host} kernel: [{uptime(when + 0.000412)}] NVRM: GPU {buses[slot]}.0: GPU has fallen off the bus.",
                )
            )
    entries.sort(key=lambda e: e[0])
    stamps = rfc3339_us_many([when for when, _ in entries])
    text = "\n".join(f"{stamp} {line}" for stamp, (_, line) in zip(stamps, entries, strict=True)) + "\n"
    return write_text(out_dir / "kernel" / f"{host}.log", text), len(entries)


def failures_in_window(lives: list[Life], params: SimulationParams) -> list[Life]:
    """Lives that failed inside the simulated span, in time order."""
    failed = [x for x in lives if x.failed_at_s is not None and params.start_s <= x.failed_at_s < params.end_s]
    return sorted(failed, key=lambda x: (x.failed_at_s, x.slot))


_TICKET_SUMMARY = {
    "memory": "uncorrectable ECC error (XID 48), job crashed; GPU replaced",
    "thermal": "GPU overheating and throttling, shut down under load; GPU replaced",
    "power": "GPU fell off the bus (XID 79), node rebooted; GPU replaced",
    79: "GPU fell off the bus (XID 79), node rebooted; GPU replaced",
    43: "GPU stopped processing (XID 43), fails dcgmi diag; GPU replaced",
    None: "GPU failed dcgmi diag level 3, no XID logged; GPU replaced",
}


def write_tickets(out_dir: Path, fleet: Fleet, failed: list[Life]) -> int:
    frame = pl.DataFrame(
        {
            "ticket_id": [f"RMA-{n + 1:06d}" for n in range(len(failed))],
            "opened_at": [iso_z(x.failed_at_s) for x in failed],
            "node": [fleet.node[int(fleet.slot_node[x.slot])] for x in failed],
            "gpu_index": [int(fleet.gpu_index[x.slot]) for x in failed],
            "gpu_uuid": [x.uuid for x in failed],
            "category": [x.category for x in failed],
            "summary": [
                f"{fleet.node[int(fleet.slot_node[x.slot])]} GPU {int(fleet.gpu_index[x.slot])}: "
                + _TICKET_SUMMARY[x.mode if x.mode != "sudden" else x.failure_xid]
                for x in failed
            ],
        },
        schema_overrides={"gpu_index": pl.Int64},
    )
    path = out_dir / "tickets.csv"
    frame.write_csv(path)
    return path.stat().st_size


def write_inventory(out_dir: Path, fleet: Fleet, lives: list[Life], params: SimulationParams) -> int:
    """One row per slot; ``uuid`` is the GPU in the slot at the end of the simulation."""
    current: dict[int, Life] = {}
    for life in lives:
        if life.start_s < params.end_s:
            current[life.slot] = life
    frame = pl.DataFrame(
        {
            "unit_id": fleet.unit_id,
            "node": [fleet.node[int(n)] for n in fleet.slot_node],
            "rack": [fleet.slot_rack(s) for s in range(fleet.units)],
            "model": [fleet.slot_model(s).name for s in range(fleet.units)],
            "lot": fleet.lot,
            "installed_at": [iso_z(x) for x in fleet.installed_at_s],
            "uuid": [current[s].uuid for s in range(fleet.units)],
            "pci_bus_id": fleet.pci_bus_id,
            "gpu_index": [int(g) for g in fleet.gpu_index],
        }
    )
    path = out_dir / "inventory.csv"
    frame.write_csv(path)
    return path.stat().st_size


def ground_truth_frame(fleet: Fleet, failed: list[Life]) -> pl.DataFrame:
    """The simulator's truth per failure (not telemetry)."""

    def ts(values: list[float | None]) -> pl.Series:
        us = [None if v is None else round(v * 1_000_000) for v in values]
        return pl.Series(us, dtype=pl.Int64).cast(pl.Datetime("us")).dt.replace_time_zone("UTC")

    return pl.DataFrame(
        {
            "unit_id": [fleet.unit_id[x.slot] for x in failed],
            "life": pl.Series([x.life for x in failed], dtype=pl.Int32),
            "mode": [x.mode for x in failed],
            "has_precursor": pl.Series([x.has_precursor for x in failed], dtype=pl.Boolean),
            "precursor_onset": ts([x.onset_s for x in failed]),
            "failed_at": ts([x.failed_at_s for x in failed]),
            "rack": [fleet.slot_rack(x.slot) for x in failed],
            "lot": [fleet.lot[x.slot] for x in failed],
        },
        schema_overrides={"unit_id": pl.String, "mode": pl.String, "rack": pl.String, "lot": pl.String},
    )
