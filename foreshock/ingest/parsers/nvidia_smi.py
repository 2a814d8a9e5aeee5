"""``nvidia-smi``: ``nvidia-smi --query-gpu=... --format=csv [-l N]`` output.

The header names the fields, with units in brackets (``power.draw [W]``); values repeat
the unit (``250.12 W``, ``87 %``), flags read ``Yes``/``No`` or ``Active``/``Not Active``
(stored as 1/0) and ``[N/A]`` / ``[Not Supported]`` mark a field the GPU does not have
(no sample is made).  Other bracketed words (``[Unknown Error]``, ``[GPU is lost]``) are
quarantined with the text nvidia-smi printed.  ``--format=csv,noheader`` output is
rejected: without the header the columns cannot be named.

Files are read by Polars' CSV reader when they are clean text (nearly always) and line
by line otherwise; both give the same rows and quarantine (see :class:`_Source`).

The timestamp is the node's local time without an offset, so a timezone is required.
The unit is ``<node>-gpu<index>`` where the node is the file's directory name
(``nvidia-smi/<node>/<day>.csv``); when an inventory exists and that directory is not one
of its nodes, the ``uuid`` field is looked up in the inventory instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.contract import ID_PATTERN
from foreshock.ingest.context import IngestContext
from foreshock.ingest.manifest import shown_name
from foreshock.ingest.reading import raw_lines_later, read_lines
from foreshock.ingest.staged import ParsedFile, UnreadableFile, conform_staged, file_counts, staged_schema
from foreshock.ingest.timestamps import parse_local_column, resolve_fall_back

TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S%.f"
# Fields that describe the GPU rather than measure it: read for identity or ignored.
DESCRIPTIVE = {
    "timestamp",
    "index",
    "pci.bus_id",
    "uuid",
    "name",
    "serial",
    "driver_version",
    "vbios_version",
    "pstate",
    "persistence_mode",
    "compute_mode",
    "gpu_name",
    "gpu_bus_id",
    "gpu_serial",
    "gpu_uuid",
    "count",
    "mig.mode.current",
    "mig.mode.pending",
    "display_mode",
    "display_active",
    "accounting.mode",
    "inforom.img",
    "pci.domain",
    "pci.bus",
    "pci.device",
    "pci.device_id",
    "pci.sub_device_id",
}
NOT_SUPPORTED = ["[N/A]", "N/A", "[Not Supported]", "Not Supported"]
FLAGS = {"Yes": 1.0, "No": 0.0, "Active": 1.0, "Not Active": 0.0, "Enabled": 1.0, "Disabled": 0.0}
NEWLINE, COMMA = ord("\n"), ord(",")
HEADER_FIELD = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*(?:\[([^\]]*)\])?\s*$")


def parse_header(line: str) -> tuple[list[str], dict[str, str]]:
    """Field names and their declared units from an nvidia-smi CSV header."""
    names, units = [], {}
    for cell in line.split(","):
        match = HEADER_FIELD.match(cell)
        if not match:
            raise UnreadableFile(f"header field {cell.strip()!r} is not an nvidia-smi query field")
        names.append(match.group(1))
        if match.group(2):
            units[match.group(1)] = match.group(2)
    return names, units


@dataclass
class _Source:
    """One file with its header checked.

    Most files are clean text (UTF-8, no NUL, no lone carriage return): for those ``body``
    holds the bytes after the header line (ending with a newline) and ``body_line`` the
    number of its first line; Polars' CSV reader splits them.  Other files are read line by
    line (:func:`read_lines`): ``lines`` are their non-blank lines (the header first),
    ``bad`` their lines that are not text.
    """

    path: Path
    header: str
    body: bytes | None = None
    body_line: int = 0
    lines: pl.DataFrame | None = None
    bad: pl.DataFrame | None = None
    raw: pl.Series | None = None

    def read_lines(self) -> None:
        """Read the file line by line (when the CSV reader cannot split it)."""
        read = read_lines(self.path)
        self.lines = read.lines.filter(pl.col("_text").str.strip_chars() != "")
        self.bad, self.raw, self.body = read.bad, read.raw_lines, None

    def parsed(self, row_count: int | None = None) -> ParsedFile:
        """The file's :class:`ParsedFile` (its lines for the quarantine are read again only
        when a row of a clean file is quarantined)."""
        if self.raw is not None:
            return ParsedFile(path=self.path, raw_lines=self.raw, row_count=row_count)
        return ParsedFile(path=self.path, raw_lookup=raw_lines_later(self.path), row_count=row_count)


def _clean_text(data: bytes) -> bool:
    """True when ``data`` is UTF-8 without NUL bytes and every carriage return ends a line."""
    if b"\x00" in data:
        return False
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n") + data.endswith(b"\r"):
        return False
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _blank(text: str) -> bool:
    """Blank as the line-by-line reading sees it (Polars' whitespace, not Python's)."""
    if text[:1].isalnum():  # the common case (a header): a letter or digit is no whitespace of either
        return False
    return pl.Series([text], dtype=pl.String).str.strip_chars().item() == ""


def _open(path: Path, ctx: IngestContext) -> _Source:
    """Read a file and check its header (raises UnreadableFile)."""
    data = Path(path).read_bytes()
    if not data.strip():
        raise UnreadableFile("empty file")
    data = data.removeprefix(b"\xef\xbb\xbf")
    if _clean_text(data):
        start, number = 0, 1
        while True:  # the first non-blank line is the header (there is one: data is not blank)
            end = data.find(b"\n", start)
            end = len(data) if end < 0 else end
            header_text = data[start:end].decode("utf-8").rstrip("\r")
            if not _blank(header_text):
                break
            start, number = end + 1, number + 1
        body = data[end + 1 :]
        if body and not body.endswith(b"\n"):
            body += b"\n"
        source = _Source(path, header_text, body=body, body_line=number + 1)
    else:
        read = read_lines(path)
        lines = read.lines.filter(pl.col("_text").str.strip_chars() != "")
        if read.bad.height and read.bad.get_column("_line").min() < lines.get_column("_line")[0]:
            raise UnreadableFile(f"header line is not text: {read.bad.get_column('_reason')[0]}")
        header_text = lines.get_column("_text")[0]
        source = _Source(path, header_text, lines=lines, bad=read.bad, raw=read.raw_lines)
    if re.match(r"^\s*\d{4}/\d{2}/\d{2} ", header_text) or "timestamp" not in header_text:
        raise UnreadableFile(
            "no nvidia-smi header line (was it written with --format=csv,noheader?): "
            "re-run nvidia-smi with --format=csv so the columns can be named"
        )
    names, _ = parse_header(header_text)
    if "index" not in names and "uuid" not in names:
        raise UnreadableFile("header has neither 'index' nor 'uuid': cannot tell which GPU a line is about")
    if ctx.timezone is None:
        raise UnreadableFile(
            "nvidia-smi timestamps are the node's local time without an offset: "
            "pass --timezone (e.g. UTC) or set [ingest] timezone"
        )
    if not [n for n in names if n not in DESCRIPTIVE]:
        raise UnreadableFile("no metric fields in the header (only descriptive fields)")
    return source


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    source = _open(path, ctx)
    parsed = source.parsed()
    staged, distinct = _stage([source], [0], ctx)
    parsed.add("samples", staged.drop("_file"), distinct)
    return parsed


def parse_files(
    paths: list[Path], indices: list[int], ctx: IngestContext
) -> tuple[dict[int, ParsedFile | Exception], dict[str, list[pl.DataFrame]]]:
    """Parse several files as one frame per header: ``(per index: ParsedFile or the error
    that rejects the file, {"samples": staged samples of the parsed files with ``_file`` =
    their index})``.

    The same rows, reasons and row order per file as :func:`parse` file by file; the
    per-file work is reading the bytes, checking the header and counting each line's
    fields, the rest runs once over the files that share a header (Polars' CSV reader
    splits the clean ones in one call, see :func:`_split_clean`).  A file that cannot be read
    gets its ``UnreadableFile`` (or the parser's error); ``OSError`` propagates.
    """
    results: dict[int, ParsedFile | Exception] = {}
    groups: dict[str, list[tuple[int, _Source]]] = {}
    for path, index in zip(paths, indices):
        try:
            source = _open(path, ctx)
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported per file, like a single parse
            results[index] = exc
            continue
        groups.setdefault(source.header, []).append((index, source))
    frames = []
    for members in groups.values():
        try:
            frame, distinct = _stage([m for _, m in members], [i for i, _ in members], ctx)
        except Exception:  # noqa: BLE001 - a file that breaks the group is parsed alone
            for index, source in members:
                try:
                    results[index] = parse(source.path, ctx)
                except OSError:
                    raise
                except Exception as exc:  # noqa: BLE001
                    results[index] = exc
            continue
        counts = file_counts(frame)
        for index, source in members:
            results[index] = source.parsed(row_count=counts.get(index, 0))
            results[index].distinct["samples"] = distinct  # those of the group: a superset
        frames.append(frame)
    return results, {"samples": frames}


def _stage(sources: list[_Source], indices: list[int], ctx: IngestContext) -> tuple[pl.DataFrame, dict[str, pl.Series]]:
    """Staged samples (conformed, plus ``_file``) of files that share one header; per file
    in the order undecodable lines, malformed lines, samples, failing samples.  With the
    distinct units and metric names of those rows (:attr:`ParsedFile.distinct`), found
    on the lines, where each unit is named once per line, not once per sample.

    The lines are read wide (one column per field) and every check and number is worked
    out there, per metric column; only then are the samples put in one long frame (metric
    by metric, each in line order), from the four columns a sample keeps.  Working long
    would repeat each line's unit, time and provenance, and the metric's name and unit,
    once per metric before most of them are thrown away."""
    header_text = sources[0].header
    names, units = parse_header(header_text)
    width = len(names)
    metrics = [n for n in names if n not in DESCRIPTIVE]
    read = {"timestamp", "index", "uuid", *metrics}  # other descriptive fields are never looked at
    good, ragged, parts = _fields(sources, indices, names, read)
    if ragged.height:
        parts.append(
            ragged.select(
                "_line",
                "_file",
                _field=pl.lit("line"),
                _reason=pl.format("malformed line: expected {} fields, got {}", pl.lit(width), pl.col("_fields")),
            ),
        )
    good = good.with_columns(_times(good.get_column("timestamp"), ctx.timezone))
    good = good.with_columns(_unit_id=_unit_expr(sources, indices, names, ctx))
    good = resolve_fall_back(good, "ts", ["_file", "_unit_id"], ctx.timezone, "_ts_reason")
    good = good.with_columns(
        _line_reason=pl.coalesce(
            pl.col("_ts_reason"),
            pl.when(pl.col("_unit_id").is_null()).then(pl.lit("cannot tell the unit: bad index or unknown uuid")),
        ),
        _line_field=pl.when(pl.col("_ts_reason").is_not_null())
        .then(pl.lit("timestamp"))
        .when(pl.col("_unit_id").is_null())
        .then(pl.lit("index")),
    )
    resolved = {n: ctx.catalog.resolve(n) for n in metrics}
    line_bad = good.get_column("_line_reason").is_not_null()
    any_line_bad = bool(line_bad.any())
    kept = good.select("_unit_id", "ts", "_line", "_file")
    samples, failing = [], []
    for name in metrics:
        text = good.get_column(name)
        plain = _plain_numbers(text, f" {units[name]}" if units.get(name) else "")
        if not plain.null_count() and resolved[name] is not None and not any_line_bad:
            samples.append(kept.with_columns(value=plain, metric=pl.lit(resolved[name])))  # the common case
            continue
        dropped = text.is_in(NOT_SUPPORTED).fill_null(True)  # a missing field makes no sample
        if dropped.all():  # a field this GPU does not have
            continue
        value = _column_numbers(text, plain)
        fails = value.is_null() | text.str.starts_with("[")
        if resolved[name] is None:
            fails = pl.repeat(True, len(text), eager=True)
        if any_line_bad:
            fails = fails | line_bad
        fails = fails & ~dropped
        keep = ~(fails | dropped)
        if keep.all():
            samples.append(kept.with_columns(value=value, metric=pl.lit(resolved[name])))
        elif keep.any():
            samples.append(kept.with_columns(value=value, metric=pl.lit(resolved[name])).filter(keep))
        if fails.any():
            failing.append(
                good.select("_line", "_file", "ts", "_line_reason", "_line_field", unit_id="_unit_id")
                .with_columns(
                    _source=pl.lit(name),
                    metric=pl.lit(resolved[name] or name),
                    _text=text,
                    _known=pl.lit(resolved[name] is not None),
                    value=value,
                )
                .filter(fails)
            )
    columns = ["unit_id", "ts", "metric", "value", "_line", "_field", "_reason", "_file"]
    if samples:
        parts.append(
            pl.concat(samples)
            .rename({"_unit_id": "unit_id"})
            .with_columns(_reason=pl.lit(None, dtype=pl.String), _field=pl.lit(None, dtype=pl.String))
            .select(columns)
        )
    if failing:  # reason texts only for the failing rows (they are built for every row a branch sees)
        parts.append(_with_reasons(pl.concat(failing), ctx).select(columns))
    if not samples and not failing:
        parts.append(pl.DataFrame(schema={**staged_schema("samples"), "_file": FILE_INDEX}).select(columns))
    staged = pl.concat([conform_staged(part, "samples").with_columns(part.get_column("_file")) for part in parts])
    distinct = {
        "unit_id": good.get_column("_unit_id").drop_nulls().unique(maintain_order=True).alias("unit_id"),
        "metric": pl.Series("metric", list(dict.fromkeys(resolved[n] or n for n in metrics)), dtype=pl.String),
    }
    return staged, distinct


def _plain_numbers(text: pl.Series, suffix: str) -> pl.Series:
    """A field's values read by a plain cast (``suffix``: its unit after a space, or "",
    cut off first: a text that casts as it is does not end in a unit); null where that
    fails (:func:`_column_numbers` reads those)."""
    return (text.str.strip_suffix(suffix) if suffix else text).cast(pl.Float64, strict=False).alias("value")


def _column_numbers(text: pl.Series, plain: pl.Series) -> pl.Series:
    """One field's values as numbers (``"250.12 W"`` -> 250.12, ``Yes``/``Active`` -> 1,
    ``No`` -> 0), given their :func:`_plain_numbers`: a value the plain cast did not read
    (it read every number, unit or not) can only be a flag word."""
    rest = plain.is_null().arg_true()
    if rest.len() == 0:
        return plain
    if rest.len() == plain.len():  # a field of flags
        return _flags(text)
    return plain.scatter(rest, _flags(text.gather(rest))).alias("value")


def _flags(text: pl.Series) -> pl.Series:
    """``Yes``/``Active``/``Enabled`` -> 1, ``No``/``Not Active``/``Disabled`` -> 0, else null."""
    return text.replace_strict(FLAGS, default=None, return_dtype=pl.Float64).alias("value")


def _with_reasons(bad: pl.DataFrame, ctx: IngestContext) -> pl.DataFrame:
    """The failing samples of :func:`_stage` with their reason and field: the line's (a bad
    time or unit), else an unknown metric, a value nvidia-smi reported in brackets, or text
    that is not a number."""
    catalog_source = ctx.catalog.source
    return bad.with_columns(
        _reason=pl.coalesce(
            pl.col("_line_reason"),
            pl.when(~pl.col("_known")).then(
                pl.format(
                    "unknown metric '{}' (not in the metric catalog {})", pl.col("_source"), pl.lit(catalog_source)
                )
            ),
            pl.when(pl.col("_text").str.starts_with("[")).then(pl.format("nvidia-smi reported {}", pl.col("_text"))),
            pl.when(pl.col("value").is_null()).then(pl.format("not a number: '{}'", pl.col("_text").str.slice(0, 40))),
        ),
        _field=pl.coalesce(pl.col("_line_field"), pl.when(pl.col("_line_reason").is_null()).then(pl.col("_source"))),
    )


FILE_INDEX = pl.Int32()


def _fields(
    sources: list[_Source], indices: list[int], names: list[str], read: set[str]
) -> tuple[pl.DataFrame, pl.DataFrame, list[pl.DataFrame]]:
    """``(good, ragged, bad)`` of files that share one header: ``good`` has ``_line``,
    ``_file`` and the stripped ``read`` fields of every line with the header's number of
    fields (blank lines and repeated headers dropped), ``ragged`` (``_line``, ``_file``,
    ``_fields``) the other lines, ``bad`` the lines that are not text (staged, per file)."""
    clean = [(s, i) for s, i in zip(sources, indices) if s.body is not None]
    goods, raggeds, bad = [], [], []
    if clean:
        try:
            good, ragged = _split_clean(clean, names, read)
        except pl.exceptions.PolarsError:  # the CSV reader refused them: read them line by line
            for source, _ in clean:
                source.read_lines()
        else:
            goods.append(good)
            raggeds.append(ragged)
    for source, index in zip(sources, indices):
        if source.body is None:
            good, ragged = _split_lines(source, index, names, read)
            goods.append(good)
            raggeds.append(ragged)
            if source.bad.height:
                bad.append(source.bad.with_columns(_file=pl.lit(index, dtype=FILE_INDEX)))
    good = pl.concat(goods)
    if len(goods) > 1:
        good = good.sort("_file", maintain_order=True)
    return good, pl.concat(raggeds), bad


def _split_lines(source: _Source, index: int, names: list[str], read: set[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`_fields` of one file read line by line."""
    width = len(names)
    body = source.lines.filter(pl.col("_text") != source.header).with_columns(
        _file=pl.lit(index, dtype=FILE_INDEX), _fields=pl.col("_text").str.count_matches(",", literal=True) + 1
    )
    good = (
        body.filter(pl.col("_fields") == width)
        .with_columns(pl.col("_text").str.split_exact(",", width - 1).struct.rename_fields(names).alias("_parts"))
        .unnest("_parts")
        .select("_line", "_file", *[pl.col(name).str.strip_chars() for name in names if name in read])
    )
    return good, body.filter(pl.col("_fields") != width).select("_line", "_file", "_fields")


