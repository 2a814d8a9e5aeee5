"""The raw partitions a first pass reads, rolled up one date x shard at a time.

:func:`shard_rollup` gives the combined rollups of one shard over the dates a run of
snapshots depends on (the snapshots' dates plus :attr:`FeatureSpec.lookback` before them);
each date's rollup is cached under ``data/features/_rollups/`` and reused while the raw
files, the failures that split that date into lives and the bucket settings are unchanged,
so an incremental run reads raw data only for the dates that changed.  Dates no later run
reads are removed after a run (:mod:`foreshock.features.rollup_cache`).
"""

from __future__ import annotations

import ctypes
import json
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from foreshock.contract import SCHEMAS
from foreshock.features import store
from foreshock.features.rollups import (
    Rollup,
    combine_edges,
    combine_scrapes,
    inner_pieces,
    rollup_events,
    rollup_samples,
)
from foreshock.features.spec import FeatureSpec
from foreshock.lake.layout import lake_shards, partition_files, shard_of

ROLLUP_THREADS = 2
# The cached frames' layout (rollups.PIECE_SCHEMA and the others): a cache entry written
# with another layout is recomputed.  2: ids and metric names Categorical; 3: pieces' edge.
CACHE_FORMAT = 3


def days_between(first: datetime, last: datetime) -> list[date]:
    return [first.date() + timedelta(days=i) for i in range((last.date() - first.date()).days + 1)]


@dataclass(frozen=True)
class _DayFiles:
    """The raw partition files of one date x shard."""

    samples: list[Path]
    events: list[Path]

    @property
    def all(self) -> list[Path]:
        return self.samples + self.events


def _shard_files(lake_dir: Path, shard: int, days: list[date]) -> dict[date, _DayFiles]:
    """Raw partition files per date of one shard (the lake is listed once per table)."""

    def by_day(table: str) -> dict[date, list[Path]]:
        out: dict[date, list[Path]] = {}
        for path in partition_files(lake_dir, table, days[0], days[-1], [shard]):
            out.setdefault(date.fromisoformat(path.parent.parent.name.split("=", 1)[1]), []).append(path)
        return out

    samples, events = by_day("samples"), by_day("events")
    return {day: _DayFiles(samples.get(day, []), events.get(day, [])) for day in days}


# Text columns of a raw samples partition read as codes (Categorical) from the Parquet
# dictionary pages the lake writes: the rollup compares codes, never a string per row.
CODED_COLUMNS = ["unit_id", "metric"]


def read_samples_coded(paths: list[Path]) -> pl.DataFrame:
    """Raw samples partitions with ``unit_id`` and ``metric`` as Categorical, in the
    files' row order.  Parquet stores those columns as a dictionary of their few distinct
    values plus a code per row; Arrow's reader hands the codes over as they are (about the
    time Polars takes to build a string per row), and equal codes are equal values.  The
    numeric columns are read by Polars."""
    frames = []
    for path in paths:
        # ParquetFile, not read_table: no dataset to set up per file.
        with pq.ParquetFile(path, read_dictionary=CODED_COLUMNS) as parquet:
            coded = pl.from_arrow(parquet.read(columns=CODED_COLUMNS, use_threads=False))
        numbers = pl.read_parquet(path, columns=["ts", "value"])
        frames.append(pl.concat([coded, numbers], how="horizontal").select(list(SCHEMAS["samples"])))
    if not frames:
        return pl.DataFrame(schema=SCHEMAS["samples"])
    return frames[0] if len(frames) == 1 else pl.concat(frames)


def _day_rollup(files: _DayFiles, spec: FeatureSpec, failures: pl.DataFrame) -> Rollup:
    """Rollups of one date x shard of raw samples and events (whole day)."""
    samples = read_samples_coded(files.samples)
    events = pl.read_parquet(files.events) if files.events else pl.DataFrame(schema=SCHEMAS["events"])
    pieces, scrapes = rollup_samples(samples, failures, spec.catalog, spec.every, spec.longest)
    return Rollup(pieces, scrapes, rollup_events(events, failures, spec.every))


def _cache_stamp(files: _DayFiles, spec: FeatureSpec, day: date, failures: pl.DataFrame) -> str:
    """What a cached day rollup depends on: the raw files (size, mtime), the failures that
    can split that day into lives, and the settings that shape buckets."""
    stats = [[str(f), (st := f.stat()).st_size, st.st_mtime_ns] for f in files.all]
    day_end = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    lives = failures.filter(pl.col("failed_at") < day_end).sort("unit_id", "failed_at")
    return json.dumps(
        {
            "files": stats,
            "failures": [[u, t.isoformat()] for u, t in lives.select("unit_id", "failed_at").iter_rows()],
            "every": spec.every.total_seconds(),
            "max_gap": spec.longest.total_seconds(),
            "catalog": sorted((m.name, m.kind) for m in spec.catalog),
            "format": CACHE_FORMAT,
        },
        sort_keys=True,
    )


