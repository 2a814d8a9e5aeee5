"""``foreshock [--config FILE] [--data-dir DIR] COMMAND [options]``.

Each stage module in ``pipelines/`` contributes its commands through ``register(sub)``
and receives the parsed arguments plus the loaded :class:`~foreshock.config.Config`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import pipelines.runtime  # noqa: F401  (environment defaults before Prefect loads)
from foreshock.config import load_config

# Modules that add sub-commands; each defines register(subparsers).
COMMAND_MODULES = (
    "pipelines.simulate_cmd",
    "pipelines.ingest_flow",
    "pipelines.features_flow",
    "pipelines.models_flow",
    "pipelines.registry_flow",
    "pipelines.drain_flow",
    "pipelines.reliability_cmd",
    "pipelines.demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foreshock",
        description="Predict GPU and node failures from telemetry and recommend drains.",
    )
    parser.add_argument("--config", help="configuration file (default: ./foreshock.toml if present)")
    parser.add_argument("--data-dir", help="data directory (default: FORESHOCK_DATA_DIR or ./data)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a stage not built yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
