"""Which format a landing file is in, from its name and its first bytes."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from foreshock.ingest.csv_table import csv_fields, first_line
from foreshock.ingest.parsers.canonical import table_of
from foreshock.ingest.parsers.rasdaemon import SQLITE_MAGIC

# Files a landing directory may hold that are not telemetry: skipped with a note.
SKIPPED = {
    "ground_truth.parquet": "simulator ground truth, not telemetry",
    "simulation.json": "simulator parameters, not telemetry",
    "catalog.yaml": "metric catalog (used for the run, not rows)",
    "catalog.yml": "metric catalog (used for the run, not rows)",
}
NOT_DATA_SUFFIXES = {".md", ".txt.sig", ".yaml", ".yml", ".toml", ".sh", ".py"}
PROM_SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?\s+\S+(\s+-?\d+)?\s*$")
SYSLOG_LINE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\S*\s+\S+\s+\S+")
NOHEADER_SMI = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}")


def skip_reason(path: Path) -> str | None:
    """Why a file is not ingested at all (None: ingest it)."""
    if path.name.startswith("."):
        return "hidden file"
    if path.name in SKIPPED:
        return SKIPPED[path.name]
    if path.suffix.lower() in NOT_DATA_SUFFIXES:
        return f"not a data file ({path.suffix})"
    return None


def detect_format(path: Path) -> str | None:
    """The source format of ``path`` (a key of ``PARSERS``), or None if unrecognised."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(65536)
    except OSError:
        return None
    suffix = path.suffix.lower()
    if head.startswith(SQLITE_MAGIC) or suffix in (".db", ".sqlite"):
        return "rasdaemon"
    if suffix == ".parquet" or head.startswith(b"PAR1"):
        return "canonical"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if suffix == ".json" or stripped.startswith("{"):
        return "prometheus-json" if '"resultType"' in text or '"status"' in text else None
    first = first_line(text)
    if first is None:
        return _by_name(path)
    if (
        suffix == ".prom"
        or first.startswith(("# HELP", "# TYPE"))
        or (PROM_SAMPLE.match(first) and "," not in first.split("{")[0])
    ):
        return "prometheus-text"
    if "NVRM: Xid" in text or suffix == ".log" or SYSLOG_LINE.match(first):
        return "xid-log"
    if NOHEADER_SMI.match(first):
        return "nvidia-smi"  # without a header: its parser rejects it with the reason
    header = list(_header_names(first))
    fields = set(header)
    if "timestamp" in fields and fields & {"index", "uuid", "pci.bus_id"}:
        return "nvidia-smi"
    if {"err_type", "err_count"} <= fields:
        return "rasdaemon"
    if "ticket_id" in fields or ("opened_at" in fields and "unit_id" not in fields):
        return "tickets"
    if table_of(path, header):
        return "canonical"
    return _by_name(path)


UNIT_SUFFIX = re.compile(r"\s*\[.*\]$")


@functools.lru_cache(maxsize=256)
def _header_names(first: str) -> tuple[str, ...]:
    """A CSV header line's fields without their ``[unit]`` suffixes (as read_csv_header
    reads them); remembered by line: a landing's nvidia-smi files share a few headers."""
    return tuple(UNIT_SUFFIX.sub("", h) for h in csv_fields(first))


def _by_name(path: Path) -> str | None:
    parts = {p.lower() for p in path.parts}
    if "nvidia-smi" in parts:
        return "nvidia-smi"
    if "kernel" in parts or path.name in ("syslog", "messages", "kern.log"):
        return "xid-log"
    if "scrape" in parts:
        return "prometheus-text"
    if "dcgm" in parts:
        return "prometheus-json"
    if path.name.startswith("tickets"):
        return "tickets"
    return None
