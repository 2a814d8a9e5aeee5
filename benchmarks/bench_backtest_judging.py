"""Benchmark: the backtest's judging at 4,096 GPUs x 30 days, scores in memory or on disk.

A backtest's folds leave their out-of-sample scores in batch files
(``fold-NNN/batch-NNNNN.parquet``).  This measures what follows, in a child process each:

* ``memory``: every score read, sorted and judged as one table, then written (what the
  backtest did before its scores waited on disk);
* ``disk``: the scores rewritten as one sorted file per model and horizon, judged one model
  and horizon at a time from a lazy scan, ``scores.parquet`` streamed from the files
  (:mod:`foreshock.models.evaluation.spilled_scores`).

The scores are a written backtest's (``--backtest DIR``, e.g. the demo's ``data/backtest``
of 256 GPUs x 30 days) tiled ``--copies`` times with their own unit ids (16: 4,096 GPUs),
judged against its failures tiled the same way and the configuration of ``--data-dir``.

Usage::

    uv run python benchmarks/bench_backtest_judging.py --backtest data/backtest --data-dir data --work /tmp/bj
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_backtest import TreePeak  # noqa: E402  (the process-tree peak sampler)

UTC = pl.Datetime("us", "UTC")


def prepare(backtest: Path, data_dir: Path, copies: int, work: Path) -> None:
    """The tiled batch files (about 200,000 test snapshots a file), failures and folds."""
    from foreshock.config import load_config
    from foreshock.lake.read import read_table

    report = json.loads((backtest / "report.json").read_text())
    scores = pl.read_parquet(backtest / "scores.parquet")
    per_snapshot = scores.select("model", "horizon").unique().height

    def tiled(frame: pl.DataFrame) -> pl.DataFrame:
        return pl.concat(
            [frame.with_columns(pl.format("t{}-{}", pl.lit(i), "unit_id").alias("unit_id")) for i in range(copies)]
        )

    for fold in report["folds"]:
        lo, hi = datetime.fromisoformat(fold["cutoff"]), datetime.fromisoformat(fold["test_end"])
        part = tiled(scores.filter(pl.col("ts").is_between(pl.lit(lo).cast(UTC), pl.lit(hi).cast(UTC), closed="left")))
        part = part.sort("ts", "unit_id")  # a fold's batches are windows of time
        out = work / "batches" / f"fold-{fold['index']:03d}"
        out.mkdir(parents=True, exist_ok=True)
        rows = 200_000 * per_snapshot
        for j, at in enumerate(range(0, part.height, rows)):
            batch = part.slice(at, rows).sort("model", "horizon", maintain_order=True)
            batch.write_parquet(out / f"batch-{j:05d}.parquet")
    failures = read_table(load_config(data_dir=data_dir).lake_dir, "failures")
    tiled(failures).write_parquet(work / "failures.parquet")
    (work / "folds.json").write_text(json.dumps(report["folds"]))


def judge(work: Path, data_dir: Path, mode: str) -> dict:
    """One judging (in this process); returns its time and the report's model keys."""
    import shutil

    from foreshock.config import load_config
    from foreshock.lake.atomic import atomic_write_parquet
    from foreshock.models.evaluation.alert_replay import Period
    from foreshock.models.evaluation.judging import judge_scores
    from foreshock.models.evaluation.spilled_scores import SpilledScores, sort_scores

    config = load_config(data_dir=data_dir)
    folds = json.loads((work / "folds.json").read_text())
    periods = [Period(datetime.fromisoformat(f["cutoff"]), datetime.fromisoformat(f["test_end"])) for f in folds]
    failures = pl.read_parquet(work / "failures.parquet")
    files = sorted((work / "batches").glob("fold-*/batch-*.parquet"))
    context = {"step": timedelta(hours=1), "periods": periods}
    if mode == "memory":
        started = time.process_time()
        scores = pl.read_parquet(files).sort("model", "horizon", "unit_id", "ts")
        report = judge_scores(scores, failures, config, **context)
        atomic_write_parquet(scores, work / "scores-memory.parquet")
    else:
        spilled = SpilledScores.temporary(work)
        copies = []
        for path in files:  # sort_scores consumes its batch files: it gets copies
            copy = spilled.directory / "batches" / path.parent.name / path.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, copy)
            copies.append(copy)
        started = time.process_time()
        sort_scores(copies, spilled)
        report = judge_scores(spilled.scan(), failures, config, **context)
        atomic_write_parquet(spilled.scan(), work / "scores-disk.parquet")
        spilled.cleanup()
    (work / f"report-{mode}.json").write_text(json.dumps(report, default=str, sort_keys=True))
    return {"cpu_s": time.process_time() - started}


def measure(args: argparse.Namespace, mode: str) -> dict:
    import subprocess

    argv = [sys.executable, __file__, "--judge", mode, "--work", str(args.work), "--data-dir", str(args.data_dir)]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    peak = TreePeak(proc.pid)
    out, _ = proc.communicate()
    peak.stop()
    if proc.returncode:
        raise RuntimeError(f"{mode} failed")
    return {
        **json.loads(out.strip().splitlines()[-1]),
        "wall_s": time.perf_counter() - started,
        "rss_gb": peak.peak / 1024**3,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backtest", type=Path, help="a written backtest (scores.parquet, report.json)")
    parser.add_argument("--data-dir", type=Path, required=True, help="its data directory (configuration, failures)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=16)
    parser.add_argument("--judge", choices=["memory", "disk"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.judge:
        print(json.dumps(judge(args.work, args.data_dir, args.judge)))
        return 0
    if not (args.work / "folds.json").exists():
        prepare(args.backtest, args.data_dir, args.copies, args.work)
    runs = {mode: measure(args, mode) for mode in ("memory", "disk")}
    same = (args.work / "report-memory.json").read_text() == (args.work / "report-disk.json").read_text()
    for mode, r in runs.items():
        print(f"{mode:>6}: peak RSS {r['rss_gb']:.2f} GB, judging CPU {r['cpu_s']:.0f} s, wall {r['wall_s']:.0f} s")
    print(f"same report: {same}; peak RSS memory/disk x{runs['memory']['rss_gb'] / runs['disk']['rss_gb']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
