"""The frames several flows start from, read the same way everywhere."""

from __future__ import annotations

import polars as pl

from foreshock.config import Config
from foreshock.errors import missing
from foreshock.lake import read_table


def features(config: Config) -> pl.DataFrame:
    """Every stored feature snapshot, sorted by unit and time; an empty store is a user error."""
    from foreshock.features.store import scan_features

    frame = scan_features(config).collect().sort("unit_id", "ts")
    if frame.height == 0:
        raise missing("no feature snapshots", config.features_dir, "features")
    return frame


def feature_source(config: Config):
    """The feature store, read lazily by time range and columns (no frame is loaded here)."""
    from foreshock.models.dataset import FeatureSource

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


def drains(config: Config) -> pl.DataFrame:
    """Canonical drains (empty when none were ingested): they censor training labels."""
    return read_table(config.lake_dir, "drains")
