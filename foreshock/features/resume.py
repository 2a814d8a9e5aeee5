"""What an interrupted features run left to do: ``data/features/_progress.json``.

A run over every snapshot handles the lake's whole change log (rows merged since the last
run), but it drops those entries only when it ends.  Without a record of its progress, a
run killed halfway leaves every entry in the log, and the next run recomputes every stored
snapshot they reach (on a first run, the whole history) although most are already done.

So after each chunk is stored, the run records how many leading entries of the change log
it handles, a digest of them, and the snapshots it still has to compute.  The next run
takes those spans in place of the entries (:meth:`Pending.covered`), plus whatever the log
gained since; a record whose entries are no longer the log's first ones (a lake rebuilt
since) covers nothing, and its spans are only recomputed.  A run that ends removes the
record before it drops the entries: a kill in between leaves the entries, which recompute
more but never less.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from foreshock.lake.atomic import atomic_write_text

PROGRESS_NAME = "_progress.json"


def changes_digest(changes: list[dict]) -> str:
    """A digest of change-log entries (as :func:`foreshock.lake.changes.read_changes` parses
    them): the same entries, in the same order, give the same digest."""
    text = "\n".join(json.dumps(change, sort_keys=True) for change in changes)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Pending:
    """An interrupted run's record: it handled the first ``changes`` entries of the change
    log (their :func:`changes_digest` is ``digest``) and still had ``spans`` of snapshots
    ``(first, last)`` to compute."""

    changes: int
    digest: str
    spans: tuple[tuple[datetime, datetime], ...]

    def covered(self, log: list[dict]) -> int:
        """How many leading entries of ``log`` the record's spans stand for: its
        ``changes`` when they are still the log's first entries, else none."""
        if self.changes > len(log) or changes_digest(log[: self.changes]) != self.digest:
            return 0
        return self.changes


def progress_path(features_dir: Path) -> Path:
    return Path(features_dir) / PROGRESS_NAME


def read_pending(features_dir: Path) -> Pending | None:
    """The record an interrupted run left, or None (no run was interrupted, or the record
    does not read: the change log, still whole, then says what to recompute)."""
    path = progress_path(features_dir)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        spans = tuple((datetime.fromisoformat(a), datetime.fromisoformat(b)) for a, b in record["spans"])
        return Pending(int(record["changes"]), str(record["digest"]), spans)
    except (ValueError, KeyError, TypeError):  # written atomically: only a hand edit gets here
        return None


def record_pending(features_dir: Path, pending: Pending) -> None:
    """Replace the record atomically (a kill leaves the previous one or this one whole)."""
    record = {
        "changes": pending.changes,
        "digest": pending.digest,
        "spans": [[first.isoformat(), last.isoformat()] for first, last in pending.spans],
    }
    atomic_write_text(progress_path(features_dir), json.dumps(record, indent=1) + "\n")


def clear_pending(features_dir: Path) -> None:
    """Remove the record (the run that had it to do is done)."""
    progress_path(features_dir).unlink(missing_ok=True)
