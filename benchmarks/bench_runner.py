"""Benchmark: the features flow on the local runner and on Dask (1 and 2 workers).

The lake of ``bench_features.py`` (``--units`` GPUs x 7 days of 1-minute samples, 6
metrics, 8 shards) is generated once; ``foreshock features --full`` then runs in a fresh
process per runner (the same CLI a user runs): ``--runner local`` (thread pool) and
``--runner dask`` on a ``LocalCluster`` of 1 and 2 single-threaded worker processes.
Printed: wall and CPU time (of the process and the workers it reaped), and whether each run stored exactly the local runner's features.

Usage::

    uv run python benchmarks/bench_runner.py              # 2,048 GPUs
    uv run python benchmarks/bench_runner.py --units 256  # a quick look
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from bench_features import DAYS, SHARDS, _config, generate  # noqa: E402

from foreshock.features.store import scan_features  # noqa: E402


def _toml(path: Path) -> Path:
    path.write_text(f'[lake]\nshards = {SHARDS}\n[features]\nexpected_sample_every = "1m"\n')
    return path


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(data_dir: Path, toml: Path, runner: list[str], workers: int) -> tuple[float, float]:
    """Wall and CPU seconds of one ``features --full`` process (CPU includes the Dask
    worker processes it started and reaped)."""
    shutil.rmtree(data_dir / "features", ignore_errors=True)
    toml_text = toml.read_text() + f"[runner]\nlocal_workers = {workers}\n"
    run_toml = toml.with_name(f"run-{workers}.toml")
    run_toml.write_text(toml_text)
    started, cpu = time.perf_counter(), _children_cpu()
    subprocess.run(
        [sys.executable, "-m", "foreshock.pipelines.cli", "--config", str(run_toml), "--data-dir", str(data_dir)]
        + runner
        + ["features", "--full"],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started, _children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=2048)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix=f"bench-runner-{args.units}-"))
    try:
        generate(data_dir, args.units)
        toml = _toml(data_dir / "foreshock.toml")
        print(
            f"features flow, {args.units} GPUs x {DAYS} days, 1-minute samples, {SHARDS} shards, {os.cpu_count()} cores"
        )
        reference = None
        for label, runner, workers in (
            ("local (2 threads)", ["--runner", "local"], 2),
            ("dask, 1 worker", ["--runner", "dask"], 1),
            ("dask, 2 workers", ["--runner", "dask"], 2),
        ):
            seconds, cpu = _run(data_dir, toml, runner, workers)
            stored = scan_features(_config(data_dir)).collect().sort("unit_id", "ts")
            if reference is None:
                reference = stored
            same = stored.equals(reference)
            print(
                f"{label:>18}: {seconds:7.1f} s wall {cpu:7.1f} s CPU  same features as local: {same}  "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    pl.Config.set_tbl_rows(5)
    main()
