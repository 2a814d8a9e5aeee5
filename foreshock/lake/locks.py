"""Writer locks, named for what they lock: :func:`directory_lock` serialises the writers of
one directory (the outbox's), :func:`lake_lock` those of the lake.

A lock is an ``flock`` on ``<directory>/.lock``, so a killed holder never leaves it stale
(two ingests at once are safe).  It is re-entrant within a thread, and a holder can hand
its hold to its own worker threads (:func:`lock_held_by_caller`) or, by a token, to worker
processes it waits for (:func:`lock_token`, :func:`lock_held_by_token`).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from foreshock.errors import UserError
from foreshock.lake.atomic import remove_temp_files

_held = threading.local()  # directories whose lock this thread holds, with the nesting depth
# What a holder leaves in ``.lock`` when it lets go normally.  A holder writes "held by <pid>
# <token>" first, so a killed holder leaves that: only then can its temp files be lying in the
# directory, and only then does the next holder search the whole directory for them (in the
# lake, a walk of every partition directory, which costs more than a small merge on a lake of
# some months).
LOCK_RELEASED = "released\n"


def lake_lock(lake_dir: Path) -> AbstractContextManager[None]:
    """The lake's writer lock (:func:`directory_lock` over ``lake_dir``): every lake write
    holds it, so it can be held over a read-check-merge sequence that calls
    :func:`~foreshock.lake.merge.merge_into_lake`, and a killed holder's temp files are
    removed by the next holder."""
    return directory_lock(lake_dir)


class LockBusy(UserError):
    """A :func:`directory_lock` taken with ``wait=False`` is held by another process,
    ``holder`` (its process id, None when it cannot be read)."""

    def __init__(self, directory: Path, holder: int | None):
        super().__init__(f"{directory} is locked by {'process ' + str(holder) if holder else 'another process'}")
        self.directory = Path(directory)
        self.holder = holder


def _holder(marker: str) -> int | None:
    # "held by <pid> <token>" (LOCK_RELEASED or empty: the holder has not marked it yet)
    words = marker.split()
    return int(words[2]) if marker.startswith("held by ") and len(words) > 2 and words[2].isdigit() else None


@contextmanager
def directory_lock(directory: Path, wait: bool = True) -> Iterator[None]:
    """Exclusive lock over the writers of ``directory`` (released even if the holder
    crashes), waited for unless ``wait`` is False: then :class:`LockBusy` names the holder.

    Re-entrant within a thread.  Taking it (outermost) after a holder was killed removes
    the temp files that holder may have left under ``directory``: its writers write only
    under this lock, so none is live (see ``LOCK_RELEASED``).
    """
    directory = Path(directory)
    key = str(directory.resolve())
    depth = getattr(_held, "depth", None)
    if depth is None:
        depth = _held.depth = {}
    if depth.get(key):
        depth[key] += 1
        try:
            yield
        finally:
            depth[key] -= 1
        return
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise LockBusy(directory, _holder(handle.read())) from None
        depth[key] = 1
        try:
            handle.seek(0)
            if handle.read() != LOCK_RELEASED:  # the last holder was killed (or an older version)
                remove_temp_files(directory)
            token = secrets.token_hex(16)
            _tokens()[key] = token
            _mark_lock(handle, f"held by {os.getpid()} {token}\n")
            yield
        finally:
            depth[key] = 0
            _tokens().pop(key, None)
            try:
                _mark_lock(handle, LOCK_RELEASED)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _mark_lock(handle, text: str) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(text)
    handle.flush()


@contextmanager
def lock_held_by_caller(lake_dir: Path) -> Iterator[None]:
    """In a worker thread of a thread that holds :func:`lake_lock` on ``lake_dir`` and waits
    for the worker: lets the worker call functions that take the lock (``merge_into_lake``)
    without taking it again (a second ``flock`` from the same process would wait forever)."""
    key = str(Path(lake_dir).resolve())
    depth = getattr(_held, "depth", None)
    if depth is None:
        depth = _held.depth = {}
    depth[key] = depth.get(key, 0) + 1
    try:
        yield
    finally:
        depth[key] -= 1


def _tokens() -> dict[str, str]:
    tokens = getattr(_held, "tokens", None)
    if tokens is None:
        tokens = _held.tokens = {}
    return tokens


def lock_token(lake_dir: Path) -> str:
    """The token of this thread's (outermost) hold of :func:`lake_lock` on ``lake_dir``: a
    random value, new for every hold, that the holder also writes in ``.lock``.  A holder
    hands it to work it runs in other processes and waits for (see
    :func:`lock_held_by_token`).  RuntimeError when this thread does not hold the lock."""
    token = _tokens().get(str(Path(lake_dir).resolve()))
    if token is None:
        raise RuntimeError(f"the lake lock of {lake_dir} is not held by this thread")
    return token


@contextmanager
def lock_held_by_token(lake_dir: Path, token: str) -> Iterator[None]:
    """:func:`lock_held_by_caller` for another process (a Dask worker) doing work for a
    holder of :func:`lake_lock` that passed it :func:`lock_token` and waits for it: the
    work may call functions that take the lock (``merge_into_lake``).  Refused (RuntimeError)
    unless ``.lock`` shows that very hold still current: a token of a hold that has ended
    (its holder let go, or was killed and another writer took the lock) never lets anyone
    in, so other writers stay excluded as before."""
    try:
        marker = (Path(lake_dir) / ".lock").read_text()
    except FileNotFoundError:
        marker = ""
    if not token or not marker.startswith("held by ") or marker.split()[-1:] != [token]:
        raise RuntimeError(f"the lake lock of {lake_dir} is not held under this token (the holder let go)")
    with lock_held_by_caller(lake_dir):
        yield
