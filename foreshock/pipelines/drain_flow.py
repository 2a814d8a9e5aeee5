"""``foreshock publish`` and ``foreshock replay``: drain recommendations for operations.

publish: data/scores/latest.parquet -> foreshock.drain.outbox.publish -> data/outbox/<ts>/
replay:  data/backtest/scores.parquet + failures -> foreshock.drain.replay -> data/reports/replay/

The logic lives in ``foreshock.drain``; these flows only wire paths together.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config

SINFO_FORMAT = "%N|%T|%E"


def _node_states(args: argparse.Namespace) -> pl.DataFrame | None:
    """Scheduler node states from ``--node-states FILE`` or a live ``sinfo`` (``--sinfo``)."""
    from foreshock.drain.slurm import read_sinfo

    if getattr(args, "node_states", None):
        return read_sinfo(Path(args.node_states).read_text())
    if getattr(args, "sinfo", False):
        if shutil.which("sinfo") is None:
            raise FileNotFoundError("--sinfo: sinfo is not on PATH")
        out = subprocess.run(
            ["sinfo", "--noheader", "--Node", f"--format={SINFO_FORMAT}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return read_sinfo(out.stdout)
    return None


@task(cache_policy=NO_CACHE)
def write_outbox(
    config: Config, scores_path: Path | None, node_states_path: Path | None, model: str | None = None
) -> Path:
    """Run the policy on the latest scores and write a new outbox directory."""
    from foreshock.drain.outbox import publish
    from foreshock.drain.slurm import read_sinfo

    node_states = read_sinfo(Path(node_states_path).read_text()) if node_states_path else None
    return publish(config, scores_path, node_states=node_states, model=model).directory


@flow(name="publish", log_prints=True)
def publish_flow(
    config: Config, scores_path: Path | None = None, node_states_path: Path | None = None, model: str | None = None
) -> Path:
    return write_outbox(config, scores_path, node_states_path, model)


@task(cache_policy=NO_CACHE)
def run_replay(
    config: Config, scores_path: Path, ground_truth: Path | None, models: list[str] | None, plots: bool
) -> Path:
    """Replay the policy over the backtest scores; writes the report, returns its directory."""
    from foreshock.drain.policy import PolicySettings
    from foreshock.drain.replay import replay
    from foreshock.drain.replay_report import write_report
    from foreshock.lake import read_table

    scores = pl.read_parquet(scores_path)
    failures = read_table(config.lake_dir, "failures")
    truth = pl.read_parquet(ground_truth) if ground_truth else None
    if failures.height == 0 and truth is not None:
        failures = truth.select("unit_id", "failed_at")
    inventory = read_table(config.lake_dir, "inventory")
    report = replay(
        scores,
        failures,
        PolicySettings.from_config(config),
        alert_window=config.duration("backtest", "alert_window"),
        min_lead_time=config.duration("backtest", "min_lead_time"),
        inventory=inventory if inventory.height else None,
        ground_truth=truth,
        models=models,
    )
    out = config.reports_dir / "replay"
    write_report(report, out, plots=plots)
    return out


@flow(name="replay", log_prints=True)
def replay_flow(
    config: Config,
    scores_path: Path,
    ground_truth: Path | None = None,
    models: list[str] | None = None,
    plots: bool = True,
) -> Path:
    return run_replay(config, scores_path, ground_truth, models, plots)


def run_publish(args: argparse.Namespace, config: Config) -> int:
    from foreshock.drain.outbox import default_scores_path, format_top
    from foreshock.drain.risk_list import read_risk_list

    scores_path = Path(args.scores) if args.scores else default_scores_path(config.data_dir)
    if not scores_path.is_file():
        print(f"foreshock publish: no scores to publish: {scores_path} (run foreshock score)", file=sys.stderr)
        return 1
    node_states_path = Path(args.node_states) if args.node_states else None
    try:
        if args.sinfo:  # snapshot the live state into a file the flow can take as a path
            states = _node_states(args)
            node_states_path = config.outbox_dir / "sinfo-latest.txt"
            node_states_path.parent.mkdir(parents=True, exist_ok=True)
            node_states_path.write_text(
                "\n".join(f"{r['node']}|{r['state']}|{r['reason'] or 'none'}" for r in states.to_dicts()) + "\n"
            )
        directory = publish_flow(config, scores_path, node_states_path, args.model)
    except (FileNotFoundError, ValueError, subprocess.CalledProcessError) as exc:
        print(f"foreshock publish: {exc}", file=sys.stderr)
        return 1
    risk_list = read_risk_list(directory / "risk_list.parquet")
    print(format_top(risk_list, args.top))
    print(f"\noutbox: {directory}")
    for name in sorted(p.name for p in directory.iterdir()):
        print(f"  {name}")
    print(f"dry run the Slurm drains with: bash {directory / 'slurm_drain.sh'}  (add --apply to drain)")
    return 0


def run_replay_cmd(args: argparse.Namespace, config: Config) -> int:
    scores_path = Path(args.scores) if args.scores else config.backtest_dir / "scores.parquet"
    if not scores_path.is_file():
        print(f"foreshock replay: no backtest scores at {scores_path} (run foreshock backtest)", file=sys.stderr)
        return 1
    ground_truth = Path(args.ground_truth) if args.ground_truth else None
    if ground_truth is not None and not ground_truth.is_file():
        print(f"foreshock replay: ground truth not found: {ground_truth}", file=sys.stderr)
        return 1
    try:
        out = replay_flow(config, scores_path, ground_truth, args.models or None, not args.no_plots)
    except ValueError as exc:
        print(f"foreshock replay: {exc}", file=sys.stderr)
        return 1
    text = (out / "replay.md").read_text()
    table = "\n".join(line for line in text.splitlines() if line.startswith("|"))
    print(table)
    print(f"\nreport: {out / 'replay.md'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    _add_publish(sub)
    _add_replay(sub)


def _add_publish(sub: argparse._SubParsersAction) -> None:
    publish = sub.add_parser("publish", help="write drain recommendations and exports to data/outbox/<timestamp>/")
    publish.add_argument("--scores", help="scores file (default: data/scores/latest.parquet)")
    states = publish.add_mutually_exclusive_group()
    states.add_argument(
        "--node-states",
        help=f"file of `sinfo --noheader --Node --format='{SINFO_FORMAT.replace('%', '%%')}'` output",
    )
    states.add_argument("--sinfo", action="store_true", help="read node states from the live Slurm (sinfo)")
    publish.add_argument("--model", help="model to use when the scores hold several (the `model` column)")
    publish.add_argument("--top", type=int, default=10, help="rows of the list to print (default 10)")
    publish.set_defaults(func=run_publish)


def _add_replay(sub: argparse._SubParsersAction) -> None:
    replay = sub.add_parser("replay", help="replay the drain policy over the backtest history")
    replay.add_argument("--scores", help="backtest scores (default: data/backtest/scores.parquet)")
    replay.add_argument("--ground-truth", help="simulator ground_truth.parquet (splits failures by precursor)")
    replay.add_argument("--models", nargs="*", help="models to replay (default: all in the scores)")
    replay.add_argument("--no-plots", action="store_true", help="skip the figures")
    replay.set_defaults(func=run_replay_cmd)
