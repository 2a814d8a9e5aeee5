"""One walk-forward fold, run here, in a worker process or as a task of the flow.

A fold trains every model on the sample before its cutoff and scores its test period
batch by batch (:class:`FoldJob`).  Each batch's scores go straight to their own file in
the fold's directory, so a fold holds one batch of test rows and its scores whatever the
length of its test period; :mod:`foreshock.models.evaluation.spilled_scores` puts the
files of all folds in the order they are judged in.  The folds are independent (each
trains on its own past), so they may run side by side: in worker processes
(:func:`fold_workers`, ``[backtest] workers``) or as tasks on the Dask runner
(:mod:`foreshock.pipelines.backtest_flow`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import polars as pl

from foreshock.config import Config
from foreshock.features.labels import CENSORED_AT
from foreshock.models.estimators.base import SAMPLE_WEIGHT, SCORE_SCHEMA, RiskModel, config_horizons, monotone_risk
from foreshock.models.estimators.baseline import ThresholdBaseline
from foreshock.models.estimators.bundle import fit_models, model_factories
from foreshock.models.estimators.dataset import FeatureSource, FrameSource, TrainingSample, training_frame
from foreshock.models.estimators.training import labelled_until, unresolved_rows
from foreshock.models.evaluation.operating_points import RULES_MODEL

log = logging.getLogger("foreshock.backtest")

ModelFactories = dict[str, Callable[[], RiskModel]]


@dataclass(frozen=True)
class Fold:
    """One walk-forward step: train before ``cutoff``, score ``[cutoff, test_end)``."""

    index: int
    cutoff: datetime
    test_end: datetime

    def to_dict(self) -> dict:
        return {"index": self.index, "cutoff": self.cutoff.isoformat(), "test_end": self.test_end.isoformat()}

    @classmethod
    def from_dict(cls, data: dict) -> Fold:
        """The fold of :meth:`to_dict` (a flow passes folds between tasks as JSON)."""
        return cls(int(data["index"]), datetime.fromisoformat(data["cutoff"]), datetime.fromisoformat(data["test_end"]))


def fold_dir(scores_dir: Path, fold: Fold) -> Path:
    """Where ``fold`` writes its scores' batch files under ``scores_dir``."""
    return Path(scores_dir) / f"fold-{fold.index:03d}"


@dataclass
class FoldJob:
    """One fold's work: train on the sample before its cutoff, score its test period.

    Picklable (paths, frames of failures and drains, the configuration), so a fold runs
    the same in this process or in a worker process (:func:`fold_workers`)."""

    fold: Fold
    folds: int
    source: FeatureSource | FrameSource
    known: pl.DataFrame
    config: Config
    sample: TrainingSample
    drains: pl.DataFrame | None
    batch_rows: int

    def run(self, scores_dir: Path, factories: ModelFactories | None = None) -> dict:
        """Fit the models (``factories``, default the configured ones), write the fold's
        out-of-sample scores under ``scores_dir`` (:func:`fold_dir`, one file a batch);
        returns the fold's notes for the report."""
        fold, known, horizons = self.fold, self.known, config_horizons(self.config)
        factories = factories or model_factories(self.config)
        started = time.monotonic()
        train = training_frame(self.source, known, fold.cutoff, self.sample, drains=self.drains)
        log.info(
            "backtest: fold %d/%d: training on %s rows before %s (%d known failures)",
            fold.index + 1,
            self.folds,
            f"{train.height:,}",
            f"{fold.cutoff:%Y-%m-%d %H:%M}",
            known.height,
        )
        unresolved = unresolved_rows(
            labelled_until(train.select(_label_keys(train)), known, horizons, fold.cutoff, weighted=True), horizons
        )
        train_rows, healthy_weight = train.height, float(train.get_column(SAMPLE_WEIGHT).max() or 1.0)
        models, notes = fit_models(train, known, factories, until=fold.cutoff)
        del train
        notes = notes + [
            f"fold {fold.index}: {n} of {train_rows} training rows have an open {h} outcome at the cutoff "
            "(negatives weighted by the observed share of the horizon)"
            for h, n in unresolved.items()
        ]
        notes += [
            f"fold {fold.index}: {name}: {note}"
            for name, model in models.items()
            for note in getattr(model, "notes_", [])
        ]
        out = fold_dir(scores_dir, fold)
        out.mkdir(parents=True, exist_ok=True)
        test_rows = batches = 0
        for batch in self.source.batches(fold.cutoff, fold.test_end, self.batch_rows):
            test_rows += batch.height
            score_batch(models, batch).write_parquet(out / f"batch-{batches:05d}.parquet")
            batches += 1
        if not batches:  # an empty test period still leaves a file: the folds' files are scanned together
            pl.DataFrame(schema=SCORE_SCHEMA).write_parquet(out / "batch-00000.parquet")
        log.info(
            "backtest: fold %d/%d done in %.0f s: %s test snapshots scored",
            fold.index + 1,
            self.folds,
            time.monotonic() - started,
            f"{test_rows:,}",
        )
        return {
            **fold.to_dict(),
            "train_snapshots": train_rows,
            "train_healthy_weight": healthy_weight,
            "train_unresolved": unresolved,
            "train_failures": known.height,
            "test_snapshots": test_rows,
            "models": sorted(models),
            "notes": notes,
        }


