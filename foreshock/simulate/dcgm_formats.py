"""The simulated fleet's dcgm-exporter telemetry as users pull it: Prometheus ``query_range``
JSON of the DCGM fields (one file per day, written node by node through a bounded buffer) and a
Prometheus text-exposition scrape.  Byte-for-byte deterministic for the same input.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.simulate.fleet import Fleet, Life
from foreshock.simulate.formats import write_text
from foreshock.simulate.params import SimulationParams
from foreshock.simulate.telemetry import NodeTelemetry

# dcgm-exporter fields that nvidia-smi does not give, exported from Prometheus.
DCGM_JSON_METRICS = (
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_XID_ERRORS",
)


def xid_gauge(tel: NodeTelemetry, lives: list[Life]) -> np.ndarray:
    """dcgm-exporter's DCGM_FI_DEV_XID_ERRORS: the last XID code since the driver loaded."""
    gauge = np.zeros(tel.present.shape, dtype=np.int64)
    boot_idx = np.searchsorted(tel.boots_s, tel.t_s, side="right") - 1
    last_boot = tel.boots_s[boot_idx]
    starts = np.array([life.start_s for life in lives] + [np.inf])
    for i, slot in enumerate(tel.slots):
        events = [(when, code) for s, when, code in tel.xids if s == slot]
        if not events:
            continue
        times = np.array([e[0] for e in events])
        codes = np.array([e[1] for e in events])
        pos = np.searchsorted(times, tel.t_s, side="right") - 1
        since = np.maximum(last_boot, starts[tel.life_of[i]])
        seen = (pos >= 0) & (times[np.maximum(pos, 0)] > since)
        gauge[i] = np.where(seen, codes[np.maximum(pos, 0)], 0)
    return gauge


def _series_labels(metric: str, fleet: Fleet, node_index: int, slot: int, uuid: str) -> dict[str, str]:
    gpu = str(int(fleet.gpu_index[slot]))
    host = fleet.node[node_index]
    return {
        "__name__": metric,
        "gpu": gpu,
        "UUID": uuid,
        "device": f"nvidia{gpu}",
        "modelName": fleet.node_model[node_index].name,
        "Hostname": host,
        "pci_bus_id": fleet.pci_bus_id[slot],
        "instance": f"{host}:9400",
        "job": "dcgm-exporter",
    }


def dcgm_series(
    tel: NodeTelemetry, fleet: Fleet, lives: list[Life], params: SimulationParams
) -> dict[tuple[str, str], list[str]]:
    """Prometheus matrix series (JSON text) per (day, metric) for this node's GPUs."""
    ratio = params.dcgm_step_s // params.sample_every_s
    on_grid = tel.present.copy()
    on_grid[:, np.arange(on_grid.shape[1]) % ratio != 0] = False
    ii, kk = np.nonzero(on_grid)  # GPU-major, so each series' points are in time order
    seconds = np.rint(tel.t_s[kk]).astype(np.int64)
    frame = pl.DataFrame({"life": tel.life_of[ii, kk], "ts": seconds}).with_columns(
        day=pl.from_epoch("ts", time_unit="s").dt.strftime("%Y-%m-%d")
    )
    gauge = xid_gauge(tel, lives)
    out: dict[tuple[str, str], list[str]] = {}
    for metric in DCGM_JSON_METRICS:
        values = gauge if metric == "DCGM_FI_DEV_XID_ERRORS" else tel.values[metric]
        pairs = (
            frame.with_columns(pair=pl.format('[{},"{}"]', pl.col("ts"), pl.Series(values[ii, kk])))
            .group_by(["day", "life"], maintain_order=True)
            .agg(pl.col("pair").str.join(","))
        )
        heads: dict[int, str] = {}  # a series' labels are the same every day
        for day, life_idx, joined in pairs.iter_rows():
            if life_idx not in heads:
                life = lives[life_idx]
                labels = _series_labels(metric, fleet, tel.node_index, life.slot, life.uuid)
                heads[life_idx] = '{"metric":' + json.dumps(labels, separators=(",", ":")) + ',"values":['
            out.setdefault((day, metric), []).append(heads[life_idx] + joined + "]}")
    return out


_DCGM_HEAD = '{"status":"success","data":{"resultType":"matrix","result":['
_DCGM_TAIL = "]}}\n"


