"""The outbox folder (``data/outbox/``): its file names, where a publish stages and points,
and its readers.

:func:`foreshock.drain.outbox.publish` writes one directory per publish through the names
here; the CLI, ``foreshock status`` and the fleet page read it back through the readers
here, so the layout is spelled once::

    data/outbox/<DIR_FORMAT>[-NN]/          one publish, complete (manifest written last)
    data/outbox/.staging-<name>-<pid>/      a publish under way, renamed into place whole
    data/outbox/LATEST                      name of the directory the last publish wrote
    data/outbox/NOTIFIED                    name of the directory whose drains were last announced
    data/outbox/sinfo-latest.txt            node states ``publish --sinfo`` read

What a publish directory holds is listed in :mod:`foreshock.drain.outbox`; the risk list's
own files are :mod:`foreshock.drain.risk_list`'s, the telemetry health and watch list files
(``telemetry_health.*``, ``watch.*``) :mod:`foreshock.drain.health_files`'s.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from foreshock.drain.risk_list import list_paths, read_risk_list
from foreshock.lake.atomic import atomic_write_text

LATEST_FILE = "LATEST"
NOTIFIED_FILE = "NOTIFIED"
STAGING_PREFIX = ".staging-"
MANIFEST_FILE = "manifest.json"
NODE_STATES_FILE = "sinfo-latest.txt"
DIR_FORMAT = "%Y%m%dT%H%M%SZ"


def new_name(outbox_dir: Path, generated_at: datetime) -> str:
    """The directory name of a publish at ``generated_at``, suffixed when it is taken."""
    base = generated_at.strftime(DIR_FORMAT)
    name, suffix = base, 1
    while (Path(outbox_dir) / name).exists():
        name = f"{base}-{suffix:02d}"
        suffix += 1
    return name


def published_at(name: str) -> datetime | None:
    """When the publish directory ``name`` was written (its :func:`new_name` read back, the
    ``-NN`` of a second publish in the same second ignored; UTC); None for another name."""
    try:
        return datetime.strptime(name.split("-")[0], DIR_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def staging_dir(outbox_dir: Path, name: str) -> Path:
    """The hidden directory a publish named ``name`` is built in (this process's own)."""
    return Path(outbox_dir) / f"{STAGING_PREFIX}{name}-{os.getpid()}"


def remove_staging_leftovers(outbox_dir: Path) -> None:
    """Staging directories of publishes that failed or were killed (caller holds the lock)."""
    for leftover in Path(outbox_dir).glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)


def point_latest(outbox_dir: Path, name: str) -> None:
    """Name ``name`` in ``LATEST`` (after its directory is in place)."""
    atomic_write_text(Path(outbox_dir) / LATEST_FILE, name + "\n")


def point_notified(outbox_dir: Path, name: str) -> None:
    """Name ``name`` in ``NOTIFIED``: its changes are announced (or there was nothing to
    announce); the next publish announces what changed since it.  ``""``: nothing
    announced yet."""
    atomic_write_text(Path(outbox_dir) / NOTIFIED_FILE, name + "\n")


def read_notified(outbox_dir: Path) -> str | None:
    """The name ``NOTIFIED`` holds (``""``: nothing announced yet), None without the file."""
    pointer = Path(outbox_dir) / NOTIFIED_FILE
    return pointer.read_text().strip() if pointer.is_file() else None


def node_states_path(outbox_dir: Path) -> Path:
    """Where ``publish --sinfo`` keeps the node states it read, for the flow to take as a path."""
    return Path(outbox_dir) / NODE_STATES_FILE


def complete_list_dirs(outbox_dir: Path) -> list[Path]:
    """The complete publish directories (manifest and risk list present), oldest first."""
    outbox_dir = Path(outbox_dir)
    if not outbox_dir.is_dir():
        return []
    return sorted(
        p
        for p in outbox_dir.iterdir()
        if not p.name.startswith(".") and (p / MANIFEST_FILE).is_file() and list_paths(p)["parquet"].is_file()
    )


def newest_list_dir(outbox_dir: Path) -> Path | None:
    """The newest complete publish directory (manifest and risk list present), if any: the
    one the next publish diffs against and ``foreshock status`` judges."""
    directories = complete_list_dirs(outbox_dir)
    return directories[-1] if directories else None


def latest_list_dir(outbox_dir: Path) -> Path | None:
    """The directory ``LATEST`` names when it holds a risk list (what the fleet page shows), or None."""
    pointer = Path(outbox_dir) / LATEST_FILE
    if not pointer.is_file():
        return None
    directory = Path(outbox_dir) / pointer.read_text().strip()
    return directory if list_paths(directory)["parquet"].is_file() else None


def read_manifest(directory: Path) -> dict[str, Any]:
    """A publish directory's ``manifest.json``."""
    return json.loads((Path(directory) / MANIFEST_FILE).read_text())


def read_published_list(directory: Path) -> pl.DataFrame:
    """A publish directory's risk list (its schema version checked)."""
    return read_risk_list(list_paths(directory)["parquet"])


def published_rows(directory: Path) -> int:
    """Rows of a publish directory's risk list, without reading the list."""
    return int(pl.scan_parquet(list_paths(directory)["parquet"]).select(pl.len()).collect().item())
