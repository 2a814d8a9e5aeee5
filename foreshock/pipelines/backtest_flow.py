"""``foreshock backtest``: the walk-forward backtest as a Prefect flow.

features (the feature store, read fold by fold) + failures (lake) [+ ground truth]
-> ``foreshock.models.evaluation.backtest`` -> ``data/backtest/scores.parquet``,
``report.json``, ``report.md``.

Wiring only: the work lives in :mod:`foreshock.models.evaluation.backtest`, the files are
written by :mod:`foreshock.models.evaluation.backtest_report`.  Tasks take and return
paths and settings, never frames.  With the local runner the backtest is one coarse task
(its folds run in ``[backtest] workers`` processes); with the Dask runner each fold is
its own task on the cluster, writing its scores under the data directory's staging
folder (which the workers see at the same path), and one last task judges them.
"""

from __future__ import annotations

import argparse
import shutil
import uuid
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.errors import UserError
from foreshock.lake.read import read_table
from foreshock.pipelines import inputs
from foreshock.pipelines.runtime import task_runner


def _plan(config: Config):
    from foreshock.models.evaluation.backtest import plan_backtest

    return plan_backtest(inputs.feature_source(config), inputs.failures(config), config, drains=inputs.drains(config))


def _judging_inputs(config: Config, ground_truth: str | None) -> dict:
    """What the judging reads besides the scores and failures (both runners' last step)."""
    from foreshock.models.evaluation.backtest import read_ground_truth

    return {
        "ground_truth": read_ground_truth(ground_truth),
        "drains": inputs.drains(config),
        "inventory": read_table(config.lake_dir, "inventory"),  # its fleet_weight, if any, reweights the figures
    }


def _write(result, out_dir: str) -> dict:
    from foreshock.models.evaluation.backtest_report import write_result

    with result:  # the scores' files go once scores.parquet is written
        out = write_result(result, Path(out_dir))
        return {"out_dir": str(out), "scores": result.score_rows, "folds": len(result.folds)}


@task(name="backtest-run", cache_policy=NO_CACHE)
def backtest_task(settings: dict, ground_truth: str | None, out_dir: str) -> dict:
    from foreshock.models.evaluation.backtest import walk_forward

    config = Config.from_settings(settings)
    source, failures = inputs.feature_source(config), inputs.failures(config)
    result = walk_forward(source, failures, config, **_judging_inputs(config, ground_truth))
    return _write(result, out_dir)


@task(name="backtest-plan", cache_policy=NO_CACHE)
def plan_task(settings: dict) -> int:
    """How many folds (each fold task plans again: the plan is cheap and deterministic)."""
    return len(_plan(Config.from_settings(settings)).jobs)


@task(name="backtest-fold", cache_policy=NO_CACHE)
def fold_task(settings: dict, index: int, scores_dir: str) -> dict:
    """Fit and score fold ``index``; its scores go under ``scores_dir``.  The fold's fits
    stay in this task (a fit sent on to the cluster from inside a task could wait for
    workers that are all busy with folds)."""
    config = Config.from_settings(settings).with_overrides({"runner": {"kind": "local"}})
    return _plan(config).jobs[index].run(Path(scores_dir))


@task(name="backtest-judge", cache_policy=NO_CACHE)
def judge_task(settings: dict, notes: list[dict], work: str, ground_truth: str | None, out_dir: str) -> dict:
    from foreshock.models.evaluation.backtest import judge_backtest
    from foreshock.models.evaluation.spilled_scores import SpilledScores

    config = Config.from_settings(settings)
    spilled = SpilledScores([], Path(work))
    result = judge_backtest(
        _plan(config), notes, spilled, inputs.failures(config), config, **_judging_inputs(config, ground_truth)
    )
    return _write(result, out_dir)


@flow(name="backtest", validate_parameters=False)
def backtest_flow(settings: dict, ground_truth: str | None = None, out_dir: str | None = None) -> dict:
    """Walk-forward backtest of every model; writes scores and the report."""
    config = Config.from_settings(settings)
    out = out_dir or str(config.backtest_dir)
    if config.section("runner")["kind"] == "local":
        return backtest_task(settings, ground_truth, out)
    from foreshock.models.evaluation.spilled_scores import batch_dir

    work = config.staging_dir / f"backtest-{uuid.uuid4().hex[:12]}"
    try:
        folds = plan_task(settings)
        futures = [fold_task.submit(settings, i, str(batch_dir(work))) for i in range(folds)]
        notes = [future.result() for future in futures]
        return judge_task(settings, notes, str(work), ground_truth, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_backtest(args: argparse.Namespace, config: Config) -> int:
    from foreshock.models.evaluation.backtest_report import REPORT_MD

    if args.ground_truth and not Path(args.ground_truth).is_file():
        raise UserError(f"ground truth file not found: {args.ground_truth}")
    inputs.require_features(config)  # one line, before any flow run starts
    flow_run = backtest_flow.with_options(task_runner=task_runner(config))
    result = flow_run(config.to_settings(args.config), ground_truth=args.ground_truth, out_dir=args.out)
    out = Path(result["out_dir"])
    print((out / REPORT_MD).read_text())
    print(f"backtest: {result['scores']} out-of-sample scores over {result['folds']} folds in {out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "backtest",
        help="walk-forward backtest of every model; lead-time report",
        description="Train on the past, score the next period, repeat; writes data/backtest/"
        "scores.parquet, report.json and report.md (metrics: docs/metrics.md).",
    )
    parser.add_argument("--ground-truth", help="simulator ground_truth.parquet (recall with / without precursor)")
    parser.add_argument("--out", help="output directory (default <data-dir>/backtest)")
    parser.set_defaults(func=run_backtest)
