"""``foreshock backtest``: the walk-forward backtest as a Prefect flow.

features (``features.store.scan_features``) + failures (lake) [+ ground truth]
-> ``models.backtest.walk_forward`` -> ``data/backtest/scores.parquet``, ``report.json``,
``report.md``.

Wiring only: the work lives in :mod:`models.backtest`.  One coarse task (the folds share
the loaded frames); it takes and returns paths and settings, never frames.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config, load_config
from foreshock.lake import atomic_write_parquet, atomic_write_text, read_table


def _config(settings: dict) -> Config:
    config = load_config(settings.get("config_file"), data_dir=settings["data_dir"])
    return config.with_overrides(settings["overrides"]) if settings.get("overrides") else config


def read_ground_truth(path: str | None) -> pl.DataFrame | None:
    """The simulator's ``ground_truth.parquet`` (or a CSV of the same columns)."""
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


@task(name="backtest-run", cache_policy=NO_CACHE)
def backtest_task(settings: dict, ground_truth: str | None, out_dir: str) -> dict:
    from features.store import scan_features
    from models.backtest import walk_forward

    config = _config(settings)
    features = scan_features(config).collect()
    if features.height == 0:
        raise ValueError(f"no feature snapshots under {config.features_dir}: run `foreshock features` first")
    failures = read_table(config.lake_dir, "failures")
    result = walk_forward(features, failures, config, ground_truth=read_ground_truth(ground_truth))
    out = Path(out_dir)
    atomic_write_parquet(result.scores, out / "scores.parquet")
    atomic_write_text(out / "report.json", json.dumps(result.report, indent=2, default=str) + "\n")
    atomic_write_text(out / "report.md", result.markdown)
    return {"out_dir": str(out), "scores": result.scores.height, "folds": len(result.folds)}


@flow(name="backtest", validate_parameters=False)
def backtest_flow(settings: dict, ground_truth: str | None = None, out_dir: str | None = None) -> dict:
    """Walk-forward backtest of every model; writes scores and the report."""
    out = out_dir or str(_config(settings).backtest_dir)
    return backtest_task(settings, ground_truth, out)


def settings_of(config: Config, config_file: str | None = None) -> dict:
    return {"config_file": config_file, "data_dir": str(config.data_dir)}


def run_backtest(args: argparse.Namespace, config: Config) -> int:
    if args.ground_truth and not Path(args.ground_truth).is_file():
        print(f"foreshock backtest: ground truth file not found: {args.ground_truth}", file=sys.stderr)
        return 2
    try:
        result = backtest_flow(settings_of(config, args.config), ground_truth=args.ground_truth, out_dir=args.out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"foreshock backtest: {exc}", file=sys.stderr)
        return 2
    out = Path(result["out_dir"])
    print((out / "report.md").read_text())
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
