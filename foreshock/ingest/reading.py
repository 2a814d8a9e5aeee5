"""Reading source files as text, refusing what is not text with a clear reason."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from foreshock.ingest.staged import UnreadableFile


def read_text(path: Path) -> str:
    """The file's text (UTF-8, a BOM is dropped).

    Raises
    ------
    UnreadableFile
        Empty file, binary content (NUL bytes) or bytes that are not UTF-8 (with offset).
    """
    data = Path(path).read_bytes()
    if not data.strip():
        raise UnreadableFile("empty file")
    if b"\x00" in data[:65536]:
        raise UnreadableFile("binary content (NUL bytes), not a text file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UnreadableFile(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line})"
        ) from None
    return text.removeprefix("\ufeff")


def text_lines(text: str) -> pl.DataFrame:
    """``_line`` (1-based) and ``_text`` (without the line end) of every line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return (
        pl.DataFrame({"_text": lines}, schema={"_text": pl.String})
        .with_row_index("_line", offset=1)
        .with_columns(pl.col("_line").cast(pl.Int64), pl.col("_text").str.strip_chars_end("\r"))
    )
