"""``foreshock publish``: drain recommendations for operations.

data/scores/latest.parquet -> foreshock.drain.outbox.publish -> data/outbox/<ts>/

The logic lives in ``foreshock.drain``; this command only wires paths together. The Prefect
flow that records a run (``foreshock serve``, the demo, a configured Prefect API) is
:mod:`foreshock.pipelines.publish_flow`; without a Prefect API the outbox is written
directly, with neither a temporary server nor Prefect imported.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import polars as pl

from foreshock.config import Config
from foreshock.errors import MissingInputError, UserError
from foreshock.models.registry.score_files import LATEST_FILE, latest_path
from foreshock.pipelines.cycle_steps import publish_outbox
from foreshock.pipelines.runtime import add_json_flag, flows_tracked, print_json

SINFO_FORMAT = "%N|%T|%E"


def _node_states(args: argparse.Namespace) -> pl.DataFrame | None:
    """Scheduler node states from ``--node-states FILE`` or a live ``sinfo`` (``--sinfo``)."""
    from foreshock.drain.slurm import read_sinfo

    if getattr(args, "node_states", None):
        return read_sinfo(Path(args.node_states).read_text())
    if getattr(args, "sinfo", False):
        if shutil.which("sinfo") is None:
            raise UserError("--sinfo: sinfo is not on PATH")
        out = subprocess.run(
            ["sinfo", "--noheader", "--Node", f"--format={SINFO_FORMAT}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return read_sinfo(out.stdout)
    return None


def run_publish(args: argparse.Namespace, config: Config) -> int:
    from foreshock.drain.health_files import summary_line
    from foreshock.drain.lemons import LemonSettings, listed_offenders
    from foreshock.drain.outbox import format_top
    from foreshock.drain.outbox_files import node_states_path as sinfo_path
    from foreshock.drain.outbox_files import read_manifest, read_published_list
    from foreshock.drain.slurm import RESUME_SCRIPT, SCRIPT_NAME

    scores_path = Path(args.scores) if args.scores else latest_path(config.scores_dir)
    if not scores_path.is_file():
        raise MissingInputError(f"no scores to publish: {scores_path}: run `foreshock score` first")
    node_states_path = Path(args.node_states) if args.node_states else None
    if args.sinfo:  # snapshot the live state into a file the flow can take as a path
        states = _node_states(args)
        node_states_path = sinfo_path(config.outbox_dir)
        node_states_path.parent.mkdir(parents=True, exist_ok=True)
        node_states_path.write_text(
            "\n".join(f"{r['node']}|{r['state']}|{r['reason'] or 'none'}" for r in states.to_dicts()) + "\n"
        )
    values = (
        config.to_settings(args.config),
        str(scores_path),
        str(node_states_path) if node_states_path else None,
        args.model,
        args.allow_stale,
    )
    if flows_tracked():
        from foreshock.pipelines.publish_flow import publish_flow

        directory = Path(publish_flow(*values))
    else:  # without a Prefect API the outbox is written directly (no temporary server, no artifact)
        directory = Path(publish_outbox(*values))
    risk_list = read_published_list(directory)
    if args.json:
        print_json(
            {
                "outbox": str(directory),
                "files": sorted(p.name for p in directory.iterdir()),
                "top": risk_list.head(args.top).to_dicts(),
            }
        )
        return 0
    print(format_top(risk_list, args.top))
    print(listed_offenders(risk_list, LemonSettings.from_config(config)))
    manifest = read_manifest(directory)
    for note in manifest.get("notes", []):
        if note.startswith("learned chooser"):
            print(note)
    print(f"\noutbox: {directory}")
    for name in sorted(p.name for p in directory.iterdir()):
        print(f"  {name}")
    if health := summary_line(directory):
        print(health)
    print(f"dry run the Slurm drains with: bash {directory / SCRIPT_NAME}  (add --apply to drain)")
    released = manifest.get("released_nodes", [])
    if released:
        print(f"{len(released)} node(s) to undrain: bash {directory / RESUME_SCRIPT}  (add --apply to resume)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    publish = sub.add_parser("publish", help="write drain recommendations and exports to data/outbox/<timestamp>/")
    publish.add_argument("--scores", help=f"scores file (default: data/scores/{LATEST_FILE})")
    states = publish.add_mutually_exclusive_group()
    states.add_argument(
        "--node-states",
        help=f"file of `sinfo --noheader --Node --format='{SINFO_FORMAT.replace('%', '%%')}'` output",
    )
    states.add_argument("--sinfo", action="store_true", help="read node states from the live Slurm (sinfo)")
    publish.add_argument("--model", help="model to use when the scores hold several (the `model` column)")
    publish.add_argument(
        "--allow-stale", action="store_true", help="publish scores older than [policy] max_score_age anyway"
    )
    publish.add_argument("--top", type=int, default=10, help="rows of the list to print (default 10)")
    add_json_flag(publish)
    publish.set_defaults(func=run_publish)
