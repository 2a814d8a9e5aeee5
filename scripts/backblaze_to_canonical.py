"""Convert Backblaze's hard-drive SMART data in start-stop form into foreshock's canonical
tables, so years of real disk telemetry go through the ordinary ingest path.

    uv run python scripts/backblaze_to_canonical.py IN.parquet OUT_DIR \\
        [--healthy-fraction F] [--seed S] [--start DATE --end DATE] [--format parquet|csv]
    uv run foreshock --config OUT_DIR/foreshock.toml --data-dir OUT_DIR/lake \\
        ingest --source canonical --path OUT_DIR/tables

The input holds one row per drive and interval over which its SMART values stayed the same
(columns ``serial_number, model, manufacturer, installed_at, start_date, stop_date,
failed, smart_5 ... smart_198``): every day from ``start_date`` up to, not including,
``stop_date`` has the row's values, and ``failed`` marks a failing drive's last interval,
whose failure Backblaze recorded on the day before ``stop_date``.

Written to ``OUT_DIR``:

``tables/samples/samples-<first day>.parquet`` (or ``.csv``)
    One reading per drive and day at 00:00 UTC, one row per reported attribute (a drive
    that does not report an attribute, a null in the input, has no row for it).  Written
    ``--chunk-days`` days at a time for all drives, so memory holds one chunk and the
    ingest takes one file (one run of dates) per batch.
``tables/inventory.*``
    ``unit_id`` = serial number, ``model``, ``maker`` (HGST, Seagate, WDC),
    ``installed_at`` (first powered on), ``fleet_weight`` (how many drives of the fleet
    the drive stands for: 1 for a failing drive, ``1 / F`` for a kept healthy drive) and
    ``retired_at`` (the day after its last reading, for a drive that left the fleet
    before the window's end without failing).  The data says nothing about where a drive
    sits, and the contract requires ``node`` and ``rack``: both are the serial number, each
    drive its own fault domain, so no peer feature (the rack error rate) pretends that
    drives share a rack, and a subsampled fleet (failing drives over-represented) cannot
    leak into a fleet-wide share.  ``lot`` is left empty.
``tables/failures.*``
    ``failed_at`` = 00:00 UTC of the failing drive's last day (the day before its last
    interval's ``stop_date``), the day of its last reading.  A snapshot at the failure is
    dropped by the labels, so a flag counts as ahead of the failure from the day before.
``tables/catalog.yaml``
    The SMART attributes: 5, 10, 12, 187, 188, 189, 196 are counters; 197 (pending
    sectors) and 198 (offline uncorrectable) are gauges (current counts that fall when
    sectors are remapped).
``sampling.json``
    The healthy fraction and seed, and the counts of drives (failing, healthy, kept).
``foreshock.toml``
    The configuration the data set needs: daily snapshots, a 14-day horizon, a lead of at
    least 1 day, a budget of 0.1 % of the drives reporting each day, the catalog above.

Healthy drives (no failure within the window) are kept with probability
``--healthy-fraction``, drawn per drive from ``--seed`` over the input's sorted serial
numbers (the same drives whatever the window); every failing drive is kept.
"""

from __future__ import annotations

import argparse
import json
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import polars as pl

# Input column -> (canonical metric, catalog entry).  Families: error counters feed the
# growth features and the threshold baseline's generic growth rule (docs/byot.md).
METRICS = {
    "smart_5": ("reallocated_sectors", "{kind: counter, family: error, unit: sectors, aliases: [smart_5_raw]}"),
    "smart_10": ("spin_retries", "{kind: counter, family: error, unit: count, aliases: [smart_10_raw]}"),
    "smart_12": ("power_cycles", "{kind: counter, family: other, unit: count, aliases: [smart_12_raw]}"),
    "smart_187": ("reported_uncorrectable", "{kind: counter, family: error, unit: count, aliases: [smart_187_raw]}"),
    "smart_188": ("command_timeouts", "{kind: counter, family: error, unit: count, aliases: [smart_188_raw]}"),
    "smart_189": ("high_fly_writes", "{kind: counter, family: error, unit: count, aliases: [smart_189_raw]}"),
    "smart_196": ("reallocation_events", "{kind: counter, family: error, unit: count, aliases: [smart_196_raw]}"),
    "smart_197": ("pending_sectors", "{kind: gauge, family: error, unit: sectors, aliases: [smart_197_raw]}"),
    "smart_198": ("offline_uncorrectable", "{kind: gauge, family: error, unit: sectors, aliases: [smart_198_raw]}"),
}
MAKERS = {"ST": "Seagate", "HGST": "HGST", "WDC": "WDC"}
DAY = timedelta(days=1)
TS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def catalog_yaml() -> str:
    """The SMART metric catalog (counters and gauges as Backblaze's attributes behave)."""
    width = max(len(name) for name, _ in METRICS.values()) + 1
    lines = [f"  {name + ':':<{width}} {entry}" for name, entry in METRICS.values()]
    return "metrics:\n" + "\n".join(lines) + "\n"


