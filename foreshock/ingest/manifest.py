"""The ingest manifest: which files are already in the lake, by content hash.

``<lake>/_manifest.parquet`` holds one row per ingested file: ``path``, ``context``,
``sha256``, ``size``, ``mtime_ns``, ``format``, ``rows_read``, ``rows_stored``,
``rows_quarantined``, ``duplicates_dropped``, ``ingested_at``, ``run_id``, ``rows_updated``
(added later: null in rows of an older manifest).  A file is
already ingested when a row has the same content hash and context (the part of the path
a parser reads meaning from: the node directory of an nvidia-smi or rasdaemon file), so
the same file twice is a no-op and a changed file is read again.  Rows are added under the
lake lock, atomically, and only after the file's rows were merged, so a run killed in the
middle leaves its unfinished files unrecorded and the rerun reads them again (the lake's
deduplication makes that exact).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from foreshock.lake import atomic_write_parquet, lake_lock

MANIFEST_NAME = "_manifest.parquet"
SCHEMA: dict[str, pl.DataType] = {
    "path": pl.String(),
    "context": pl.String(),
    "sha256": pl.String(),
    "size": pl.Int64(),
    "mtime_ns": pl.Int64(),
    "format": pl.String(),
    "rows_read": pl.Int64(),
    "rows_stored": pl.Int64(),
    "rows_quarantined": pl.Int64(),
    "duplicates_dropped": pl.Int64(),
    "ingested_at": pl.Datetime("us", "UTC"),
    "run_id": pl.String(),
    "rows_updated": pl.Int64(),
}
# Formats whose parser takes the node from the file's directory name.
DIRECTORY_CONTEXT = {"nvidia-smi", "rasdaemon"}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_context(path: Path, fmt: str) -> str:
    return Path(path).parent.name if fmt in DIRECTORY_CONTEXT else ""


def manifest_path(lake_dir: Path) -> Path:
    return Path(lake_dir) / MANIFEST_NAME


def read_manifest(lake_dir: Path) -> pl.DataFrame:
    path = manifest_path(lake_dir)
    if not path.exists():
        return pl.DataFrame(schema=SCHEMA)
    return pl.read_parquet(path)


def record_files(lake_dir: Path, entries: list[dict]) -> None:
    """Add ingested files (dicts with the manifest's columns) under the lake lock."""
    if not entries:
        return
    now = datetime.now(UTC)
    new = pl.DataFrame([{**e, "ingested_at": e.get("ingested_at", now)} for e in entries], schema=SCHEMA)
    with lake_lock(lake_dir):
        # diagonal: a manifest written before a column was added still merges.
        merged = pl.concat([read_manifest(lake_dir), new], how="diagonal_relaxed")
        merged = merged.unique(subset=["sha256", "context"], keep="first", maintain_order=True)
        atomic_write_parquet(merged, manifest_path(lake_dir))
