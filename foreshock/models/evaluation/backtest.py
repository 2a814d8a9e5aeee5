"""Walk-forward backtest: train on the past, score the next period, repeat.

The span of the feature snapshots is cut into a training head and ``folds`` consecutive
test periods covering its last ``test_fraction`` (defaults 4 and 0.4, so a 30-day demo or
a 40-day daily data set gets out-of-sample scores for its last 40 %).  For the test period
starting at cutoff ``c``, every model is trained on

* snapshots taken before ``c`` (every failure-adjacent one and a weighted sample of the
  healthy ones: :mod:`foreshock.models.estimators.dataset`),
* failures detected by ``c``,
* labels known at ``c`` by the one rule for both classes (:mod:`foreshock.models.estimators.training`): a
  snapshot whose horizon runs past ``c`` is positive when its failure fell in the observed
  part, otherwise a negative weighted by the observed share of the horizon; the number of
  such open rows is in each fold's notes,

and scores the snapshots in ``[c, next cutoff)``.  The out-of-sample scores of all folds
are then judged together (:mod:`foreshock.models.evaluation.judging`) with the metrics of
:mod:`foreshock.models.evaluation.metrics` at the operating points of
:mod:`foreshock.models.evaluation.operating_points`, each fold's threshold chosen from the folds before it: the
drain budget (at most ``[backtest] drain_budget_per_day`` new alerts a day), the lowest
threshold meeting ``[backtest] target_precision``, the policy's fixed ``[policy]
enter_risk``, and, labelled as an upper bound, the budget with its threshold chosen on the
test period itself.  The threshold baseline's binary rules are scored as operators run
them today (model ``rules``).  Computation only: the result is rendered and written by
:mod:`foreshock.models.evaluation.backtest_report`.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from foreshock.budget import fleet_weights
from foreshock.config import Config, builtin_default
from foreshock.contract import UTC_TS
from foreshock.durations import format_duration
from foreshock.features.labels import CENSORED_AT
from foreshock.models.estimators.base import (
    SAMPLE_WEIGHT,
    SCORE_SCHEMA,
    RiskModel,
    config_horizons,
    monotone_risk,
    require_columns,
)
from foreshock.models.estimators.baseline import ThresholdBaseline
from foreshock.models.estimators.bundle import fit_models, model_factories
from foreshock.models.estimators.dataset import FeatureSource, FrameSource, TrainingSample, as_source, training_frame
from foreshock.models.estimators.training import known_failures, labelled_until, unresolved_rows
from foreshock.models.evaluation.alert_replay import Period
from foreshock.models.evaluation.judging import judge_scores
from foreshock.models.evaluation.operating_points import RULES_MODEL

log = logging.getLogger("foreshock.backtest")


@dataclass(frozen=True)
class Fold:
    """One walk-forward step: train before ``cutoff``, score ``[cutoff, test_end)``."""

    index: int
    cutoff: datetime
    test_end: datetime

    def to_dict(self) -> dict:
        return {"index": self.index, "cutoff": self.cutoff.isoformat(), "test_end": self.test_end.isoformat()}


@dataclass
class BacktestResult:
    """Out-of-sample scores and their judged report (written and read back by
    :mod:`foreshock.models.evaluation.backtest_report`).

    Attributes
    ----------
    scores
        ``unit_id, ts, model, horizon, risk``: one row per unit, snapshot, model, horizon.
    report
        JSON-ready dict: settings, folds, and per model and horizon the snapshot metrics
        and the metrics at each operating point.
    """

    scores: pl.DataFrame
    report: dict
    folds: list[Fold] = field(default_factory=list)


def read_ground_truth(path: str | Path | None) -> pl.DataFrame | None:
    """The simulator's ``ground_truth.parquet`` (or a CSV of the same columns); None for no path."""
    if not path:
        return None
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"ground truth file not found: {file}")
    try:
        truth = pl.read_csv(file, try_parse_dates=True) if file.suffix == ".csv" else pl.read_parquet(file)
    except Exception as exc:  # polars raises several error types for unreadable files
        raise ValueError(f"{file}: cannot read ground truth: {exc}") from None
    if "failed_at" not in truth.columns:
        for alias in ("failure_time", "failure_at", "failed"):
            if alias in truth.columns:
                truth = truth.rename({alias: "failed_at"})
                break
    missing = {"unit_id", "failed_at"} - set(truth.columns)
    if missing:
        raise ValueError(f"{file}: ground truth lacks column(s) {sorted(missing)}; has {truth.columns}")
    return truth