# The feature settings of daily telemetry, shared with the other daily-disk tools.
DAILY_SNAPSHOTS = Path(__file__).resolve().parents[1] / "features" / "daily-snapshots.toml"


def config_toml(catalog: Path) -> str:
    """The configuration for the converted fleet: daily snapshots, 14-day horizon, a lead of
    at least a day (time to copy a disk's data off), alerts counted up to one horizon ahead."""
    daily = DAILY_SNAPSHOTS.read_text()
    return f'''[paths]
catalog = "{catalog}"

{daily}
[backtest]
alert_window = "14d"
min_lead_time = "1d"
daily_budget_share = 0.001  # the budget point: 0.1 % of the drives reporting each day
'''


def _window(frame: pl.DataFrame, start: date | None, end: date | None) -> pl.DataFrame:
    """Intervals clipped to the days ``start..end`` (inclusive); a failure whose day falls
    after ``end`` is not one of the window (the drive is censored at ``end``)."""
    first = start or frame.get_column("start_date").min()
    stop = (end + DAY) if end else frame.get_column("stop_date").max()
    return (
        frame.filter((pl.col("stop_date") > first) & (pl.col("start_date") < stop))
        .with_columns(
            pl.max_horizontal("start_date", pl.lit(first)).alias("start_date"),
            (pl.col("failed") & (pl.col("stop_date") <= stop)).alias("failed"),
            pl.min_horizontal("stop_date", pl.lit(stop)).alias("stop_date"),
        )
        .filter(pl.col("stop_date") > pl.col("start_date"))
    )


