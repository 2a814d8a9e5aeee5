"""Benchmark: the whole ``foreshock features`` command on the simulator's own fleet, against
the floor.

For each size (default 1,024 and 4,096 GPUs x 14 days) ``foreshock simulate`` writes its
landing (nvidia-smi CSV every 10 minutes, DCGM Prometheus exports and scrapes, kernel Xid
logs, tickets: every metric the simulator emits, about 20 of the catalog's) and ``foreshock
ingest`` stores it; neither is timed here (``benchmarks/bench_ingest.py --formats
simulator`` times the ingest).  Then, in rounds whose order turns each round:

- **features**: ``foreshock --data-dir D features --full`` as a subprocess, exactly as an
  operator runs it (imports, the Prefect flow, every snapshot built from the raw
  partitions into an emptied feature store, every partition written);
- **floor**: one lazy Polars scan of every sample partition grouped per unit, metric and
  hour (the snapshot grain) with mean, max and count, plus one write (zstd Parquet) of a
  frame the size of the command's output (the output itself, read before the clock starts):
  what any feature build must at least do, read the lake once and write its result once.

Printed per size: wall and CPU seconds (the child's and its children's), peak RSS, the
paired ratio features / floor (each round's two runs shared the machine's load; medians over
rounds), and over the sizes the size exponent (log time ratio / log size ratio).  With
``--before``, whether every run of both revisions stored the same frames (a digest of each
partition's rows read back, bit for bit; computed after each run, outside its time).

Without ``PREFECT_API_URL`` the command runs its plan directly (no Prefect, no temporary
server: ``pipelines/features_cmd.py``); ``--prefect server`` starts one Prefect server for
the whole benchmark and points the commands at it, so each run is a recorded flow run, as
under ``foreshock serve`` (``pipelines/systemd``); ``--prefect both`` measures both ways in
the same rounds.

Usage::

    uv run python benchmarks/bench_features.py                         # 1024 4096, both Prefect ways
    uv run python benchmarks/bench_features.py --sizes 256 --repeat 1  # a quick look
    uv run python benchmarks/bench_features.py --before main~3         # also an older revision
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from fault_injection import start_prefect_server, stop_server
from rounds import child_usage, extract_revision, in_rounds, paired, typical

ROOT = Path(__file__).resolve().parents[1]
# The targets (issue 28): the whole command within 4x the floor's wall time (2x the goal),
# peak RSS within 4 GB, time linear in the fleet (size exponent at most 1.05).
TARGET_X_FLOOR, GOAL_X_FLOOR, TARGET_RSS_MB, TARGET_EXPONENT = 4.0, 2.0, 4096, 1.05
# -P: the working directory is not put first on sys.path, so ``PYTHONPATH`` decides whose
# ``foreshock`` a run imports (run from the checkout, ``-c`` alone imported the checkout's
# code for ``--before`` too).
CLI = [sys.executable, "-P", "-c", "import sys; from foreshock.pipelines.cli import main; sys.exit(main())"]


def _child_usage(command: list[str], env: dict[str, str]) -> dict:
    """``command`` in a child process: wall, CPU, peak RSS, stdout (:func:`rounds.child_usage`);
    the benchmark stops if it failed."""
    result = child_usage(command, env)
    if result["returncode"]:
        sys.exit(f"{' '.join(command[-4:])} failed:\n{result['stderr'][-3000:]}")
    return result


def _usage() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), usage.ru_utime + usage.ru_stime


def worker_floor(data_dir: Path, stream: bool = False) -> dict:
    """The floor, in this (child) process: one scan + group_by + one write of the output.

    The output is read whole before the clock starts, then written; with ``stream`` (a
    lake and output too large to hold at once) the lake is aggregated one partition at a
    time and the output is read and written in one streaming pass, and the time of
    reading it alone (measured after) is taken off."""
    from foreshock.lake.layout import partition_files

    files = partition_files(data_dir / "lake", "samples")
    outputs = sorted((data_dir / "features").glob("date=*/shard=*/part.parquet"))
    output = None if stream else pl.read_parquet(outputs)
    target = data_dir / "floor-output.parquet"
    started, cpu_started = _usage()

    def aggregate(paths: list[Path]) -> int:
        return (
            pl.scan_parquet(paths)
            .group_by("unit_id", "metric", pl.col("ts").dt.truncate("1h"))
            .agg(pl.col("value").mean().alias("mean"), pl.col("value").max().alias("max"), pl.len())
            .collect()
            .height
        )

    # Streaming: partition by partition (a group, one unit, metric and hour, lies in one
    # date x shard partition: the same groups, one partition's rows held at a time).
    groups = sum(aggregate([path]) for path in files) if stream else aggregate(files)
    if output is None:
        pl.scan_parquet(outputs).sink_parquet(target, compression="zstd", statistics=True)
    else:
        output.write_parquet(target, compression="zstd", statistics=True)
    ended, cpu_ended = _usage()
    shape = pl.scan_parquet(target).select(pl.len()).collect().item(), len(pl.read_parquet_schema(target))
    target.unlink()
    measured = {"seconds": ended - started, "cpu": cpu_ended - cpu_started, "groups": groups}
    if stream:
        read_started, read_cpu = _usage()
        for path in outputs:
            pl.read_parquet(path)
        read_ended, read_cpu_ended = _usage()
        measured["seconds"] -= read_ended - read_started
        measured["cpu"] -= read_cpu_ended - read_cpu
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {**measured, "peak_rss_mb": usage.ru_maxrss / 1024, "output": list(shape), "stream": stream}


def run_features(data_dir: Path, env: dict[str, str], digest: bool = False) -> dict:
    """The whole command on an empty feature store (no stored snapshot to merge with, no
    cached rollup: a full build from the raw data); with ``digest``, the stored frames'
    :func:`store_digest` (after the run, not timed)."""
    shutil.rmtree(data_dir / "features", ignore_errors=True)
    result = _child_usage([*CLI, "--data-dir", str(data_dir), "features", "--full"], env)
    rows = int(result["stdout"].split("features: ", 1)[1].split()[0])
    return {**result, "rows": rows, "store": store_digest(data_dir / "features") if digest else None}


def store_digest(features_dir: Path) -> str:
    """sha256 of every stored partition's name and rows as read back (uncompressed Arrow IPC
    of the frame: column names, types, values and nulls bit for bit), whatever the bytes of
    the Parquet files."""
    digest = hashlib.sha256()
    for path in sorted(features_dir.glob("date=*/shard=*/part.parquet")):
        buffer = io.BytesIO()
        pl.read_parquet(path).rechunk().write_ipc(buffer, compression="uncompressed")
        digest.update(str(path.relative_to(features_dir)).encode())
        digest.update(buffer.getvalue())
    return digest.hexdigest()


def run_floor(data_dir: Path, env: dict[str, str], stream: bool) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", "floor-stream" if stream else "floor", "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def prepare(data_dir: Path, units: int, days: int, env: dict[str, str]) -> str:
    """The simulator's landing for ``units`` GPUs x ``days``, ingested; a line saying what."""
    raw = data_dir / "raw" / "sim"
    sim = _child_usage([*CLI, "--data-dir", str(data_dir), "simulate", "--units", str(units), "--days", str(days)], env)
    ingest = _child_usage([*CLI, "--data-dir", str(data_dir), "ingest", "--path", str(raw), "--timezone", "UTC"], env)
    shutil.rmtree(raw)
    read = next(line for line in ingest["stdout"].splitlines() if line.strip().startswith("total: read"))
    samples = pl.scan_parquet(data_dir / "lake" / "samples" / "**" / "*.parquet").select(pl.len()).collect().item()
    metrics = (
        (pl.scan_parquet(data_dir / "lake" / "samples" / "**" / "*.parquet").select(pl.col("metric").n_unique()))
        .collect()
        .item()
    )
    return (
        f"{units:,} GPUs x {days} d: simulate {sim['seconds']:.0f} s, ingest {ingest['seconds']:.0f} s "
        f"({read.strip()}); lake {samples:,} samples of {metrics} metrics"
    )


