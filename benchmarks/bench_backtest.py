"""Benchmark: the walk-forward backtest on 256 / 1,024 / 4,096 GPUs x 30 days of hourly snapshots.

Data: a fleet from ``foreshock simulate`` (30 days), ingested with ``foreshock ingest`` and
turned into hourly feature snapshots by ``foreshock features`` (``--prepare N`` does the
three steps into ``DATA/gpusN``).  Larger sizes can be made by tiling a prepared fleet's
feature store and failures (``--tile-from N``): each copy gets its own unit ids
(``t<i>-``) and lands in its own shards, so the backtest sees ``k`` times the units with the
same per-unit statistics.  Tiling is how the 4,096-GPU case fits in an afternoon: ingesting
4,096 GPUs of text telemetry takes hours on a shared 2-core machine, and the backtest is
what is measured here.

Each measurement runs in its own process (``python bench_backtest.py --run ...``), so its
peak RSS (``ru_maxrss``) and CPU time (user + system) belong to it alone.  Printed per size:
wall time, CPU time, peak RSS and the number of out-of-sample scores (the child's log lines,
with each fold's fit and scoring times, are kept in ``DATA/.../bench-<mode>-<source>.log``); with ``--old SRC`` the
smallest size is also run with the backtest of another source tree (e.g. ``git archive
057777e foreshock | tar -x -C /tmp/old``: the in-memory backtest before issue 10) and the
ratios are printed.  With ``--before SRC`` every size is also run with the same
(fold-by-fold) backtest of another source tree, e.g. the commit before a change, and the
before/after ratios per size are printed from the one run.

Peak memory is given twice: ``ru_maxrss`` (the largest single process: the child or
one of the fold processes it waited for) and the peak of the summed RSS of the child and
every process under it (fold workers, a Dask cluster's workers), sampled every 0.2 s:
the memory the machine needs.  ``--modes`` chooses how the folds run: ``workers`` (the
default ``[backtest] workers`` processes), ``serial`` (one after another in the child,
``FORESHOCK_BACKTEST_WORKERS=1``) and ``dask`` (``foreshock --runner dask backtest``: each
fold a task on a local Dask cluster of ``[runner] local_workers`` processes; the flow
needs a Prefect API, so this mode's wall time includes starting a temporary Prefect
server when none is configured, and its summed RSS includes that server).

Usage::

    uv run python benchmarks/bench_backtest.py --data /tmp/bench --prepare 256
    uv run python benchmarks/bench_backtest.py --data /tmp/bench --sizes 256 1024 4096 --tile-from 256 --old /tmp/old
    git archive HEAD~1 foreshock | tar -x -C /tmp/before
    uv run python benchmarks/bench_backtest.py --data /tmp/bench --sizes 1024 256 --before /tmp/before
    uv run python benchmarks/bench_backtest.py --data /tmp/bench --sizes 4096 --tile-from 256 --modes serial dask
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prepare(data: Path, units: int, seed: int) -> Path:
    """simulate -> ingest -> features into ``data/gpus<units>`` (skipped when already done)."""
    out = data / f"gpus{units}"
    if (out / "features.done").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "foreshock.pipelines.cli", "--data-dir", str(out)]
    sim = ["simulate", "--units", str(units), "--days", "30", "--seed", str(seed)]
    for argv in (sim, ["ingest", "--path", str(out / "raw" / "sim"), "--timezone", "UTC"], ["features"]):
        subprocess.run([*cli, *argv], check=True, cwd=ROOT)
    (out / "features.done").touch()
    return out


def tile(base: Path, copies: int, out: Path) -> Path:
    """``copies`` copies of a prepared fleet's features and failures under ``out``."""
    import polars as pl

    from foreshock.config import load_config
    from foreshock.features.store import feature_files
    from foreshock.lake.read import read_table

    if (out / "tiled.done").exists():
        return out
    config = load_config(data_dir=base)
    failures = read_table(config.lake_dir, "failures")
    files = feature_files(config.features_dir)
    shards = 1 + max(int(p.parent.name.removeprefix("shard=")) for p in files)
    for i in range(copies):
        for path in files:
            shard = int(path.parent.name.removeprefix("shard=")) + i * shards
            target = out / "features" / path.parent.parent.name / f"shard={shard:02d}" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            pl.read_parquet(path).with_columns(
                pl.format("t{}-{}", pl.lit(i), "unit_id").alias("unit_id")
            ).write_parquet(target)
    tiled = pl.concat(
        [failures.with_columns(pl.format("t{}-{}", pl.lit(i), "unit_id").alias("unit_id")) for i in range(copies)]
    )
    tiled.write_parquet(out / "failures.parquet")
    (out / "tiled.done").touch()
    return out


