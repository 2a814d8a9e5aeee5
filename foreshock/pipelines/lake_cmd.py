"""``foreshock lake``: rows, units and time span of each lake table."""

from __future__ import annotations

import argparse

from foreshock.config import Config
from foreshock.lake import format_lake_summary, lake_summary


def show_lake(args: argparse.Namespace, config: Config) -> int:
    print(format_lake_summary(lake_summary(config.lake_dir)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    lake = sub.add_parser("lake", help="print a summary of the lake (rows, units, span per table)")
    lake.set_defaults(func=show_lake)
