"""Telemetry health and degradation trends of a data directory, as a publish takes them:
the lake's last ``[health] lookback`` for the findings, the feature store's last
``sparkline_span`` for the trends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import polars as pl

from foreshock.config import Config
from foreshock.features.build import lake_extent
from foreshock.features.store import newest_snapshot, scan_features
from foreshock.health.settings import HealthSettings
from foreshock.health.telemetry import empty_findings, finding_counts, telemetry_findings
from foreshock.health.trends import empty_trends, needed_columns, trend_summary, unit_trends, watch_list
from foreshock.lake.layout import partition_files
from foreshock.lake.read import read_table, scan_table


@dataclass
class HealthReport:
    """What a publish writes about telemetry health and degradation trends."""

    findings: pl.DataFrame  # telemetry.FINDING_SCHEMA
    trends: pl.DataFrame  # one row per unit and trend metric (trends.unit_trends)
    now: datetime | None  # the newest sample the findings were judged at

    @property
    def watch(self) -> pl.DataFrame:
        return watch_list(self.trends)

    @property
    def counts(self) -> dict[str, int]:
        return finding_counts(self.findings)

    def unit_trends(self) -> pl.DataFrame:
        """``unit_id, degradation_trend`` (the risk list's column)."""
        return trend_summary(self.trends)


def _table(config: Config, name: str) -> pl.DataFrame | None:
    return read_table(config.lake_dir, name) if partition_files(config.lake_dir, name) else None


def lake_findings(config: Config, settings: HealthSettings) -> tuple[pl.DataFrame, datetime | None]:
    """Findings over the lake's last ``lookback`` and the newest sample they are judged at."""
    extent = lake_extent(config.lake_dir)  # reads the newest date only, not the whole lake
    if extent is None:
        return empty_findings(), None
    newest = extent[1]
    start = newest - settings.lookback
    # A lazy scan: each check reads what it needs, the raw rows are never held whole.
    samples = scan_table(config.lake_dir, "samples", start=start.date()).filter(pl.col("ts") > start)
    inventory = read_table(config.lake_dir, "inventory")
    findings = telemetry_findings(
        samples,
        inventory,
        config.catalog,
        newest,
        settings,
        failures=_table(config, "failures"),
        drains=_table(config, "drains"),
    )
    return findings, newest


def store_trends(config: Config, settings: HealthSettings) -> pl.DataFrame:
    """Trends from the feature store's snapshots over ``sparkline_span`` (plus one window)."""
    windows = sorted(set(config.windows))
    stored = scan_features(config)
    names = set(stored.collect_schema().names())
    columns = [c for c in needed_columns(config.catalog, settings, windows) if c in names]
    newest = newest_snapshot(config.features_dir) if columns else None
    if newest is None:
        return empty_trends()
    start = newest - settings.sparkline_span - settings.trend_window
    frame = stored.select("unit_id", "ts", *columns).filter(pl.col("ts") >= start).collect()
    return unit_trends(frame, config.catalog, settings, windows)


def health_report(config: Config, settings: HealthSettings | None = None) -> HealthReport:
    """Both parts for ``config``'s data directory (the lake and the feature store)."""
    settings = settings or HealthSettings.from_config(config)
    findings, now = lake_findings(config, settings)
    return HealthReport(findings=findings, trends=store_trends(config, settings), now=now)
