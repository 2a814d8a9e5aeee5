"""``foreshock status``: is the pipeline healthy?

For each part — lake, features, scores, outbox, the registered champion — the newest
timestamp, its age, row counts and whether the age is within ``[status] <part>_max_age``.
Exit 0 when every part is fresh, 1 when one is stale, 2 when one is broken (missing or
unreadable): a cron job or a monitoring probe can alert on the code alone.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import polars as pl

from foreshock.config import Config
from foreshock.durations import parse_duration
from foreshock.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from foreshock.lake.read import scan_table
from foreshock.pipelines.runtime import add_json_flag, print_json

log = logging.getLogger("foreshock.status")

OK, STALE, BROKEN = "ok", "stale", "broken"
EXIT_CODES = {OK: EXIT_OK, STALE: EXIT_FAILURE, BROKEN: EXIT_USAGE}
PARTS = ("lake", "features", "scores", "outbox", "champion")


@dataclass
class PartStatus:
    """One part of the pipeline: its newest timestamp, age and state."""

    part: str
    state: str
    newest: datetime | None = None
    age_seconds: float | None = None
    max_age: str | None = None
    rows: int | None = None
    detail: str = ""

    def to_dict(self) -> dict:
        out = asdict(self)
        out["newest"] = self.newest.isoformat() if self.newest else None
        out["age"] = human_age(self.age_seconds) if self.age_seconds is not None else None
        return out


def human_age(seconds: float) -> str:
    """``20d11h``, ``3h05m``, ``19m``, ``42s``: two units at most, for a person scanning a table."""
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m" if minutes else f"{secs}s"


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _judge(
    part: str, newest: datetime | None, rows: int | None, now: datetime, limit: str, detail: str = ""
) -> PartStatus:
    if newest is None:
        return PartStatus(part, BROKEN, rows=rows, max_age=limit, detail=detail or "nothing stored yet")
    age = (now - newest).total_seconds()
    state = STALE if age > parse_duration(limit).total_seconds() else OK
    return PartStatus(part, state, newest, max(age, 0.0), limit, rows, detail)


def lake_status(config: Config) -> tuple[datetime | None, int, str]:
    samples = scan_table(config.lake_dir, "samples").select(pl.len().alias("rows"), pl.col("ts").max().alias("last"))
    row = samples.collect().row(0, named=True)
    if not row["rows"]:
        return None, 0, f"no samples under {config.lake_dir}: run `foreshock ingest` or `foreshock pull`"
    return _utc(row["last"]), int(row["rows"]), "newest telemetry sample"


def features_status(config: Config) -> tuple[datetime | None, int, str]:
    from foreshock.features.store import last_snapshot, scan_features

    rows = scan_features(config).select(pl.len()).collect().item()
    if not rows:
        return None, 0, f"no snapshots under {config.features_dir}: run `foreshock features`"
    return _utc(last_snapshot(config.features_dir)), int(rows), "newest snapshot stored by every shard"


def scores_status(config: Config) -> tuple[datetime | None, int, str]:
    from foreshock.models.registry.score_files import latest_path, newest_scored

    path = latest_path(config.scores_dir)
    newest = newest_scored(config.scores_dir)
    if newest is None:
        return None, 0, f"no {path}: run `foreshock score`"
    return _utc(newest[0]), newest[1], f"newest scored snapshot in {path.name}"


def outbox_status(config: Config) -> tuple[datetime | None, int, str]:
    from foreshock.drain.outbox_files import newest_list_dir, published_rows, read_manifest

    directory = newest_list_dir(config.outbox_dir)
    if directory is None:
        return None, 0, f"no risk list under {config.outbox_dir}: run `foreshock publish`"
    generated_at = datetime.fromisoformat(read_manifest(directory)["generated_at"])
    return _utc(generated_at), published_rows(directory), f"newest risk list {directory.name}"


def champion_status(config: Config) -> tuple[datetime | None, int | None, str]:
    from foreshock.models.registry.registry import find_alias
    from foreshock.pipelines.runtime import configure_mlflow

    if not os.environ.get("MLFLOW_TRACKING_URI") and not (config.mlflow_dir / "mlflow.db").is_file():
        return None, None, f"no MLflow store in {config.mlflow_dir}: run `foreshock train` and `foreshock review`"
    uri = configure_mlflow(config.mlflow_dir)
    version = find_alias(config.model_name, "champion")  # no MLflow import where the store allows
    if version is None:
        return None, None, f"no {config.model_name}@champion in {uri}: run `foreshock train` and `foreshock review`"
    created = datetime.fromtimestamp(version.creation_timestamp / 1000, UTC)
    return created, None, f"{config.model_name} version {version.version} (run {version.run_id})"


CHECKS = {
    "lake": lake_status,
    "features": features_status,
    "scores": scores_status,
    "outbox": outbox_status,
    "champion": champion_status,
}


def pipeline_status(config: Config, now: datetime | None = None) -> list[PartStatus]:
    """Every part's status at ``now`` (default: the current time)."""
    now = now or datetime.now(UTC)
    limits = config.section("status")
    out = []
    for part, check in CHECKS.items():
        limit = str(limits[f"{part}_max_age"])
        try:
            newest, rows, detail = check(config)
        except Exception as exc:  # noqa: BLE001 - an unreadable part is reported, not raised
            log.debug("status of %s failed", part, exc_info=True)
            out.append(PartStatus(part, BROKEN, max_age=limit, detail=f"{type(exc).__name__}: {exc}"))
            continue
        out.append(_judge(part, newest, rows, now, limit, detail))
    return out


