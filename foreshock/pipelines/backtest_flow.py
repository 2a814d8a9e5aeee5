"""``foreshock backtest``: the walk-forward backtest as a Prefect flow.

features (``foreshock.features.store.scan_features``) + failures (lake) [+ ground truth]
-> ``foreshock.models.evaluation.backtest.walk_forward`` -> ``data/backtest/scores.parquet``, ``report.json``,
``report.md``.

Wiring only: the work lives in :mod:`foreshock.models.evaluation.backtest`, the files are written by
:mod:`foreshock.models.evaluation.backtest_report`.  One coarse task (the folds read
the feature store one by one); it takes and returns paths and settings, never frames.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.errors import UserError
from foreshock.lake.read import read_table
from foreshock.pipelines import inputs


@task(name="backtest-run", cache_policy=NO_CACHE)
def backtest_task(settings: dict, ground_truth: str | None, out_dir: str) -> dict:
    from foreshock.models.evaluation.backtest import read_ground_truth, walk_forward
    from foreshock.models.evaluation.backtest_report import write_result

    config = Config.from_settings(settings)
    source, failures = inputs.feature_source(config), inputs.failures(config)
    result = walk_forward(
        source,
        failures,
        config,
        ground_truth=read_ground_truth(ground_truth),
        drains=inputs.drains(config),
        inventory=read_table(config.lake_dir, "inventory"),  # its fleet_weight, if any, reweights the figures
    )
    out = write_result(result, Path(out_dir))
    return {"out_dir": str(out), "scores": result.scores.height, "folds": len(result.folds)}


@flow(name="backtest", validate_parameters=False)
def backtest_flow(settings: dict, ground_truth: str | None = None, out_dir: str | None = None) -> dict:
    """Walk-forward backtest of every model; writes scores and the report."""
    out = out_dir or str(Config.from_settings(settings).backtest_dir)
    return backtest_task(settings, ground_truth, out)


def run_backtest(args: argparse.Namespace, config: Config) -> int:
    from foreshock.models.evaluation.backtest_report import REPORT_MD

    if args.ground_truth and not Path(args.ground_truth).is_file():
        raise UserError(f"ground truth file not found: {args.ground_truth}")
    inputs.require_features(config)  # one line, before any flow run starts
    result = backtest_flow(config.to_settings(args.config), ground_truth=args.ground_truth, out_dir=args.out)
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
