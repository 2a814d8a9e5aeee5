"""Files written whole or not at all: temp file, fsync, rename, fsync of the directory.

A file is written under a temporary name (``.<name>.tmp-<pid>-<thread>``), fsynced,
renamed into place and its directory fsynced, so a crash never leaves a partial file
visible and a power loss never loses a rename that was reported done.  A temp file left by
a killed writer is removed by :func:`remove_temp_files`: in the lake, the next time its lock
is taken (:mod:`foreshock.lake.locks`); elsewhere by the next CLI run, once its writer is gone.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import polars as pl

TEMP_NAME = re.compile(r"^\..+\.tmp-(\d+)(?:-\d+)?$")


def remove_temp_files(root: Path, *, only_dead_writers: bool = False) -> list[Path]:
    """Remove temp files (``.<name>.tmp-<pid>[-<thread>]``) under ``root``; returns them.

    With ``only_dead_writers``, a file is removed only when the process that wrote it is
    gone (for directories written without a lock: a live writer's file is left alone).
    """
    removed = []
    root = Path(root)
    if not root.is_dir():
        return removed
    for directory, _, files in os.walk(root):
        for name in files:
            match = TEMP_NAME.match(name)
            if not match or (only_dead_writers and process_alive(int(match.group(1)))):
                continue
            path = Path(directory) / name
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append(path)
    return removed


def process_alive(pid: int) -> bool:
    """Whether the process ``pid`` (a writer named in a temp file's name) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_durably(tmp: Path, path: Path) -> None:
    try:
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def parquet_options(compression_level: int | None = None) -> dict:
    """The Parquet write options of every file written here: zstd with statistics.

    ``compression_level``: the zstd level (``[lake] compression_level`` for the lake's
    writes); None is Polars' own zstd level (files outside the lake: features, scores).
    """
    return {"compression": "zstd", "compression_level": compression_level, "statistics": True}


def atomic_write_parquet(df: pl.DataFrame | pl.LazyFrame, path: Path, *, compression_level: int | None = None) -> None:
    """Write ``df`` to ``path`` atomically and durably (temp file, fsync, rename, fsync dir);
    a lazy frame is streamed to the file (never held whole in memory).
    ``compression_level``: see :func:`parquet_options`."""
    options = parquet_options(compression_level)
    if isinstance(df, pl.LazyFrame):
        atomic_write_with(path, lambda tmp: df.sink_parquet(tmp, **options))
    else:
        atomic_write_with(path, lambda tmp: df.write_parquet(tmp, **options))


def atomic_write_with(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` writes the file at a temporary name; it is then put in place at
    ``path`` atomically and durably, as :func:`atomic_write_parquet` does (which uses it);
    inside :func:`written_together` on this thread, when that block ends."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pending = getattr(_together, "files", None)
    if pending is not None and path in {target for _, target in pending}:
        _put_in_place(pending)  # written twice in one block: the first one goes in place now
        pending.clear()
    tmp = _temp_path(path)
    try:
        write(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if pending is not None:
        pending.append((tmp, path))
    else:
        _replace_durably(tmp, path)


# The files written inside a ``written_together`` block on this thread, not in place yet.
_together = threading.local()
# Threads that fsync the files of a ``written_together`` block (they wait on the disk).
FSYNC_THREADS = 8


@contextmanager
def written_together():
    """Within this block (on this thread), :func:`atomic_write_with` (and so
    :func:`atomic_write_parquet`) leaves each file at its temporary name; when the block
    ends, the files are fsynced side by side, renamed into place and their directories
    fsynced side by side, so each is in place and durable when the block returns, as
    after a write outside it.  Concurrent fsyncs share the file system's journal commits:
    one after the other a file took 5-6 ms on the 2-core VM of docs/scale.md, eight at a
    time 0.2 ms.  If the block raises, its files are removed (none is put in place).
    A block inside another is part of the outer one."""
    if getattr(_together, "files", None) is not None:
        yield
        return
    _together.files = []
    try:
        yield
        _put_in_place(_together.files)
    except BaseException:
        for tmp, _ in _together.files:
            tmp.unlink(missing_ok=True)
        raise
    finally:
        _together.files = None


def written_file(path: Path) -> Path:
    """Where the file last written at ``path`` is now: its temporary name while a
    :func:`written_together` block on this thread holds it, else ``path``.  (The rename
    keeps its device, inode, size and modification time.)"""
    for tmp, target in reversed(getattr(_together, "files", None) or []):
        if target == Path(path):
            return tmp
    return Path(path)


def _put_in_place(files: list[tuple[Path, Path]]) -> None:
    """Fsync each temp file, rename it to its target, fsync the targets' directories
    (:func:`_replace_durably` for many files, the fsyncs side by side)."""
    if not files:
        return
    with ThreadPoolExecutor(max_workers=min(FSYNC_THREADS, len(files))) as pool:
        list(pool.map(_fsync_file, [tmp for tmp, _ in files]))
        for tmp, path in files:
            os.replace(tmp, path)
        list(pool.map(fsync_directory, list(dict.fromkeys(path.parent for _, path in files))))


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically and durably (temp file, fsync, rename, fsync dir)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path(path)
    try:
        tmp.write_text(text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _replace_durably(tmp, path)