def _split_clean(
    clean: list[tuple[_Source, int]], names: list[str], read: set[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`_fields` of clean files: the lines' fields are counted on the bytes (so a
    line with too few or too many fields is told apart from empty fields), then the
    files are read as one CSV by Polars (no quoting: nvidia-smi writes none)."""
    width = len(names)
    header_bytes = [s.header.encode() for s, _ in clean]
    keep_parts, line_parts, ragged_parts, counts = [], [], [], []
    for (source, index), header in zip(clean, header_bytes):
        body = np.frombuffer(source.body, dtype=np.uint8)
        ends = np.flatnonzero(body == NEWLINE)
        commas = np.diff(np.searchsorted(np.flatnonzero(body == COMMA), ends), prepend=0)
        keep = commas == width - 1
        starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
        at = source.body.find(header)
        while at >= 0:  # a repeated header line (nvidia-smi -l restarted) is not data
            line = int(np.searchsorted(ends, at))
            tail = source.body[at + len(header) : ends[line] + 1]
            if starts[line] == at and tail in (b"\n", b"\r\n"):
                keep[line] = False
            at = source.body.find(header, at + 1)
        odd = np.flatnonzero(commas != width - 1)
        if odd.size:
            texts = [source.body[starts[k] : ends[k]].decode("utf-8").rstrip("\r") for k in odd]
            blank = pl.Series(texts, dtype=pl.String).str.strip_chars() == ""
            odd = odd[~blank.to_numpy()]
            ragged_parts.append(
                pl.DataFrame(
                    {
                        "_line": odd.astype(np.int64) + source.body_line,
                        "_file": np.full(odd.size, index, dtype=np.int32),
                        "_fields": commas[odd].astype(np.uint32) + 1,
                    }
                )
            )
        keep_parts.append(keep)
        line_parts.append(np.arange(source.body_line, source.body_line + ends.size, dtype=np.int64))
        counts.append(ends.size)
    columns = [k for k, name in enumerate(names) if name in read]
    if not sum(counts):
        raise pl.exceptions.NoDataError("no lines after the headers")
    frame = pl.read_csv(
        b"".join(s.body for s, _ in clean),
        has_header=False,
        schema={f"_{k}": pl.String for k in range(width)},
        columns=columns,
        quote_char=None,
        truncate_ragged_lines=True,
        missing_columns="insert",
        empty_string_is_null=False,
        raise_if_empty=False,
    )
    if frame.height != sum(counts):
        raise pl.exceptions.ShapeError(f"the CSV reader saw {frame.height} lines where the files have {sum(counts)}")
    keep = np.concatenate(keep_parts)
    good = frame.select(
        _line=pl.Series(np.concatenate(line_parts)),
        _file=pl.Series(np.repeat(np.array([i for _, i in clean], dtype=np.int32), counts)),
        **{names[k]: pl.col(f"_{k}").str.strip_chars() for k in columns},
    ).filter(pl.Series(keep))
    ragged_schema = {"_line": pl.Int64, "_file": FILE_INDEX, "_fields": pl.UInt32}
    ragged = pl.concat([pl.DataFrame(schema=ragged_schema), *[r.cast(ragged_schema) for r in ragged_parts]])
    return good, ragged


def _times(stamps: pl.Series, timezone: str) -> pl.DataFrame:
    """``ts`` and ``_ts_reason`` of each line's timestamp text.  When the lines repeat
    their timestamps (a node's GPUs read at once), only the distinct texts are parsed and
    joined back; nvidia-smi usually writes each line's own milliseconds, and then the
    search for repeats costs more than it saves."""
    distinct = stamps.unique()
    if 2 * distinct.len() > stamps.len():
        return parse_local_column(stamps, timezone, TIMESTAMP_FORMAT).rename({"reason": "_ts_reason"})
    parsed = parse_local_column(distinct, timezone, TIMESTAMP_FORMAT).rename({"reason": "_ts_reason"})
    keys = stamps.to_frame("_text")
    found = keys.join(
        parsed.with_columns(_text=distinct), on="_text", how="left", maintain_order="left", nulls_equal=True
    )
    return found.drop("_text")


def _unit_expr(sources: list[_Source], indices: list[int], names: list[str], ctx: IngestContext) -> pl.Expr:
    """Each file's unit: ``<node>-gpu<index>`` from its directory, or its ``uuid`` looked up
    in the inventory when the directory is not a known node (reads ``_file`` and the fields)."""
    index_ok = pl.col("index").str.contains(r"^\d{1,3}$") if "index" in names else pl.lit(False)
    uuid_map = ctx.unit_by_uuid()
    nodes, by_uuid = {}, []
    for source, index in zip(sources, indices):
        node = shown_name(source.path.parent.name)
        nodes[index] = node
        node_known = node in ctx.known_node_names() if ctx.has_inventory else bool(ID_PATTERN.fullmatch(node))
        if not node_known and "uuid" in names and uuid_map:
            by_uuid.append(index)
    node = pl.col("_file").replace_strict(nodes, return_dtype=pl.String)
    by_dir = (
        pl.when(index_ok).then(pl.format("{}-gpu{}", node, pl.col("index"))).otherwise(pl.lit(None, dtype=pl.String))
    )
    if not by_uuid:
        return by_dir
    by_table = pl.col("uuid").replace_strict(uuid_map, default=None, return_dtype=pl.String)
    return pl.when(pl.col("_file").is_in(by_uuid)).then(by_table).otherwise(by_dir)