def score_batch(models: dict[str, RiskModel], batch: pl.DataFrame) -> pl.DataFrame:
    """Every model's scores of one batch of snapshots (``SCORE_SCHEMA``), ordered by
    model and horizon so that each model's rows sit together in the file (its row
    groups can then be skipped when another model is read)."""
    parts = []
    for name, model in models.items():
        risk = monotone_risk(model.predict_risk(batch))
        parts.append(risk.with_columns(pl.lit(name).alias("model")).select(list(SCORE_SCHEMA)))
        if isinstance(model, ThresholdBaseline):  # the binary rules as run today, beside the ranked ones
            parts.append(
                model.predict_fires(batch).with_columns(pl.lit(RULES_MODEL).alias("model")).select(list(SCORE_SCHEMA))
            )
    scores = pl.concat(parts) if parts else pl.DataFrame(schema=SCORE_SCHEMA)
    return scores.sort("model", "horizon", maintain_order=True)


def fold_workers(config: Config, source: FeatureSource | FrameSource, *, factories_given: bool, folds: int) -> int:
    """How many folds run at once, each in its own process (``[backtest] workers``).

    The folds are independent (each trains on its own past), so on a machine with idle
    cores they can be fitted side by side; each fold computes exactly what it would in
    this process.  One process (in turn, here) when: one worker is asked for; the models
    are given as constructors (which need not pickle); the features are a frame in
    memory (each worker would get its own copy); the runner is Dask (the gbm full fits
    already go to the cluster).
    """
    workers = int(config.section("backtest")["workers"])
    if factories_given or not isinstance(source, FeatureSource) or config.section("runner")["kind"] != "local":
        return 1
    return max(1, min(workers, folds))


def _start_worker(level: int, records) -> None:
    """A fold worker sends its log records to the calling process (which shows them as its
    own lines) and bins LightGBM Datasets on one thread (the workers already keep the
    cores busy)."""
    from logging.handlers import QueueHandler

    from foreshock.models.estimators.boosting import set_dataset_threads

    root = logging.getLogger()
    root.handlers[:] = [QueueHandler(records)]
    root.setLevel(level)
    set_dataset_threads(1)


class _Relay(logging.Handler):
    """A worker's log record, handled by this process's logger of the same name."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(record.name).handle(record)


def run_in_workers(jobs: list[FoldJob], scores_dir: Path, workers: int) -> list[dict]:
    """The folds on ``workers`` spawned processes (polars and LightGBM hold threads that
    a fork would copy in an unknown state); notes in fold order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from logging.handlers import QueueListener

    context = multiprocessing.get_context("spawn")
    records = context.Queue()
    listener = QueueListener(records, _Relay())
    listener.start()
    try:
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(log.getEffectiveLevel(), records),
        ) as pool:
            futures = [pool.submit(job.run, scores_dir) for job in jobs]
            return [future.result() for future in futures]
    finally:
        listener.stop()


def _label_keys(frame: pl.DataFrame) -> list[str]:
    return [c for c in ("unit_id", "ts", "life_start", CENSORED_AT) if c in frame.columns]
