"""A publish's telemetry health and watch list files (beside the risk list, in the same
outbox directory, written before it is renamed into place) and their readers::

    telemetry_health.csv | .jsonl   one row per finding: kind, unit_id, node, metric, since,
                                    detail, check (foreshock.health.telemetry)
    watch.csv | .jsonl              units whose correctable ECC or row remaps are rising or
                                    accelerating, below any drain threshold too, with the
                                    unit's risk and action (foreshock.health.trends);
                                    ``sparkline`` is a list in JSON Lines, ``;``-joined in CSV

The risk list carries the same trend per unit in its ``degradation_trend`` column.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from foreshock.contract import UTC_TS
from foreshock.drain.textfile import render_health
from foreshock.health.report import HealthReport, health_report
from foreshock.health.settings import HealthSettings
from foreshock.health.telemetry import FINDING_SCHEMA
from foreshock.lake.atomic import atomic_write_text

HEALTH_STEM = "telemetry_health"
WATCH_STEM = "watch"


def health_paths(directory: Path) -> dict[str, Path]:
    """The files by name: ``telemetry_health.csv``, ``.jsonl``, ``watch.csv``, ``.jsonl``."""
    return {
        f"{stem}.{fmt}": Path(directory) / f"{stem}.{fmt}"
        for stem in (HEALTH_STEM, WATCH_STEM)
        for fmt in ("csv", "jsonl")
    }


def publish_health(config, risk_list: pl.DataFrame) -> tuple[HealthReport | None, pl.DataFrame]:
    """The health report of a publish and its risk list with ``degradation_trend`` filled
    (``[health] enabled = false``: no report, the list as it is)."""
    settings = HealthSettings.from_config(config)
    if not settings.enabled:
        return None, risk_list
    report = health_report(config, settings)
    trends = dict(report.unit_trends().iter_rows())
    if "degradation_trend" in risk_list.columns and trends:
        risk_list = risk_list.with_columns(
            pl.col("unit_id").replace_strict(trends, default=None, return_dtype=pl.String).alias("degradation_trend")
        )
    return report, risk_list


def watch_rows(report: HealthReport, risk_list: pl.DataFrame) -> pl.DataFrame:
    """The watch list with each unit's node, risk and action from the risk list."""
    watch = report.watch
    if watch.height == 0:
        return watch
    context = [c for c in ("unit_id", "node", "action", "risk") if c in risk_list.columns]
    joined = watch.join(risk_list.select(context), on="unit_id", how="left") if len(context) > 1 else watch
    lead = (
        "unit_id",
        "node",
        "metric",
        "trend",
        "action",
        "risk",
        "rate_per_day",
        "prev_rate_per_day",
        "accel_per_day2",
    )
    first = [c for c in lead if c in joined.columns]
    return joined.select(*first, *[c for c in joined.columns if c not in first])


def write_health_files(report: HealthReport, risk_list: pl.DataFrame, directory: Path) -> dict[str, Path]:
    """Write the four files atomically; returns their paths by name."""
    paths = health_paths(directory)
    findings = report.findings
    atomic_write_text(paths[f"{HEALTH_STEM}.csv"], findings.write_csv())
    atomic_write_text(paths[f"{HEALTH_STEM}.jsonl"], findings.write_ndjson())
    watch = watch_rows(report, risk_list)
    flat = (
        watch.with_columns(pl.col("sparkline").cast(pl.List(pl.String)).list.join(";"))
        if "sparkline" in watch.columns
        else watch
    )
    atomic_write_text(paths[f"{WATCH_STEM}.csv"], flat.write_csv())
    atomic_write_text(paths[f"{WATCH_STEM}.jsonl"], watch.write_ndjson())
    return paths


def health_gauges(report: HealthReport | None) -> str:
    """The textfile gauges of a publish's report ("" without one)."""
    if report is None:
        return ""
    return render_health(report.findings, report.counts, report.watch)


def _read_jsonl(path: Path) -> pl.DataFrame | None:
    if not path.is_file():
        return None
    if path.stat().st_size == 0:
        return pl.DataFrame()
    frame = pl.read_ndjson(path)
    times = [c for c in ("since", "ts") if c in frame.columns and frame.schema[c] == pl.String]
    return frame.with_columns([pl.col(c).str.to_datetime(time_zone="UTC").cast(UTC_TS) for c in times])


def read_findings(directory: Path) -> pl.DataFrame | None:
    """A publish directory's findings (None: published without them)."""
    frame = _read_jsonl(health_paths(directory)[f"{HEALTH_STEM}.jsonl"])
    if frame is None:
        return None
    return frame if frame.width else pl.DataFrame(schema=FINDING_SCHEMA)


def read_watch(directory: Path) -> pl.DataFrame | None:
    """A publish directory's watch list (None: published without one)."""
    return _read_jsonl(health_paths(directory)[f"{WATCH_STEM}.jsonl"])


def summary_line(directory: Path) -> str | None:
    """One line on a publish directory's findings and watch list (None: published without)."""
    findings, watch = read_findings(directory), read_watch(directory)
    if findings is None:
        return None
    kinds = dict(findings.group_by("kind").len().sort("len", descending=True).iter_rows()) if findings.height else {}
    trends = dict(watch.group_by("trend").len().iter_rows()) if watch is not None and watch.height else {}
    found = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "none"
    return (
        f"telemetry health: {findings.height} finding(s) ({found}) in {HEALTH_STEM}.csv; watch list: "
        f"{trends.get('accelerating', 0)} accelerating, {trends.get('rising', 0)} rising (units x metrics) in {WATCH_STEM}.csv"
    )
