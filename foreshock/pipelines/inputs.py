"""The frames several flows start from, read the same way everywhere."""

from __future__ import annotations

import logging

import polars as pl

from foreshock.config import Config
from foreshock.errors import UserError, missing
from foreshock.lake.read import lake_metrics, read_table

log = logging.getLogger("foreshock.inputs")


def features(config: Config) -> pl.DataFrame:
    """Every stored feature snapshot, sorted by unit and time; an empty store is a user error."""
    from foreshock.features.store import scan_features

    frame = scan_features(config).collect().sort("unit_id", "ts")
    if frame.height == 0:
        raise missing("no feature snapshots", config.features_dir, "features")
    return frame


def feature_source(config: Config):
    """The feature store, read lazily by time range and columns (no frame is loaded here)."""
    from foreshock.models.estimators.dataset import FeatureSource

    source = FeatureSource.from_dir(config.features_dir)
    if source.empty:
        raise missing("no feature snapshots", config.features_dir, "features")
    return source


def require_features(config: Config) -> None:
    """Fail in one line, before any flow run, when no feature snapshot has been stored."""
    if not config.features_dir.is_dir() or next(config.features_dir.rglob("*.parquet"), None) is None:
        raise missing("no feature snapshots", config.features_dir, "features")


def failures(config: Config) -> pl.DataFrame:
    return read_table(config.lake_dir, "failures")


def lake_metrics_in_catalog(config: Config, stage: str) -> list[str]:
    """The lake's metrics the configured catalog knows.

    An empty lake is a user error (run ``ingest``); so is a lake none of whose metrics
    the catalog knows.  Metrics outside the catalog are named on stderr: the stage ignores
    them, and the user should know how many and which.
    """
    stored = lake_metrics(config.lake_dir)
    if not stored:
        raise missing("no samples in the lake", config.lake_dir, "ingest")
    known = [m for m in stored if m in config.catalog]
    outside = [m for m in stored if m not in config.catalog]
    if outside:
        shown = ", ".join(outside[:20]) + (f", ... ({len(outside) - 20} more)" if len(outside) > 20 else "")
        note = (
            f"{len(outside)} of the lake's {len(stored)} metrics are not in the catalog {config.catalog.source} "
            f"and are ignored: {shown}"
        )
        if not known:
            raise UserError(f"{note}; name the catalog the lake was ingested with ([paths] catalog or --catalog)")
        log.warning("foreshock %s: note: %s", stage, note)
    return known


def drains(config: Config) -> pl.DataFrame:
    """Canonical drains (empty when none were ingested): they censor training labels."""
    return read_table(config.lake_dir, "drains")
