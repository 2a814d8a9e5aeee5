"""``foreshock reliability``: fleet reliability by cohort and location from the lake."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import polars as pl

from foreshock.config import Config
from foreshock.errors import UserError, missing
from foreshock.lake.read import read_table, scan_table
from foreshock.models.reliability.fleet import ReliabilitySettings, analyse_fleet, config_duration_days
from foreshock.models.reliability.lives import unit_lives
from foreshock.models.reliability.reliability_report import write_reliability_report


def _observed_until(config: Config, until: str | None) -> datetime:
    if until:
        moment = datetime.fromisoformat(until.replace("Z", "+00:00"))
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    latest = [
        scan_table(config.lake_dir, "samples").select(pl.col("ts").max()).collect().item(),
        scan_table(config.lake_dir, "failures").select(pl.col("failed_at").max()).collect().item(),
    ]
    latest = [t for t in latest if t is not None]
    if not latest:
        raise ValueError("the lake has no samples or failures: pass --until")
    return max(latest)


def _columns(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(c.strip() for c in text.split(",") if c.strip())


def run(args: argparse.Namespace, config: Config) -> int:
    inventory = read_table(config.lake_dir, "inventory")
    if inventory.height == 0:
        raise missing("no inventory", config.lake_dir, "ingest")
    settings = ReliabilitySettings.from_config(
        config,
        by=_columns(args.by),
        strata=_columns(args.strata),
        numeric=_columns(args.numeric),
        ages_days=tuple(config_duration_days(a) for a in _columns(args.ages)) if args.ages else None,
        job_gpus=tuple(int(n) for n in _columns(args.job_gpus)) if args.job_gpus else None,
    )
    wanted = {*settings.by, *settings.strata}
    unknown = sorted(c for c in wanted if c not in inventory.columns)
    if unknown:
        raise UserError(f"{unknown} not inventory columns {inventory.columns}")
    # telemetry starts observation; a failure history alone is observed since installation
    first_sample = scan_table(config.lake_dir, "samples").select(pl.col("ts").min()).collect().item()
    until = _observed_until(config, args.until)
    lives = unit_lives(
        inventory, read_table(config.lake_dir, "failures"), until, mode=args.mode, observed_from=first_sample
    )
    result = analyse_fleet(lives, settings, observed_from=first_sample, observed_until=until)
    path = config.reports_dir / (f"reliability-{args.mode}.md" if args.mode else "reliability.md")
    files = write_reliability_report(result, path, plots=not args.no_plots)
    print(path.read_text())
    print(f"written to {path}" + (f" (+{len(files) - 1} figures)" if len(files) > 1 else ""))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("reliability", help="Kaplan–Meier, Weibull and Cox reliability by cohort and location")
    parser.add_argument("--by", help="cohort columns, comma-separated (default [reliability] by: rack,lot)")
    parser.add_argument("--strata", help="columns the Cox model stratifies by (e.g. lot)")
    parser.add_argument("--numeric", help="Cox covariates entered per unit step rather than by level")
    parser.add_argument("--ages", help="ages to report survival at, e.g. 365d,730d (default: spread over the data)")
    parser.add_argument("--job-gpus", help="job sizes for the interruption table, e.g. 8,1024,16384")
    parser.add_argument("--mode", help="analyse one failure mode (others censor)")
    parser.add_argument("--until", help="end of observation (ISO 8601); default: latest time in the lake")
    parser.add_argument("--no-plots", action="store_true", help="skip the figures")
    parser.set_defaults(func=run)