def choose_drives(frame: pl.DataFrame, windowed: pl.DataFrame, fraction: float, seed: int) -> pl.DataFrame:
    """``unit_id, failing, fleet_weight`` of the drives kept: every failing drive (weight
    1) and each healthy one with probability ``fraction`` (weight ``1 / fraction``)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"--healthy-fraction must be in (0, 1], got {fraction}")
    serials = frame.get_column("serial_number").unique().sort()
    draw = pl.DataFrame({"unit_id": serials, "_u": np.random.default_rng(seed).random(serials.len())})
    drives = windowed.group_by("serial_number").agg(pl.col("failed").any().alias("failing"))
    return (
        drives.rename({"serial_number": "unit_id"})
        .join(draw, on="unit_id", how="left")
        .filter(pl.col("failing") | (pl.col("_u") < fraction))
        .select("unit_id", "failing", pl.when("failing").then(1.0).otherwise(1.0 / fraction).alias("fleet_weight"))
        .sort("unit_id")
    )


def expand(intervals: pl.DataFrame, lo: date, hi: date) -> pl.DataFrame:
    """Long samples ``unit_id, ts, metric, value`` of the days ``[lo, hi)``: each interval's
    days in that range, one row per non-null attribute, sorted by time, drive, metric."""
    part = intervals.filter((pl.col("start_date") < hi) & (pl.col("stop_date") > lo))
    days = part.select(
        pl.col("serial_number").alias("unit_id"),
        pl.date_ranges(
            pl.max_horizontal("start_date", pl.lit(lo)),
            pl.min_horizontal("stop_date", pl.lit(hi)) - pl.duration(days=1),
        ).alias("day"),
        *METRICS,
    ).explode("day")
    names = {column: name for column, (name, _) in METRICS.items()}
    return (
        days.unpivot(index=["unit_id", "day"], on=list(METRICS), variable_name="metric", value_name="value")
        .drop_nulls("value")
        .select(
            "unit_id",
            pl.col("day").cast(pl.Datetime("us", "UTC")).alias("ts"),
            pl.col("metric").replace_strict(names),
            pl.col("value").cast(pl.Float64),
        )
        .sort("ts", "unit_id", "metric")
    )


def _write(frame: pl.DataFrame, path: Path, fmt: str) -> Path:
    path = path.with_suffix(f".{fmt}")
    if fmt == "parquet":
        frame.write_parquet(path)
    else:  # CSV: times as ISO 8601 with Z (the canonical CSV form)
        times = [c for c, t in frame.schema.items() if isinstance(t, pl.Datetime)]
        frame.with_columns(pl.col(c).dt.strftime(TS_FORMAT) for c in times).write_csv(path)
    return path


def failures_of(intervals: pl.DataFrame) -> pl.DataFrame:
    """``unit_id, failed_at`` of every failure in the start-stop rows: the failing drive's
    last reading day (Backblaze records it the day before its last interval's ``stop_date``)."""
    return (
        intervals.filter("failed")
        .select(
            pl.col("serial_number").alias("unit_id"),
            (pl.col("stop_date") - pl.duration(days=1)).cast(pl.Datetime("us", "UTC")).alias("failed_at"),
        )
        .sort("failed_at", "unit_id")
    )


def convert(
    source: Path,
    out: Path,
    *,
    healthy_fraction: float = 1.0,
    seed: int = 0,
    start: date | None = None,
    end: date | None = None,
    fmt: str = "parquet",
    chunk_days: int = 14,
) -> dict:
    """Write the canonical tables, catalog, ``sampling.json`` and ``foreshock.toml`` into
    ``out`` (see the module docstring); returns what ``sampling.json`` holds."""
    frame = pl.read_parquet(source)
    windowed = _window(frame, start, end)
    kept = choose_drives(frame, windowed, healthy_fraction, seed)
    intervals = windowed.join(kept.select(pl.col("unit_id").alias("serial_number")), on="serial_number", how="semi")
    tables = out / "tables"
    (tables / "samples").mkdir(parents=True, exist_ok=True)
    for old in (tables / "samples").glob("samples-*"):
        old.unlink()  # a chunking from an earlier run must not be ingested beside this one
    first, stop = intervals.get_column("start_date").min(), intervals.get_column("stop_date").max()
    sample_rows = 0
    lo = first
    while lo is not None and lo < stop:
        hi = min(lo + chunk_days * DAY, stop)
        chunk = expand(intervals, lo, hi)
        if chunk.height:
            _write(chunk, tables / "samples" / f"samples-{lo.isoformat()}", fmt)
        sample_rows += chunk.height
        lo = hi
    spans = intervals.group_by("serial_number").agg(
        pl.col("model").first(),
        pl.col("manufacturer").first(),
        pl.col("installed_at").first(),
        pl.col("start_date").min().alias("first_day"),
        pl.col("stop_date").max().alias("stop"),
        pl.col("failed").any(),
    )
    utc = pl.Datetime("us", "UTC")
    inventory = (
        spans.join(kept, left_on="serial_number", right_on="unit_id")
        .select(
            pl.col("serial_number").alias("unit_id"),
            pl.col("serial_number").alias("node"),
            pl.col("serial_number").alias("rack"),
            "model",
            pl.col("manufacturer").replace(MAKERS).alias("maker"),
            # a drive first seen before its power-on date would start a life after its readings
            pl.min_horizontal("installed_at", "first_day").cast(utc).alias("installed_at"),
            "fleet_weight",
            # text, as the contract keeps extra inventory columns (read by `foreshock reliability`)
            pl.when(~pl.col("failed") & (pl.col("stop") < stop))
            .then(pl.col("stop").cast(utc).dt.strftime(TS_FORMAT))
            .alias("retired_at"),
        )
        .sort("unit_id")
    )
    _write(inventory, tables / "inventory", fmt)
    _write(failures_of(intervals), tables / "failures", fmt)
    catalog = tables / "catalog.yaml"
    catalog.write_text(catalog_yaml())
    # relative: the configuration resolves it against its own directory (a movable output)
    (out / "foreshock.toml").write_text(config_toml(catalog.relative_to(out)))
    failing = int(kept.get_column("failing").sum())
    healthy_in_window = windowed.get_column("serial_number").n_unique() - failing
    sampling = {
        "source": source.name,
        "healthy_fraction": healthy_fraction,
        "seed": seed,
        "start": first.isoformat() if first else None,
        "end": (stop - DAY).isoformat() if stop else None,
        "failing_drives": failing,
        "healthy_drives": healthy_in_window,
        "healthy_kept": kept.height - failing,
        "healthy_weight": 1.0 / healthy_fraction,
        "drive_days": int(intervals.select((pl.col("stop_date") - pl.col("start_date")).dt.total_days().sum()).item()),
        "sample_rows": sample_rows,
        "fleet_weight": "inventory column: fleet drives a unit stands for (1 failing, 1/healthy_fraction healthy)",
    }
    (out / "sampling.json").write_text(json.dumps(sampling, indent=2) + "\n")
    return sampling


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="start-stop Parquet file")
    parser.add_argument("out", type=Path, help="output directory")
    parser.add_argument("--healthy-fraction", type=float, default=1.0, help="share of healthy drives kept")
    parser.add_argument("--seed", type=int, default=0, help="seed of the healthy drives' draw")
    parser.add_argument("--start", type=date.fromisoformat, help="first day (default: the data's)")
    parser.add_argument("--end", type=date.fromisoformat, help="last day, inclusive (default: the data's)")
    parser.add_argument("--format", choices=("parquet", "csv"), default="parquet", dest="fmt")
    parser.add_argument("--chunk-days", type=int, default=14, help="days of samples per file")
    args = parser.parse_args(argv)
    sampling = convert(
        args.source,
        args.out,
        healthy_fraction=args.healthy_fraction,
        seed=args.seed,
        start=args.start,
        end=args.end,
        fmt=args.fmt,
        chunk_days=args.chunk_days,
    )
    print(json.dumps(sampling, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
