"""Is the pipeline fresh? The one freshness check, behind ``foreshock status`` and the fleet
page's "Pipeline freshness" table alike.

For each part — lake, features, scores, outbox, the registered champion — the newest
timestamp (read through the owner of that part's files), its age, row counts and whether
the age is within ``[status] <part>_max_age``: *ok*, *stale*, or *broken* when the part is
missing or unreadable.  :mod:`foreshock.reporting.freshness_report` renders the parts as a
terminal table and as Prometheus gauges.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import polars as pl

from foreshock.config import Config
from foreshock.durations import parse_duration
from foreshock.lake.read import scan_table

log = logging.getLogger("foreshock.status")

OK, STALE, BROKEN = "ok", "stale", "broken"
PARTS = ("lake", "features", "scores", "outbox", "champion")
MLFLOW_STORE_FILE = "mlflow.db"  # the embedded store foreshock.config.mlflow_tracking_uri names


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


def as_utc(value: datetime | None) -> datetime | None:
    """``value`` in UTC (a naive time is taken as UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def judge(
    part: str, newest: datetime | None, rows: int | None, now: datetime, limit: str, detail: str = ""
) -> PartStatus:
    """A part's state at ``now``: broken without a newest timestamp, stale past ``limit``."""
    if newest is None:
        return PartStatus(part, BROKEN, rows=rows, max_age=limit, detail=detail or "nothing stored yet")
    age = (now - newest).total_seconds()
    state = STALE if age > parse_duration(limit).total_seconds() else OK
    return PartStatus(part, state, newest, max(age, 0.0), limit, rows, detail)


# Each check returns (newest timestamp, rows, detail); a missing part has no newest timestamp.
Check = Callable[[Config], tuple[datetime | None, int | None, str]]


def lake_status(config: Config) -> tuple[datetime | None, int, str]:
    samples = scan_table(config.lake_dir, "samples").select(pl.len().alias("rows"), pl.col("ts").max().alias("last"))
    row = samples.collect().row(0, named=True)
    if not row["rows"]:
        return None, 0, f"no samples under {config.lake_dir}: run `foreshock ingest` or `foreshock pull`"
    return as_utc(row["last"]), int(row["rows"]), "newest telemetry sample"


def features_status(config: Config) -> tuple[datetime | None, int, str]:
    from foreshock.features.store import last_snapshot, scan_features

    rows = scan_features(config).select(pl.len()).collect().item()
    if not rows:
        return None, 0, f"no snapshots under {config.features_dir}: run `foreshock features`"
    return as_utc(last_snapshot(config.features_dir)), int(rows), "newest snapshot stored by every shard"


def scores_status(config: Config) -> tuple[datetime | None, int, str]:
    from foreshock.models.registry.score_files import latest_path, newest_scored

    path = latest_path(config.scores_dir)
    newest = newest_scored(config.scores_dir)
    if newest is None:
        return None, 0, f"no {path}: run `foreshock score`"
    return as_utc(newest[0]), newest[1], f"newest scored snapshot in {path.name}"


def outbox_status(config: Config) -> tuple[datetime | None, int, str]:
    from foreshock.drain.outbox_files import newest_list_dir, published_rows, read_manifest

    directory = newest_list_dir(config.outbox_dir)
    if directory is None:
        return None, 0, f"no risk list under {config.outbox_dir}: run `foreshock publish`"
    generated_at = datetime.fromisoformat(read_manifest(directory)["generated_at"])
    return as_utc(generated_at), published_rows(directory), f"newest risk list {directory.name}"


def mlflow_store_found(config: Config) -> bool:
    """A tracking URI is set, or the embedded store exists: the champion can be looked up
    without creating a store."""
    return bool(os.environ.get("MLFLOW_TRACKING_URI")) or (config.mlflow_dir / MLFLOW_STORE_FILE).is_file()


def champion_status(config: Config) -> tuple[datetime | None, int | None, str]:
    """The registered champion's creation time.  MLflow must already point at the store
    (the command's ``configure_mlflow`` when :func:`mlflow_store_found`)."""
    from foreshock.models.registry.registry import find_alias

    if not mlflow_store_found(config):
        return None, None, f"no MLflow store in {config.mlflow_dir}: run `foreshock train` and `foreshock review`"
    uri = os.environ.get("MLFLOW_TRACKING_URI", str(config.mlflow_dir))
    version = find_alias(config.model_name, "champion")  # no MLflow import where the store allows
    if version is None:
        return None, None, f"no {config.model_name}@champion in {uri}: run `foreshock train` and `foreshock review`"
    created = datetime.fromtimestamp(version.creation_timestamp / 1000, UTC)
    return created, None, f"{config.model_name} version {version.version} (run {version.run_id})"


CHECKS: dict[str, Check] = {
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
        out.append(judge(part, newest, rows, now, limit, detail))
    return out


def overall(parts: list[PartStatus]) -> str:
    """The pipeline's state: broken if any part is, else stale if any part is, else ok."""
    states = {p.state for p in parts}
    return BROKEN if BROKEN in states else STALE if STALE in states else OK
