"""``foreshock status``: is the pipeline healthy?

For each part — lake, features, scores, outbox, the registered champion — the newest
timestamp, its age, row counts and whether the age is within ``[status] <part>_max_age``
(the check: :mod:`foreshock.reporting.freshness`, which the fleet page shows too).
Exit 0 when every part is fresh, 1 when one is stale, 2 when one is broken (missing or
unreadable): a cron job or a monitoring probe can alert on the code alone.  Below the
table, the repeat offenders (:mod:`foreshock.drain.lemons`) of the ``[lemon] window``
before the lake's newest sample (or now, if earlier); they do not change the exit code.
"""

from __future__ import annotations

import argparse
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from foreshock.config import Config
from foreshock.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from foreshock.pipelines.runtime import add_json_flag, configure_mlflow, print_json
from foreshock.reporting.freshness import BROKEN, OK, STALE, as_utc, mlflow_store_found, overall, pipeline_status
from foreshock.reporting.freshness_report import STATUS_TEXTFILE, format_status, render_textfile, status_textfile_path

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger("foreshock.status")

EXIT_CODES = {OK: EXIT_OK, STALE: EXIT_FAILURE, BROKEN: EXIT_USAGE}


def run_status(args: argparse.Namespace, config: Config) -> int:
    now = as_utc(datetime.fromisoformat(args.now)) if args.now else datetime.now(UTC)
    if mlflow_store_found(config):  # never create a store just to find it empty
        configure_mlflow(config.mlflow_dir)
    parts = pipeline_status(config, now)
    state = overall(parts)
    lemons = _repeat_offenders(config, now, parts)
    if args.textfile is not None:
        from foreshock.drain.textfile import render_repeat_offenders, write_textfile

        target = args.textfile or status_textfile_path(config)
        text = render_textfile(parts, now) + (render_repeat_offenders(lemons[2]) if lemons[2] is not None else "")
        log.info("status gauges written to %s", write_textfile(target, text))
    if args.json:
        print_json(
            {
                "state": state,
                "checked_at": now.isoformat(),
                "parts": [p.to_dict() for p in parts],
                "repeat_offenders": lemons[1],
            }
        )
    else:
        print(format_status(parts, now))
        print(lemons[0])
    for p in parts:
        if p.state != OK:
            log.warning("%s is %s: %s", p.part, p.state, p.detail)
    return EXIT_CODES[state]


def _repeat_offenders(config: Config, now: datetime, parts: list) -> tuple[str, list[dict], pl.DataFrame | None]:
    """The repeat offenders as text lines, as JSON rows and as their table (for the gauges);
    no rows and no table when the lake is unreadable."""
    from foreshock.drain.lemons import LemonSettings, lake_lemons, offender_lines

    lake = next((p for p in parts if p.part == "lake"), None)
    end = min(now, lake.newest) if lake is not None and lake.newest is not None else now
    try:
        table, _ = lake_lemons(config, end)
    except (OSError, ValueError) as exc:  # the lake's own state is in the table above
        return f"repeat offenders: not read ({exc})", [], None
    flagged = table.filter(table["lemon"].is_not_null())
    return offender_lines(table, LemonSettings.from_config(config)), flagged.to_dicts(), table


def _iso_time(text: str) -> str:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return text


def register(sub: argparse._SubParsersAction) -> None:
    status = sub.add_parser(
        "status",
        help="freshness of lake, features, scores, outbox and champion",
        description="Newest timestamp, age, rows and state of each part of the pipeline against "
        "the [status] limits. Exit 0 healthy, 1 stale, 2 broken.",
    )
    add_json_flag(status)
    status.add_argument("--now", type=_iso_time, help="judge ages at this time (ISO 8601; default: now)")
    status.add_argument(
        "--textfile",
        nargs="?",
        const="",
        metavar="PATH",
        help=f"also write the freshness gauges for node-exporter (default PATH: {STATUS_TEXTFILE} "
        "beside the [metrics] textfile)",
    )
    status.set_defaults(func=run_status)
