"""The live scores folder (``data/scores/``): its file names, its writer and its readers.

Every scoring run writes its scores twice, atomically: ``scores-<timestamp>.parquet`` (kept,
the risk history the fleet page draws) and ``latest.parquet`` (the newest run, what publish
and ``foreshock status`` read).  Nothing else spells these names: the CLI, the drain, the
status check and the page come here.  Columns are :func:`~foreshock.models.registry.scoring.live_scores`'s.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl

from foreshock.lake.atomic import atomic_write_parquet

LATEST_FILE = "latest.parquet"
RUN_PREFIX = "scores-"


def latest_path(scores_dir: Path) -> Path:
    """``<scores_dir>/latest.parquet``: the newest scoring run."""
    return Path(scores_dir) / LATEST_FILE


def write_scores(scores: pl.DataFrame, scores_dir: Path, stamp: str) -> Path:
    """Write one run's scores as ``scores-<stamp>.parquet`` and ``latest.parquet``.

    Returns
    -------
    Path
        The ``latest.parquet`` written.
    """
    atomic_write_parquet(scores, Path(scores_dir) / f"{RUN_PREFIX}{stamp}.parquet")
    latest = latest_path(scores_dir)
    atomic_write_parquet(scores, latest)
    return latest


def run_files(scores_dir: Path) -> list[Path]:
    """Every run's ``scores-<timestamp>.parquet``, oldest first."""
    return sorted(Path(scores_dir).glob(f"{RUN_PREFIX}*.parquet"))


def newest_scored(scores_dir: Path) -> tuple[datetime | None, int] | None:
    """The newest scored snapshot time and the row count of ``latest.parquet``; None when
    no run wrote one (raises when the file is unreadable)."""
    path = latest_path(scores_dir)
    if not path.is_file():
        return None
    row = pl.scan_parquet(path).select(pl.len().alias("rows"), pl.col("ts").max().alias("last")).collect()
    return row["last"][0], int(row["rows"][0])
