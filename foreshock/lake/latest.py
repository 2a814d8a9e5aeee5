"""The latest stored reading of each series (unit, metric) of a samples partition file,
remembered by the process that wrote the file.

Ingest's counter-step check compares a batch's first reading of each counter with the
series' last stored one: without this, every batch reads the partitions of its days and
the day before in full, to keep one row per series (and the look for stored keys reads
the partitions of its days).  When this process wrote a partition file, it knows each
series' latest row from the sorted rows it wrote (``split._split_sorted`` finds them from
its packed keys, without a pass over the names) and keeps them here, keyed by the file's
identity: device, inode, size and modification time.  A batch of a day this process
ingested before (the next day's, or the next scrape's) then reads none of those files for
its checks; the merge still reads and rewrites the partitions it appends to.  Any other
write of the file (another process, a rewrite, a restore) gives it a new identity (files
are replaced by rename, so a new inode), and the reader then reads the file as before: a
stale entry is never used, only ignored.

Kept for the most recently written ``MAX_FILES`` files (a day of partitions and the day
before, for the lake's shard counts); a few thousand rows each at most.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import polars as pl

from foreshock.lake.atomic import written_file

MAX_FILES = 256


@dataclass(frozen=True)
class Latest:
    """A partition file's latest reading of each of its series (``rows``: ``unit_id``,
    ``ts``, ``metric``, ``value``, one row per series) and its newest time (``newest``)."""

    rows: pl.DataFrame
    newest: datetime


_files: OrderedDict[Path, tuple[tuple[int, int, int, int], Latest]] = OrderedDict()
_lock = threading.Lock()


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def remember(path: Path, latest: Latest) -> None:
    """Keep ``latest`` for the file just written at ``path`` (as it is now; perhaps still
    at its temporary name, :func:`~foreshock.lake.atomic.written_together`)."""
    identity = _identity(written_file(path))
    with _lock:
        _files.pop(Path(path), None)
        if identity is not None:
            _files[Path(path)] = (identity, latest)
            while len(_files) > MAX_FILES:
                _files.popitem(last=False)


def forget(path: Path) -> None:
    """Drop what is kept for ``path`` (its writer does not know its latest rows)."""
    with _lock:
        _files.pop(Path(path), None)


def forget_all() -> None:
    """Drop everything kept."""
    with _lock:
        _files.clear()


def known_before(path: Path, time: datetime) -> Latest | None:
    """What is kept for the file at ``path`` (:func:`known`) when every row of it is older
    than ``time``: then it is all the file holds for a reading from ``time`` on."""
    latest = known(path)
    return latest if latest is not None and latest.newest < time else None


def known(path: Path) -> Latest | None:
    """What is kept for the file at ``path``, if it is still the file that was written."""
    with _lock:
        entry = _files.get(Path(path))
    if entry is None:
        return None
    identity, latest = entry
    return latest if _identity(path) == identity else None


def appended(before: Latest, new: Latest) -> Latest:
    """The latest rows of a file after ``new``'s rows, all later than its own, were
    appended: each series' row in ``new``, else the one it had."""
    kept = before.rows.join(new.rows.select("unit_id", "metric"), on=["unit_id", "metric"], how="anti")
    return Latest(pl.concat([kept, new.rows], how="vertical_relaxed"), max(before.newest, new.newest))