def plan_folds(
    first: datetime,
    last: datetime,
    step: timedelta,
    folds: int | None = None,
    test_fraction: float | None = None,
) -> list[Fold]:
    """Cutoffs on snapshot boundaries splitting the last ``test_fraction`` of the span
    into ``folds`` test periods (defaults: the built-in ``[backtest]``).

    Raises
    ------
    ValueError
        When the span is too short for one snapshot per test period.
    """
    folds = int(builtin_default("backtest", "folds") if folds is None else folds)
    test_fraction = float(builtin_default("backtest", "test_fraction") if test_fraction is None else test_fraction)
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if folds < 1:
        raise ValueError(f"folds must be >= 1, got {folds}")
    end = last + step  # the last snapshot covers one interval
    span = end - first
    test_span = span * test_fraction
    length = test_span / folds
    if length < step:
        raise ValueError(
            f"{format_duration(span)} of snapshots every {format_duration(step)} is too short for "
            f"{folds} test periods over the last {test_fraction:.0%}"
        )

    def on_grid(t: datetime) -> datetime:
        steps = round((t - first) / step)
        return first + steps * step

    cutoffs = [on_grid(end - test_span + i * length) for i in range(folds)] + [end]
    return [Fold(i, cutoffs[i], cutoffs[i + 1]) for i in range(folds) if cutoffs[i] < cutoffs[i + 1]]


ModelFactories = dict[str, Callable[[], RiskModel]]


