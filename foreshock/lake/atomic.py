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
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
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
    ``path`` atomically and durably, as :func:`atomic_write_parquet` does (which uses it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path(path)
    try:
        write(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _replace_durably(tmp, path)


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
