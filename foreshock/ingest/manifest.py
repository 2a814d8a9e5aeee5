"""The ingest manifest: which files are already in the lake, by content hash.

``<lake>/_manifest.parquet`` holds one row per ingested file: ``path``, ``context``,
``sha256``, ``size``, ``mtime_ns``, ``format``, ``rows_read``, ``rows_stored``,
``rows_quarantined``, ``duplicates_dropped``, ``ingested_at``, ``run_id``, ``rows_updated``
and ``path_bytes`` (added later: null in rows of an older manifest).  File names are
stored losslessly: ``path_bytes`` holds the name's bytes as the file system has them, and
``path`` a readable text form (bytes that are not UTF-8 shown as ``\\xNN``), so a landing
file with any name can be recorded; a name that has no bytes form is rejected when the
run is planned, before any row is merged.  A file is
already ingested when a row has the same content hash and context (the part of the path
a parser reads meaning from: the node directory of an nvidia-smi or rasdaemon file), so
the same file twice is a no-op and a changed file is read again.  Rows are added under the
lake lock, atomically, and only after the file's rows were merged, so a run killed in the
middle leaves its unfinished files unrecorded and the rerun reads them again (the lake's
deduplication makes that exact).
"""

from __future__ import annotations

import hashlib
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from foreshock.lake.atomic import atomic_write_parquet
from foreshock.lake.locks import lake_lock

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
    "path_bytes": pl.Binary(),
}
# Formats whose parser takes the node from the file's directory name.
DIRECTORY_CONTEXT = {"nvidia-smi", "rasdaemon"}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Characters that would break a report's or a log's line: control characters and the
# Unicode line and paragraph separators.
LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def shown_name(name: str | os.PathLike) -> str:
    """A file name as valid text on one line: bytes that are not UTF-8 (held by Python as
    lone surrogates) shown as ``\\xNN``, control characters (a newline, a tab) and line
    separators escaped as ``\\n``, ``\\t``, ``\\x1b``, ``\\u2028``.  Unchanged for every
    name that is printable UTF-8; the manifest keeps the name's bytes besides."""
    text = os.fspath(name)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = os.fsencode(text).decode("utf-8", errors="backslashreplace")
    return LINE_BREAKING.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def name_bytes(path: str | os.PathLike) -> bytes:
    """The file system's bytes of a name.

    Raises
    ------
    ValueError
        When the name has no bytes form (a lone surrogate that did not come from the file
        system): the manifest could not record it.
    """
    try:
        return os.fsencode(path)
    except UnicodeEncodeError as exc:
        raise ValueError(f"file name cannot be represented as bytes: {shown_name(path)!r} ({exc.reason})") from None


def path_from_bytes(raw: bytes) -> Path:
    return Path(os.fsdecode(raw))


def file_context(path: Path, fmt: str) -> str:
    return shown_name(Path(path).parent.name) if fmt in DIRECTORY_CONTEXT else ""


def manifest_path(lake_dir: Path) -> Path:
    return Path(lake_dir) / MANIFEST_NAME


def read_manifest(lake_dir: Path) -> pl.DataFrame:
    path = manifest_path(lake_dir)
    if not path.exists():
        return pl.DataFrame(schema=SCHEMA)
    return pl.read_parquet(path)


def record_files(lake_dir: Path, entries: list[dict], compression_level: int | None = None) -> None:
    """Add ingested files (dicts with the manifest's columns) under the lake lock, written
    with the zstd level ``compression_level`` (``[lake] compression_level``)."""
    if not entries:
        return
    now = datetime.now(UTC)
    new = pl.DataFrame([{**e, "ingested_at": e.get("ingested_at", now)} for e in entries], schema=SCHEMA)
    with lake_lock(lake_dir):
        # diagonal: a manifest written before a column was added still merges.
        merged = pl.concat([read_manifest(lake_dir), new], how="diagonal_relaxed")
        merged = merged.unique(subset=["sha256", "context"], keep="first", maintain_order=True)
        atomic_write_parquet(merged, manifest_path(lake_dir), compression_level=compression_level)
