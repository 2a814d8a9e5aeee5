"""The lake's change log (``_changes.jsonl``): which telemetry partitions received rows, and
the time span of those rows, so the features stage recomputes exactly the snapshots late
rows affect.  Appended under the lake lock by every merge (or by ingest before it writes),
consumed by a features run.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path

import polars as pl

from foreshock.contract import TIME_COLUMN
from foreshock.lake.atomic import atomic_write_text
from foreshock.lake.layout import lake_shards, with_shard
from foreshock.lake.locks import lake_lock
from foreshock.lake.split import SplitRows

CHANGES_NAME = "_changes.jsonl"


def record_split(lake_dir: Path, splits: list[SplitRows]) -> None:
    """:func:`record_stored_rows` of the rows of ``splits`` (one table's), read off their
    partitions: the same lines, without a pass over the rows by date and unit."""
    spans: dict[tuple[date, int], tuple[datetime, datetime]] = {}
    table = None
    for split in splits:
        table = split.table
        time_col = TIME_COLUMN[split.table]
        for day, shard, part in split.pieces:
            if part.height == 0:
                continue
            times = part.get_column(time_col)
            first, last = times.min(), times.max()
            if (day, shard) in spans:
                first, last = min(first, spans[day, shard][0]), max(last, spans[day, shard][1])
            spans[day, shard] = (first, last)
    if spans:
        _append_changes(lake_dir, table, [(*key, *span) for key, span in sorted(spans.items())])


def record_change(lake_dir: Path, table: str, day: date, shard: int, times: pl.Series) -> None:
    """Append which partition received rows and their time span (under the lake lock), so
    the features stage can recompute exactly the snapshots late rows affect."""
    _append_changes(lake_dir, table, [(day, shard, times.min(), times.max())])


def _append_changes(lake_dir: Path, table: str, spans: list[tuple[date, int, datetime, datetime]]) -> None:
    """Append one change-log line per ``(date, shard, first, last)`` of ``table``."""
    lines = [
        json.dumps(
            {
                "table": table,
                "date": day.isoformat(),
                "shard": int(shard),
                "first": first.isoformat(),
                "last": last.isoformat(),
            }
        )
        + "\n"
        for day, shard, first, last in spans
    ]
    with open(Path(lake_dir) / CHANGES_NAME, "a") as handle:
        handle.write("".join(lines))


def record_stored_rows(lake_dir: Path, table: str, frames: list[pl.DataFrame], shards: int) -> None:
    """Log the partitions the rows of ``frames`` (a telemetry table's) go to, with their time
    spans: one line per partition, in date and shard order, as :func:`merge_into_lake`
    writes them.  For a caller that stores exactly these rows next, under the lake lock:
    logged first, a partition never changes without the features stage hearing of it (a
    crash in between only makes it recompute a little more)."""
    time_col = TIME_COLUMN[table]
    frames = [f for f in frames if f.height]
    if not frames or time_col is None:
        return
    shards = lake_shards(lake_dir, shards)
    # Spans per date and unit first (a few thousand rows), then per partition.
    by_unit = (
        pl.concat([f.lazy().select("unit_id", time_col) for f in frames])
        .group_by(pl.col(time_col).dt.date().alias("_date"), "unit_id")
        .agg(first=pl.col(time_col).min(), last=pl.col(time_col).max())
        .collect()
    )
    spans = (
        with_shard(by_unit, shards)
        .group_by("_date", "shard")
        .agg(pl.col("first").min(), pl.col("last").max())
        .sort("_date", "shard")
        .select("_date", "shard", "first", "last")
    )
    _append_changes(lake_dir, table, list(spans.iter_rows()))


def read_changes(lake_dir: Path) -> list[dict]:
    """Partitions changed since the features stage last consumed the change log (one dict per
    merge: ``table, date, shard, first, last``)."""
    path = Path(lake_dir) / CHANGES_NAME
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def consume_changes(lake_dir: Path, count: int) -> None:
    """Drop the first ``count`` entries of the change log (those a features run handled);
    entries appended since stay."""
    path = Path(lake_dir) / CHANGES_NAME
    if count <= 0 or not path.exists():
        return
    with lake_lock(lake_dir):
        rest = path.read_text().splitlines(keepends=True)[count:]
        atomic_write_text(path, "".join(rest))
