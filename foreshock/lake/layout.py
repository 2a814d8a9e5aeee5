"""Where the lake's rows live: tables, partitions by date and shard, the shard count.

Under ``<data_dir>/lake/``::

    samples/date=2026-11-01/shard=03/part.parquet
    events/date=.../shard=../part.parquet
    failures/date=.../shard=../part.parquet
    drains/date=.../shard=../part.parquet
    inventory/part.parquet
    _lake.json            # {"shards": N}: fixed for the life of the lake
    _changes.jsonl        # time span of rows stored per telemetry partition, until features read it
                          # (foreshock.lake.changes)
    _manifest.parquet     # the files ingested (foreshock.ingest.manifest)
    _catalog.yaml         # the metric catalog the lake was ingested with, merged across runs

A telemetry table (one with a time column, ``contract.TIME_COLUMN``) is partitioned by the
UTC date of that column and the unit's shard (:func:`shard_of`); the inventory is one file.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.contract import TIME_COLUMN
from foreshock.lake.atomic import atomic_write_text
from foreshock.lake.columns import long_runs

PART_NAME = "part.parquet"


def shard_of(unit_id: str, shards: int) -> int:
    """Stable shard of a unit (crc32, identical across processes and library versions)."""
    return zlib.crc32(unit_id.encode()) % shards


def shard_numbers(unit_ids: pl.Series, shards: int, distinct: pl.Series | None = None) -> pl.Series:
    """Each row's shard (Int32, null without a unit): crc32 once per distinct unit, then
    looked up by the unit's position among them (an enum cast).  Rows that come in long
    runs of one unit (a unit's readings one after another, as files list them) are looked
    up once per run and repeated along it, without the per-row cast.  ``distinct``: the
    distinct units when the caller knows them (every unit of ``unit_ids`` among them, no
    null), so they are not searched for again."""
    unit_ids = unit_ids.cast(pl.String)
    runs = long_runs(unit_ids)
    if runs is not None:
        values, lengths = runs
        per_run = _shard_numbers(values, shards)
        return per_run.gather(pl.Series(np.repeat(np.arange(len(lengths)), lengths))).alias("shard")
    return _shard_numbers(unit_ids, shards, distinct)


def _shard_numbers(unit_ids: pl.Series, shards: int, distinct: pl.Series | None = None) -> pl.Series:
    units = unit_ids.unique().drop_nulls() if distinct is None else distinct.unique(maintain_order=True)
    numbers = pl.Series([shard_of(u, shards) for u in units.to_list()], dtype=pl.Int32)
    return numbers.gather(unit_ids.cast(pl.Enum(units)).to_physical()).alias("shard")


def with_shard(df: pl.DataFrame, shards: int) -> pl.DataFrame:
    """``df`` with each row's ``shard`` (:func:`shard_numbers`)."""
    return df.with_columns(shard_numbers(df.get_column("unit_id"), shards))


def lake_shards(lake_dir: Path, default: int) -> int:
    """The lake's shard count: recorded on first write, never changed afterwards."""
    meta = Path(lake_dir) / "_lake.json"
    if meta.exists():
        return int(json.loads(meta.read_text())["shards"])
    return default


def record_shards(lake_dir: Path, shards: int) -> None:
    """Record the lake's shard count at its first write (:func:`lake_shards` reads it)."""
    meta = Path(lake_dir) / "_lake.json"
    if not meta.exists():
        atomic_write_text(meta, json.dumps({"shards": shards}) + "\n")


def partition_path(lake_dir: Path, table: str, day: date | None = None, shard: int | None = None) -> Path:
    if TIME_COLUMN[table] is None:
        return Path(lake_dir) / table / PART_NAME
    return Path(lake_dir) / table / f"date={day.isoformat()}" / f"shard={shard:02d}" / PART_NAME


def partition_files(
    lake_dir: Path,
    table: str,
    start: date | datetime | None = None,
    end: date | datetime | None = None,
    shards: Iterable[int] | None = None,
) -> list[Path]:
    """Partition files of ``table`` with start <= date <= end (inclusive), sorted."""
    root = Path(lake_dir) / table
    if TIME_COLUMN[table] is None:
        path = root / PART_NAME
        return [path] if path.exists() else []
    start_d = start.date() if isinstance(start, datetime) else start
    end_d = end.date() if isinstance(end, datetime) else end
    wanted = None if shards is None else {int(s) for s in shards}
    files = []
    for day_dir in sorted(root.glob("date=*")):
        day = date.fromisoformat(day_dir.name.split("=", 1)[1])
        if (start_d and day < start_d) or (end_d and day > end_d):
            continue
        for shard_dir in sorted(day_dir.glob("shard=*")):
            if wanted is not None and int(shard_dir.name.split("=", 1)[1]) not in wanted:
                continue
            path = shard_dir / PART_NAME
            if path.exists():
                files.append(path)
    return files


def partition_dates(lake_dir: Path, table: str) -> list[date]:
    root = Path(lake_dir) / table
    return sorted(date.fromisoformat(p.name.split("=", 1)[1]) for p in root.glob("date=*"))
