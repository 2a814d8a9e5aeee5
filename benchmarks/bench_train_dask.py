"""Benchmark: the driver's memory when the gradient-boosted model trains on Dask.

Two ways to train on a Dask cluster, on the same feature store and training sample:

* ``old``: the driver reads the training sample (``StoredSample.frame``, what
  ``training_frame`` returns), builds the feature matrix, early-stops and calibrates
  locally and scatters every n-th row of the matrix to the workers for the full refit;
* ``new``: the driver hands the sample left in the store (``StoredSample``) to the model:
  it holds the keys, labels and weights, and the workers read their rows of the store
  (``gbm_dask.StoreParts``), early-stop, predict the holdout margins and refit.

Data: a synthetic feature store written by ``--prepare`` (the test suite's synthetic fleet,
``tests/models/synthetic_fleet.py``, widened with noise columns to ``--columns`` features,
about what the real feature catalogue has), hourly snapshots, every row in the sample.

Each measurement runs in its own process (``--run old|new``), with its own LocalCluster of
two single-threaded worker processes on 127.0.0.1, so the driver's peak RSS
(``ru_maxrss``) and CPU time (``process_time``) belong to it alone; the workers' CPU time
and peak RSS are collected from them before the cluster stops.  The store is written by
a process of its own as well: on Linux a child process starts with its parent's peak RSS
as its own.  The driver's resident memory is also sampled every 20 ms during the fit: its
peak there, less its value when the fit starts (imports, the in-process scheduler), is
what the fit itself holds.

Usage::

    uv run python benchmarks/bench_train_dask.py --data /tmp/bench-dask --prepare --units 192 --days 30
    uv run python benchmarks/bench_train_dask.py --data /tmp/bench-dask
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HORIZONS = ["24h", "72h"]


def prepare(data: Path, units: int, days: int, columns: int, seed: int) -> None:
    """The synthetic fleet's feature store (``data/features``) and failures."""
    import numpy as np
    import polars as pl

    sys.path.insert(0, str(ROOT))
    from foreshock.features.store import write_features
    from tests.models.synthetic_fleet import synthetic_fleet

    rng = np.random.default_rng(seed)
    fleet = synthetic_fleet(rng, units=units, days=days)
    frame = fleet.features.with_columns(pl.col("ts").dt.cast_time_unit("us"))
    have = len(frame.columns)
    noise = rng.standard_normal((frame.height, max(columns - have, 0)), dtype=np.float32)
    frame = frame.with_columns(pl.Series(f"noise_{j:03d}", noise[:, j]) for j in range(noise.shape[1]))
    del noise
    write_features(frame, data / "features", 8)
    fleet.failures.write_parquet(data / "failures.parquet")
    print(f"feature store: {frame.height:,} rows x {len(frame.columns)} columns, {fleet.failures.height} failures")


def _rss_mb() -> float:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Sampler(threading.Thread):
    """The driver's peak resident memory while it runs (sampled every 20 ms)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.start_mb = self.peak_mb = _rss_mb()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.peak_mb = max(self.peak_mb, _rss_mb())

    def stop(self) -> None:
        self.done.set()
        self.join()
        self.peak_mb = max(self.peak_mb, _rss_mb())


def run(data: Path, how: str) -> dict:
    """One fit on a fresh two-worker LocalCluster; the driver's and workers' figures."""
    import resource

    import distributed
    import polars as pl

    from foreshock.models.estimators.dataset import FeatureSource, TrainingSample, training_sample
    from foreshock.models.estimators.gbm import GradientBoostedRisk

    def usage() -> dict:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return {"cpu_s": r.ru_utime + r.ru_stime, "peak_rss_mb": r.ru_maxrss / 1024}

    failures = pl.read_parquet(data / "failures.parquet")
    source = FeatureSource.from_dir(data / "features")
    first, last = source.span()
    cutoff = first + (last - first) * 0.8
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        before = usage()
        sampler = _Sampler()
        sampler.start()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        sample = training_sample(source, failures, cutoff, TrainingSample(max_healthy_rows=0))
        model = GradientBoostedRisk(horizons=HORIZONS, dask_client=client)
        model.fit(sample.frame() if how == "old" else sample, failures, until=cutoff)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        sampler.stop()
        workers = client.run(usage)
    driver = usage()
    return {
        "how": how,
        "rows": sample.height,
        "features": len(model.feature_names_),
        "best_rounds": model.best_rounds_,
        "wall_s": round(wall, 1),
        "driver_cpu_s": round(cpu, 1),
        "driver_peak_rss_mb": round(driver["peak_rss_mb"]),
        "driver_peak_rss_before_fit_mb": round(before["peak_rss_mb"]),
        "driver_rss_at_fit_start_mb": round(sampler.start_mb),
        "driver_fit_peak_over_start_mb": round(sampler.peak_mb - sampler.start_mb),
        "workers_cpu_s": round(sum(w["cpu_s"] for w in workers.values()), 1),
        "worker_peak_rss_mb": round(max(w["peak_rss_mb"] for w in workers.values())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--prepare", action="store_true", help="write the synthetic feature store first")
    parser.add_argument("--units", type=int, default=192)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--columns", type=int, default=380)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--run", choices=["prepare", "old", "new"], help="one measurement in this process (internal)")
    args = parser.parse_args()
    if args.run == "prepare":
        prepare(args.data, args.units, args.days, args.columns, args.seed)
        return
    if args.run:
        print(json.dumps(run(args.data, args.run)))
        return
    if args.prepare:  # in its own process too: a child starts with its parent's peak RSS
        spec = ["--units", str(args.units), "--days", str(args.days), "--columns", str(args.columns)]
        argv = [sys.executable, __file__, "--data", str(args.data), "--run", "prepare", *spec, "--seed", str(args.seed)]
        subprocess.run(argv, check=True, cwd=ROOT)
    results = {}
    for how in ("old", "new"):
        out = subprocess.run(
            [sys.executable, __file__, "--data", str(args.data), "--run", how],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        results[how] = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(results[how]))
    old, new = results["old"], results["new"]
    print(
        f"driver peak RSS: old {old['driver_peak_rss_mb']:,} MB, new {new['driver_peak_rss_mb']:,} MB; "
        f"held by the fit: old {old['driver_fit_peak_over_start_mb']:,} MB, "
        f"new {new['driver_fit_peak_over_start_mb']:,} MB; "
        f"wall {old['wall_s']} s -> {new['wall_s']} s; driver CPU {old['driver_cpu_s']} s -> {new['driver_cpu_s']} s; "
        f"workers' CPU {old['workers_cpu_s']} s -> {new['workers_cpu_s']} s"
    )


if __name__ == "__main__":
    main()
