"""Ingest throughput and peak memory for a large fleet: nvidia-smi CSV, canonical Parquet and
the simulator's mixed landing.

    uv run python benchmarks/bench_ingest.py                       # 4,096 GPUs x 7 days, 1-minute samples
    uv run python benchmarks/bench_ingest.py --gpus 512 --days 2   # a quick look
    uv run python benchmarks/bench_ingest.py --formats simulator --gpus 1024 --days 14  # the issue-28 landing
    uv run python benchmarks/bench_ingest.py --before main~5       # also the code of an older revision
    uv run python benchmarks/bench_ingest.py --no-parse-ahead      # also this tree parsing each batch in turn
    uv run python benchmarks/bench_ingest.py --malloc-conf ""      # also this tree with Polars' own jemalloc setting

Writes ``nvidia-smi --query-gpu=... --format=csv`` files (one per node and day, 8 GPUs per
node, as ``nvidia-smi -l 60`` would) and canonical ``samples-<day>.parquet`` files with the
same samples, each with an inventory, under ``--work``; then runs
``foreshock.ingest.ingest_path`` on each in a child process and prints rows/s of wall and
of CPU time (the machine is shared: CPU time is the steadier figure) and the child's peak
RSS against the targets (Parquet >= 5M rows/s, CSV >= 1M rows/s).  ``--metrics`` picks
how many metric columns each line has (default 2: GPU temperature and the corrected-ECC
counter); samples scale with it (one sample per metric per line).

``--formats simulator`` ingests what ``foreshock simulate --units GPUS --days DAYS`` writes
(2,122 files at 1,024 GPUs x 14 days: nvidia-smi CSV every 10 minutes, DCGM Prometheus JSON
exports and text scrapes, kernel Xid logs, tickets, the inventory; ``--every`` and
``--metrics`` do not apply) against its target of 2 M rows/s.

For Parquet it also runs the floor of any ingest in the same way (each day file read, one
sort into lake order, each partition written as the lake writes it; no check, duplicate
search, lock, fsync or bookkeeping) and prints the ingest's time as a multiple of it: the
part of the cost that is ours, whatever the machine.

Each ingest (and the floor, and ``--before``) runs ``--repeat`` times (default 3), in
rounds whose order turns: figures are medians, ratios the medians of each round's ratio.

``--before REV`` runs the same ingests with the ``foreshock`` package of git revision
``REV`` (extracted with ``git archive``) in the same run and prints the after/before
ratios, and whether both wrote the same lake and quarantine (every Parquet file compared
as frames).  ``--no-parse-ahead`` (``[ingest] parse_ahead = false``) and ``--malloc-conf
CONF`` (Polars' jemalloc told ``_RJEM_MALLOC_CONF=CONF`` instead of foreshock's default; ``""``:
Polars' own setting) run this tree again in the same rounds, each compared with this tree's
default run and checked for the same lake and quarantine.  Each child gets the jemalloc
setting its own code chooses (this process's Polars does not pass its own on).  System CPU (the kernel's share: page faults, zeroing pages
the allocator gave back) is printed beside the total.  A lake-merge micro-benchmark (one partition, then an hour of newer rows appended,
with and without the append fast path) always runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
from rounds import extract_revision, in_rounds, paired, typical

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


PARQUET_METRICS = ["gpu_temp_c", "ecc_sbe_volatile_total", "power_w", "gpu_util_pct", "memory_temp_c", "sm_clock_mhz"]
# rows/s on the 2-core machine (issue 11; the simulator's mixed landing: issue 28)
TARGETS = {"nvidia-smi": 1_000_000, "parquet": 5_000_000, "simulator": 2_000_000}


def inventory_frame(gpus: int) -> pl.DataFrame:
    nodes = gpus // GPUS_PER_NODE
    return pl.DataFrame(
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


def generate_parquet(raw: Path, gpus: int, days: int, every_s: int, metrics: int, seed: int) -> int:
    """Canonical samples, one Parquet file per day (unit, time, metric, value); returns rows."""
    rng = np.random.default_rng(seed)
    raw.mkdir(parents=True, exist_ok=True)
    units = inventory_frame(gpus).get_column("unit_id")
    inventory_frame(gpus).write_csv(raw / "inventory.csv")
    names = PARQUET_METRICS[: min(metrics, len(PARQUET_METRICS))]
    steps = 86400 // every_s
    rows = 0
    for day in range(days):
        base = START + timedelta(days=day)
        times = pl.datetime_range(base, base + timedelta(seconds=(steps - 1) * every_s), f"{every_s}s", eager=True)
        grid = pl.DataFrame({"unit_id": units}).join(pl.DataFrame({"ts": times}), how="cross")
        frames = []
        for name in names:
            if name == "ecc_sbe_volatile_total":
                values = np.cumsum(rng.poisson(0.01, (len(units), steps)), axis=1).ravel().astype(float)
            else:
                values = rng.uniform(30, 80, grid.height).round(1)
            frames.append(grid.with_columns(metric=pl.lit(name), value=pl.Series(values)))
        frame = pl.concat(frames)
        frame.write_parquet(raw / f"samples-{base:%Y-%m-%d}.parquet")
        rows += frame.height
    return rows


def generate_simulator(raw: Path, gpus: int, days: int, seed: int) -> str:
    """``foreshock simulate``'s landing for ``gpus`` x ``days`` (its own formats and mix:
    nvidia-smi CSV every 10 minutes, DCGM Prometheus JSON exports and text scrapes, kernel
    Xid logs, tickets, the inventory); a line saying what it wrote."""
    command = [sys.executable, "-c", "import sys; from foreshock.pipelines.cli import main; sys.exit(main())"]
    command += ["simulate", "--units", str(gpus), "--days", str(days), "--seed", str(seed), "--out", str(raw)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wrote = next(line for line in done.stdout.splitlines() if line.startswith("wrote"))
    formats = {}
    for path in raw.rglob("*"):
        if path.is_file():
            formats[path.suffix or path.name] = formats.get(path.suffix or path.name, 0) + 1
    return f"the simulator's landing, {wrote.removeprefix('wrote ')} ({', '.join(f'{n} {k}' for k, n in sorted(formats.items()))})"


def generate(raw: Path, gpus: int, days: int, every_s: int, metrics: int, seed: int) -> int:
    """Write the nvidia-smi landing directory; returns the number of CSV data lines."""
    rng = np.random.default_rng(seed)
    fields = METRIC_FIELDS[:metrics]
    header = ", ".join(["timestamp", "index", "pci.bus_id", "uuid"] + [f"{n} [{u}]" if u else n for n, u in fields])
    nodes = gpus // GPUS_PER_NODE
    steps = 86400 // every_s
    raw.mkdir(parents=True, exist_ok=True)
    inventory_frame(gpus).write_csv(raw / "inventory.csv")
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


def ingest_child(raw: Path, data: Path, workers: int | None) -> None:
    from foreshock.config import load_config
    from foreshock.ingest import ingest_path

    overrides = {"ingest": {"timezone": "UTC"}}
    if workers:
        overrides["runner"] = {"local_workers": workers}
    config = load_config(data_dir=data).with_overrides(overrides)
    started, cpu_started = time.perf_counter(), time.process_time()
    system_started = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    report = ingest_path(raw, config)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu": cpu,
                "sys": resource.getrusage(resource.RUSAGE_SELF).ru_stime - system_started,
                "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "totals": report.totals,
                "adds_up": report.adds_up,
                "rejected": len(report.by_status("rejected")),
            }
        )
    )


def floor_child(raw: Path, data: Path) -> None:
    """The floor of canonical-Parquet ingest: each day file read, its rows put in lake order
    by one sort of a packed integer key (day, shard, unit, time, metric), and each (day,
    shard) partition written as the lake writes it (zstd, statistics) -- no check, no
    duplicate search, no lock, fsync, manifest or change log.  What any ingest must do."""
    import zlib

    started, cpu_started = time.perf_counter(), time.process_time()
    rows = 0
    for path in sorted(raw.glob("samples-*.parquet")):
        frame = pl.read_parquet(path)
        rows += frame.height
        units = frame.get_column("unit_id").unique()
        by_shard = pl.DataFrame(
            {"unit_id": units, "shard": [zlib.crc32(u.encode()) % 8 for u in units.to_list()]}
        ).sort("shard", "unit_id")
        metrics = frame.get_column("metric").unique().sort()
        micros = pl.col("ts").dt.epoch("us")
        low = frame.get_column("ts").dt.epoch("us").min()
        assert max(len(units) - 1, 1).bit_length() <= 24  # the unit's bits above bit 40
        metric_bits = max(len(metrics) - 1, 1).bit_length()
        shift = lambda bits: pl.lit(1 << bits, dtype=pl.UInt64)  # noqa: E731 - Polars has no << on expressions
        unit_rank = pl.col("unit_id").cast(pl.Enum(by_shard.get_column("unit_id"))).to_physical().cast(pl.UInt64)
        metric_rank = pl.col("metric").cast(pl.Enum(metrics)).to_physical().cast(pl.UInt64)
        key = frame.select(
            (unit_rank * shift(40) + (micros - low).cast(pl.UInt64) * shift(metric_bits) + metric_rank).alias("key")
        ).to_series()
        order = np.argsort(key.to_numpy(), kind="stable")
        sorted_key = key.to_numpy()[order]
        unit_of_row = pl.Series((sorted_key >> np.uint64(40)).view(np.int64))
        ordered = pl.DataFrame(
            {
                "unit_id": by_shard.get_column("unit_id").gather(unit_of_row),
                "ts": pl.Series(frame.get_column("ts").to_physical().to_numpy()[order]).cast(frame.schema["ts"]),
                "metric": metrics.gather(pl.Series((sorted_key & np.uint64((1 << metric_bits) - 1)).view(np.int64))),
                "value": frame.get_column("value").to_numpy()[order],
            }
        )
        # units are ranked by shard first: each shard's rows are one slice of the sorted rows
        shard_of_rank = by_shard.get_column("shard").to_numpy()
        bounds = np.searchsorted(unit_of_row.to_numpy(), np.searchsorted(shard_of_rank, np.arange(9)))
        for shard in range(8):
            part = ordered.slice(int(bounds[shard]), int(bounds[shard + 1] - bounds[shard]))
            if part.height:
                target = data / path.stem / f"shard={shard}.parquet"
                target.parent.mkdir(parents=True, exist_ok=True)
                part.write_parquet(target, compression="zstd", statistics=True)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    written = sum(pl.scan_parquet(p).select(pl.len()).collect().item() for p in data.rglob("*.parquet"))
    assert written == rows, f"the floor wrote {written:,} of {rows:,} rows"
    print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mb": peak, "rows": rows}))


def run_child(
    mode: str, raw: Path, data: Path, code: Path | None = None, workers: int | None = None, keep: Path | None = None
) -> dict:
    """Run ``--child`` (ingest ``raw`` into a fresh lake; ``code``: an older package tree;
    ``mode`` ``--child-in-turn``: with ``[ingest] parse_ahead = false``) or
    ``--floor-child`` in a child process; its JSON line.  ``keep``: the data directory is
    moved there (when nothing is there yet) instead of deleted.  The child gets this
    process's environment (:func:`jemalloc_told`)."""
    shutil.rmtree(data, ignore_errors=True)
    env = dict(os.environ)
    # The jemalloc setting the user exported or jemalloc_told gives, not the one this
    # process's Polars wrote: each child's code chooses its own.
    env.pop("_RJEM_MALLOC_CONF", None)
    if CHILD_MALLOC_CONF is not None:
        env["_RJEM_MALLOC_CONF"] = CHILD_MALLOC_CONF
    if mode == "--child-in-turn":  # the child's config reads it (FORESHOCK_<SECTION>_<KEY>)
        mode, env["FORESHOCK_INGEST_PARSE_AHEAD"] = "--child", "false"
    if code is not None:
        env["PYTHONPATH"] = str(code)
    child = subprocess.run(
        [sys.executable, "-c", FORESHOCK_FIRST, __file__, mode, "--raw", str(raw), "--data", str(data)]
        + (["--workers", str(workers)] if workers else []),
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if child.returncode != 0:
        sys.exit(f"{mode} failed:\n{child.stderr[-3000:]}")
    if keep is not None and not keep.exists():
        shutil.move(data, keep)
    shutil.rmtree(data, ignore_errors=True)
    return json.loads(child.stdout.strip().splitlines()[-1])


def _exported_malloc_conf(value: str | None) -> str | None:
    """The ``_RJEM_MALLOC_CONF`` the user exported, from the value Polars left in this
    process's environment as it loaded (its own setting, then the user's after a comma)."""
    for own in (
        "dirty_decay_ms:500,muzzy_decay_ms:1000,thp:always,metadata_thp:always",
        "dirty_decay_ms:500,muzzy_decay_ms:1000",
    ):
        if value is not None and value.startswith(own):
            return value[len(own) + 1 :] if len(value) > len(own) else None
    return value


# A child imports its tree's foreshock before this script (which imports Polars) runs in it,
# as the CLI does: the allocator setting foreshock chooses (or not, in an older tree) is then
# in place before Polars loads.
# (``-c`` puts the working directory first on the path: taken off, so that ``--before``'s
# PYTHONPATH finds the older tree.)
FORESHOCK_FIRST = (
    "import sys; sys.path.pop(0); sys.argv = sys.argv[1:]; import foreshock, os, runpy; "
    "sys.path.insert(0, os.path.dirname(sys.argv[0])); runpy.run_path(sys.argv[0], run_name='__main__')"
)

# The _RJEM_MALLOC_CONF children get: the user's, or jemalloc_told's while its block runs.
CHILD_MALLOC_CONF: str | None = _exported_malloc_conf(os.environ.get("_RJEM_MALLOC_CONF"))


@contextmanager
def jemalloc_told(conf: str | None):
    """Children started while the block runs get ``_RJEM_MALLOC_CONF=conf`` (None: as the
    user exported it, if at all): Polars' jemalloc reads it as Polars loads there."""
    global CHILD_MALLOC_CONF
    before = CHILD_MALLOC_CONF
    if conf is not None:
        CHILD_MALLOC_CONF = conf
    try:
        yield
    finally:
        CHILD_MALLOC_CONF = before


def run_ingest(raw: Path, data: Path, code: Path | None, workers: int | None = None, keep: Path | None = None) -> dict:
    """Ingest ``raw`` into a fresh lake in a child process (``code``: an older package tree)."""
    return run_child("--child", raw, data, code, workers, keep)


def same_lakes(one: Path, other: Path) -> list[str]:
    """What differs between two data directories ingested from the same landing: each
    Parquet file of the lake and the quarantine compared as frames (the manifest and the
    quarantine without the run's id and times); empty when they hold the same rows."""
    differ = []

    def named(root: Path) -> dict[str, Path]:  # a quarantine file by its name without the run's id
        found = {p.relative_to(root).as_posix(): p for p in root.rglob("*.parquet")}
        return {"/".join("run=*" if x.startswith("run=") else x for x in k.split("/")): p for k, p in found.items()}

    files = {root: named(root) for root in (one, other)}
    if sorted(files[one]) != sorted(files[other]):
        differ.append(f"files: {sorted(set(files[one]) ^ set(files[other]))[:5]}")
    for name, path in sorted(files[one].items()):
        if name in files[other]:
            left, right = pl.read_parquet(path), pl.read_parquet(files[other][name])
            run_columns = [c for c in ("run_id", "ingested_at") if c in left.columns]
            if not left.drop(run_columns).equals(right.drop(run_columns, strict=False)):
                differ.append(name)
    return differ


def report_ingest(label: str, result: dict, target: int) -> None:
    totals, seconds, cpu = result["totals"], result["seconds"], result["cpu"]
    rows = totals["rows_read"]
    system = f" ({result['sys']:.1f}s of it system)" if "sys" in result else ""
    print(
        f"  {label}: {rows:,} rows read, {totals['rows_stored']:,} stored, {totals['rows_quarantined']:,} quarantined, "
        f"{totals['duplicates_dropped']:,} duplicates (adds up: {result['adds_up']}, files rejected: {result['rejected']})"
    )
    print(
        f"    wall {seconds:.1f}s = {rows / seconds:,.0f} rows/s | cpu {cpu:.1f}s{system} = {rows / cpu:,.0f} rows per CPU-s "
        f"= {cpu / rows * 1e6:.2f} CPU-s per million rows | peak RSS {result['peak_mb']:,.0f} MB | target "
        f"{target:,} rows/s: {'met' if rows / seconds >= target else 'not met'} (wall); its CPU cost "
        f"{'fits' if cpu / rows * 1e6 <= 2e6 / target else 'does not fit'} two idle cores (at most "
        f"{2e6 / target:.2f} CPU-s per million rows), {'fits' if rows / cpu >= target else 'does not fit'} one"
    )
    count, fastest, slowest = result.get("runs", (1, seconds, seconds))
    if count > 1:
        print(f"    (medians of {count} runs; wall from {fastest:.2f}s to {slowest:.2f}s)")


def _print_same_lake(what: str, one: Path, other: Path) -> None:
    differ = same_lakes(one, other)
    print(f"    lake and quarantine the same rows as this tree's default run, {what}: {not differ} {differ[:5] or ''}")


def merge_bench(gpus: int, every_s: int) -> None:
    """A day's partition of ``gpus`` units (two metrics), then the next hour appended: the
    exact merge (anti-join + whole sort) against the append fast path."""
    from foreshock.lake.layout import partition_files
    from foreshock.lake.merge import merge_into_lake

    units = inventory_frame(gpus).get_column("unit_id")
    steps = 86400 // every_s

    def block(start: datetime, count: int) -> pl.DataFrame:
        times = pl.datetime_range(start, start + timedelta(seconds=(count - 1) * every_s), f"{every_s}s", eager=True)
        grid = pl.DataFrame({"unit_id": units}).join(pl.DataFrame({"ts": times}), how="cross")
        return pl.concat([grid.with_columns(metric=pl.lit(m), value=pl.lit(1.0)) for m in PARQUET_METRICS[:2]])

    hour = 3600 // every_s
    day = block(START, steps - hour)
    last_hour = block(START + timedelta(seconds=(steps - hour) * every_s), hour)
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fast in (False, True):
            lake = Path(tmp) / str(fast)
            merge_into_lake(lake, "samples", day, shards=1)
            started, cpu = time.perf_counter(), time.process_time()
            result = merge_into_lake(lake, "samples", last_hour, shards=1, fast_path=fast)
            times[fast] = (time.perf_counter() - started, time.process_time() - cpu)
            assert result.rows_stored == last_hour.height
        same = pl.read_parquet(partition_files(Path(tmp) / "True", "samples")[0]).equals(
            pl.read_parquet(partition_files(Path(tmp) / "False", "samples")[0])
        )
    print(
        f"merge: {last_hour.height:,} newer rows into a {day.height:,}-row partition: exact {times[False][0]:.2f}s "
        f"(cpu {times[False][1]:.2f}s), fast path {times[True][0]:.2f}s (cpu {times[True][1]:.2f}s): "
        f"{times[False][0] / times[True][0]:.1f}x wall, {times[False][1] / max(times[True][1], 1e-9):.1f}x CPU; "
        f"identical files: {same}"
    )


def parquet_bytes(data: Path) -> int:
    """Bytes of the Parquet files under a kept data directory (lake, quarantine, manifest):
    what a change of the lake's compression costs in storage."""
    return sum(path.stat().st_size for path in data.rglob("*.parquet"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4096)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--every", type=int, default=60, help="sample interval in seconds (default 60)")
    parser.add_argument(
        "--metrics", type=int, default=2, choices=range(1, len(METRIC_FIELDS) + 1), metavar=f"1..{len(METRIC_FIELDS)}"
    )
    parser.add_argument("--formats", nargs="+", choices=sorted(TARGETS), default=sorted(TARGETS))
    parser.add_argument("--before", metavar="REV", help="also ingest with the code of this git revision")
    parser.add_argument("--work", type=Path, default=Path("data/bench_ingest"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        metavar="N",
        help="also ingest this tree with [runner] local_workers = N (threads per batch), e.g. --workers 1 2",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="rounds of runs (this tree, the floor, --before; in turn): medians and paired ratios (default 3)",
    )
    parser.add_argument(
        "--no-parse-ahead", action="store_true", help="also this tree with [ingest] parse_ahead = false"
    )
    parser.add_argument(
        "--malloc-conf",
        metavar="CONF",
        help="also this tree with _RJEM_MALLOC_CONF=CONF (Polars' jemalloc) instead of foreshock's default; "
        "'' for Polars' own setting",
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--raw", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        ingest_child(args.raw, args.data, args.workers[0] if args.workers else None)
        return
    if args.floor_child:
        floor_child(args.raw, args.data)
        return
    shutil.rmtree(args.work, ignore_errors=True)
    merge_bench(min(args.gpus, 512), args.every)
    with tempfile.TemporaryDirectory() as tmp:
        before_code = extract_revision(args.before, Path(tmp)) if args.before else None
        for fmt in args.formats:
            raw = args.work / f"raw-{fmt}"
            started = time.perf_counter()
            if fmt == "simulator":
                what = generate_simulator(raw, args.gpus, args.days, args.seed)
            elif fmt == "nvidia-smi":
                lines = generate(raw, args.gpus, args.days, args.every, args.metrics, args.seed)
                what = f"{lines:,} nvidia-smi lines, {args.metrics} metric column(s)"
            else:
                lines = generate_parquet(raw, args.gpus, args.days, args.every, args.metrics, args.seed)
                what = f"{lines:,} canonical samples in {args.days} Parquet file(s)"
            size = sum(p.stat().st_size for p in raw.rglob("*") if p.is_file())
            print(
                f"{fmt}: {args.gpus:,} GPUs x {args.days} d"
                f"{'' if fmt == 'simulator' else f' at {args.every}s'}: {what}, {size / 1e9:.2f} GB "
                f"(generated in {time.perf_counter() - started:.0f}s, seed {args.seed})"
            )
            # Rounds of runs next to each other, their order turned each round: the machine is
            # shared, and a ratio of two runs of one round is steadier than either figure.
            kinds = ["after"] + (["floor"] if fmt == "parquet" else []) + (["before"] if before_code else [])
            kinds += ["in-turn"] if args.no_parse_ahead else []
            kinds += ["malloc"] if args.malloc_conf is not None else []
            kept = {kind: args.work / f"kept-{kind}" for kind in kinds}

            def run(kind: str, raw: Path = raw, kept: dict[str, Path] = kept) -> dict:
                if kind == "floor":
                    return run_child("--floor-child", raw, args.work / "floor")
                if kind in ("in-turn", "malloc"):
                    mode = "--child-in-turn" if kind == "in-turn" else "--child"
                    with jemalloc_told(args.malloc_conf if kind == "malloc" else None):
                        return run_child(mode, raw, args.work / "data", keep=kept[kind])
                code = before_code if kind == "before" else None
                return run_ingest(raw, args.work / "data", code, keep=kept[kind])

            runs = in_rounds(kinds, run, args.repeat)
            after = typical(runs["after"])
            report_ingest("this tree", after, TARGETS[fmt])
            if fmt == "parquet":
                floor = typical(runs["floor"])
                print(
                    f"    floor (read, one sort, partition writes; no checks): wall {floor['seconds']:.1f}s = "
                    f"{floor['rows'] / floor['seconds']:,.0f} rows/s, cpu {floor['cpu']:.1f}s, peak RSS "
                    f"{floor['peak_mb']:,.0f} MB | ingest = {paired(runs['after'], runs['floor'], 'seconds'):.2f}x "
                    f"the floor (wall), {paired(runs['after'], runs['floor'], 'cpu'):.2f}x (CPU)"
                )
            for kind, label in (
                ("in-turn", "this tree, [ingest] parse_ahead = false"),
                ("malloc", f"this tree, _RJEM_MALLOC_CONF={args.malloc_conf!r}"),
            ):
                if kind in runs:
                    report_ingest(label, typical(runs[kind]), TARGETS[fmt])
                    print(
                        f"    this tree's defaults against it: {paired(runs[kind], runs['after'], 'seconds'):.2f}x "
                        f"faster (wall), {paired(runs[kind], runs['after'], 'cpu'):.2f}x less CPU (medians of paired runs)"
                    )
                    _print_same_lake(kind, kept["after"], kept[kind])
            for workers in args.workers or []:
                report_ingest(
                    f"this tree, {workers} worker(s)", run_ingest(raw, args.work / "data", None, workers), TARGETS[fmt]
                )
            if before_code is not None:
                report_ingest(f"at {args.before}", typical(runs["before"]), TARGETS[fmt])
                print(
                    f"    after/before: {paired(runs['before'], runs['after'], 'seconds'):.2f}x faster (wall), "
                    f"{paired(runs['before'], runs['after'], 'cpu'):.2f}x less CPU (medians of paired runs)"
                )
                differ = same_lakes(args.work / "kept-after", args.work / "kept-before")
                print(f"    lake and quarantine the same rows before and after: {not differ} {differ[:5] or ''}")
                sizes = [parquet_bytes(args.work / f"kept-{kind}") for kind in ("after", "before")]
                print(
                    f"    Parquet files of lake and quarantine: {sizes[0] / 1e6:,.1f} MB after, "
                    f"{sizes[1] / 1e6:,.1f} MB before ({sizes[0] / max(sizes[1], 1):.3f}x)"
                )
            for path in kept.values():
                shutil.rmtree(path, ignore_errors=True)
            if not args.keep:
                shutil.rmtree(raw, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
