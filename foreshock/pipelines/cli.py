"""``foreshock [--config FILE] [--data-dir DIR] COMMAND [options]``.

Each command module in ``foreshock/pipelines/`` (named for its command) contributes its commands through ``register(sub)``
and receives the parsed arguments plus the loaded :class:`~foreshock.config.Config`.
Only the module of the command being run is imported: the stages pull in Prefect,
MLflow, LightGBM and lifelines, which take seconds each to import on a small machine.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

import foreshock.pipelines.runtime  # noqa: F401  (environment defaults before Prefect loads)
from foreshock.config import load_config
from foreshock.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UserError
from foreshock.lake import remove_temp_files
from foreshock.pipelines.runtime import stop_servers_on_signals

# command -> (module that registers it, one-line help for the command list)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("foreshock.pipelines.simulate_cmd", "write a simulated fleet's raw telemetry in real formats"),
    "ingest": ("foreshock.pipelines.ingest_flow", "parse, validate and merge raw telemetry into the lake"),
    "lake": ("foreshock.pipelines.lake_cmd", "print a summary of the lake (rows, units, span per table)"),
    "features": ("foreshock.pipelines.features_flow", "compute feature snapshots from the lake (incremental)"),
    "backtest": ("foreshock.pipelines.backtest_flow", "walk-forward backtest of every model; lead-time report"),
    "train": ("foreshock.pipelines.train_flow", "fit on all labelled history, log to MLflow, register a challenger"),
    "review": (
        "foreshock.pipelines.review_flow",
        "challenger vs champion on the same window; promote if guardrails hold",
    ),
    "score": ("foreshock.pipelines.score_flow", "risk per unit and horizon from models:/<name>@champion"),
    "publish": (
        "foreshock.pipelines.publish_flow",
        "write drain recommendations and exports to data/outbox/<timestamp>/",
    ),
    "replay": ("foreshock.pipelines.replay_flow", "replay the drain policy over the backtest history"),
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


# Errors that mean "bad usage or input" (exit 2, one line). KeyError and IndexError are
# LookupErrors too, but from our own code they are bugs: they stay failures (exit 1).
USER_ERRORS = (UserError, FileNotFoundError, NotADirectoryError, ValueError, LookupError)
BUG_ERRORS = (KeyError, IndexError)


def exit_code(exc: BaseException) -> int:
    """The one mapping from an exception to the process exit status (docs/architecture.md)."""
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, USER_ERRORS) and not isinstance(exc, BUG_ERRORS):
        return EXIT_USAGE
    return EXIT_FAILURE


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)  # bad usage: argparse prints it and exits 2
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    where = f"foreshock {args.command}" if args.command else "foreshock"
    stop_servers_on_signals()
    try:
        config = load_config(args.config, data_dir=args.data_dir)
        remove_temp_files(config.data_dir, only_dead_writers=True)  # left by a killed run
        return int(args.func(args, config) or EXIT_OK)
    except BaseException as exc:  # noqa: BLE001 - every error leaves through the one mapping
        if isinstance(exc, SystemExit):
            raise
        code = exit_code(exc)
        if code == EXIT_FAILURE:
            traceback.print_exc(file=sys.stderr)
        print(f"{where}: {exc}" if str(exc) else f"{where}: {type(exc).__name__}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
