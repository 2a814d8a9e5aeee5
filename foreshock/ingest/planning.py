"""Planning an ingest: find, recognise and batch the files of a landing path that are not
ingested yet.

Batches: inventory files first (units are resolved and checked against the inventory),
then files grouped by the day in their path (``nvidia-smi/<node>/2026-11-01.csv``,
``dcgm/2026-11-01/...``) so each merge rewrites only that day's partitions, then the files
without a day (scrapes, kernel logs, tickets).  A batch is capped in bytes to bound memory.
A plan is plain values (it crosses Prefect task boundaries: paths, never frames).
"""

from __future__ import annotations

import os
import re
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from foreshock.config import Config
from foreshock.ingest import manifest
from foreshock.ingest.csv_table import read_csv_header
from foreshock.ingest.detect import detect_format, skip_reason
from foreshock.ingest.parsers import FORMATS
from foreshock.ingest.parsers.canonical import table_of
from foreshock.ingest.report import FileReport

SOURCES = ("auto", *FORMATS)
MAX_BATCH_BYTES = 256 * 1024 * 1024
DETECT_BYTES = 65536
DAY_IN_PATH = re.compile(r"(\d{4}-\d{2}-\d{2})")


@dataclass
class PlannedFile:
    """A file the run will read (plain values: it crosses Prefect task boundaries)."""

    path: str
    format: str
    sha256: str
    size: int
    mtime_ns: int
    context: str
    day: str | None = None
    inventory: bool = False
    # The name's bytes (hex): ``path`` is the readable text form (see manifest.shown_name).
    path_hex: str = ""

    def open_path(self) -> Path:
        return manifest.path_from_bytes(bytes.fromhex(self.path_hex)) if self.path_hex else Path(self.path)


@dataclass
class IngestPlan:
    run_id: str
    root: str
    source: str
    batches: list[list[PlannedFile]] = field(default_factory=list)
    reports: list[FileReport] = field(default_factory=list)
    catalog_path: str | None = None
    notes: list[str] = field(default_factory=list)

    def after(self, number: int) -> list[PlannedFile] | None:
        """The batch after batch ``number`` (what ``ingest_batch`` may parse ahead), or None."""
        return self.batches[number + 1] if number + 1 < len(self.batches) else None


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-{os.getpid()}"


def parse_scrape_time(text: str | None) -> datetime | None:
    """``--scrape-time`` (ISO 8601 with ``Z`` or an offset) as an aware UTC datetime."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--scrape-time {text!r}: not an ISO 8601 time (e.g. 2026-11-30T23:50:00Z)") from None
    if value.tzinfo is None:
        raise ValueError(f"--scrape-time {text!r}: give a UTC offset or Z")
    return value.astimezone(UTC)


def _unreadable_reason(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(DETECT_BYTES)  # a bounded prefix: a 3 GB file is not read whole
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    if not data.strip():
        return "empty file" if len(data) < DETECT_BYTES else "unrecognised format (starts with blank space)"
    if b"\x00" in data:
        return "binary content, not a recognised format"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 4:
            return f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
    return "unrecognised format (use --source to name it)"


def landing_files(root: Path, follow_symlinks: bool) -> tuple[list[Path], list[tuple[Path, str]]]:
    """``(files, skipped)`` under ``root``, sorted: the regular files, and what is not read
    with the reason.  Symbolic links are not followed (into directories either) unless
    ``follow_symlinks``; FIFOs, sockets and devices are never opened (a FIFO would block
    the run until something writes to it)."""
    if root.is_file():
        return [root], []
    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    seen: set[tuple[int, int]] = set()
    for directory, dirs, names in os.walk(root, followlinks=follow_symlinks):
        info = os.stat(directory)
        if (info.st_dev, info.st_ino) in seen:  # a link loop
            dirs[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        for name in [*names, *(d for d in dirs if not follow_symlinks)]:
            path = Path(directory) / name
            if path.is_symlink() and not follow_symlinks:
                skipped.append((path, SYMLINK_SKIPPED))
            elif name in names:
                kind = _file_kind(path)
                if kind == "regular file":
                    files.append(path)
                else:
                    skipped.append((path, f"{kind}, not a regular file: not read"))
    return sorted(files), sorted(skipped)


SYMLINK_SKIPPED = "symbolic link, not followed (use --follow-symlinks to read what it points to)"


def _file_kind(path: Path) -> str:
    """What a directory entry is (following a link: ``--follow-symlinks``)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:  # a dangling link, a name gone since the listing
        return f"cannot be read ({exc.strerror})"
    kinds = {
        stat.S_ISREG: "regular file",
        stat.S_ISFIFO: "FIFO (named pipe)",
        stat.S_ISSOCK: "socket",
        stat.S_ISCHR: "character device",
        stat.S_ISBLK: "block device",
        stat.S_ISDIR: "directory",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "special file")


def _is_inventory(path: Path, fmt: str) -> bool:
    if fmt != "canonical":
        return False
    if path.suffix.lower() == ".parquet":
        try:
            columns = list(pl.read_parquet_schema(path))
        except Exception:  # a broken file is reported when it is parsed
            return path.stem.lower().startswith("inventory")
    else:
        columns = read_csv_header(path) or []
    return table_of(path, columns) == "inventory"


