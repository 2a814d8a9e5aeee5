"""Ingest throughput and peak memory for a large fleet's nvidia-smi CSV dumps.

    uv run python benchmarks/bench_ingest.py                       # 4,096 GPUs x 7 days, 1-minute samples
    uv run python benchmarks/bench_ingest.py --gpus 512 --days 2   # a quick look

Writes ``nvidia-smi --query-gpu=... --format=csv`` files (one per node and day, 8 GPUs per
node, as ``nvidia-smi -l 60`` would) plus an inventory under ``--work``, then runs
``foreshock.ingest.ingest_path`` in a child process and prints rows/s and the child's peak
RSS.  ``--metrics`` picks how many metric columns each line has (default 2: GPU
temperature and the corrected-ECC counter) to keep the full fleet within minutes on 2
cores; samples scale with it (one sample per metric per line).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

METRIC_FIELDS = [
    ("temperature.gpu", ""),
    ("ecc.errors.corrected.volatile.total", ""),
    ("power.draw", "W"),
    ("utilization.gpu", "%"),
    ("temperature.memory", ""),
    ("clocks.sm", "MHz"),
    ("ecc.errors.uncorrected.volatile.total", ""),
    ("remapped_rows.correctable", ""),
    ("remapped_rows.uncorrectable", ""),
    ("remapped_rows.pending", ""),
    ("clocks_event_reasons.hw_thermal_slowdown", ""),
    ("ecc.errors.corrected.aggregate.total", ""),
    ("ecc.errors.uncorrected.aggregate.total", ""),
]
GPUS_PER_NODE = 8
START = datetime(2026, 11, 1, tzinfo=UTC)


def generate(work: Path, gpus: int, days: int, every_s: int, metrics: int, seed: int) -> int:
    """Write the landing directory; returns the number of CSV data lines."""
    rng = np.random.default_rng(seed)
    fields = METRIC_FIELDS[:metrics]
    header = ", ".join(["timestamp", "index", "pci.bus_id", "uuid"] + [f"{n} [{u}]" if u else n for n, u in fields])
    nodes = gpus // GPUS_PER_NODE
    steps = 86400 // every_s
    raw = work / "raw"
    inventory = pl.DataFrame(
        {
            "unit_id": [f"node{n:04d}-gpu{g}" for n in range(nodes) for g in range(GPUS_PER_NODE)],
            "node": [f"node{n:04d}" for n in range(nodes) for _ in range(GPUS_PER_NODE)],
            "rack": [f"rack{n // 32:02d}" for n in range(nodes) for _ in range(GPUS_PER_NODE)],
            "model": "NVIDIA H100 80GB HBM3",
            "lot": "LOT-2025-07A",
            "installed_at": "2026-01-01T00:00:00Z",
            "uuid": [f"GPU-{n:08x}-0000-0000-0000-{g:012x}" for n in range(nodes) for g in range(GPUS_PER_NODE)],
            "pci_bus_id": [f"00000000:{0x18 + 0x10 * g:02X}:00.0" for n in range(nodes) for g in range(GPUS_PER_NODE)],
            "gpu_index": [str(g) for _ in range(nodes) for g in range(GPUS_PER_NODE)],
        }
    )
    raw.mkdir(parents=True, exist_ok=True)
    inventory.write_csv(raw / "inventory.csv")
    lines = 0
    for day in range(days):
        base = START + timedelta(days=day)
        stamps = pl.Series(
            [(base + timedelta(seconds=s * every_s)).strftime("%Y/%m/%d %H:%M:%S.000") for s in range(steps)]
        )
        frame = pl.DataFrame(
            {"timestamp": stamps.repeat_by(GPUS_PER_NODE).explode(), "index": np.tile(np.arange(GPUS_PER_NODE), steps)}
        )
        for node in range(nodes):
            temp = 35 + rng.integers(0, 40, frame.height)
            sbe = np.cumsum(rng.poisson(0.01, frame.height).reshape(steps, GPUS_PER_NODE), axis=0).ravel()
            values = {
                "temperature.gpu": temp,
                "ecc.errors.corrected.volatile.total": sbe,
                "power.draw": (rng.uniform(80, 700, frame.height)).round(2),
                "utilization.gpu": rng.integers(0, 101, frame.height),
                "temperature.memory": temp + 7,
                "clocks.sm": rng.integers(345, 1981, frame.height),
            }
            columns = [
                pl.col("timestamp"),
                pl.col("index").cast(pl.String),
                pl.lit("00000000:18:00.0"),
                pl.lit(f"GPU-{node:08x}"),
            ]
            for name, unit in fields:
                column = pl.Series(values.get(name, np.zeros(frame.height, dtype=np.int64))).cast(pl.String)
                columns.append(column + (f" {unit}" if unit else ""))
            text = frame.select(pl.concat_str(columns, separator=", ").alias("line")).get_column("line")
            target = raw / "nvidia-smi" / f"node{node:04d}" / f"{base:%Y-%m-%d}.csv"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(header + "\n" + "\n".join(text.to_list()) + "\n")
            lines += text.len()
    return lines


def ingest_child(work: Path) -> None:
    from foreshock.config import load_config
    from foreshock.ingest import ingest_path

    config = load_config(data_dir=work / "data").with_overrides({"ingest": {"timezone": "UTC"}})
    started = time.perf_counter()
    report = ingest_path(work / "raw", config)
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "seconds": seconds,
                "totals": report.totals,
                "adds_up": report.adds_up,
                "rejected": len(report.by_status("rejected")),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4096)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--every", type=int, default=60, help="sample interval in seconds (default 60)")
    parser.add_argument(
        "--metrics", type=int, default=2, choices=range(1, len(METRIC_FIELDS) + 1), metavar=f"1..{len(METRIC_FIELDS)}"
    )
    parser.add_argument("--work", type=Path, default=Path("data/bench_ingest"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the generated files and lake")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        ingest_child(args.work)
        return
    shutil.rmtree(args.work, ignore_errors=True)
    started = time.perf_counter()
    lines = generate(args.work, args.gpus, args.days, args.every, args.metrics, args.seed)
    generated = time.perf_counter() - started
    size = sum(p.stat().st_size for p in (args.work / "raw").rglob("*.csv"))
    print(
        f"input: {args.gpus:,} GPUs x {args.days} d at {args.every}s, {args.metrics} metric column(s): "
        f"{lines:,} nvidia-smi lines, {size / 1e9:.2f} GB of CSV (generated in {generated:.0f}s, seed {args.seed})"
    )
    child = subprocess.run(
        [sys.executable, __file__, "--child", "--work", str(args.work)],
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        sys.exit(f"ingest failed:\n{child.stderr[-3000:]}")
    result = json.loads(child.stdout.strip().splitlines()[-1])
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_mb = usage.ru_maxrss / 1024
    cpu = usage.ru_utime + usage.ru_stime  # wall time depends on what else the machine runs
    totals = result["totals"]
    seconds = result["seconds"]
    print(
        f"ingest: {totals['rows_read']:,} rows read (samples + inventory), {totals['rows_stored']:,} stored, "
        f"{totals['rows_quarantined']:,} quarantined, {totals['duplicates_dropped']:,} duplicates "
        f"(adds up: {result['adds_up']}, files rejected: {result['rejected']})"
    )
    print(
        f"time {seconds:.1f}s  throughput {totals['rows_read'] / seconds:,.0f} rows/s "
        f"({lines / seconds:,.0f} CSV lines/s, {size / 1e6 / seconds:.1f} MB/s)  peak RSS {peak_mb:,.0f} MB"
    )
    print(
        f"cpu {cpu:.1f}s (user+sys of the ingest process; {totals['rows_read'] / cpu:,.0f} rows per CPU-second), "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