class DcgmWriter:
    """Write ``dcgm/<day>/<METRIC>.json`` as ``/api/v1/query_range`` responses, node by node.

    A response holds every GPU's series of that day, so a file is complete only after the
    last node.  The series are buffered and appended to their files whenever the buffer
    passes ``buffer_chars``, so memory stays bounded however large the fleet (4,096 GPUs x
    60 days is ~0.9 GB of JSON); the bytes are those of one write per file.
    """

    def __init__(self, out_dir: Path, days: list[str], buffer_chars: int = 64_000_000) -> None:
        self.out_dir, self.days, self.buffer_chars = out_dir, days, buffer_chars
        self._buffer: dict[tuple[str, str], list[str]] = {}
        self._buffered = 0
        self._begun: set[tuple[str, str]] = set()

    def _path(self, day: str, metric: str) -> Path:
        return self.out_dir / "dcgm" / day / f"{metric}.json"

    def add(self, series: dict[tuple[str, str], list[str]]) -> None:
        """Queue one node's series (from :func:`dcgm_series`); flush when the buffer is full."""
        for key, texts in series.items():
            self._buffer.setdefault(key, []).extend(texts)
            self._buffered += sum(len(t) for t in texts)
        if self._buffered >= self.buffer_chars:
            self._flush()

    def _flush(self) -> None:
        for (day, metric), texts in self._buffer.items():
            if not texts:
                continue
            path = self._path(day, metric)
            lead = "," if (day, metric) in self._begun else _DCGM_HEAD
            if (day, metric) not in self._begun:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"")  # a file left by an earlier run is not appended to
                self._begun.add((day, metric))
            with path.open("ab") as handle:
                handle.write((lead + ",".join(texts)).encode())
        self._buffer.clear()
        self._buffered = 0

    def close(self) -> tuple[int, int]:
        """Finish every day's files (empty responses where no series fell); files and bytes."""
        self._flush()
        files = size = 0
        for day in self.days:
            for metric in DCGM_JSON_METRICS:
                path = self._path(day, metric)
                if (day, metric) in self._begun:
                    with path.open("ab") as handle:
                        handle.write(_DCGM_TAIL.encode())
                    size += path.stat().st_size
                else:
                    size += write_text(path, _DCGM_HEAD + _DCGM_TAIL)
                files += 1
        return files, size


_SCRAPE_METRICS = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature.gpu"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "temperature.memory"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_cw"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "utilization.gpu"),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "clocks.sm"),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        "ecc.errors.corrected.volatile.total",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        "ecc.errors.uncorrected.volatile.total",
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        "ecc.errors.corrected.aggregate.total",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        "ecc.errors.uncorrected.aggregate.total",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
    (
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "counter",
        "Throttling duration due to thermal constraints (in us).",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
    ),
    (
        "DCGM_FI_DEV_POWER_VIOLATION",
        "counter",
        "Throttling duration due to power constraints (in us).",
        "DCGM_FI_DEV_POWER_VIOLATION",
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    ),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "xid"),
)
_SCRAPE_REMAP = (
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors.",
        "remap.correctable",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors.",
        "remap.uncorrectable",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether a row remap is pending.", "remap.pending"),
)
_SCRAPE_RETIRED = (
    (
        "DCGM_FI_DEV_RETIRED_SBE",
        "counter",
        "Total number of retired pages due to single-bit errors.",
        "remap.correctable",
    ),
    (
        "DCGM_FI_DEV_RETIRED_DBE",
        "counter",
        "Total number of retired pages due to double-bit errors.",
        "remap.uncorrectable",
    ),
    ("DCGM_FI_DEV_RETIRED_PENDING", "gauge", "Total number of pages pending retirement.", "remap.pending"),
)


def write_scrape(out_dir: Path, tel: NodeTelemetry, fleet: Fleet, lives: list[Life], gauge: np.ndarray) -> int:
    """``scrape/<node>.prom``: one text exposition at each GPU's last reported sample."""
    model = fleet.node_model[tel.node_index]
    metrics = _SCRAPE_METRICS + (_SCRAPE_REMAP if model.row_remapping else _SCRAPE_RETIRED)
    last: list[tuple[int, int]] = []
    for i in range(len(tel.slots)):
        ks = np.flatnonzero(tel.present[i])
        # Only the GPU still installed at the end answers the scrape.
        if len(ks) and tel.life_of[i, ks[-1]] == tel.life_of[i, -1]:
            last.append((i, int(ks[-1])))
    out: list[str] = []
    for name, kind, help_text, source in metrics:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for i, k in last:
            life = lives[tel.life_of[i, k]]
            labels = _series_labels(name, fleet, tel.node_index, life.slot, life.uuid)
            del labels["__name__"], labels["instance"], labels["job"]
            label_text = ",".join(f'{key}="{value}"' for key, value in labels.items())
            if source == "xid":
                value = str(int(gauge[i, k]))
            elif source == "power_cw":
                cw = int(tel.values[source][i, k])
                value = f"{cw // 100}.{cw % 100:02d}"
            else:
                value = str(int(tel.values[source][i, k]))
            out.append(f"{name}{{{label_text}}} {value} {int(tel.ts_ms[i, k])}")
    return write_text(out_dir / "scrape" / f"{fleet.node[tel.node_index]}.prom", "\n".join(out) + "\n")
