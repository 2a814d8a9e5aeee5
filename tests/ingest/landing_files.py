"""Landing-directory files in the simulator's raw layout, written by the tests themselves
(so the ingest tests do not depend on the simulator), and lake comparison helpers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

START = datetime(2026, 11, 1, tzinfo=UTC)
SMI_FIELDS = (
    "timestamp, index, pci.bus_id, uuid, temperature.gpu, temperature.memory, power.draw [W], utilization.gpu [%], "
    "clocks.sm [MHz], ecc.errors.corrected.volatile.total, ecc.errors.uncorrected.volatile.total, "
    "ecc.errors.corrected.aggregate.total, ecc.errors.uncorrected.aggregate.total, retired_pages.sbe, retired_pages.dbe, "
    "retired_pages.pending, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
    "clocks_event_reasons.hw_thermal_slowdown"
)
# Per line: 16 metric fields, of which retired_pages.sbe/.dbe/.pending are [N/A] on H100.
SMI_SAMPLES_PER_LINE = 13
DCGM_METRICS = (
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
)
PCI = ("00000000:3B:00.0", "00000000:5E:00.0", "00000000:86:00.0", "00000000:AF:00.0")


@dataclass
class Landing:
    root: Path
    nodes: int
    gpus: int
    days: int
    steps_per_day: int
    step: timedelta

    @property
    def units(self) -> int:
        return self.nodes * self.gpus

    @property
    def smi_lines(self) -> int:
        return self.units * self.days * self.steps_per_day

    @property
    def smi_samples(self) -> int:
        return self.smi_lines * SMI_SAMPLES_PER_LINE

    @property
    def dcgm_samples(self) -> int:
        return self.units * self.days * self.steps_per_day * len(DCGM_METRICS)


def write_canonical_inventory(root: Path, units: list[str], rack: str = "rack00") -> None:
    """``root/inventory.csv``: a canonical inventory of ``units`` named ``<node>-gpu<k>``."""
    pl.DataFrame(
        {
            "unit_id": units,
            "node": [u.split("-")[0] for u in units],
            "rack": rack,
            "model": "NVIDIA H100 80GB HBM3",
            "installed_at": "2026-01-01T00:00:00Z",
        }
    ).write_csv(root / "inventory.csv")


def node_name(n: int) -> str:
    return f"gpu-node{n + 1:03d}"


def uuid_of(node: int, gpu: int) -> str:
    return f"GPU-{node:04x}{gpu:04x}-5f1c-4e2b-9a1d-0123456789ab"


def smi_line(ts: datetime, gpu: int, node: int, k: int) -> str:
    temp = 40 + (k % 20)
    sbe = k // 3
    return ", ".join(
        [
            ts.strftime("%Y/%m/%d %H:%M:%S.000"),
            str(gpu),
            PCI[gpu],
            uuid_of(node, gpu),
            str(temp),
            str(temp + 7),
            f"{250 + k % 50:.2f} W",
            f"{k % 100} %",
            "1410 MHz",
            str(sbe),
            "0",
            str(1000 + sbe),
            "0",
            "[N/A]",
            "[N/A]",
            "[N/A]",
            str(k // 50),
            "0",
            "Yes" if k % 97 == 0 else "No",
            "Active" if temp > 58 else "Not Active",
        ]
    )


def write_landing(
    root: Path, nodes: int = 2, gpus: int = 2, days: int = 2, steps_per_day: int = 6, xid_code: int = 79
) -> Landing:
    """Inventory, nvidia-smi day files, DCGM query_range JSON, scrapes, kernel logs, tickets."""
    step = timedelta(days=1) / steps_per_day
    landing = Landing(root, nodes, gpus, days, steps_per_day, step)
    root.mkdir(parents=True, exist_ok=True)
    inventory = ["unit_id,node,rack,model,lot,installed_at,uuid,pci_bus_id,gpu_index"]
    for n in range(nodes):
        for g in range(gpus):
            inventory.append(
                f"{node_name(n)}-gpu{g},{node_name(n)},rack{n // 2 + 1:02d},NVIDIA H100 80GB HBM3,LOT-2025-07A,"
                f"2026-01-15T00:00:00Z,{uuid_of(n, g)},{PCI[g]},{g}"
            )
    (root / "inventory.csv").write_text("\n".join(inventory) + "\n")
    for d in range(days):
        day = START + timedelta(days=d)
        for n in range(nodes):
            lines = [SMI_FIELDS]
            for s in range(steps_per_day):
                for g in range(gpus):
                    lines.append(smi_line(day + s * step, g, n, d * steps_per_day + s))
            target = root / "nvidia-smi" / node_name(n) / f"{day:%Y-%m-%d}.csv"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(lines) + "\n")
        for metric in (*DCGM_METRICS, "DCGM_FI_DEV_XID_ERRORS"):
            result = []
            for n in range(nodes):
                for g in range(gpus):
                    values = []
                    for s in range(steps_per_day):
                        k = d * steps_per_day + s
                        ts = (day + s * step).timestamp()
                        if metric == "DCGM_FI_DEV_XID_ERRORS":
                            # unit 0 of node 0 gets the code at the day's third sample and holds it
                            value = xid_code if (n, g) == (0, 0) and k >= 2 else 0
                        else:
                            value = k * 10 + g
                        values.append([ts, str(value)])
                    result.append(
                        {
                            "metric": {
                                "__name__": metric,
                                "gpu": str(g),
                                "UUID": uuid_of(n, g),
                                "device": f"nvidia{g}",
                                "modelName": "NVIDIA H100 80GB HBM3",
                                "Hostname": node_name(n),
                                "pci_bus_id": PCI[g],
                            },
                            "values": values,
                        }
                    )
            target = root / "dcgm" / f"{day:%Y-%m-%d}" / f"{metric}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    last = START + timedelta(days=days - 1) + (steps_per_day - 1) * step
    for n in range(nodes):
        k = (days - 1) * steps_per_day + steps_per_day - 1
        lines = ["# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).", "# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
        for g in range(gpus):
            labels = f'gpu="{g}",UUID="{uuid_of(n, g)}",device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",Hostname="{node_name(n)}"'
            lines.append(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} {40 + k % 20} {int(last.timestamp() * 1000)}")
        target = root / "scrape" / f"{node_name(n)}.prom"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n")
        log = [
            f"2026-11-01T00:00:01.000001+00:00 {node_name(n)} systemd[1]: Started Daily apt download activities.",
            f"2026-11-01T12:00:03.123456+00:00 {node_name(n)} kernel: [123456.789012] NVRM: Xid (PCI:0000:3b:00): 79, pid=2817, name=python3, GPU has fallen off the bus.",
            f"2026-11-01T13:00:00.000000+00:00 {node_name(n)} kernel: [127053.1] nvidia-nvswitch0: link up",
        ]
        target = root / "kernel" / f"{node_name(n)}.log"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(log) + "\n")
    (root / "tickets.csv").write_text(
        "ticket_id,opened_at,node,gpu_index,gpu_uuid,category,summary\n"
        f'T-1001,2026-11-02T06:00:00Z,{node_name(0)},0,{uuid_of(0, 0)},fell off bus,"GPU lost, node drained"\n'
    )
    (root / "ground_truth.parquet").write_bytes(b"PAR1 not telemetry")
    (root / "simulation.json").write_text(json.dumps({"units": nodes * gpus}))
    return landing


def write_messy_landing(root: Path, days: int = 2) -> Landing:
    """A small landing with bad rows: repeated lines, a conflict, a broken number, a counter
    jump, a row of another day, an unknown GPU, and a file of rows already stored (all in
    the second day's files)."""
    landing = write_landing(root, nodes=4, gpus=2, days=days, steps_per_day=8)
    day = START + timedelta(days=1)
    step = landing.step
    bad = [
        smi_line(day + 2 * step, 0, 1, 10),  # a repeated line: duplicates
        smi_line(day + 3 * step, 1, 2, 10).replace(", 1410 MHz", ", 1500 MHz"),  # same key, other value
        smi_line(day + 4 * step, 0, 3, 12).replace(" W,", "x W,", 1),  # a broken number
        smi_line(day + 5 * step, 1, 0, 13).replace(f", {13 // 3}, 0, ", ", 900000000, 0, ", 1),  # a counter jump
        smi_line(day + 25 * step, 0, 2, 14),  # in the future of this day's file: another day's partition
        "2026/11/02 01:00:00.000, 7, 00000000:3B:00.0, GPU-ffff0000-5f1c-4e2b-9a1d-0123456789ab"
        + ", 1" * 16,  # an unknown GPU
    ]
    for n in range(landing.nodes):
        target = root / "nvidia-smi" / node_name(n) / f"{day:%Y-%m-%d}.csv"
        target.write_text(target.read_text() + "\n".join(bad[n::2]) + "\n")
    late = root / "nvidia-smi" / node_name(0) / "extra" / f"{day:%Y-%m-%d}.csv"
    late.parent.mkdir()
    late.write_text(SMI_FIELDS + "\n" + smi_line(START + 3 * step, 1, 0, 3) + "\n")  # already stored (day 1)
    return landing


def lake_snapshot(lake_dir: Path) -> dict[str, object]:
    """Every canonical table, sorted, plus the partition file names: equal lakes compare equal."""
    from foreshock.contract import KEYS, TABLES
    from foreshock.lake.read import read_table

    snapshot = {}
    for table in TABLES:
        frame = read_table(lake_dir, table)
        snapshot[table] = frame.sort(list(KEYS[table]))
    snapshot["partitions"] = sorted(str(p.relative_to(lake_dir)) for p in Path(lake_dir).rglob("part.parquet"))
    return snapshot


def assert_same_lake(left: Path, right: Path) -> None:
    a, b = lake_snapshot(left), lake_snapshot(right)
    assert a["partitions"] == b["partitions"]
    for table in ("inventory", "samples", "events", "failures"):
        assert a[table].equals(b[table]), f"{table} differs"
