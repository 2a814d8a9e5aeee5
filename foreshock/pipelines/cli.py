"""``foreshock [--config FILE] [--data-dir DIR] COMMAND [options]``.

Each stage module in ``pipelines/`` contributes its commands through ``register(sub)``
and receives the parsed arguments plus the loaded :class:`~foreshock.config.Config`.
Only the module of the command being run is imported: the stages pull in Prefect,
MLflow, LightGBM and lifelines, which take seconds each to import on a small machine.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import foreshock.pipelines.runtime  # noqa: F401  (environment defaults before Prefect loads)
from foreshock.config import load_config

# command -> (module that registers it, one-line help for the command list)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("foreshock.pipelines.simulate_cmd", "write a simulated fleet's raw telemetry in real formats"),
    "ingest": ("foreshock.pipelines.ingest_flow", "parse, validate and merge raw telemetry into the lake"),
    "lake": ("foreshock.pipelines.demo", "print a summary of the lake (rows, units, span per table)"),
    "features": ("foreshock.pipelines.features_flow", "compute feature snapshots from the lake (incremental)"),
    "backtest": ("foreshock.pipelines.models_flow", "walk-forward backtest of every model; lead-time report"),
    "train": ("foreshock.pipelines.registry_flow", "fit on all labelled history, log to MLflow, register a challenger"),
    "review": (
        "foreshock.pipelines.registry_flow",
        "challenger vs champion on the same window; promote if guardrails hold",
    ),
    "score": ("foreshock.pipelines.registry_flow", "risk per unit and horizon from models:/<name>@champion"),
    "publish": (
        "foreshock.pipelines.drain_flow",
        "write drain recommendations and exports to data/outbox/<timestamp>/",
    ),
    "replay": ("foreshock.pipelines.drain_flow", "replay the drain policy over the backtest history"),
    "reliability": ("foreshock.pipelines.reliability_cmd", "Kaplan-Meier, Weibull and Cox reliability by cohort"),
    "demo": ("foreshock.pipelines.demo", "run the whole pipeline on a simulated fleet"),
}


def _requested_command(argv: list[str]) -> str | None:
    """The command named on the command line (the first word that is not a global option)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in ("--config", "--data-dir"):
            skip = True
            continue
        if word.startswith("-"):
            continue
        return word
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the requested command's module is imported."""
    parser = argparse.ArgumentParser(
        prog="foreshock",
        description="Predict GPU and node failures from telemetry and recommend drains.",
    )
    parser.add_argument("--config", help="configuration file (default: ./foreshock.toml if present)")
    parser.add_argument("--data-dir", help="data directory (default: FORESHOCK_DATA_DIR or ./data)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = _requested_command(argv) if argv is not None else None
    modules = {module for command, (module, _) in COMMANDS.items() if argv is None or wanted in (command, "demo")}
    for module_name in dict.fromkeys(module for module, _ in COMMANDS.values()):
        if module_name in modules:
            importlib.import_module(module_name).register(sub)
    for command, (_, help_text) in COMMANDS.items():
        if command not in sub.choices:  # listed in --help; its module loads when it is asked for
            sub.add_parser(command, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        config = load_config(args.config, data_dir=args.data_dir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"foreshock: {exc}", file=sys.stderr)
        return 2
    result = args.func(args, config)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
