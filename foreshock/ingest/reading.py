"""Reading source files as text, line by line: one bad line never loses the file.

Real exports and kernel logs carry stray bytes (a truncated multi-byte character, a NUL
from a crash mid-write).  A line holding bytes that are not UTF-8, or a NUL, is set aside
with its line number, a reason and its bytes shown escaped (``\\xff``, ``\\x00``); the parser
sees it as a blank line and every other line of the file is read.  Only a file that is
mostly such lines (binary content) or has nothing at all is refused whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from foreshock.ingest.staged import ParsedFile, RawLookup, UnreadableFile

# Bytes shown escaped in the quarantine: C0 controls (but tab) and DEL.
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
UNDECODABLE_FIELD = "line"


def escape_bytes(line: bytes) -> str:
    """``line`` as readable text: undecodable bytes and control characters as ``\\xNN``."""
    text = line.decode("utf-8", errors="backslashreplace")
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _line_problem(line: bytes) -> str | None:
    """Why a line cannot be read as text (None: it can)."""
    nul = line.find(b"\x00")
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        if nul < 0 or exc.start < nul:
            return f"undecodable bytes (not UTF-8): byte 0x{line[exc.start]:02x} at column {exc.start + 1}"
    if nul >= 0:
        return f"NUL byte at column {nul + 1} (binary data in a text line)"
    return None


@dataclass
class SourceLines:
    """A text file's lines.

    ``lines``: ``_line`` (1-based) and ``_text`` (no line end; a bad line is ``""``).
    ``bad``: the lines that are not text, as staged rows (``_line``, ``_reason``,
    ``_field``, ``_raw`` = the bytes escaped), for the parser to add to its table.
    """

    lines: pl.DataFrame
    bad: pl.DataFrame

    @property
    def raw_lines(self) -> pl.Series:
        """Every line's text for the quarantine (bad lines escaped), index = line - 1."""
        if self.bad.height == 0:
            return self.lines.get_column("_text")
        escaped = self.lines.join(self.bad.select("_line", "_raw"), on="_line", how="left")
        return escaped.select(pl.coalesce("_raw", "_text")).to_series().alias("_text")


BAD_SCHEMA = {"_line": pl.Int64, "_reason": pl.String, "_field": pl.String, "_raw": pl.String}


def read_lines(path: Path) -> SourceLines:
    """The file's lines (UTF-8, a BOM is dropped), bad lines set aside.

    Raises
    ------
    UnreadableFile
        Empty file, or binary content (no line is text, or most lines are not).
    """
    data, text = _file_text(path)
    if text is None:
        return _read_lines_slowly(data)
    return SourceLines(lines=text_lines(text), bad=pl.DataFrame(schema=BAD_SCHEMA))


def _file_text(path: Path) -> tuple[bytes, str | None]:
    """The file's bytes (a BOM dropped) and its text when it is clean UTF-8 without NUL
    (None: read it line by line).  An empty file raises :class:`UnreadableFile`."""
    data = Path(path).read_bytes()
    if not data.strip():
        raise UnreadableFile("empty file")
    data = data.removeprefix(b"\xef\xbb\xbf")
    if b"\x00" in data:
        return data, None
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError:
        return data, None


def _read_lines_slowly(data: bytes) -> SourceLines:
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    texts: list[str] = []
    bad: dict[str, list] = {name: [] for name in BAD_SCHEMA}
    for number, line in enumerate(raw, start=1):
        problem = _line_problem(line)
        if problem is None:
            texts.append(line.decode("utf-8"))
            continue
        texts.append("")
        bad["_line"].append(number)
        bad["_reason"].append(problem)
        bad["_field"].append(UNDECODABLE_FIELD)
        bad["_raw"].append(escape_bytes(line.rstrip(b"\r"))[:1000])
    readable = sum(1 for t in texts if t.strip())
    if readable == 0 or len(bad["_line"]) > readable:
        first = bad["_reason"][0] if bad["_line"] else ""
        raise UnreadableFile(
            f"binary content, not a text file ({len(bad['_line'])} of {len(raw)} lines are not text; "
            f"line {bad['_line'][0]}: {first})"
        )
    return SourceLines(lines=_frame(texts), bad=pl.DataFrame(bad, schema=BAD_SCHEMA))


