"""Where a batch's parsed rows wait for :class:`~foreshock.ingest.tasks.GroupTasks`:
``<data>/staging/ingest/``, a directory per batch, made and removed while the driver holds
the lake lock.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from foreshock.config import Config

STAGING_PARQUET = {"compression": "lz4", "statistics": False}


def staging_root(config: Config) -> Path:
    """Where a batch's parsed rows are staged for :class:`GroupTasks`: a directory per
    batch, made and removed while the driver holds the lake lock."""
    return config.staging_dir / "ingest"


def clear_staging(config: Config) -> None:
    """Remove shard groups a killed driver left staged.  Called under the lake lock, so no
    staging directory is in use: each lives only within the hold that made it."""
    root = staging_root(config)
    if root.is_dir():
        for leftover in root.iterdir():
            shutil.rmtree(leftover, ignore_errors=True)
