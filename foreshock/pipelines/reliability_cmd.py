"""``foreshock reliability``: fleet reliability by cohort and location from the lake."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import polars as pl

from foreshock.config import Config
from foreshock.errors import UserError, missing
from foreshock.lake import atomic_write_text, read_table, scan_table
from foreshock.models.reliability import reliability_markdown, unit_lives


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


def run(args: argparse.Namespace, config: Config) -> int:
    inventory = read_table(config.lake_dir, "inventory")
    if inventory.height == 0:
        raise missing("no inventory", config.lake_dir, "ingest")
    by = [c.strip() for c in args.by.split(",") if c.strip()]
    unknown = [c for c in by if c not in inventory.columns]
    if unknown:
        raise UserError(f"--by {unknown} not inventory columns {inventory.columns}")
    # telemetry starts observation; a failure history alone is observed since installation
    first_sample = scan_table(config.lake_dir, "samples").select(pl.col("ts").min()).collect().item()
    lives = unit_lives(
        inventory,
        read_table(config.lake_dir, "failures"),
        _observed_until(config, args.until),
        mode=args.mode,
        observed_from=first_sample,
    )
    report = reliability_markdown(lives, by)
    path = config.reports_dir / (f"reliability-{args.mode}.md" if args.mode else "reliability.md")
    atomic_write_text(path, report)
    print(report)
    print(f"written to {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("reliability", help="Kaplan–Meier, Weibull and Cox reliability by cohort and location")
    parser.add_argument("--by", default="rack,lot", help="inventory columns, comma-separated (default rack,lot)")
    parser.add_argument("--mode", help="analyse one failure mode (others censor)")
    parser.add_argument("--until", help="end of observation (ISO 8601); default: latest time in the lake")
    parser.set_defaults(func=run)