def read_text(path: Path) -> str:
    """The whole file as one text, for formats that are one document (JSON).

    Undecodable bytes become lone surrogates (``surrogateescape``), so the parser can find
    which part of the document holds them (:func:`has_undecodable`) and keep the rest.

    Raises
    ------
    UnreadableFile
        Empty file or binary content (NUL bytes).
    """
    data = Path(path).read_bytes()
    if not data.strip():
        raise UnreadableFile("empty file")
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise UnreadableFile(f"binary content (NUL byte on line {line}), not a text document")
    return data.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")


UNDECODABLE = re.compile("[\udc80-\udcff]")


def has_undecodable(text: str) -> bool:
    """True when ``text`` (from :func:`read_text`) holds bytes that were not UTF-8 (an
    ASCII text, as most exports are, holds none: told at once, without the search)."""
    return not text.isascii() and UNDECODABLE.search(text) is not None


def text_lines(text: str) -> pl.DataFrame:
    """``_line`` (1-based) and ``_text`` (without the line end) of every line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return _frame(lines, "\r" in text)


def _frame(lines: list[str], carriage_returns: bool = True) -> pl.DataFrame:
    frame = pl.DataFrame({"_text": lines}, schema={"_text": pl.String}).with_row_index("_line", offset=1)
    text = pl.col("_text").str.strip_chars_end("\r") if carriage_returns else pl.col("_text")
    return frame.with_columns(pl.col("_line").cast(pl.Int64), text)


FILE_INDEX = pl.Int32()


@dataclass
class ManyLines:
    """The lines of several text files as one frame, for parsers that read a batch's files
    together (:func:`read_many_lines`).

    ``lines``: ``_file`` (the file's index in the batch), ``_line`` and ``_text`` as
    :attr:`SourceLines.lines` has them, file after file.  ``bad``: the lines that are not
    text, as :attr:`SourceLines.bad` with ``_file``.  ``errors``: the files that cannot be
    read at all, by index, with the :class:`UnreadableFile` that says why.
    """

    lines: pl.DataFrame
    bad: pl.DataFrame
    errors: dict[int, UnreadableFile]


def read_many_lines(paths: list[Path], indices: list[int]) -> ManyLines:
    """:func:`read_lines` of every file, as one frame (see :class:`ManyLines`).

    The clean files (UTF-8, no NUL: nearly all) are split into lines by one Polars pass
    over their texts, which costs less than a frame per file; the others are read line by
    line as :func:`read_lines` reads them.  ``OSError`` propagates.
    """
    texts, clean, frames, bad, errors = [], [], [], [], {}
    for path, index in zip(paths, indices):
        try:
            data, text = _file_text(path)
            read = _read_lines_slowly(data) if text is None else None
        except UnreadableFile as exc:
            errors[index] = exc
            continue
        if read is not None:
            frames.append((index, read.lines.with_columns(_file=pl.lit(index, dtype=FILE_INDEX))))
            bad.append(read.bad.with_columns(_file=pl.lit(index, dtype=FILE_INDEX)))
            continue
        texts.append(text.removesuffix("\n"))  # as text_lines: no line after the last line end
        clean.append(index)
    if texts:
        split = (
            pl.DataFrame({"_file": pl.Series(clean, dtype=FILE_INDEX), "_text": texts})
            .with_columns(pl.col("_text").str.split("\n"))
            .with_columns(_line=pl.int_ranges(1, pl.col("_text").list.len() + 1, dtype=pl.Int64))
            .explode("_text", "_line")
            .with_columns(pl.col("_text").str.strip_chars_end("\r"))
        )
        frames.append((clean[0], split))
    columns = ["_file", "_line", "_text"]
    lines = pl.concat(
        [pl.DataFrame(schema={"_file": FILE_INDEX, "_line": pl.Int64, "_text": pl.String})]
        + [frame.select(columns) for _, frame in frames]
    )
    if len(frames) > 1:  # files read line by line among the clean ones: back in file order
        lines = lines.sort("_file", maintain_order=True)
    bad_schema = {**BAD_SCHEMA, "_file": FILE_INDEX}
    return ManyLines(
        lines, pl.concat([pl.DataFrame(schema=bad_schema), *[b.select(list(bad_schema)) for b in bad]]), errors
    )


def raw_lines_later(path: Path) -> RawLookup:
    """A :attr:`ParsedFile.raw_lookup` that reads the file's lines again, when a row of it
    is quarantined (rarely): a file parsed with others keeps no lines of its own."""
    return lambda rows: ParsedFile(path=path, raw_lines=read_lines(path).raw_lines).raw_text(rows)
