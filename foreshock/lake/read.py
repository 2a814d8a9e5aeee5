"""Reading the lake: lazy scans pruned by date and shard, whole tables, and the summary an
operator checks first (``foreshock lake``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path

import polars as pl

from foreshock.contract import SCHEMAS, TIME_COLUMN
from foreshock.lake.layout import partition_files


def scan_table(
    lake_dir: Path,
    table: str,
    start: date | datetime | None = None,
    end: date | datetime | None = None,
    shards: Iterable[int] | None = None,
) -> pl.LazyFrame:
    """Lazy scan of a canonical table (partition-pruned by date and shard).

    Always returns the contract's columns, even when nothing is stored yet.
    """
    files = partition_files(lake_dir, table, start, end, shards)
    if not files:
        return pl.LazyFrame(schema=SCHEMAS[table])
    return pl.scan_parquet(files, hive_partitioning=False)


def read_table(lake_dir: Path, table: str, **kwargs) -> pl.DataFrame:
    return scan_table(lake_dir, table, **kwargs).collect()


def lake_summary(lake_dir: Path) -> dict[str, dict]:
    """Rows, units and time span of each canonical table (what an operator checks first)."""
    summary: dict[str, dict] = {}
    for table, time_col in TIME_COLUMN.items():
        frame = scan_table(lake_dir, table)
        aggs = [pl.len().alias("rows"), pl.col("unit_id").n_unique().alias("units")]
        if time_col:
            aggs += [pl.col(time_col).min().alias("first"), pl.col(time_col).max().alias("last")]
        row = frame.select(aggs).collect().row(0, named=True)
        if table == "samples":
            row["metrics"] = frame.select(pl.col("metric").n_unique()).collect().item()
        row["partitions"] = len(partition_files(lake_dir, table))
        summary[table] = row
    return summary


def lake_metrics(lake_dir: Path) -> list[str]:
    """The distinct metric names stored in ``samples``, sorted."""
    frame = scan_table(lake_dir, "samples").select(pl.col("metric").unique()).collect()
    return sorted(frame.get_column("metric").drop_nulls().to_list())


def format_lake_summary(summary: dict[str, dict]) -> str:
    lines = [f"{'table':<10} {'rows':>12} {'units':>7} {'partitions':>10}  span"]
    for table, row in summary.items():
        span = ""
        if row.get("first") is not None:
            span = f"{row['first']:%Y-%m-%d %H:%M} .. {row['last']:%Y-%m-%d %H:%M} UTC"
        extra = f"  ({row['metrics']} metrics)" if row.get("metrics") else ""
        lines.append(f"{table:<10} {row['rows']:>12,} {row['units']:>7,} {row['partitions']:>10,}  {span}{extra}")
    return "\n".join(lines)
