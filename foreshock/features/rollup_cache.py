"""The bound of the rollup cache ``data/features/_rollups/date=YYYY-MM-DD/shard=NN/``.

The cache exists so that a run reads each raw partition once: consecutive chunks of one
run overlap by the lookback, and an incremental run needs the lookback before its first new
snapshot, plus, for rows that arrive late, the lookback before the oldest snapshot they
reach.  A date older than ``lookback + [features] rollup_cache_late`` before the newest
stored snapshot is needed by no later run unless rows older than that allowance arrive;
such a date is removed after a run, and recomputed from the lake if it is ever read again.
Without the bound the cache grows with every day kept (21 GB, ten times the feature store,
on a 39,851-disk fleet over 1,000 days).

A first pass holds a shared lock on ``_rollups/.in-use`` while it reads and writes the cache
(:func:`cache_in_use`); a prune takes it exclusively without waiting and skips when any run
holds it (the next run prunes).  A date is removed by renaming it out of the way first, so a
prune killed midway leaves every date whole or gone (its leftovers go at the next prune).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path

from foreshock.config import Config
from foreshock.durations import parse_duration
from foreshock.features import store
from foreshock.features.spec import FeatureSpec

IN_USE = ".in-use"
PRUNED = ".pruned-"  # a date being removed (renamed first: whole or gone)


@contextmanager
def cache_in_use(cache_dir: Path) -> Iterator[None]:
    """Shared hold of the cache while a first pass reads and writes it: no prune removes a
    date under it (any number of passes, threads or processes, hold it at once)."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / IN_USE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prune_cache(cache_dir: Path, keep_from: date) -> int | None:
    """Remove the cached dates before ``keep_from``.

    Returns
    -------
    int or None
        Dates removed; None when a run holds :func:`cache_in_use` (nothing is removed).
    """
    cache_dir = Path(cache_dir)
    if not cache_dir.is_dir():
        return 0
    with open(cache_dir / IN_USE, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        try:
            return _remove_before(cache_dir, keep_from)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_before(cache_dir: Path, keep_from: date) -> int:
    removed = 0
    for path in sorted(cache_dir.iterdir()):
        if path.name.startswith(PRUNED):  # left by a prune that was killed midway
            shutil.rmtree(path, ignore_errors=True)
            continue
        try:
            day = date.fromisoformat(path.name.removeprefix("date="))
        except ValueError:
            continue
        if path.name.startswith("date=") and day < keep_from:
            trash = path.with_name(f"{PRUNED}{path.name}-{os.getpid()}")
            os.rename(path, trash)
            shutil.rmtree(trash, ignore_errors=True)
            removed += 1
    return removed


def retained_from(config: Config, spec: FeatureSpec, newest: datetime) -> date:
    """Oldest cached date a later run can read, with snapshots stored up to ``newest`` and
    late rows no older than ``[features] rollup_cache_late`` before it: a snapshot reads the
    ``lookback`` before it."""
    late = parse_duration(config.section("features")["rollup_cache_late"])
    return (newest - spec.lookback - late).date()


def prune_rollups(
    config: Config, spec: FeatureSpec, newest: datetime, next_first: datetime | None = None
) -> int | None:
    """Remove the cached rollups no later run can read (:func:`retained_from` ``newest``)
    and, within a run, that its chunks from ``next_first`` on do not read either.  Returns
    the dates removed (None: another run is using the cache)."""
    keep_from = retained_from(config, spec, newest)
    if next_first is not None:
        keep_from = min(keep_from, (next_first - spec.lookback).date())
    return prune_cache(store.rollup_cache_dir(config.features_dir), keep_from)


def remove_empty_staging(features_dir: Path) -> None:
    """Remove ``_staging/`` when a run leaves it empty (each date's folder is removed once
    written; a concurrent run's files keep it)."""
    try:
        os.rmdir(Path(features_dir) / store.STAGING)
    except OSError:
        pass  # absent, or not empty