def _line(label: str, result: dict) -> str:
    return f"wall {result['seconds']:.2f} s, CPU {result['cpu']:.2f} s, peak RSS {result['peak_rss_mb']:,.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--prefect", choices=["ephemeral", "server", "both"], default="both")
    parser.add_argument("--before", metavar="REV", help="also run the features command with this git revision's code")
    parser.add_argument("--repeat", type=int, default=3, metavar="N", help="rounds of runs (default 3)")
    parser.add_argument("--work", type=Path, help="where the data sets go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the data sets (reused by a later run with --work)")
    parser.add_argument(
        "--stream-floor-from",
        type=int,
        default=2048,
        metavar="GPUS",
        help="from this size on, the floor aggregates one lake partition at a time and streams the output from "
        "the store to its file instead of holding it (the read is measured apart and taken off); default 2048",
    )
    parser.add_argument("--worker", choices=["floor", "floor-stream"], help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker_floor(args.data_dir, stream=args.worker == "floor-stream")))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-features-"))
    scratch = Path(tempfile.mkdtemp(prefix="bench-features-code-"))
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base_env.pop("PREFECT_API_URL", None)
    server = None
    envs: dict[str, dict[str, str]] = {}
    if args.prefect in ("ephemeral", "both"):
        envs["features"] = base_env
    if args.prefect in ("server", "both"):
        server, api = start_prefect_server(scratch)  # its home: scratch/prefect
        envs["features/server"] = {**base_env, "PREFECT_API_URL": api}
    if args.before:
        code = extract_revision(args.before, scratch)
        first = next(iter(envs.values()))
        envs["before"] = {**first, "PYTHONPATH": str(code)}
    print(
        f"features benchmark: the simulator's fleet, {args.days} days, hourly snapshots, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}; medians of {args.repeat} rounds, ratios paired per round"
    )
    print(
        "floor = one Polars scan + group_by(unit, metric, hour) mean/max/count + one zstd write of the command's output"
    )
    measured: dict[int, dict[str, dict]] = {}
    try:
        for units in args.sizes:
            data_dir = work / f"gpus-{units}"
            if not (data_dir / "lake" / "samples").is_dir():
                shutil.rmtree(data_dir, ignore_errors=True)
                print(prepare(data_dir, units, args.days, base_env), flush=True)

            def run(kind: str, data_dir: Path = data_dir, stream: bool = units >= args.stream_floor_from) -> dict:
                if kind == "floor":
                    return run_floor(data_dir, base_env, stream)
                return run_features(data_dir, envs[kind], digest=args.before is not None)

            # The floor last in the first round: it writes the output the command stored.
            runs = in_rounds([*envs, "floor"], run, args.repeat)
            floor = typical(runs["floor"], "peak_rss_mb")
            rows, columns = floor["output"]
            print(
                f"{units:,} GPUs: output {rows:,} snapshots x {columns} columns; load {os.getloadavg()[0]:.1f}\n"
                f"  floor{' (output streamed; its read taken off)' if floor['stream'] else ''}: {_line('floor', floor)}",
                flush=True,
            )
            measured[units] = {}
            for kind in envs:
                result = typical(runs[kind], "peak_rss_mb")
                measured[units][kind] = result
                wall_x = paired(runs[kind], runs["floor"], "seconds")
                cpu_x = paired(runs[kind], runs["floor"], "cpu")
                count, fastest, slowest = result["runs"]
                print(
                    f"  {kind}: {_line(kind, result)} (wall {fastest:.1f}-{slowest:.1f} s over {count}); "
                    f"{result['rows']:,} rows\n"
                    f"    x floor: {wall_x:.2f} wall, {cpu_x:.2f} CPU | at most {TARGET_X_FLOOR:g}x: "
                    f"{'met' if wall_x <= TARGET_X_FLOOR else 'not met'}; {GOAL_X_FLOOR:g}x (goal): "
                    f"{'met' if wall_x <= GOAL_X_FLOOR else 'not met'}; peak RSS at most {TARGET_RSS_MB:,} MB: "
                    f"{'met' if result['peak_rss_mb'] <= TARGET_RSS_MB else 'not met'}",
                    flush=True,
                )
                if kind == "before":
                    stores = {run["store"] for name in envs for run in runs[name]}
                    print(
                        f"    this tree against {args.before}: {paired(runs['before'], runs['features'], 'seconds'):.2f}x "
                        f"faster (wall), {paired(runs['before'], runs['features'], 'cpu'):.2f}x less CPU (paired); "
                        f"feature store {'identical in every run' if len(stores) == 1 else 'DIFFERENT'}"
                    )
            if not args.keep:
                shutil.rmtree(data_dir, ignore_errors=True)
    finally:
        if server is not None:
            stop_server(server)
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    if len(measured) >= 2:
        small, large = min(measured), max(measured)
        for kind in measured[small]:
            for what, label in (("seconds", "wall"), ("cpu", "CPU")):
                exponent = math.log(measured[large][kind][what] / measured[small][kind][what]) / math.log(large / small)
                print(
                    f"size exponent {small}->{large} GPUs, {kind} ({label}): {exponent:.3f} "
                    f"(linear = 1.0, target <= {TARGET_EXPONENT})"
                )


if __name__ == "__main__":
    main()
