"""``foreshock train``: fit every model on all labelled history and register a challenger.

features + failures -> foreshock.models.estimators.bundle.train_bundle -> walk-forward backtest for the
metrics (or a given `foreshock backtest` result) -> foreshock.models.registry.tracking.log_training
(new version, alias ``challenger``).  This is the production refit on all history; the
out-of-sample evidence that its recipe beats the champion comes from ``foreshock review``
(the same recipe refitted before the review window), which promotes this version.

Flow and tasks take plain values (settings, paths as text) so a deployment can run them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.pipelines import inputs
from foreshock.pipelines.runtime import configure_mlflow, quiet_mlflow, stamp


@task(cache_policy=NO_CACHE)
def fit_bundle(settings: dict, run_dir: str) -> str:
    """Train every model on all labelled history; the bundle is saved under ``run_dir``."""
    from foreshock.models.estimators.bundle import train_bundle

    config = Config.from_settings(settings)
    bundle = train_bundle(inputs.feature_source(config), inputs.failures(config), config, drains=inputs.drains(config))
    bundle.save(Path(run_dir) / "bundle")
    return str(Path(run_dir) / "bundle")


@task(cache_policy=NO_CACHE)
def backtest_for_metrics(settings: dict, run_dir: str, ground_truth: str | None) -> str:
    """Walk-forward backtest of the same configuration: scores and report under ``run_dir``."""
    from foreshock.models.evaluation.backtest import read_ground_truth, walk_forward
    from foreshock.models.evaluation.backtest_report import write_result

    config = Config.from_settings(settings)
    source, failures = inputs.feature_source(config), inputs.failures(config)
    result = walk_forward(
        source, failures, config, ground_truth=read_ground_truth(ground_truth), drains=inputs.drains(config)
    )
    return str(write_result(result, Path(run_dir) / "backtest"))


@task(cache_policy=NO_CACHE)
def log_to_registry(settings: dict, bundle_dir: str, backtest_dir: str) -> dict[str, str]:
    """Log the run to MLflow and register the bundle as the new challenger."""
    from foreshock.models.estimators.bundle import RiskBundle
    from foreshock.models.evaluation.backtest_report import read_result
    from foreshock.models.registry.tracking import log_training, training_inputs

    config = Config.from_settings(settings)
    bundle = RiskBundle.load(Path(bundle_dir))
    backtest = read_result(Path(backtest_dir))
    source, failures = inputs.feature_source(config), inputs.failures(config)
    # Labels for the outcome plots need keys only; the input example is the newest rows.
    training = training_inputs(bundle, backtest, source.keys(), failures, config)
    training["example"] = source.latest().sort("ts").tail(5)
    record = log_training(bundle, backtest, config, **training)
    return {"run_id": record.run_id, "version": record.version, "model_name": record.model_name}


@flow(name="train", log_prints=True, validate_parameters=False)
def train_flow(settings: dict, ground_truth: str | None = None, backtest_dir: str | None = None) -> dict[str, str]:
    config = Config.from_settings(settings)
    run_dir = str(config.models_dir / f"train-{stamp()}")
    bundle_dir = fit_bundle(settings, run_dir)
    if backtest_dir is None:
        backtest_dir = backtest_for_metrics(settings, run_dir, ground_truth)
    return log_to_registry(settings, bundle_dir, backtest_dir)


def run_train(args: argparse.Namespace, config: Config) -> int:
    uri = configure_mlflow(config.mlflow_dir)
    quiet_mlflow()
    inputs.require_features(config)
    if args.backtest:
        from foreshock.models.evaluation.backtest_report import read_result

        read_result(Path(args.backtest))  # fail early, naming what is missing
    record = train_flow(config.to_settings(args.config), args.ground_truth, args.backtest)
    print(
        f"registered {record['model_name']} version {record['version']} (alias challenger), "
        f"run {record['run_id']} in {uri}"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="fit on all labelled history, log to MLflow, register a challenger")
    train.add_argument("--ground-truth", help="simulator ground truth (precursor recall in the backtest metrics)")
    train.add_argument(
        "--backtest",
        metavar="DIR",
        help="log the metrics of this `foreshock backtest` result (e.g. data/backtest) instead of re-running it",
    )
    train.set_defaults(func=run_train)
