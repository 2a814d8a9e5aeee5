"""One parser per source format; each maps a file to staged canonical rows.

Every parser has the signature ``parse(path, ctx) -> ParsedFile`` and raises
:class:`~foreshock.ingest.staged.UnreadableFile` when the file cannot be read at all.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from foreshock.ingest.context import IngestContext
from foreshock.ingest.parsers import (
    canonical,
    nvidia_smi,
    prometheus_json,
    prometheus_text,
    rasdaemon,
    tickets,
    xid_log,
)
from foreshock.ingest.staged import ParsedFile

Parser = Callable[[Path, IngestContext], ParsedFile]

PARSERS: dict[str, Parser] = {
    "canonical": canonical.parse,
    "nvidia-smi": nvidia_smi.parse,
    "prometheus-json": prometheus_json.parse,
    "prometheus-text": prometheus_text.parse,
    "rasdaemon": rasdaemon.parse,
    "tickets": tickets.parse,
    "xid-log": xid_log.parse,
}

FORMATS = tuple(sorted(PARSERS))
