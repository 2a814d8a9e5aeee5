"""One parser per source format; each maps a file to staged canonical rows.

Every parser has the signature ``parse(path, ctx) -> ParsedFile`` and raises
:class:`~foreshock.ingest.staged.UnreadableFile` when the file cannot be read at all.
Formats in ``BATCH_PARSERS`` also parse a batch's files together (many small files of
one format and day as one frame): ``parse_files(paths, indices, ctx) -> (per index a
ParsedFile or the error that rejects the file, staged frames by table with a ``_file``
column)``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl

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

BatchParser = Callable[
    [list[Path], list[int], IngestContext], tuple[dict[int, ParsedFile | Exception], dict[str, list[pl.DataFrame]]]
]

BATCH_PARSERS: dict[str, BatchParser] = {
    "nvidia-smi": nvidia_smi.parse_files,
    "prometheus-text": prometheus_text.parse_files,
    "xid-log": xid_log.parse_files,
}

FORMATS = tuple(sorted(PARSERS))

# Formats whose parser reads nothing of the lake but the inventory (through the context),
# or says when it did (``ParsedFile.reads_lake``: a DCGM XID gauge whose first code is not 0
# looks up the codes already stored as events, foreshock.ingest.dcgm): a batch of them may
# be parsed while the batch before it is still being stored, and a file whose parse read
# the lake has those rows staged again in its batch's turn (foreshock.ingest.parse_ahead).
PARSE_AHEAD_FORMATS = frozenset(
    {"canonical", "nvidia-smi", "prometheus-json", "prometheus-text", "rasdaemon", "tickets", "xid-log"}
)

# Of those, the formats whose parser reads nothing of the lake at all (only the catalog and
# the time zone): a batch of them may be parsed even while the batch before it stores an
# inventory (the batch's checks read the inventory stored by then: run._take_prefetched).
LAKE_FREE_FORMATS = frozenset({"canonical", "rasdaemon"})
