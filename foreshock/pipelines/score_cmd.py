"""``foreshock score``: ``models:/<name>@champion`` on the latest snapshot of every unit.

Writes ``scores/latest.parquet`` and ``scores/scores-<timestamp>.parquet`` under the data
directory. The scoring itself lives in :mod:`foreshock.models.registry.scoring`; the Prefect flow
that records a run (under ``foreshock serve``, the demo, or a configured Prefect API) is
:mod:`foreshock.pipelines.score_flow`. Without a Prefect API this command neither starts a
server nor imports Prefect: seconds on a small machine, for a second of work.
"""

from __future__ import annotations

import argparse
import logging

import polars as pl

from foreshock.config import Config
from foreshock.pipelines import inputs
from foreshock.pipelines.cycle_steps import score_latest, trust_settings
from foreshock.pipelines.runtime import (
    add_json_flag,
    configure_mlflow,
    flows_tracked,
    print_json,
    quiet_mlflow,
)

log = logging.getLogger("foreshock.score")


def run_score(args: argparse.Namespace, config: Config) -> int:
    from foreshock.models.estimators.base import decision_horizon
    from foreshock.models.registry.registry import check_champion

    configure_mlflow(config.mlflow_dir)
    quiet_mlflow()
    inputs.require_features(config)
    check_champion(config.model_name, **trust_settings(config))  # one line before a flow run
    settings = config.to_settings(args.config)
    if flows_tracked():
        from foreshock.pipelines.score_flow import score_flow

        path = score_flow(settings)
    else:  # no temporary server (nor Prefect) for a second of work
        path = score_latest(settings)
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