def failures_in_lake(data: Path) -> None:
    """A tiled fleet's failures also in a lake under ``data`` (``foreshock backtest``,
    which the ``dask`` mode runs, reads them there)."""
    import polars as pl

    from foreshock.lake.merge import merge_into_lake

    if (data / "failures.parquet").exists() and not (data / "lake" / "failures").exists():
        merge_into_lake(data / "lake", "failures", pl.read_parquet(data / "failures.parquet"), shards=1)


def run_backtest(data: Path, old: bool) -> dict:
    """One backtest on ``data`` (in this process); returns what it scored."""
    import polars as pl

    from foreshock.config import load_config

    features_dir = data / "features"
    config = load_config(data_dir=data)
    failures_file = data / "failures.parquet"
    if failures_file.exists():
        failures = pl.read_parquet(failures_file)
    else:
        from foreshock.lake.read import read_table

        failures = read_table(config.lake_dir, "failures")
    from foreshock.models.evaluation.backtest import walk_forward

    if old:  # the backtest before issue 10 took the whole frame in memory
        from foreshock.features.store import scan_features

        result = walk_forward(scan_features(features_dir).collect(), failures, config)
    else:
        from foreshock.models.estimators.dataset import FeatureSource

        result = walk_forward(FeatureSource.from_dir(features_dir), failures, config)
    with result:
        return {"scores": result.score_rows, "folds": len(result.folds)}


