"""The feature store: ``data/features/date=YYYY-MM-DD/shard=NN/part.parquet``.

One row per unit and snapshot, keyed ``unit_id, ts``; the date is the snapshot's UTC
date and the shard the unit's lake shard.  Files are written atomically
(:func:`write_partition`); rewriting a snapshot replaces its rows, so a
rerun is idempotent.  ``_staging/`` holds first-pass results between the per-shard and the
per-date passes of a run (removed when a run ends); ``_rollups/`` caches raw partitions'
rollups, bounded by :mod:`foreshock.features.rollup_cache`; ``_progress.json`` is what an
interrupted run left (:mod:`foreshock.features.resume`); ``.lock`` lets one run write at a
time (:func:`writer_lock`).
"""

from __future__ import annotations

import difflib
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import date, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from foreshock.config import Config
from foreshock.contract import SNAPSHOT_KEY
from foreshock.errors import UserError
from foreshock.lake.atomic import atomic_write_with
from foreshock.lake.layout import PART_NAME, shard_numbers
from foreshock.lake.locks import LockBusy, directory_lock

STAGING = "_staging"
ROLLUPS = "_rollups"
# Intermediate files are Arrow IPC: written and read at memory speed, never kept.
SCRATCH_NAME = "part.arrow"
KEY = list(SNAPSHOT_KEY)


def partition_path(features_dir: Path, day: date, shard: int) -> Path:
    return Path(features_dir) / f"date={day.isoformat()}" / f"shard={shard:02d}" / PART_NAME


def rollup_cache_dir(features_dir: Path) -> Path:
    """Per date x shard rollups of raw data, reused by incremental runs."""
    return Path(features_dir) / ROLLUPS


def staging_day_dir(features_dir: Path, day: date) -> Path:
    return Path(features_dir) / STAGING / f"date={day.isoformat()}"


def staging_path(features_dir: Path, day: date, shard: int) -> Path:
    return staging_day_dir(features_dir, day) / f"shard={shard:02d}" / SCRATCH_NAME


def write_scratch(frame: pl.DataFrame, path: Path) -> None:
    """Write an intermediate file (staging, rollup cache): renamed into place like the
    store's files, but uncompressed Arrow IPC and no fsync (a lost one is recomputed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    frame.write_ipc(tmp, compression="uncompressed")
    os.replace(tmp, path)


def write_scratch_text(path: Path, text: str) -> None:
    """A small intermediate text file (a cache stamp), written like :func:`write_scratch`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_scratch(path: Path) -> pl.DataFrame:
    """Read a file written by :func:`write_scratch`."""
    return pl.read_ipc(path)


def write_staged(frame: pl.DataFrame, path: Path) -> None:
    write_scratch(frame, path)


def staged_files(features_dir: Path, day: date | None) -> list[Path]:
    root = Path(features_dir) / STAGING
    pattern = f"date={day.isoformat()}/shard=*/{SCRATCH_NAME}" if day else f"date=*/shard=*/{SCRATCH_NAME}"
    return sorted(root.glob(pattern))


def feature_files(features_dir: Path) -> list[Path]:
    """Every stored feature partition, in date then shard order."""
    return sorted(Path(features_dir).glob(f"date=*/shard=*/{PART_NAME}"))


def write_features(
    frame: pl.DataFrame,
    features_dir: Path,
    shards: int,
    replace: tuple[datetime, datetime] | None = None,
) -> int:
    """Merge feature rows into their partitions; rows already stored for the same
    ``unit_id, ts`` are replaced (a recomputation is authoritative).

    Parameters
    ----------
    frame : pl.DataFrame
        Feature rows (any dates and shards).
    features_dir : Path
        The feature store.
    shards : int
        The lake's shard count.
    replace : (datetime, datetime), optional
        Snapshots ``lo..hi`` (inclusive) that ``frame`` recomputed for every unit: stored
        rows in that span that ``frame`` does not hold are removed too (a unit that late
        data put out of service, or into a new life, must not keep its old row).

    Returns
    -------
    int
        Rows written (new or replaced).
    """
    # One order for every partition: date, shard, then the key.  The wide frame is gathered
    # once (not at all when it is already in that order) and each partition is a slice.
    keys = frame.select(
        pl.col("ts").dt.date().alias("_day"), shard_numbers(frame.get_column("unit_id"), shards).alias("_shard"), *KEY
    ).with_row_index("_row")
    ordered = keys.sort("_day", "_shard", *KEY, maintain_order=True)
    if not ordered.get_column("_row").equals(keys.get_column("_row")):
        frame = frame.select(pl.all().gather(ordered.get_column("_row")))
    runs = (
        ordered.with_row_index("_at")
        .group_by("_day", "_shard", maintain_order=True)
        .agg(pl.col("_at").first(), pl.len())
    )
    parts = {(day, shard): frame.slice(at, n) for day, shard, at, n in runs.iter_rows()}
    if replace is not None:
        lo, hi = replace
        # Only the replaced dates' folders are listed (not the whole store at every date).
        for offset in range((hi.date() - lo.date()).days + 1):
            day = lo.date() + timedelta(days=offset)
            for path in sorted(Path(features_dir).glob(f"date={day.isoformat()}/shard=*/{PART_NAME}")):
                parts.setdefault((day, int(path.parent.name.split("=", 1)[1])), frame.head(0))
    for (day, shard), part in parts.items():
        path = partition_path(features_dir, day, shard)
        if path.exists():
            stored = pl.read_parquet(path)
            kept = stored.join(part.select(KEY), on=KEY, how="anti")
            if replace is not None:
                kept = kept.filter(~pl.col("ts").is_between(replace[0], replace[1]))
            if part.height == 0 and kept.height == stored.height:
                continue
            part = pl.concat([kept, part], how="diagonal_relaxed").select(part.columns or kept.columns).sort(KEY)
        if part.height:
            write_partition(part, path)
        elif path.exists():
            path.unlink()
    return frame.height


