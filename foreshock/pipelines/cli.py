"""``foreshock [--config FILE] [--data-dir DIR] [-v|-q] [--log-format text|json] COMMAND [options]``.

Results a user asked for go to stdout (``--json`` on status, lake, score and publish);
progress and diagnostics are log lines on stderr with a UTC timestamp and a level.
Exit codes (:mod:`foreshock.errors`): 0 ok, 1 failure, 2 bad usage or input, 3 partial.

Each command module in ``foreshock/pipelines/`` (named for its command) contributes its commands through ``register(sub)``
and receives the parsed arguments plus the loaded :class:`~foreshock.config.Config`.
Only the module of the command being run is imported: the stages pull in Prefect,
MLflow, LightGBM and lifelines, which take seconds each to import on a small machine.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from foreshock.config import load_config
from foreshock.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, is_user_error
from foreshock.lake.atomic import remove_temp_files
from foreshock.pipelines.runtime import (  # before Prefect loads
    LOG_FORMATS,
    RUNNERS,
    configure_logging,
    configure_served_runs,
    log_level,
    runner_overrides,
    stop_servers_on_signals,
)

log = logging.getLogger("foreshock.cli")

# command -> (module that registers it, one-line help for the command list)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("foreshock.pipelines.simulate_cmd", "write a simulated fleet's raw telemetry in real formats"),
    "ingest": ("foreshock.pipelines.ingest_cmd", "parse, validate and merge raw telemetry into the lake"),
    "lake": ("foreshock.pipelines.lake_cmd", "print a summary of the lake (rows, units, span per table)"),
    "features": ("foreshock.pipelines.features_cmd", "compute feature snapshots from the lake (incremental)"),
    "dictionary": (
        "foreshock.pipelines.dictionary_cmd",
        "every feature column's name pattern, meaning, unit and window",
    ),
    "backtest": ("foreshock.pipelines.backtest_flow", "walk-forward backtest of every model; lead-time report"),
    "train": ("foreshock.pipelines.train_flow", "fit on all labelled history, log to MLflow, register a challenger"),
    "review": (
        "foreshock.pipelines.review_flow",
        "challenger vs champion on the same window; promote if guardrails hold",
    ),
    "score": ("foreshock.pipelines.score_cmd", "risk per unit and horizon from models:/<name>@champion"),
    "publish": (
        "foreshock.pipelines.publish_cmd",
        "write drain recommendations and exports to data/outbox/<timestamp>/",
    ),
    "replay": ("foreshock.pipelines.replay_flow", "replay the drain policy over the backtest history"),
    "reliability": ("foreshock.pipelines.reliability_cmd", "Kaplan-Meier, Weibull and Cox reliability by cohort"),
    "report": ("foreshock.pipelines.report_cmd", "the fleet risk page: one self-contained HTML file"),
    "demo": ("foreshock.pipelines.demo", "run the whole pipeline on a simulated fleet"),
    "status": ("foreshock.pipelines.status_cmd", "freshness of lake, features, scores, outbox and champion"),
    "serve": ("foreshock.pipelines.serve_cmd", "serve the scheduled Prefect deployments (ingest, cycle, retrain)"),
    "pull": ("foreshock.pipelines.pull_cmd", "pull dcgm-exporter series from a Prometheus server into the lake"),
}

# global options that take a value (the command is the first other word)
VALUE_OPTIONS = {"--config", "--data-dir", "--log-format", "--runner", "--dask-address"}


def _requested_command(argv: list[str]) -> str | None:
    """The command named on the command line (the first word that is not a global option)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in VALUE_OPTIONS:
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
    parser.add_argument("--version", action="version", version=f"foreshock {package_version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log lines (-vv: Prefect's too)")
    parser.add_argument("-q", "--quiet", action="count", default=0, help="warnings and errors only (-qq: errors)")
    parser.add_argument(
        "--log-format", choices=LOG_FORMATS, default="text", help="log lines as text or JSON lines (default text)"
    )
    parser.add_argument("--runner", choices=RUNNERS, help="where partitioned tasks run (default: [runner] kind, local)")
    parser.add_argument("--dask-address", help="Dask scheduler, e.g. tcp://HOST:8786 (implies --runner dask)")
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


def package_version() -> str:
    try:
        return version("foreshock")
    except PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


def exit_code(exc: BaseException) -> int:
    """The one mapping from an exception to the process exit status (docs/architecture.md)."""
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if is_user_error(exc):
        return EXIT_USAGE
    return EXIT_FAILURE


def _prefect_verbosity(argv: list[str]) -> None:
    """``-vv`` shows Prefect's own log lines; set before Prefect is imported (it reads the
    level once, when it configures its logging)."""
    if "-vv" in argv or argv.count("-v") + argv.count("--verbose") >= 2:
        os.environ["PREFECT_LOGGING_LEVEL"] = "INFO"
    if _requested_command(argv) == "serve":
        configure_served_runs()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    _prefect_verbosity(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)  # bad usage: argparse prints it and exits 2
    configure_logging(log_level(args.verbose, args.quiet), args.log_format)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    where = f"foreshock {args.command}" if args.command else "foreshock"
    stop_servers_on_signals()
    try:
        config = load_config(args.config, data_dir=args.data_dir)
        log.debug("%s: configuration %s, data directory %s", where, config.source, config.data_dir)
        config = config.with_overrides(runner_overrides(args.runner, args.dask_address))
        remove_temp_files(config.data_dir, only_dead_writers=True)  # left by a killed run
        return int(args.func(args, config) or EXIT_OK)
    except BaseException as exc:  # noqa: BLE001 - every error leaves through the one mapping
        if isinstance(exc, SystemExit):
            raise
        code = exit_code(exc)
        message = f"{where}: {exc}" if str(exc) else f"{where}: {type(exc).__name__}"
        # a failure keeps its traceback for the report; bad input is one line
        log.error(message, exc_info=code == EXIT_FAILURE)
        return code


if __name__ == "__main__":
    sys.exit(main())