def measure(data: Path, src: Path, old: bool, mode: str = "workers") -> dict:
    """Run one backtest in a child process; wall, CPU (user + sys, the child and the
    processes it waited for), ``ru_maxrss`` and the peak summed RSS of its process tree."""
    env = {**os.environ, "PYTHONPATH": str(src), "POLARS_MAX_THREADS": os.environ.get("POLARS_MAX_THREADS", "2")}
    if mode == "serial":
        env["FORESHOCK_BACKTEST_WORKERS"] = "1"
    if mode == "dask":
        failures_in_lake(data)
        out_dir = data / "backtest-dask"
        argv = [sys.executable, "-m", "foreshock.pipelines.cli", "--data-dir", str(data), "--runner", "dask"]
        argv += ["backtest", "--out", str(out_dir)]
    else:
        argv = [sys.executable, str(Path(__file__).resolve()), "--run", str(data)] + (["--run-old"] if old else [])
    # The child's log lines (per-fold fit and scoring times) are kept beside the data.
    log_path = data / f"bench-{mode}-{'old' if old else Path(src).name}.log"
    with tempfile.TemporaryFile("w+") as out, open(log_path, "w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, text=True, cwd=ROOT)
        peak = TreePeak(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
        wall = time.perf_counter() - start
        peak.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"backtest on {data} failed:\n{err.read()[-3000:]}")
        if mode == "dask":
            import polars as pl

            scores = pl.scan_parquet(out_dir / "scores.parquet").select(pl.len()).collect().item()
            folds = len(json.loads((out_dir / "report.json").read_text())["folds"])
            result = {"scores": scores, "folds": folds}
        else:
            result = json.loads(out.read().strip().splitlines()[-1])
    return {
        **result,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_gb": usage.ru_maxrss / 1024**2,  # KiB on Linux
        "tree_rss_gb": peak.peak / 1024**3,
    }


class TreePeak:
    """The peak of the summed RSS of a process and all its descendants, sampled in a thread."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        import threading

        self.peak, self._done = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(pid, every), daemon=True)
        self._thread.start()

    def _sample(self, pid: int, every: float) -> None:
        import psutil

        try:
            root = psutil.Process(pid)
        except psutil.Error:
            return
        while not self._done.is_set():
            total = 0
            try:
                for proc in [root, *root.children(recursive=True)]:
                    try:
                        total += proc.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                return
            self.peak = max(self.peak, total)
            self._done.wait(every)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="bench data root")
    parser.add_argument("--prepare", type=int, nargs="*", default=[], help="simulate+ingest+features these sizes")
    parser.add_argument("--sizes", type=int, nargs="*", default=[256, 1024, 4096])
    parser.add_argument("--tile-from", type=int, help="make sizes not prepared by tiling this prepared size")
    parser.add_argument("--old", help="source tree of the old backtest, compared on the smallest size")
    parser.add_argument("--before", help="source tree of the same backtest before a change, run on every size")
    parser.add_argument("--new", default=str(ROOT), help="source tree of the backtest measured (default: this one)")
    parser.add_argument(
        "--modes", nargs="*", default=["workers"], choices=["workers", "serial", "dask"], help="how the folds run"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--run-old", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
        print(json.dumps(run_backtest(args.run, old=args.run_old)))
        return 0
    sys.path.insert(0, str(ROOT))
    for units in args.prepare:
        prepare(args.data, units, args.seed)
    rows = []
    for units in args.sizes:
        data = args.data / f"gpus{units}"
        if not (data / "features.done").exists():
            if not args.tile_from or units % args.tile_from:
                print(f"{units} GPUs: not prepared (use --prepare {units} or --tile-from)")
                continue
            data = tile(args.data / f"gpus{args.tile_from}", units // args.tile_from, args.data / f"tiled{units}")
        runs = [("old", Path(args.old), True)] if args.old and units == min(args.sizes) else []
        runs += [("before", Path(args.before), False)] if args.before else []
        for mode in args.modes:
            for code, src, old in [*runs, ("new", Path(args.new), False)]:
                if old and mode == "dask":
                    continue
                rows.append((code, units, mode, measure(data, src, old=old, mode=mode)))
                r = rows[-1][3]
                print(
                    f"{code} {units:>5} GPUs ({mode}): wall {r['wall_s']:7.1f} s  CPU {r['cpu_s']:7.1f} s  "
                    f"peak RSS {r['peak_rss_gb']:5.2f} GB (process tree {r['tree_rss_gb']:5.2f} GB)  "
                    f"{r['scores']:,} scores, {r['folds']} folds",
                    flush=True,
                )
            runs = [r for r in runs if r[0] != "old"]  # the old backtest once
    print(
        "\n| code | GPUs | folds run | wall (s) | CPU (s) | peak RSS, one process (GB) | peak RSS, tree (GB) | scores |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for code, n, mode, r in rows:
        print(
            f"| {code} | {n:,} | {mode} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | {r['peak_rss_gb']:.2f} "
            f"| {r['tree_rss_gb']:.2f} | {r['scores']:,} |"
        )
    old = [r for c, _, _, r in rows if c == "old"]
    new = [r for c, n, _, r in rows if c == "new" and n == min(args.sizes)]
    if old and new:
        print(
            f"\nold/new on {min(args.sizes)} GPUs: wall x{old[0]['wall_s'] / new[0]['wall_s']:.2f}, "
            f"CPU x{old[0]['cpu_s'] / new[0]['cpu_s']:.2f}, peak RSS x{old[0]['peak_rss_gb'] / new[0]['peak_rss_gb']:.2f}"
        )
    for units, mode in [(u, m) for u in args.sizes for m in args.modes]:
        pair = {c: r for c, n, m, r in rows if n == units and m == mode and c in ("before", "new")}
        if len(pair) == 2:
            b, a = pair["before"], pair["new"]
            print(
                f"before/after on {units} GPUs ({mode}): wall x{b['wall_s'] / a['wall_s']:.2f}, "
                f"CPU x{b['cpu_s'] / a['cpu_s']:.2f}, peak RSS x{b['peak_rss_gb'] / a['peak_rss_gb']:.2f} "
                f"(tree x{b['tree_rss_gb'] / a['tree_rss_gb']:.2f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