def walk_forward(
    features: pl.DataFrame | FeatureSource | FrameSource,
    failures: pl.DataFrame,
    config: Config,
    *,
    ground_truth: pl.DataFrame | None = None,
    factories: ModelFactories | None = None,
    folds: int | None = None,
    test_fraction: float | None = None,
    drains: pl.DataFrame | None = None,
    inventory: pl.DataFrame | None = None,
) -> BacktestResult:
    """Run the walk-forward backtest and judge its out-of-sample scores.

    Parameters
    ----------
    features
        The feature store (:class:`~foreshock.models.estimators.dataset.FeatureSource`, read fold by
        fold) or a feature frame in memory (``unit_id, ts`` + features).
    failures
        Canonical failures table.
    config
        ``[labels] horizons``, ``[backtest]`` (``alert_window``, ``min_lead_time``,
        ``drain_budget_per_day``, ``target_precision``, optional ``folds``,
        ``test_fraction`` and ``score_batch_rows``), ``[policy]`` costs and
        ``enter_risk``, model settings and the training sample (``[models]
        max_healthy_rows``).
    ground_truth
        Optional: ``unit_id, failed_at`` and ``has_precursor`` or ``precursor_onset``
        (the simulator's ``ground_truth.parquet``) for recall with / without precursor.
    factories
        Model constructors by name (default: :func:`foreshock.models.estimators.bundle.model_factories`).
    folds, test_fraction
        Override ``[backtest] folds`` / ``test_fraction``.
    drains
        Canonical drains (``unit_id, drained_at, returned_at``): a drain censors the
        labels of the snapshots before it, and failures during one are reported apart
        (``drained_then_failed``).
    inventory
        The inventory: when it carries ``fleet_weight`` (a subsampled fleet), the budget
        and the fleet-level figures count each unit by its weight (``docs/metrics.md``).

    Memory: per fold only the training sample (keys first, then the sampled rows'
    features as Float32) and one batch of test rows are held; each fold's scores go to a
    file and are read back once at the end.
    """
    # Over 80 lines for its docstring; the body plans the folds, runs them (here or in
    # worker processes) and judges their scores once, together.
    source = as_source(features)
    require_columns(failures, ("unit_id", "failed_at"), "failures")
    if source.empty:
        raise ValueError("no feature snapshots to backtest")
    section = config.section("backtest")
    folds = int(folds or section["folds"])
    test_fraction = float(test_fraction or section["test_fraction"])
    batch_rows = int(section["score_batch_rows"])
    custom_factories = factories is not None
    horizons = config_horizons(config)
    sample = TrainingSample.from_config(config, horizons)
    failures = failures.with_columns(pl.col("failed_at").cast(UTC_TS))
    step = source.step()
    first, last = source.span()
    plan = plan_folds(first, last, step, folds, test_fraction)

    jobs = [
        FoldJob(fold, len(plan), source, known_failures(failures, fold.cutoff), config, sample, drains, batch_rows)
        for fold in plan
    ]
    workers = fold_workers(config, source, factories_given=custom_factories, folds=len(plan))
    with tempfile.TemporaryDirectory(prefix="foreshock-backtest-") as tmp:
        fold_files = [Path(tmp) / f"fold-{fold.index}.parquet" for fold in plan]
        if workers > 1:
            fold_notes = _run_in_workers(jobs, fold_files, workers)
        else:
            fold_notes = [job.run(path, factories) for job, path in zip(jobs, fold_files)]
        scores = pl.read_parquet(fold_files) if fold_files else pl.DataFrame(schema=SCORE_SCHEMA)
    scores = scores.sort("model", "horizon", "unit_id", "ts")
    periods = [Period(f.cutoff, f.test_end) for f in plan]
    report = judge_scores(
        scores,
        failures,
        config,
        ground_truth=ground_truth,
        step=step,
        periods=periods,
        drains=drains,
        weights=fleet_weights(inventory),
    )
    report["folds"] = fold_notes
    report["settings"].update(
        {
            "folds": folds,
            "test_fraction": test_fraction,
            "snapshot_every": format_duration(step),
            "max_healthy_rows": sample.max_healthy_rows,
        }
    )
    return BacktestResult(scores=scores, report=report, folds=plan)


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

    def run(self, path: Path, factories: ModelFactories | None = None) -> dict:
        """Fit the models (``factories``, default the configured ones), write the fold's
        out-of-sample scores to ``path``; returns the fold's notes for the report."""
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
        test_rows = 0
        parts = []
        for batch in self.source.batches(fold.cutoff, fold.test_end, self.batch_rows):
            test_rows += batch.height
            for name, model in models.items():
                risk = monotone_risk(model.predict_risk(batch))
                parts.append(risk.with_columns(pl.lit(name).alias("model")).select(list(SCORE_SCHEMA)))
                if isinstance(model, ThresholdBaseline):  # the binary rules as run today, beside the ranked ones
                    parts.append(
                        model.predict_fires(batch)
                        .with_columns(pl.lit(RULES_MODEL).alias("model"))
                        .select(list(SCORE_SCHEMA))
                    )
        fold_scores = pl.concat(parts) if parts else pl.DataFrame(schema=SCORE_SCHEMA)
        log.info(
            "backtest: fold %d/%d done in %.0f s: %s test snapshots scored",
            fold.index + 1,
            self.folds,
            time.monotonic() - started,
            f"{test_rows:,}",
        )
        fold_scores.write_parquet(path)
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


def _run_in_workers(jobs: list[FoldJob], paths: list[Path], workers: int) -> list[dict]:
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
            futures = [pool.submit(job.run, path) for job, path in zip(jobs, paths)]
            return [future.result() for future in futures]
    finally:
        listener.stop()


def _label_keys(frame: pl.DataFrame) -> list[str]:
    return [c for c in ("unit_id", "ts", "life_start", CENSORED_AT) if c in frame.columns]
