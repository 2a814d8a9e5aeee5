"""Benchmark: feature snapshots for 1,024 / 2,048 / 4,096 GPUs x 7 days.

Canonical samples at 1-minute spacing are generated straight into a temporary lake (through
``foreshock.lake.merge.merge_into_lake``, one date x shard at a time) and hourly snapshots are
built with the same code path the Prefect flow runs (``features.build.update_features``:
per-shard first pass, per-date peer pass, Parquet writes), default windows
1h/6h/1d/7d, 7-day baseline.

Metric subset (6 of the 23 catalog metrics, the ones every DCGM deployment exports):
``ecc_sbe_volatile_total``, ``ecc_dbe_volatile_total``, ``pcie_replay_total`` (counters,
with resets), ``gpu_temp_c``, ``memory_temp_c``, ``power_w`` (gauges); plus ~0.5 XID
events per GPU-day.  The other catalog metrics still get (null) columns.

Printed per size: wall time, peak RSS of the feature process, the floor (one Polars
scan-and-aggregate pass over the same sample partitions: mean, max and count per unit and
metric) and the ratio to it, and seconds per 1,000 GPUs (linearity).  On the smallest size,
a straightforward pandas implementation of five of the same window features (gpu_temp_c
mean/max over 1h and 1d, power_w std over 1d, SBE increase over 1d with reset handling) is
timed too.

Usage::

    uv run python benchmarks/bench_features.py                 # 1024 2048 4096
    uv run python benchmarks/bench_features.py --sizes 256     # a quick look

Each measurement runs in its own process so that peak RSS belongs to it alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
from rounds import extract_revision, in_rounds, paired, typical

ROOT = Path(__file__).resolve().parents[1]
# Last: a worker given an older revision on PYTHONPATH (--before) must import that one.
sys.path.append(str(ROOT))

from foreshock.config import load_config  # noqa: E402
from foreshock.contract import UTC_TS  # noqa: E402
from foreshock.lake.atomic import atomic_write_parquet  # noqa: E402
from foreshock.lake.layout import partition_files, partition_path, shard_of  # noqa: E402
from foreshock.lake.merge import merge_into_lake  # noqa: E402

T0 = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 7
SHARDS = 8
# The targets: features within 4x the floor's wall time at 4,096 GPUs (2x the goal), peak
# RSS within 4 GB, time linear in the fleet (size exponent at most 1.05).
TARGET_X_FLOOR, GOAL_X_FLOOR, TARGET_RSS_MB = 4.0, 2.0, 4096
COUNTERS = ("ecc_sbe_volatile_total", "ecc_dbe_volatile_total", "pcie_replay_total")
GAUGES = ("gpu_temp_c", "memory_temp_c", "power_w")


def _config(data_dir: Path):
    return load_config(None, data_dir=data_dir).with_overrides(
        {"lake": {"shards": SHARDS}, "features": {"expected_sample_every": "1m"}}
    )


def generate(data_dir: Path, units: int, seed: int = 7) -> None:
    """Write ``units`` GPUs x 7 days of 1-minute samples into ``data_dir/lake``."""
    rng = np.random.default_rng(seed)
    lake = _config(data_dir).lake_dir
    ids = [f"gpu-node{i // 8:04d}-gpu{i % 8}" for i in range(units)]
    inventory = pl.DataFrame(
        {
            "unit_id": ids,
            "node": [u.rsplit("-", 1)[0] for u in ids],
            "rack": [f"rack{i // 64:03d}" for i in range(units)],
            "model": ["H100" if i % 4 else "A100" for i in range(units)],
            "lot": [f"lot{i % 16:02d}" for i in range(units)],
            "installed_at": [T0 - timedelta(days=90)] * units,
        }
    )
    merge_into_lake(lake, "inventory", inventory, SHARDS)
    by_shard: dict[int, list[str]] = {}
    for unit in ids:
        by_shard.setdefault(shard_of(unit, SHARDS), []).append(unit)
    minutes = 24 * 60
    carried: dict[tuple[int, str], np.ndarray] = {}  # counters continue across days
    for day in range(DAYS):
        start = T0 + timedelta(days=day)
        stamps = np.array(
            [(start + timedelta(minutes=m + 1)).replace(tzinfo=None) for m in range(minutes)], dtype="datetime64[us]"
        )
        for shard, members in sorted(by_shard.items()):
            n = len(members)
            columns: dict[str, np.ndarray] = {}
            for metric in COUNTERS:
                rate = rng.gamma(0.3, 0.05, size=(n, 1))
                values = np.cumsum(rng.poisson(rate, size=(n, minutes)), axis=1).astype(float)
                values += carried.get((shard, metric), np.zeros(n))[:, None]
                reloaded = rng.random(n) < 0.05  # driver reloads reset the counter mid-day
                values[reloaded, minutes // 2 :] -= values[reloaded, minutes // 2 : minutes // 2 + 1]
                carried[(shard, metric)] = values[:, -1].copy()
                columns[metric] = values
            power = 250 + 300 * rng.random((n, minutes))
            columns["power_w"] = power
            columns["gpu_temp_c"] = 35 + 0.08 * power + rng.normal(0, 1, (n, minutes))
            columns["memory_temp_c"] = 40 + 0.07 * power + rng.normal(0, 1, (n, minutes))
            names = sorted(columns)
            members_sorted = sorted(members)
            order = [members.index(u) for u in members_sorted]
            cube = np.stack([columns[m][order] for m in names], axis=2)  # unit x minute x metric
            k = len(names)
            frame = pl.DataFrame(
                {
                    "unit_id": np.repeat(np.array(members_sorted, dtype=object), minutes * k),
                    "ts": np.tile(np.repeat(stamps, k), n),
                    "metric": np.tile(np.array(names, dtype=object), n * minutes),
                    "value": cube.ravel(),
                }
            ).with_columns(
                pl.col("ts").dt.replace_time_zone("UTC").cast(UTC_TS),
                pl.col("unit_id").cast(pl.String),
                pl.col("metric").cast(pl.String),
            )
            # Rows are generated in the lake's order and unique: write the partition as is.
            atomic_write_parquet(frame, partition_path(lake, "samples", start.date(), shard))
        n_events = max(1, units // 2)
        events = pl.DataFrame(
            {
                "unit_id": rng.choice(ids, n_events).tolist(),
                "ts": [start + timedelta(seconds=int(s)) for s in rng.integers(1, 86400, n_events)],
                "source": "xid",
                "code": rng.choice([13, 31, 48, 63, 79, 94], n_events).tolist(),
                "count": 1,
            }
        ).with_columns(pl.col("ts").cast(UTC_TS))
        merge_into_lake(lake, "events", events, SHARDS)
    failed = rng.choice(ids, max(1, units // 200), replace=False).tolist()
    failures = pl.DataFrame(
        {
            "unit_id": failed,
            "failed_at": [T0 + timedelta(hours=float(h)) for h in rng.uniform(24, DAYS * 24 - 2, len(failed))],
            "mode": "hbm",
        }
    ).with_columns(pl.col("failed_at").cast(UTC_TS))
    merge_into_lake(lake, "failures", failures, SHARDS)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (steadier than wall time on a
    shared machine)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measured(started: float, cpu_started: float, rows: int) -> dict:
    return {
        "seconds": time.perf_counter() - started,
        "cpu": _cpu_seconds() - cpu_started,
        "rows": rows,
        "peak_rss_mb": _peak_rss_mb(),
    }


def worker_features(data_dir: Path) -> dict:
    from foreshock.features.build import update_features

    config = _config(data_dir)
    # A full build from the raw partitions each time: no stored snapshot, no cached rollup.
    shutil.rmtree(config.features_dir, ignore_errors=True)
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    rows = update_features(config, full=True)
    return _measured(started, cpu_started, rows)


def worker_floor(data_dir: Path, hourly: bool = False) -> dict:
    """One lazy scan of every sample partition, grouped per unit and metric (and per hour
    with ``hourly``: the snapshot grain any hourly feature must reach), mean/max/count."""
    files = partition_files(_config(data_dir).lake_dir, "samples")
    keys = [pl.col("unit_id"), pl.col("metric")] + ([pl.col("ts").dt.truncate("1h")] if hourly else [])
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    out = (
        pl.scan_parquet(files)
        .group_by(keys)
        .agg(pl.col("value").mean().alias("mean"), pl.col("value").max().alias("max"), pl.len())
        .collect()
    )
    return _measured(started, cpu_started, out.height)


def worker_floor_hourly(data_dir: Path) -> dict:
    return worker_floor(data_dir, hourly=True)


def worker_pandas(data_dir: Path) -> dict:
    """Five window features the way a notebook would write them: pandas time-based rolling
    per unit on the raw samples, read at each hourly snapshot."""
    import pandas as pd

    files = partition_files(_config(data_dir).lake_dir, "samples")
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    raw = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    raw = raw.sort_values(["unit_id", "metric", "ts"])
    snapshots = []
    for metric, spec in (
        ("gpu_temp_c", [("1h", "mean"), ("1h", "max"), ("1D", "mean"), ("1D", "max")]),
        ("power_w", [("1D", "std")]),
        ("ecc_sbe_volatile_total", [("1D", "increase")]),
    ):
        series = raw[raw["metric"] == metric].set_index("ts")
        if metric == "ecc_sbe_volatile_total":
            step = series.groupby("unit_id")["value"].diff()
            step = step.where(step >= 0, series["value"])  # a drop is a reset
            series = series.assign(value=step.fillna(0.0))
        grouped = series.groupby("unit_id")["value"]
        for window, how in spec:
            rolled = grouped.rolling(window, closed="right")
            values = rolled.sum() if how == "increase" else getattr(rolled, how)()
            frame = values.reset_index()
            # The snapshot at T takes the last rolling value at or before T.
            frame["snapshot"] = frame["ts"].dt.ceil("1h")
            snapshots.append(frame.groupby(["unit_id", "snapshot"])["value"].last().rename(f"{metric}_{how}_{window}"))
    result = pd.concat(snapshots, axis=1)
    return _measured(started, cpu_started, len(result))


WORKERS = {
    "features": worker_features,
    "floor": worker_floor,
    "floor-hourly": worker_floor_hourly,
    "pandas": worker_pandas,
}


def _run_worker(kind: str, data_dir: Path, code: Path | None = None) -> dict:
    """A worker in a child process (its own peak RSS); ``code``: an older package tree."""
    out = subprocess.run(
        [sys.executable, __file__, "--worker", kind, "--data-dir", str(data_dir)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(code or ROOT)},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--no-pandas", action="store_true")
    parser.add_argument("--before", metavar="REV", help="also build the features with the code of this git revision")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="rounds of runs (features, floor, hourly floor, --before; in turn): medians and paired ratios (default 3)",
    )
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--data-dir", type=Path)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args.data_dir)))
        return
    print(
        f"features benchmark: {DAYS} days, 1-minute samples, hourly snapshots, {len(COUNTERS) + len(GAUGES)} metrics, "
        f"{SHARDS} shards, {os.cpu_count()} cores; medians of {max(args.repeat, 1)} rounds, ratios paired per round"
    )
    print(
        "floor = one Polars scan + group_by(unit, metric) mean/max/count; floor-h = the same grouped "
        "per hour too (the snapshot grain)"
    )
    print(
        f"{'GPUs':>6} {'samples':>12} {'gen s':>7} {'floor s':>8} {'floor cpu':>9} {'floor-h s':>10} "
        f"{'features s':>11} {'feat cpu':>9} {'x floor':>8} {'x fl cpu':>9} {'x floor-h':>10} {'s/1k GPU':>9} "
        f"{'peak RSS MB':>12} {'rows':>9} {'load':>5}"
    )
    measured: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        before = extract_revision(args.before, Path(tmp)) if args.before else None
        for units in args.sizes:
            data_dir = Path(tempfile.mkdtemp(prefix=f"bench-features-{units}-"))
            try:
                started = time.perf_counter()
                generate(data_dir, units)
                generated = time.perf_counter() - started
                samples = units * DAYS * 24 * 60 * (len(COUNTERS) + len(GAUGES))
                kinds = ["features", "floor", "floor-hourly"] + (["before"] if before else [])
                runs = in_rounds(
                    kinds,
                    lambda kind, data_dir=data_dir: _run_worker(
                        "features" if kind == "before" else kind, data_dir, before if kind == "before" else None
                    ),
                    args.repeat,
                )
                floor, floor_h, feats = (typical(runs[k], "peak_rss_mb") for k in ("floor", "floor-hourly", "features"))
                measured[units] = feats
                print(
                    f"{units:>6} {samples:>12,} {generated:>7.1f} {floor['seconds']:>8.2f} {floor['cpu']:>9.2f} "
                    f"{floor_h['seconds']:>10.2f} {feats['seconds']:>11.2f} {feats['cpu']:>9.2f} "
                    f"{paired(runs['features'], runs['floor'], 'seconds'):>8.2f} "
                    f"{paired(runs['features'], runs['floor'], 'cpu'):>9.2f} "
                    f"{paired(runs['features'], runs['floor-hourly'], 'seconds'):>10.2f} "
                    f"{feats['seconds'] / units * 1000:>9.2f} "
                    f"{feats['peak_rss_mb']:>12.0f} {feats['rows']:>9,} {os.getloadavg()[0]:>5.1f}",
                    flush=True,
                )
                count, fastest, slowest = feats["runs"]
                if count > 1:
                    print(f"       features wall from {fastest:.2f} s to {slowest:.2f} s over {count} runs")
                ratio = paired(runs["features"], runs["floor"], "seconds")
                print(
                    f"       at most {TARGET_X_FLOOR:g}x the floor (the target at 4,096 GPUs): "
                    f"{'met' if ratio <= TARGET_X_FLOOR else 'not met'}; {GOAL_X_FLOOR:g}x (the goal): "
                    f"{'met' if ratio <= GOAL_X_FLOOR else 'not met'}; peak RSS at most {TARGET_RSS_MB:,} MB: "
                    f"{'met' if feats['peak_rss_mb'] <= TARGET_RSS_MB else 'not met'}"
                )
                if before:
                    print(
                        f"       at {args.before}: {typical(runs['before'], 'peak_rss_mb')['seconds']:.2f} s; this tree "
                        f"is {paired(runs['before'], runs['features'], 'seconds'):.2f}x faster (wall), "
                        f"{paired(runs['before'], runs['features'], 'cpu'):.2f}x less CPU (paired)",
                        flush=True,
                    )
                if units == min(args.sizes) and not args.no_pandas:
                    pandas = _run_worker("pandas", data_dir)
                    print(
                        f"       pandas, 5 window features: {pandas['seconds']:.1f} s, peak RSS "
                        f"{pandas['peak_rss_mb']:.0f} MB; foreshock (all features) is "
                        f"{pandas['seconds'] / feats['seconds']:.1f}x faster",
                        flush=True,
                    )
            finally:
                shutil.rmtree(data_dir, ignore_errors=True)
    if len(measured) >= 2:
        small, large = min(measured), max(measured)
        for what in ("seconds", "cpu"):
            exponent = math.log(measured[large][what] / measured[small][what]) / math.log(large / small)
            label = "wall" if what == "seconds" else "CPU"
            print(f"size exponent {small}->{large} GPUs ({label} time): {exponent:.3f}  (linear = 1.0, target <= 1.05)")


if __name__ == "__main__":
    main()