def overall(parts: list[PartStatus]) -> str:
    states = {p.state for p in parts}
    return BROKEN if BROKEN in states else STALE if STALE in states else OK


def format_status(parts: list[PartStatus], now: datetime) -> str:
    lines = [f"{'part':<9} {'state':<7} {'newest (UTC)':<17} {'age':>6} {'limit':>6} {'rows':>12}  detail"]
    for p in parts:
        d = p.to_dict()
        newest = f"{p.newest:%Y-%m-%d %H:%M}" if p.newest else "-"
        rows = f"{p.rows:,}" if p.rows is not None else "-"
        lines.append(
            f"{p.part:<9} {p.state:<7} {newest:<17} {d['age'] or '-':>6} {p.max_age or '-':>6} {rows:>12}  {p.detail}"
        )
    lines.append(f"pipeline: {overall(parts)} at {now:%Y-%m-%d %H:%M:%S} UTC")
    return "\n".join(lines)


STATUS_TEXTFILE = "foreshock_status.prom"


def render_textfile(parts: list[PartStatus], now: datetime) -> str:
    """The parts' freshness as Prometheus gauges for node-exporter's textfile collector:
    ``foreshock_part_newest_timestamp_seconds``, ``foreshock_part_age_seconds``,
    ``foreshock_part_max_age_seconds`` and ``foreshock_part_ok`` (1 fresh, 0 stale or
    broken) per ``part``, so Grafana and Alertmanager see a stalled lake, features or
    champion as well as stale scores."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    label = ["part"]
    newest = Gauge("foreshock_part_newest_timestamp_seconds", "Newest timestamp of the part", label, registry=registry)
    age = Gauge("foreshock_part_age_seconds", "Age of the part's newest timestamp", label, registry=registry)
    limit = Gauge("foreshock_part_max_age_seconds", "[status] <part>_max_age", label, registry=registry)
    fresh = Gauge("foreshock_part_ok", "1 when the part is within its max age, else 0", label, registry=registry)
    for p in parts:
        if p.newest is not None:
            newest.labels(p.part).set(p.newest.timestamp())
            age.labels(p.part).set(p.age_seconds or 0.0)
        if p.max_age:
            limit.labels(p.part).set(parse_duration(p.max_age).total_seconds())
        fresh.labels(p.part).set(1 if p.state == OK else 0)
    Gauge("foreshock_status_timestamp_seconds", "When status was checked", registry=registry).set(now.timestamp())
    return generate_latest(registry).decode()


def run_status(args: argparse.Namespace, config: Config) -> int:
    now = _utc(datetime.fromisoformat(args.now)) if args.now else datetime.now(UTC)
    parts = pipeline_status(config, now)
    state = overall(parts)
    if args.textfile is not None:
        from foreshock.drain.textfile import textfile_path, write_textfile

        target = args.textfile or textfile_path(config).with_name(STATUS_TEXTFILE)
        log.info("status gauges written to %s", write_textfile(target, render_textfile(parts, now)))
    if args.json:
        print_json({"state": state, "checked_at": now.isoformat(), "parts": [p.to_dict() for p in parts]})
    else:
        print(format_status(parts, now))
    for p in parts:
        if p.state != OK:
            log.warning("%s is %s: %s", p.part, p.state, p.detail)
    return EXIT_CODES[state]


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