def write_partition(frame: pl.DataFrame, path: Path) -> None:
    """Write one feature partition atomically and durably
    (:func:`foreshock.lake.atomic.atomic_write_with`): zstd Parquet with statistics, as
    every Parquet file of the project, written by pyarrow with dictionary pages for the text
    columns only.  The frame reads back the same as from Polars' writer, which spends a
    third more CPU on a partition's few hundred float columns (docs/scale.md)."""
    text = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    table = frame.to_arrow()
    atomic_write_with(
        path, lambda tmp: pq.write_table(table, tmp, compression="zstd", use_dictionary=text, write_statistics=True)
    )


@contextmanager
def writer_lock(features_dir: Path) -> Iterator[None]:
    """One features run at a time on a store: an exclusive ``flock`` on
    ``<features_dir>/.lock`` (:func:`foreshock.lake.locks.directory_lock`), not waited for.
    A second run refuses at once, naming the holder (UserError, one line); a holder killed
    with SIGKILL holds nothing (the kernel drops its ``flock``), and the next holder removes
    the temp files it left."""
    with ExitStack() as held:
        try:
            held.enter_context(directory_lock(features_dir, wait=False))
        except LockBusy as busy:
            raise UserError(
                f"another features run, {_process(busy.holder)}, is writing {features_dir}: "
                "this one did not start (rerun it when that one ends)"
            ) from None
        yield


def _process(pid: int | None) -> str:
    """``process 1234 (foreshock features --full)``: the command line when it can be read."""
    if pid is None:
        return "in another process"
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return f"process {pid}"
    command = " ".join(" ".join(words).split())  # one line, whatever the arguments hold
    return f"process {pid} ({command[:120]})" if command else f"process {pid}"


def _shard_ends(features_dir: Path) -> list[datetime]:
    """Each shard's newest stored snapshot, read from its newest date's file only."""
    newest: dict[str, Path] = {}
    for path in feature_files(features_dir):
        newest[path.parent.name] = path  # sorted by date: the last one wins
    ends = [pl.scan_parquet(p).select(pl.col("ts").max()).collect().item() for p in newest.values()]
    return [e for e in ends if e is not None]


def last_snapshot(features_dir: Path) -> datetime | None:
    """The last snapshot every shard has stored (the minimum over shards of each shard's
    newest snapshot), or None when the store is empty.  Taking the minimum means a run that
    died after writing some shards of a date recomputes that date for all of them."""
    ends = _shard_ends(features_dir)
    return min(ends) if ends else None


def newest_snapshot(features_dir: Path) -> datetime | None:
    """The newest snapshot any shard has stored, or None when the store is empty (the
    maximum where :func:`last_snapshot` takes the minimum; no scan of older dates)."""
    ends = _shard_ends(features_dir)
    return max(ends) if ends else None


def _union_schema(files: list[Path]) -> dict[str, pl.DataType]:
    schema: dict[str, pl.DataType] = {}
    for path in files:
        for name, dtype in pl.read_parquet_schema(path).items():
            schema.setdefault(name, dtype)
    return schema


def scan_features(config: Config | Path, columns: Sequence[str] | None = None) -> pl.LazyFrame:
    """Lazy scan of every stored feature partition, columns aligned across partitions.

    Parameters
    ----------
    config : Config or Path
        A configuration (its ``features_dir`` is scanned) or the features directory.
    columns : sequence of str, optional
        Only these columns, after the key ``unit_id, ts``.  A name the store does not hold
        is an error, never a silent drop: a notebook asking for a feature that does not
        exist must not plot the ones that do and look complete.

    Returns
    -------
    pl.LazyFrame
        Union of all partitions; a column missing from older partitions (e.g. after a
        catalog gained a metric) reads as null.  Empty frame when nothing is stored.

    Raises
    ------
    ValueError
        When ``columns`` names a column no stored partition has; the message names it and
        the closest stored names.
    """
    features_dir = config.features_dir if isinstance(config, Config) else Path(config)
    files = feature_files(features_dir)
    if not files:
        frame = pl.LazyFrame(schema={"unit_id": pl.String, "ts": pl.Datetime("us", "UTC")})
    else:
        schema = _union_schema(files)
        frame = pl.scan_parquet(files, schema=schema, missing_columns="insert", hive_partitioning=False)
    if columns is None:
        return frame
    stored = frame.collect_schema().names()
    unknown = [c for c in columns if c not in stored]
    if unknown:
        raise ValueError(_unknown_features(unknown, stored, features_dir))
    return frame.select(list(dict.fromkeys([*KEY, *columns])))


def _unknown_features(unknown: list[str], stored: list[str], features_dir: Path) -> str:
    if len(stored) <= len(KEY):
        return (
            f"no feature column {', '.join(unknown)}: no features stored under {features_dir} (run foreshock features)"
        )
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, stored, n=3, cutoff=0.6)
        hints.append(f"{name!r}" + (f" (closest: {', '.join(close)})" if close else ""))
    return (
        f"no feature column {'; '.join(hints)} in {features_dir}; every column is listed by "
        "`foreshock dictionary` (features/dictionary.md for the built-in configuration)"
    )