def plan_ingest(
    path: str | Path,
    config: Config,
    source: str = "auto",
    *,
    force: bool = False,
    run_id: str | None = None,
    max_batch_bytes: int = MAX_BATCH_BYTES,
    follow_symlinks: bool = False,
) -> IngestPlan:
    """Find, recognise and batch the files under ``path`` that are not ingested yet.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    ValueError
        When ``source`` is not a known format.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r}: choose one of {', '.join(SOURCES)}")
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"ingest path not found: {root}")
    plan = IngestPlan(run_id=run_id or new_run_id(), root=str(root), source=source)
    candidates, skipped = landing_files(root, follow_symlinks)
    for path, reason in skipped:
        plan.reports.append(FileReport(manifest.shown_name(path), None, "skipped", reason=reason))
    _find_catalog(root, plan, config)
    seen, unchanged = _ingested(config, force)
    in_run: dict[tuple[str, str], str] = {}
    planned: list[PlannedFile] = []
    to_read: list[tuple[Path, str, bytes, str, os.stat_result]] = []
    for file in candidates:
        shown = manifest.shown_name(file)
        try:
            raw_name = manifest.name_bytes(file)
        except ValueError as exc:  # rejected before any row is merged
            plan.reports.append(FileReport(shown, None, "rejected", reason=str(exc)))
            continue
        reason = skip_reason(file)
        if reason:
            plan.reports.append(FileReport(shown, None, "skipped", reason=reason))
            continue
        fmt = source if source != "auto" else detect_format(file)
        if fmt is None:
            plan.reports.append(FileReport(shown, None, "rejected", reason=_unreadable_reason(file)))
            continue
        stat = file.stat()
        if (shown, stat.st_size, stat.st_mtime_ns) in unchanged:
            plan.reports.append(FileReport(shown, fmt, "already ingested"))
            continue
        to_read.append((file, shown, raw_name, fmt, stat))
    # Hashing reads every byte of the landing: on the run's threads (hashlib releases the GIL).
    with ThreadPoolExecutor(max_workers=max(1, config.local_workers)) as pool:
        digests = list(pool.map(manifest.file_sha256, [file for file, *_ in to_read]))
    for (file, shown, raw_name, fmt, stat), digest in zip(to_read, digests, strict=True):
        context = manifest.file_context(file, fmt)
        key = (digest, context)
        if key in seen:
            plan.reports.append(FileReport(shown, fmt, "already ingested"))
            continue
        if key in in_run:
            plan.reports.append(FileReport(shown, fmt, "already ingested", reason=f"same content as {in_run[key]}"))
            continue
        in_run[key] = shown
        relative = file.relative_to(root) if root.is_dir() else Path(file.name)
        day = DAY_IN_PATH.search(manifest.shown_name(relative))
        planned.append(
            PlannedFile(
                path=shown,
                format=fmt,
                sha256=digest,
                size=stat.st_size,
                mtime_ns=stat.st_mtime_ns,
                context=context,
                day=day.group(1) if day else None,
                inventory=_is_inventory(file, fmt),
                path_hex=raw_name.hex(),
            )
        )
    plan.batches = _batches(planned, max_batch_bytes)
    return plan


def _find_catalog(root: Path, plan: IngestPlan, config: Config) -> None:
    """A landing directory's ``catalog.yaml`` (or ``.yml``), noted in ``plan`` to be merged
    over the configured catalog."""
    if root.is_dir():
        for name in ("catalog.yaml", "catalog.yml"):
            if (root / name).is_file():
                plan.catalog_path = str((root / name).resolve())
                plan.notes.append(f"using metric catalog {root / name} (merged over {config.catalog.source})")


def _ingested(config: Config, force: bool) -> tuple[set[tuple], set[tuple]]:
    """What the manifest says was ingested (nothing with ``force``): the ``(sha256, context)``
    of each file, and its ``(path, size, mtime_ns)``."""
    recorded = manifest.read_manifest(config.lake_dir) if not force else pl.DataFrame(schema=manifest.SCHEMA)
    seen = set(zip(recorded.get_column("sha256").to_list(), recorded.get_column("context").to_list()))
    # Same path, size and mtime as an ingested file: unchanged, no need to read it to hash it.
    unchanged = set(
        zip(
            recorded.get_column("path").to_list(),
            recorded.get_column("size").to_list(),
            recorded.get_column("mtime_ns").to_list(),
        )
    )
    return seen, unchanged


def _batches(files: list[PlannedFile], max_bytes: int) -> list[list[PlannedFile]]:
    inventory = [f for f in files if f.inventory]
    rest = [f for f in files if not f.inventory]
    groups: dict[str | None, list[PlannedFile]] = {}
    for f in rest:
        groups.setdefault(f.day, []).append(f)
    order = sorted(k for k in groups if k is not None) + ([None] if None in groups else [])
    batches = [inventory] if inventory else []
    for day in order:
        batch: list[PlannedFile] = []
        size = 0
        for f in groups[day]:
            if batch and size + f.size > max_bytes:
                batches.append(batch)
                batch, size = [], 0
            batch.append(f)
            size += f.size
        if batch:
            batches.append(batch)
    return batches


def planned_to_dict(files: list[PlannedFile]) -> list[dict]:
    return [asdict(f) for f in files]


def planned_from_dict(items: list[dict]) -> list[PlannedFile]:
    return [PlannedFile(**item) for item in items]
