"""``foreshock report``: the fleet risk page, one self-contained HTML file.

data dir -> foreshock.reporting.fleet_status (gather) -> fleet_status_report (render)
         -> data/reports/fleet-<timestamp>.html and data/reports/fleet.html
"""

from __future__ import annotations

import argparse

from foreshock.config import Config
from foreshock.errors import missing
from foreshock.pipelines.runtime import configure_mlflow


def run(args: argparse.Namespace, config: Config) -> int:
    from foreshock.reporting.fleet_status import fleet_status
    from foreshock.reporting.fleet_status_report import newest_page_path, write_fleet_page

    if not config.lake_dir.is_dir():
        raise missing("no lake", config.lake_dir, "ingest")
    configure_mlflow(config.mlflow_dir)
    status = fleet_status(config, top=args.top)
    path = write_fleet_page(status, config.reports_dir)
    print(f"fleet risk page: {path}")
    print(f"newest copy:     {newest_page_path(config.reports_dir)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("report", help="the fleet risk page: one self-contained HTML file under data/reports/")
    parser.add_argument("--top", type=int, default=8, help="units shown with their risk over time (default 8)")
    parser.set_defaults(func=run)
