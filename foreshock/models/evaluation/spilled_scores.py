"""Out-of-sample scores kept on disk, not in memory.

A backtest over a long history scores millions of snapshots by every model and horizon;
holding them all until they are judged made the backtest's memory grow with the history.
Instead every fold writes each batch's scores to its own file
(:mod:`foreshock.models.evaluation.backtest_folds`), :func:`sort_scores` rewrites them as
one file per model and horizon, each sorted by unit and time (the order the judging and
``scores.parquet`` have always had), and :class:`SpilledScores` hands them out lazily:
the judging reads one model and horizon at a time and ``scores.parquet`` is streamed from
them.  Memory then holds one model's series for one horizon, never the whole table.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import polars as pl

from foreshock.models.estimators.base import SCORE_SCHEMA

ORDER = ("model", "horizon", "unit_id", "ts")


def batch_dir(directory: Path) -> Path:
    """Where the folds write their batch files under a working ``directory`` (until
    :func:`sort_scores` rewrites them beside it)."""
    return Path(directory) / "batches"


class SpilledScores:
    """Score files under a working directory, in ``model, horizon, unit_id, ts`` order.

    Parameters
    ----------
    files
        The files, one per model and horizon, in that order.
    directory
        The working directory they are in; removed by :meth:`cleanup` (and when the
        object is garbage collected or the process exits) when ``owned``.
    owned
        Whether this object removes ``directory``.
    """

    def __init__(self, files: list[Path], directory: Path, *, owned: bool = True) -> None:
        self.files = list(files)
        self.directory = Path(directory)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.directory, True) if owned else None

    @classmethod
    def temporary(cls, parent: Path | None = None) -> SpilledScores:
        """An empty set of scores in a new temporary directory (under ``parent`` when given,
        else the system's temporary directory)."""
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        return cls([], Path(tempfile.mkdtemp(prefix="foreshock-backtest-", dir=parent)))

    def scan(self) -> pl.LazyFrame:
        """Every score, lazily, in ``model, horizon, unit_id, ts`` order."""
        if not self.files:
            return pl.LazyFrame(schema=SCORE_SCHEMA)
        return pl.scan_parquet(self.files)

    def rows(self) -> int:
        """How many scores (read from the files' footers)."""
        return int(self.scan().select(pl.len()).collect().item())

    def collect(self) -> pl.DataFrame:
        """Every score in memory (small backtests, tests)."""
        return self.scan().collect()

    def cleanup(self) -> None:
        """Remove the working directory and its files now."""
        if self._cleanup is not None:
            self._cleanup()
        self.files = []


def sort_scores(batch_files: list[Path], spilled: SpilledScores) -> SpilledScores:
    """Rewrite the folds' batch files as one sorted file per model and horizon in
    ``spilled``'s directory (the batch files are removed); returns ``spilled`` with them.

    One model and horizon is read at a time (the batch files keep each model's rows
    together, so the others' row groups are skipped)."""
    if not batch_files:
        return spilled
    batches = pl.scan_parquet(batch_files)
    pairs = batches.select("model", "horizon").unique().sort("model", "horizon").collect(engine="streaming").rows()
    for k, (model, horizon) in enumerate(pairs):
        series = (
            batches.filter((pl.col("model") == model) & (pl.col("horizon") == horizon))
            .collect(engine="streaming")
            .sort(ORDER[2:])
        )
        path = spilled.directory / f"scores-{k:04d}.parquet"
        series.write_parquet(path)
        spilled.files.append(path)
        del series
    for path in batch_files:
        path.unlink(missing_ok=True)
    return spilled
