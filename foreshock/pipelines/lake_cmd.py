"""``foreshock lake``: rows, units and time span of each lake table."""

from __future__ import annotations

import argparse

from foreshock.config import Config
from foreshock.lake.read import format_lake_summary, lake_summary
from foreshock.pipelines.runtime import add_json_flag, print_json


def show_lake(args: argparse.Namespace, config: Config) -> int:
    summary = lake_summary(config.lake_dir)
    if getattr(args, "json", False):
        print_json({"lake_dir": str(config.lake_dir), "tables": summary})
    else:
        print(format_lake_summary(summary))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    lake = sub.add_parser("lake", help="print a summary of the lake (rows, units, span per table)")
    add_json_flag(lake)
    lake.set_defaults(func=show_lake)
