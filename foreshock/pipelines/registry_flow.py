"""``foreshock train``, ``foreshock review`` and ``foreshock score``: the MLflow registry path.

train:  features + failures -> models.bundle.train_bundle -> walk-forward backtest for the
        metrics -> models.registry.log_training (new version, alias ``challenger``)
review: challenger vs champion on the same window -> report -> promote if guardrails hold
        (``--approve VERSION`` promotes by hand, ``--rollback VERSION`` moves champion back)
score:  ``models:/<name>@champion`` on the latest snapshot of every unit ->
        data/scores/latest.parquet and data/scores/scores-<timestamp>.parquet

Tasks hand each other paths, not frames (Prefect hashes task inputs).
"""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.lake import atomic_write_parquet
from foreshock.pipelines.runtime import configure_mlflow


def _quiet_mlflow() -> None:
    """MLflow's per-model notes (uv project detected, pip version unknown) are noise here."""
    for name in ("mlflow.utils.environment", "mlflow.utils.uv_utils", "mlflow.pyfunc", "mlflow.models.model"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def _features(config: Config) -> pl.DataFrame:
    from foreshock.features.store import scan_features

    return scan_features(config).collect().sort("unit_id", "ts")


def _failures(config: Config) -> pl.DataFrame:
    from foreshock.lake import read_table

    return read_table(config.lake_dir, "failures")


# --------------------------------------------------------------------------------------
# train
# --------------------------------------------------------------------------------------


@task(cache_policy=NO_CACHE)
def fit_bundle(config: Config, run_dir: Path) -> Path:
    """Train every model on all labelled history; the bundle is saved under ``run_dir``."""
    from foreshock.models.bundle import train_bundle

    bundle = train_bundle(_features(config), _failures(config), config)
    bundle.save(run_dir / "bundle")
    return run_dir / "bundle"


@task(cache_policy=NO_CACHE)
def backtest_for_metrics(config: Config, run_dir: Path, ground_truth: Path | None) -> Path:
    """Walk-forward backtest of the same configuration: scores and report under ``run_dir``."""
    from foreshock.models.backtest import read_ground_truth, walk_forward

    result = walk_forward(_features(config), _failures(config), config, ground_truth=read_ground_truth(ground_truth))
    return result.save(run_dir / "backtest")


@task(cache_policy=NO_CACHE)
def log_to_registry(config: Config, bundle_dir: Path, backtest_dir: Path) -> dict[str, str]:
    """Log the run to MLflow and register the bundle as the new challenger."""
    from foreshock.models.backtest import BacktestResult
    from foreshock.models.bundle import RiskBundle
    from foreshock.models.registry import log_training, training_inputs

    bundle = RiskBundle.load(bundle_dir)
    backtest = BacktestResult.load(backtest_dir)
    features, failures = _features(config), _failures(config)
    inputs = training_inputs(bundle, backtest, features, failures, config)
    record = log_training(bundle, backtest, config, **inputs)
    return {"run_id": record.run_id, "version": record.version, "model_name": record.model_name}


@flow(name="train", log_prints=True)
def train_flow(config: Config, ground_truth: Path | None = None, backtest_dir: Path | None = None) -> dict[str, str]:
    run_dir = config.data_dir / "models" / f"train-{_stamp()}"
    bundle_dir = fit_bundle(config, run_dir)
    if backtest_dir is None:
        backtest_dir = backtest_for_metrics(config, run_dir, ground_truth)
    return log_to_registry(config, bundle_dir, backtest_dir)


def run_train(args: argparse.Namespace, config: Config) -> int:
    uri = configure_mlflow(config.data_dir)
    _quiet_mlflow()
    ground_truth = Path(args.ground_truth) if args.ground_truth else None
    try:
        backtest_dir = None
        if args.backtest:
            from foreshock.models.backtest import BacktestResult

            backtest_dir = Path(args.backtest)
            BacktestResult.load(backtest_dir)  # fail early, naming what is missing
        record = train_flow(config, ground_truth, backtest_dir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"foreshock train: {exc}", file=sys.stderr)
        return 1
    print(
        f"registered {record['model_name']} version {record['version']} (alias challenger), "
        f"run {record['run_id']} in {uri}"
    )
    return 0


# --------------------------------------------------------------------------------------
# review
# --------------------------------------------------------------------------------------


@task(cache_policy=NO_CACHE)
def review_task(config: Config, promote: bool) -> dict[str, object]:
    from foreshock.models.base import config_horizons
    from foreshock.models.review import run_review
    from foreshock.models.training import labelled_until

    features, failures = _features(config), _failures(config)
    labelled = labelled_until(features, failures, config_horizons(config))
    result = run_review(config, labelled, failures, promote=promote)
    return {
        "decision": result.decision,
        "promoted": result.promoted,
        "report_md": str(result.report_md),
        "report_html": str(result.report_html),
        "table": result.table().to_dicts(),
        "checks": [(c.name, c.passed) for c in result.checks],
    }


@flow(name="review", log_prints=True)
def review_flow(config: Config, promote: bool = True) -> dict[str, object]:
    return review_task(config, promote)


def run_review_cmd(args: argparse.Namespace, config: Config) -> int:
    from foreshock.models import registry, review

    configure_mlflow(config.data_dir)
    _quiet_mlflow()
    name = config.model_name
    try:
        if args.approve or args.rollback:
            version = args.approve or args.rollback
            move = review.approve if args.approve else review.rollback
            previous = move(config, version, by=args.by, reason=args.reason or "")
            print(f"{name}: champion is now version {version} (was {previous or 'none'})")
            return 0
        outcome = review_flow(config, promote=not args.dry_run)
    except (LookupError, ValueError) as exc:
        print(f"foreshock review: {exc}", file=sys.stderr)
        return 1

    def show(value: float | None) -> str:
        return "–" if value is None or value != value else f"{value:.4g}"  # NaN: not measured

    print(f"  {'metric':<32} {'champion':>10} {'challenger':>10}")
    for row in outcome["table"]:
        print(f"  {row['metric']:<32} {show(row['champion']):>10} {show(row['challenger']):>10}")
    for check, passed in outcome["checks"]:
        print(f"  guardrail {check}: {'pass' if passed else 'FAIL'}")
    print(outcome["decision"])
    print(f"report: {outcome['report_md']} and {outcome['report_html']}")
    print(f"aliases: {registry.aliases(name)}")
    return 0


# --------------------------------------------------------------------------------------
# score
# --------------------------------------------------------------------------------------


@task(cache_policy=NO_CACHE)
def score_task(config: Config) -> Path:
    from foreshock.models.registry import latest_snapshots, live_scores, load_champion

    champion = load_champion(config.model_name)
    from foreshock.features.store import scan_features

    snapshots = latest_snapshots(scan_features(config))
    if snapshots.height == 0:
        raise ValueError(f"no feature snapshots under {config.features_dir}: run `foreshock features` first")
    scores = live_scores(champion, snapshots)
    out_dir = config.data_dir / "scores"
    atomic_write_parquet(scores, out_dir / f"scores-{_stamp()}.parquet")
    atomic_write_parquet(scores, out_dir / "latest.parquet")
    return out_dir / "latest.parquet"


@flow(name="score", log_prints=True)
def score_flow(config: Config) -> Path:
    return score_task(config)


def run_score(args: argparse.Namespace, config: Config) -> int:
    from foreshock.models.registry import decision_horizon

    configure_mlflow(config.data_dir)
    _quiet_mlflow()
    try:
        path = score_flow(config)
    except (LookupError, ValueError) as exc:
        print(f"foreshock score: {exc}", file=sys.stderr)
        return 1
    scores = pl.read_parquet(path)
    horizon = decision_horizon(config)
    top = scores.filter(pl.col("horizon") == horizon).sort("risk", descending=True).head(args.top)
    first = scores.row(0, named=True) if scores.height else {}
    print(
        f"scored {scores['unit_id'].n_unique()} units with {first.get('model_name')} "
        f"version {first.get('model_version')} (run {first.get('run_id')}), horizon {horizon}:"
    )
    for row in top.iter_rows(named=True):
        signals = ", ".join(f"{s['signal']}={s['value']:.3g}" for s in (row["top_signals"] or []))
        print(f"  {row['unit_id']:<24} risk {row['risk']:.3f}  {signals}")
    print(f"written to {path}")
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

    review = sub.add_parser("review", help="challenger vs champion on the same window; promote only if guardrails hold")
    review.add_argument("--approve", metavar="VERSION", help="promote VERSION to champion by hand")
    review.add_argument("--rollback", metavar="VERSION", help="move champion back to an earlier VERSION")
    review.add_argument("--by", help="who approves or rolls back (default: $USER)")
    review.add_argument("--reason", help="why (recorded as a tag on the version)")
    review.add_argument("--dry-run", action="store_true", help="write the report but move no alias")
    review.set_defaults(func=run_review_cmd)

    score = sub.add_parser("score", help="risk per unit and horizon from models:/<name>@champion")
    score.add_argument("--top", type=int, default=10, help="how many units to print (default 10)")
    score.set_defaults(func=run_score)