def _shard_failures(lake_dir: Path, shard: int, failures: pl.DataFrame) -> pl.DataFrame:
    shards = lake_shards(lake_dir, 1)
    mine = [u for u in failures.get_column("unit_id").unique().to_list() if shard_of(u, shards) == shard]
    return failures.filter(pl.col("unit_id").is_in(mine))


def cached_day_rollup(
    files: _DayFiles,
    cache_dir: Path | None,
    spec: FeatureSpec,
    shard: int,
    day: date,
    failures: pl.DataFrame,
    shard_failures: pl.DataFrame,
) -> Rollup:
    """:func:`_day_rollup`, kept under ``cache_dir`` and reused while its inputs are
    unchanged, so an incremental run reads raw data only for the dates that changed.
    ``shard_failures`` are the failures of the shard's units (what the stamp records)."""
    if cache_dir is None or not files.all:
        return _day_rollup(files, spec, failures)
    stamp = _cache_stamp(files, spec, day, shard_failures)
    where = Path(cache_dir) / f"date={day.isoformat()}" / f"shard={shard:02d}"
    meta = where / "rollup.json"
    if meta.exists() and meta.read_text() == stamp:
        try:
            return Rollup(*(store.read_scratch(where / f"{name}.arrow") for name in ("pieces", "scrapes", "events")))
        except (OSError, pl.exceptions.PolarsError):
            pass  # a damaged cache entry is recomputed
    rollup = _day_rollup(files, spec, failures)
    for name in ("pieces", "scrapes", "events"):
        store.write_scratch(getattr(rollup, name), where / f"{name}.arrow")
    store.write_scratch_text(meta, stamp)  # last: the stamp vouches for the files before it
    return rollup


def shard_rollup(
    lake_dir: Path,
    spec: FeatureSpec,
    shard: int,
    first: datetime,
    last: datetime,
    failures: pl.DataFrame,
    cache_dir: Path | None = None,
) -> Rollup:
    """Rollups of the raw partitions snapshots ``first..last`` of one shard depend on."""
    lo = first - spec.lookback
    days = days_between(lo, last)
    files = _shard_files(lake_dir, shard, days)
    shard_failures = _shard_failures(lake_dir, shard, failures) if cache_dir is not None else failures

    # Whole days are rolled up; buckets outside (lo, last] are data no snapshot here sees.
    def in_range(frame: pl.DataFrame) -> pl.DataFrame:
        inside = (pl.col("bucket") > lo) & (pl.col("bucket") <= last)
        return frame if frame.select(inside.all()).item() else frame.filter(inside)

    # Each date's pieces are reduced as they come (combine_pieces, date by date): only its
    # edge pieces are kept whole for the merge across dates, so the run never holds every
    # date's full rollup and a copy of it at once (over a lookback of three weeks, most of
    # a first pass's memory otherwise).
    inner, edges, scrapes, events = [], [], [], []
    for part in _in_order(
        lambda day: cached_day_rollup(files[day], cache_dir, spec, shard, day, failures, shard_failures), days
    ):
        inner.append(in_range(inner_pieces(part.pieces)))
        edges.append(part.pieces.filter(pl.col("edge")))
        scrapes.append(part.scrapes)
        events.append(part.events)
        del part
    merged = combine_edges(pl.concat(edges), spec.longest)
    rollup = Rollup(
        pl.concat(inner + [in_range(frame) for frame in merged]),
        in_range(combine_scrapes(pl.concat(scrapes))),
        in_range(pl.concat(events)),
    )
    release_freed_memory()
    return rollup


def _trim() -> Callable[[], object] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # the C library the process runs on
    except (OSError, AttributeError):  # not glibc: nothing to release this way
        return None


_MALLOC_TRIM = _trim()


def release_freed_memory() -> None:
    """Give back to the system what the rollups' numpy arrays freed (glibc only).

    numpy allocates through the C library's malloc, which keeps freed memory in one arena
    per thread for its next allocations; the windows and the peer pass that follow a
    shard's rollups allocate through Polars' own allocator and never reuse it, so without
    this the rollup threads' arenas would add their largest partitions' arrays to a run's
    peak (about 100 MB at 1,024 GPUs, four times that at 4,096)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _in_order(rollup: Callable[[date], Rollup], days: list[date]) -> Iterator[Rollup]:
    """``rollup(day)`` of each date, in date order, ``ROLLUP_THREADS`` dates at a time:
    Polars releases the GIL, and one file alone does not keep two cores busy.  At most one
    date more than that is computed ahead of the caller, who so holds a few dates' rollups
    at a time, not the whole span's."""
    with ThreadPoolExecutor(max_workers=ROLLUP_THREADS) as pool:
        pending: deque[Future[Rollup]] = deque()
        for day in days:
            pending.append(pool.submit(rollup, day))
            if len(pending) > ROLLUP_THREADS:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
