"""Rows on their way into the lake: the contract's columns plus where each row came from.

A parser turns one source file into *staged* frames, one per canonical table.  Each holds
the table's columns (typed; null where a field could not be parsed) and provenance
columns that travel with the row until it is stored or quarantined:

``_line``    line number in the file (1-based; for JSON the series number, for Parquet the row)
``_field``   the source field a parse failure refers to (null when none)
``_reason``  why the parser already rejected the row (null when it parsed)
``_raw``     a short raw text hint (null: the quarantine looks the line up in the file)
``_node``    for host-level units (DIMMs), the node that must be in the inventory

Rows are counted in canonical records: an nvidia-smi line with fifteen metric columns is
fifteen samples; a line that cannot be split into fields at all is one record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from foreshock.contract import SCHEMAS

if TYPE_CHECKING:
    from foreshock.ingest.context import IngestContext

PROVENANCE: dict[str, pl.DataType] = {
    "_line": pl.Int64(),
    "_field": pl.String(),
    "_reason": pl.String(),
    "_raw": pl.String(),
    "_node": pl.String(),
}


class UnreadableFile(Exception):
    """A file that cannot be parsed at all (empty, truncated, binary, wrong format)."""


def staged_schema(table: str) -> dict[str, pl.DataType]:
    return {**SCHEMAS[table], **PROVENANCE}


def conform_staged(df: pl.DataFrame, table: str) -> pl.DataFrame:
    """Cast to the staged schema, adding missing provenance columns as nulls.

    Inventory keeps its extra (fault-domain, uuid, pci_bus_id, ...) columns as strings.
    """
    schema = staged_schema(table)
    exprs = [
        (pl.col(name).cast(dtype) if name in df.columns else pl.lit(None, dtype=dtype)).alias(name)
        for name, dtype in schema.items()
    ]
    extra = [pl.col(c).cast(pl.String) for c in df.columns if c not in schema] if table == "inventory" else []
    return df.select(exprs + extra)


def empty_staged(table: str) -> pl.DataFrame:
    return pl.DataFrame(schema=staged_schema(table))


RawLookup = Callable[[pl.DataFrame], pl.Series]


@dataclass
class ParsedFile:
    """What a parser made of one file.

    ``raw_lines`` holds the file's lines (index = line - 1) so a quarantined row can show
    the text it came from; parsers without lines give ``raw_lookup`` instead, which maps
    the quarantined rows (``_line``, ``_raw``) to their raw text.
    """

    path: Path
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    raw_lines: pl.Series | None = None
    raw_lookup: RawLookup | None = None
    notes: list[str] = field(default_factory=list)
    # Rows staged for this file in a frame shared with other files (``tables`` is empty).
    row_count: int | None = None
    # Per table, the distinct values (no null) of some text columns, as the parser found
    # them: every value of the column is among them.  Later steps use them instead of
    # searching the rows again (ids and metric names repeat on every row).
    distinct: dict[str, dict[str, pl.Series]] = field(default_factory=dict)
    # The parse looked at rows stored in the lake (other than the inventory): a file parsed
    # ahead of its batch's turn (:mod:`~foreshock.ingest.parse_ahead`) is parsed again then,
    # or, given ``in_turn``, only has the tables that depend on the lake staged again.
    reads_lake: bool = False
    # Of a file parsed ahead whose parse reads the lake: its tables that depend on stored rows,
    # staged as a parse with the context given (the batch's, in its turn) would stage them.
    in_turn: Callable[[IngestContext], dict[str, pl.DataFrame]] | None = None

    def add(self, table: str, frame: pl.DataFrame, distinct: dict[str, pl.Series] | None = None) -> None:
        frame = conform_staged(frame, table)
        if table in self.tables:
            self.tables[table] = pl.concat([self.tables[table], frame], how="diagonal_relaxed")
            self.distinct.pop(table, None)  # those of the first part only
        else:
            self.tables[table] = frame
            if distinct:
                self.distinct[table] = distinct

    @property
    def rows(self) -> int:
        if self.row_count is not None:
            return self.row_count
        return sum(frame.height for frame in self.tables.values())

    def raw_text(self, rows: pl.DataFrame) -> pl.Series:
        """Raw text of some of this file's staged rows (for the quarantine)."""
        if self.raw_lookup is not None:
            return self.raw_lookup(rows)
        if self.raw_lines is not None:
            index = (rows.get_column("_line") - 1).fill_null(-1)
            valid = (index >= 0) & (index < self.raw_lines.len())
            safe = index.zip_with(valid, pl.Series([0] * rows.height, dtype=pl.Int64))
            looked_up = (
                self.raw_lines.gather(safe)
                if self.raw_lines.len()
                else pl.Series([None] * rows.height, dtype=pl.String)
            )
            looked_up = looked_up.zip_with(valid, pl.Series([None] * rows.height, dtype=pl.String))
            return rows.get_column("_raw").fill_null(looked_up) if "_raw" in rows.columns else looked_up
        return rows.get_column("_raw")


def conform_shared(df: pl.DataFrame, table: str) -> pl.DataFrame:
    """:func:`conform_staged` for rows of several files, keeping their ``_file``."""
    return conform_staged(df, table).with_columns(df.get_column("_file"))


def file_counts(frame: pl.DataFrame) -> dict[int, int]:
    """Rows per file (``_file``, a file's index in its batch) of a staged frame; files
    without a row are not listed.  The indices are small: counted by ``np.bincount``, a
    quarter of the CPU of grouping them."""
    if frame.height == 0:
        return {}
    files = frame.get_column("_file")
    if files.null_count() or files.min() < 0:  # not an index: grouped
        return dict(frame.group_by("_file").len().iter_rows())
    counts = np.bincount(files.to_numpy())
    return {int(i): int(counts[i]) for i in np.flatnonzero(counts)}


def rows_by_file(shared: dict[str, list[pl.DataFrame]]) -> dict[int, int]:
    """Rows per file (``_file``) in frames staged for several files (a batch parser's)."""
    counts: dict[int, int] = {}
    for frames in shared.values():
        for frame in frames:
            for index, rows in file_counts(frame).items():
                counts[index] = counts.get(index, 0) + rows
    return counts


def own_tables(outcomes: dict, shared: dict[str, list[pl.DataFrame]]) -> None:
    """Each parsed file of ``outcomes`` (index -> ParsedFile or error) given its rows of
    ``shared`` (frames of several files, by table, with ``_file``) as its own tables: what
    parsing it alone gives (a table the batch staged is there even when the file has no row
    in it)."""
    for table, frames in shared.items():
        parts = [frame.partition_by("_file", as_dict=True, include_key=False) for frame in frames]
        for index, parsed in outcomes.items():
            if not isinstance(parsed, ParsedFile):
                continue
            mine = [part[(index,)] for part in parts if (index,) in part]
            frame = pl.concat(mine) if mine else empty_staged(table)
            parsed.tables[table] = frame
            parsed.distinct.pop(table, None)
            parsed.row_count = None


def parse_alone(parse_files, path, ctx) -> ParsedFile:
    """One file through a batch parser (``parse_files([path], [0], ctx)``) with its rows
    as its own tables: what a format's single-file ``parse`` gives; raises the file's
    :class:`UnreadableFile`."""
    results, shared = parse_files([path], [0], ctx)
    own_tables(results, shared)
    if isinstance(results[0], Exception):
        raise results[0]
    return results[0]
