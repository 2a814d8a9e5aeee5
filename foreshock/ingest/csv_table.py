"""CSV files as string columns with exact line numbers and a reason for ragged lines.

Polars' CSV reader is fast but drops line numbers and stops on a ragged line; this reader
splits lines itself (vectorised), handles quoted fields line by line in Python (they are
rare: ticket summaries), and keeps every line's number and text for the quarantine.  A
quoted field spanning lines is not supported (the line shows up as malformed).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import polars as pl

from foreshock.ingest.reading import read_lines
from foreshock.ingest.staged import UnreadableFile


def read_csv_table(path: Path) -> tuple[pl.DataFrame, pl.Series]:
    """``(table, raw_lines)``: one String column per header field plus ``_line``,
    ``_reason`` and ``_field`` (set on lines with the wrong number of fields or bytes that
    are not text, see :mod:`foreshock.ingest.reading`)."""
    source = read_lines(path)
    lines = source.lines.filter(pl.col("_text").str.strip_chars() != "")
    if source.bad.height and (lines.height == 0 or source.bad.get_column("_line").min() < lines.get_column("_line")[0]):
        raise UnreadableFile(f"header line is not text: {source.bad.get_column('_reason')[0]}")
    header = next(csv.reader([lines.get_column("_text")[0]]))
    names = [h.strip() for h in header]
    if len(set(names)) != len(names) or any(not n for n in names):
        raise UnreadableFile(f"header has empty or repeated column names: {names}")
    body = lines.slice(1)
    quoted = body.get_column("_text").str.contains('"', literal=True)
    plain = body.filter(~quoted).with_columns(_parts=pl.col("_text").str.split(","))
    parts = [plain.select("_line", "_parts")]
    if quoted.any():
        tricky = body.filter(quoted)
        rows = [next(csv.reader([line]), []) for line in tricky.get_column("_text").to_list()]
        parts.append(tricky.select("_line").with_columns(_parts=pl.Series(rows, dtype=pl.List(pl.String))))
    table = pl.concat(parts).sort("_line")
    width = len(names)
    ok = pl.col("_parts").list.len() == width
    table = table.with_columns(
        [pl.when(ok).then(pl.col("_parts").list.get(i, null_on_oob=True)).alias(name) for i, name in enumerate(names)]
        + [
            pl.when(ok)
            .then(pl.lit(None, dtype=pl.String))
            .otherwise(
                pl.format("malformed line: expected {} fields, got {}", pl.lit(width), pl.col("_parts").list.len())
            )
            .alias("_reason"),
            pl.when(ok).then(pl.lit(None, dtype=pl.String)).otherwise(pl.lit("line")).alias("_field"),
        ]
    ).drop("_parts")
    if source.bad.height:
        undecodable = source.bad.drop("_raw")
        table = pl.concat([table, undecodable], how="diagonal_relaxed").sort("_line")
    return table, source.raw_lines


def read_csv_header(path: Path, limit: int = 65536) -> list[str] | None:
    """The first line of a text file split as CSV (None when it is not text)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(limit)
    except OSError:
        return None
    line = first_line(head.decode("utf-8", errors="replace").lstrip("\ufeff"))
    return None if line is None else csv_fields(line)


def csv_fields(line: str) -> list[str]:
    """A line split as CSV, each field stripped of blank space."""
    return [c.strip() for c in next(csv.reader([line]), [])]


# What ``str.splitlines`` ends a line at.
LINE_BREAK = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
NON_BLANK = re.compile(r"\S")


def first_line(text: str) -> str | None:
    """The first line of ``text`` that is not blank (``splitlines``' lines), None if none;
    without splitting the rest of the text."""
    found = NON_BLANK.search(text)
    if found is None:
        return None
    end = LINE_BREAK.search(text, found.start())
    return text[: end.start() if end else len(text)].splitlines()[-1]
