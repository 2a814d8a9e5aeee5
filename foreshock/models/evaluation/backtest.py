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
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from foreshock.budget import fleet_weights
from foreshock.config import Config, builtin_default
from foreshock.contract import UTC_TS
from foreshock.durations import format_duration
from foreshock.models.estimators.base import config_horizons, require_columns
from foreshock.models.estimators.dataset import FeatureSource, FrameSource, TrainingSample, as_source
from foreshock.models.estimators.training import known_failures
from foreshock.models.evaluation.alert_replay import Period
from foreshock.models.evaluation.backtest_folds import (  # noqa: F401  (Fold, FoldJob: importers of this module)
    Fold,
    FoldJob,
    ModelFactories,
    fold_workers,
    run_in_workers,
)
from foreshock.models.evaluation.judging import judge_scores
from foreshock.models.evaluation.spilled_scores import SpilledScores, batch_dir, sort_scores

log = logging.getLogger("foreshock.backtest")


class BacktestResult:
    """Out-of-sample scores and their judged report (written and read back by
    :mod:`foreshock.models.evaluation.backtest_report`).

    Attributes
    ----------
    report
        JSON-ready dict: settings, folds, and per model and horizon the snapshot metrics
        and the metrics at each operating point.
    folds
        The walk-forward folds.

    The scores stay in files (:class:`~foreshock.models.evaluation.spilled_scores.SpilledScores`)
    until :meth:`close` (or the result is garbage collected): :meth:`scan_scores` reads
    them lazily, :attr:`scores` loads them whole.
    """

    def __init__(self, scores: SpilledScores, report: dict, folds: list[Fold] | None = None) -> None:
        self._scores = scores
        self.report = report
        self.folds = list(folds or [])

    @property
    def scores(self) -> pl.DataFrame:
        """``unit_id, ts, model, horizon, risk``: one row per unit, snapshot, model and
        horizon, sorted by model, horizon, unit and time; read whole (see :meth:`scan_scores`)."""
        return self._scores.collect()

    def scan_scores(self) -> pl.LazyFrame:
        """The scores, lazily (nothing is read until collected or sunk)."""
        return self._scores.scan()

    @property
    def score_rows(self) -> int:
        """How many scores, without reading them."""
        return self._scores.rows()

    def close(self) -> None:
        """Remove the score files (the scores can no longer be read)."""
        self._scores.cleanup()

    def __enter__(self) -> BacktestResult:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


@dataclass
class BacktestPlan:
    """The folds of a backtest and what each needs: planned once, run here, in worker
    processes or as tasks (:func:`plan_backtest`).

    Attributes
    ----------
    jobs
        One :class:`FoldJob` per fold, in time order.
    step
        The snapshot interval.
    folds, test_fraction
        The settings the folds were planned with (for the report).
    sample
        The training sample's settings (for the report).
    """

    jobs: list[FoldJob]
    step: timedelta
    folds: int
    test_fraction: float
    sample: TrainingSample

    @property
    def plan(self) -> list[Fold]:
        return [job.fold for job in self.jobs]


def plan_backtest(
    source: FeatureSource | FrameSource,
    failures: pl.DataFrame,
    config: Config,
    *,
    folds: int | None = None,
    test_fraction: float | None = None,
    drains: pl.DataFrame | None = None,
) -> BacktestPlan:
    """The folds over ``source``'s span (``[backtest] folds``, ``test_fraction`` unless
    given), each with the failures known at its cutoff.

    Raises
    ------
    ValueError
        When there is no snapshot, or the span is too short (:func:`plan_folds`).
    """
    require_columns(failures, ("unit_id", "failed_at"), "failures")
    if source.empty:
        raise ValueError("no feature snapshots to backtest")
    section = config.section("backtest")
    folds = int(folds or section["folds"])
    test_fraction = float(test_fraction or section["test_fraction"])
    sample = TrainingSample.from_config(config, config_horizons(config))
    failures = failures.with_columns(pl.col("failed_at").cast(UTC_TS))
    step = source.step()
    first, last = source.span()
    plan = plan_folds(first, last, step, folds, test_fraction)
    batch_rows = int(section["score_batch_rows"])
    jobs = [
        FoldJob(fold, len(plan), source, known_failures(failures, fold.cutoff), config, sample, drains, batch_rows)
        for fold in plan
    ]
    return BacktestPlan(jobs, step, folds, test_fraction, sample)


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
    work_dir: Path | None = None,
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
    work_dir
        Where the scores wait on disk (a temporary directory under it; default the
        system's temporary directory).  They stay until the result is closed.

    Memory: per fold only the training sample (keys first, then the sampled rows'
    features as Float32) and one batch of test rows are held; each batch's scores go to
    a file, and the judging reads one model and horizon at a time
    (:mod:`foreshock.models.evaluation.spilled_scores`).
    """
    # Over 80 lines for its docstring; the body plans the folds, runs them (here or in
    # worker processes) and judges their scores once, together.
    source = as_source(features)
    backtest = plan_backtest(source, failures, config, folds=folds, test_fraction=test_fraction, drains=drains)
    workers = fold_workers(config, source, factories_given=factories is not None, folds=len(backtest.jobs))
    spilled = SpilledScores.temporary(work_dir)
    try:
        batches = batch_dir(spilled.directory)
        if workers > 1:
            notes = run_in_workers(backtest.jobs, batches, workers)
        else:
            notes = [job.run(batches, factories) for job in backtest.jobs]
        return judge_backtest(
            backtest, notes, spilled, failures, config, ground_truth=ground_truth, drains=drains, inventory=inventory
        )
    except BaseException:
        spilled.cleanup()
        raise


def judge_backtest(
    backtest: BacktestPlan,
    fold_notes: list[dict],
    spilled: SpilledScores,
    failures: pl.DataFrame,
    config: Config,
    *,
    ground_truth: pl.DataFrame | None = None,
    drains: pl.DataFrame | None = None,
    inventory: pl.DataFrame | None = None,
) -> BacktestResult:
    """Judge the scores the folds wrote under ``spilled``'s ``batches/`` folder, all
    folds together (one model and horizon at a time); the result keeps ``spilled``."""
    batch_files = sorted(batch_dir(spilled.directory).glob("fold-*/batch-*.parquet"))
    sort_scores(batch_files, spilled)
    plan = backtest.plan
    report = judge_scores(
        spilled.scan(),
        failures.with_columns(pl.col("failed_at").cast(UTC_TS)),
        config,
        ground_truth=ground_truth,
        step=backtest.step,
        periods=[Period(f.cutoff, f.test_end) for f in plan],
        drains=drains,
        weights=fleet_weights(inventory),
    )
    report["folds"] = fold_notes
    report["settings"].update(
        {
            "folds": backtest.folds,
            "test_fraction": backtest.test_fraction,
            "snapshot_every": format_duration(backtest.step),
            "max_healthy_rows": backtest.sample.max_healthy_rows,
        }
    )
    return BacktestResult(spilled, report, plan)
