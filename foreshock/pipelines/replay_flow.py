"""``foreshock replay``: the drain policy replayed over the backtest history.

data/backtest/scores.parquet + failures -> foreshock.drain.replay -> data/reports/replay/

The logic lives in ``foreshock.drain.replay`` (maths) and ``replay_report`` (rendering).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.errors import MissingInputError, UserError


@task(cache_policy=NO_CACHE)
def run_replay(
    settings: dict, scores_path: str, ground_truth: str | None, models: list[str] | None, plots: bool
) -> str:
    """Replay the policy over the backtest scores; writes the report, returns its directory."""
    from foreshock.drain.replay import replay
    from foreshock.drain.replay_report import replay_dir, write_report
    from foreshock.drain.settings import PolicySettings
    from foreshock.lake.read import read_table

    config = Config.from_settings(settings)
    scores = pl.read_parquet(scores_path)
    failures = read_table(config.lake_dir, "failures")
    truth = pl.read_parquet(ground_truth) if ground_truth else None
    if failures.height == 0 and truth is not None:
        failures = truth.select("unit_id", "failed_at")
    inventory = read_table(config.lake_dir, "inventory")
    drains = read_table(config.lake_dir, "drains")  # recorded drains: incidents of repeat offenders
    report = replay(
        scores,
        failures,
        PolicySettings.from_config(config),
        alert_window=config.duration("backtest", "alert_window"),
        min_lead_time=config.duration("backtest", "min_lead_time"),
        inventory=inventory if inventory.height else None,
        ground_truth=truth,
        models=models,
        drains=drains if drains.height else None,
    )
    out = replay_dir(config.reports_dir)
    write_report(report, out, plots=plots)
    return str(out)


@flow(name="replay", log_prints=True, validate_parameters=False)
def replay_flow(
    settings: dict,
    scores_path: str,
    ground_truth: str | None = None,
    models: list[str] | None = None,
    plots: bool = True,
) -> str:
    return run_replay(settings, scores_path, ground_truth, models, plots)


def run_replay_cmd(args: argparse.Namespace, config: Config) -> int:
    from foreshock.drain.replay_report import MARKDOWN_FILE
    from foreshock.models.evaluation.backtest_report import scores_path as backtest_scores

    scores_path = Path(args.scores) if args.scores else backtest_scores(config.backtest_dir)
    if not scores_path.is_file():
        raise MissingInputError(f"no backtest scores at {scores_path}: run `foreshock backtest` first")
    if args.ground_truth is not None and not Path(args.ground_truth).is_file():
        raise UserError(f"ground truth not found: {args.ground_truth}")
    settings = config.to_settings(args.config)
    out = Path(replay_flow(settings, str(scores_path), args.ground_truth, args.models or None, not args.no_plots))
    text = (out / MARKDOWN_FILE).read_text()
    # the tables, each after its section heading (the repeat offenders, the learned chooser)
    shown, previous = [], ""
    for line in text.splitlines():
        if line.startswith("## ") or (line.startswith("|") and not previous.startswith("|")):
            shown.append("")  # a new section or table: a blank line before it
        if line.startswith(("|", "## ")):
            shown.append(line)
        previous = line
    print("\n".join(shown).strip("\n"))
    print(f"\nreport: {out / MARKDOWN_FILE}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    replay = sub.add_parser("replay", help="replay the drain policy over the backtest history")
    replay.add_argument("--scores", help="backtest scores (default: data/backtest/scores.parquet)")
    replay.add_argument("--ground-truth", help="simulator ground_truth.parquet (splits failures by precursor)")
    replay.add_argument("--models", nargs="*", help="models to replay (default: all in the scores)")
    replay.add_argument("--no-plots", action="store_true", help="skip the figures")
    replay.set_defaults(func=run_replay_cmd)
