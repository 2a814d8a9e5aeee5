"""``foreshock score``: ``models:/<name>@champion`` on the latest snapshot of every unit.

Writes ``scores/latest.parquet`` and ``scores/scores-<timestamp>.parquet`` under the data
directory. The scoring itself lives in :mod:`foreshock.models.scoring`.
"""

from __future__ import annotations

import argparse
import logging

import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.errors import missing
from foreshock.lake import atomic_write_parquet
from foreshock.pipelines import inputs
from foreshock.pipelines.runtime import (
    add_json_flag,
    configure_mlflow,
    flows_tracked,
    print_json,
    quiet_mlflow,
    stamp,
)

log = logging.getLogger("foreshock.score")


@task(cache_policy=NO_CACHE)
def score_task(settings: dict) -> str:
    from foreshock.models.registry import load_champion
    from foreshock.models.scoring import live_scores

    config = Config.from_settings(settings)
    champion = load_champion(config.model_name, **trust_settings(config))
    snapshots = inputs.feature_source(config).latest()  # the last days' partitions only
    if snapshots.height == 0:
        raise missing("no feature snapshots", config.features_dir, "features")
    scores = live_scores(champion, snapshots)
    atomic_write_parquet(scores, config.scores_dir / f"scores-{stamp()}.parquet")
    atomic_write_parquet(scores, config.latest_scores)
    return str(config.latest_scores)


def trust_settings(config: Config) -> dict:
    """``[registry]`` settings for loading the champion (see models.trusted_bundle)."""
    registry = config.section("registry")
    return {
        "trusted_runs_only": bool(registry["trusted_runs_only"]),
        "trusted_source": str(registry["trusted_source"]),
    }


@flow(name="score", log_prints=True, validate_parameters=False)
def score_flow(settings: dict) -> str:
    return score_task(settings)


def run_score(args: argparse.Namespace, config: Config) -> int:
    from foreshock.models.base import decision_horizon
    from foreshock.models.registry import check_champion

    configure_mlflow(config.mlflow_dir)
    quiet_mlflow()
    inputs.require_features(config)
    check_champion(config.model_name, **trust_settings(config))  # one line before a flow run
    settings = config.to_settings(args.config)
    path = score_flow(settings) if flows_tracked() else score_task.fn(settings)  # no temporary server for it
    scores = pl.read_parquet(path)
    horizon = decision_horizon(config)
    top = scores.filter(pl.col("horizon") == horizon).sort("risk", descending=True).head(args.top)
    first = scores.row(0, named=True) if scores.height else {}
    log.info("scores written to %s", path)
    if args.json:
        print_json(
            {
                "scores": path,
                "units": scores["unit_id"].n_unique(),
                "model_name": first.get("model_name"),
                "model_version": first.get("model_version"),
                "run_id": first.get("run_id"),
                "horizon": horizon,
                "top": top.to_dicts(),
            }
        )
        return 0
    print(
        f"scored {scores['unit_id'].n_unique()} units with {first.get('model_name')} "
        f"version {first.get('model_version')} (run {first.get('run_id')}), horizon {horizon}:"
    )
    for row in top.iter_rows(named=True):
        signals = ", ".join(f"{s['signal']}={s['value']:.3g}" for s in (row["top_signals"] or []))
        print(f"  {row['unit_id']:<24} risk {row['risk']:.3f}  {signals}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    score = sub.add_parser("score", help="risk per unit and horizon from models:/<name>@champion")
    score.add_argument("--top", type=int, default=10, help="how many units to print (default 10)")
    add_json_flag(score)
    score.set_defaults(func=run_score)
