"""Ingest: source parsers, format detection, validation, quarantine and the manifest.

``ingest_path(path, config)`` reads a file or landing directory in any supported format
into the lake (``foreshock.lake``) and returns an :class:`IngestReport` whose counts add
up: rows read = stored + quarantined + duplicates dropped.
"""

from foreshock.ingest.detect import detect_format
from foreshock.ingest.parsers import FORMATS
from foreshock.ingest.planning import SOURCES, IngestPlan, PlannedFile, parse_scrape_time, plan_ingest
from foreshock.ingest.report import FileReport, IngestReport
from foreshock.ingest.run import ingest_batch, ingest_path

__all__ = [
    "FORMATS",
    "SOURCES",
    "FileReport",
    "IngestPlan",
    "IngestReport",
    "PlannedFile",
    "detect_format",
    "ingest_batch",
    "ingest_path",
    "parse_scrape_time",
    "plan_ingest",
]
