"""``nvidia-smi``: ``nvidia-smi --query-gpu=... --format=csv [-l N]`` output.

The header names the fields, with units in brackets (``power.draw [W]``); values repeat
the unit (``250.12 W``, ``87 %``), flags read ``Yes``/``No`` or ``Active``/``Not Active``
(stored as 1/0) and ``[N/A]`` / ``[Not Supported]`` mark a field the GPU does not have
(no sample is made).  Other bracketed words (``[Unknown Error]``, ``[GPU is lost]``) are
quarantined with the text nvidia-smi printed.  ``--format=csv,noheader`` output is
rejected: without the header the columns cannot be named.

The timestamp is the node's local time without an offset, so a timezone is required.
The unit is ``<node>-gpu<index>`` where the node is the file's directory name
(``nvidia-smi/<node>/<day>.csv``); when an inventory exists and that directory is not one
of its nodes, the ``uuid`` field is looked up in the inventory instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from foreshock.contract import ID_PATTERN
from foreshock.ingest.context import IngestContext
from foreshock.ingest.manifest import shown_name
from foreshock.ingest.reading import read_lines
from foreshock.ingest.staged import ParsedFile, UnreadableFile, conform_staged
from foreshock.ingest.timestamps import parse_local, resolve_fall_back

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
    """One file with its header checked: ``lines`` are its non-blank lines (the header
    first), ``bad`` its lines that are not text (see :func:`read_lines`)."""

    path: Path
    lines: pl.DataFrame
    bad: pl.DataFrame
    raw_lines: pl.Series
    header: str


def _open(path: Path, ctx: IngestContext) -> _Source:
    """Read a file and check its header (raises UnreadableFile)."""
    source = read_lines(path)
    lines = source.lines.filter(pl.col("_text").str.strip_chars() != "")
    if source.bad.height and source.bad.get_column("_line").min() < lines.get_column("_line")[0]:
        raise UnreadableFile(f"header line is not text: {source.bad.get_column('_reason')[0]}")
    header_text = lines.get_column("_text")[0]
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
    return _Source(path, lines, source.bad, source.raw_lines, header_text)


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    source = _open(path, ctx)
    parsed = ParsedFile(path=path, raw_lines=source.raw_lines)
    parsed.add("samples", _stage([source], [0], ctx).drop("_file"))
    return parsed


def parse_files(
    paths: list[Path], indices: list[int], ctx: IngestContext
) -> tuple[dict[int, ParsedFile | Exception], list[pl.DataFrame]]:
    """Parse several files as one frame per header: ``(per index: ParsedFile or the error
    that rejects the file, staged samples of the parsed files with ``_file`` = their index)``.

    The same rows, reasons and row order per file as :func:`parse` file by file; the
    per-file work is only reading the lines and checking the header, the rest runs once
    over the concatenation of the files that share a header.  A file that cannot be read
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
            frame = _stage([m for _, m in members], [i for i, _ in members], ctx)
        except Exception:  # noqa: BLE001 - a file that breaks the group is parsed alone
            for index, source in members:
                try:
                    results[index] = parse(source.path, ctx)
                except OSError:
                    raise
                except Exception as exc:  # noqa: BLE001
                    results[index] = exc
            continue
        counts = dict(frame.group_by("_file").len().iter_rows())
        for index, source in members:
            results[index] = ParsedFile(path=source.path, raw_lines=source.raw_lines, row_count=counts.get(index, 0))
        frames.append(frame)
    return results, frames


def _stage(sources: list[_Source], indices: list[int], ctx: IngestContext) -> pl.DataFrame:
    """Staged samples (conformed, plus ``_file``) of files that share one header; per file
    in the order undecodable lines, malformed lines, samples, failing samples."""
    header_text = sources[0].header
    names, units = parse_header(header_text)
    width = len(names)
    metrics = [n for n in names if n not in DESCRIPTIVE]
    read = {"timestamp", "index", "uuid", *metrics}  # other descriptive fields are never looked at
    index = pl.Int32()
    lines = pl.concat([s.lines.with_columns(_file=pl.lit(i, dtype=index)) for s, i in zip(sources, indices)])
    # Every file's first parsed line is the header; a repeated one (when -l restarts) goes too.
    body = lines.filter(pl.col("_text") != header_text)
    body = body.with_columns(_fields=pl.col("_text").str.count_matches(",", literal=True) + 1)
    ragged = body.filter(pl.col("_fields") != width)
    good = (
        body.filter(pl.col("_fields") == width)
        .with_columns(pl.col("_text").str.split_exact(",", width - 1).struct.rename_fields(names).alias("_parts"))
        .unnest("_parts")
        .with_columns([pl.col(name).str.strip_chars() for name in names if name in read])
    )
    parts = [s.bad.with_columns(_file=pl.lit(i, dtype=index)) for s, i in zip(sources, indices) if s.bad.height]
    if ragged.height:
        parts.append(
            ragged.select(
                "_line",
                "_file",
                _field=pl.lit("line"),
                _reason=pl.format("malformed line: expected {} fields, got {}", pl.lit(width), pl.col("_fields")),
            ),
        )
    ts, ts_reason = parse_local(pl.col("timestamp"), ctx.timezone, TIMESTAMP_FORMAT)
    # A node's lines repeat each timestamp once per GPU and each GPU on every line: parse
    # the distinct values and join them back.
    good = _on_distinct(good, ["timestamp"], ts=ts, _ts_reason=ts_reason)
    identity = ["_file"] + [n for n in ("index", "uuid") if n in names]
    good = _on_distinct(good, identity, _unit_id=_unit_expr(sources, indices, names, ctx))
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
    long = pl.concat(
        [
            good.select(
                "_line",
                "_file",
                "ts",
                "_line_reason",
                "_line_field",
                unit_id="_unit_id",
                _source=pl.lit(name),
                metric=pl.lit(resolved[name] or name),
                _text=pl.col(name),
                _known=pl.lit(resolved[name] is not None),
                _suffix=pl.lit(f" {units[name]}" if units.get(name) else ""),
            )
            for name in metrics
        ],
        how="vertical",
    )
    long = long.with_columns(value=_numbers(long))
    long = long.filter(~pl.col("_text").is_in(NOT_SUPPORTED))
    failing = (
        pl.col("_line_reason").is_not_null()
        | ~pl.col("_known")
        | pl.col("_text").str.starts_with("[")
        | pl.col("value").is_null()
    )
    long = long.with_columns(_failing=failing)
    columns = ["unit_id", "ts", "metric", "value", "_line", "_field", "_reason", "_file"]
    parts.append(
        long.filter(~pl.col("_failing"))
        .with_columns(_reason=pl.lit(None, dtype=pl.String), _field=pl.lit(None, dtype=pl.String))
        .select(columns)
    )
    bad = long.filter(pl.col("_failing"))
    if bad.height:  # reason texts only for the failing rows (they are built for every row a branch sees)
        catalog_source = ctx.catalog.source
        bad = bad.with_columns(
            _reason=pl.coalesce(
                pl.col("_line_reason"),
                pl.when(~pl.col("_known")).then(
                    pl.format(
                        "unknown metric '{}' (not in the metric catalog {})", pl.col("_source"), pl.lit(catalog_source)
                    )
                ),
                pl.when(pl.col("_text").str.starts_with("[")).then(
                    pl.format("nvidia-smi reported {}", pl.col("_text"))
                ),
                pl.when(pl.col("value").is_null()).then(
                    pl.format("not a number: '{}'", pl.col("_text").str.slice(0, 40))
                ),
            ),
            _field=pl.coalesce(
                pl.col("_line_field"), pl.when(pl.col("_line_reason").is_null()).then(pl.col("_source"))
            ),
        )
        parts.append(bad.select(columns))
    staged = pl.concat([conform_staged(part, "samples").with_columns(part.get_column("_file")) for part in parts])
    return staged


def _on_distinct(frame: pl.DataFrame, columns: list[str], **exprs: pl.Expr) -> pl.DataFrame:
    """``frame.with_columns(**exprs)`` where ``exprs`` read only ``columns``, evaluated once
    per distinct value of ``columns`` (row order kept)."""
    if not columns:
        return frame.with_columns(**exprs)
    distinct = frame.select(columns).unique().with_columns(**exprs)
    return frame.join(distinct, on=columns, how="left", maintain_order="left", nulls_equal=True)


def _numbers(long: pl.DataFrame) -> pl.Series:
    """:func:`_number` of every row of ``long`` (``_text``, ``_suffix``).  Most values are
    plain numbers: a plain cast reads them (a text ending in a unit has a space, so it never
    casts), and only the rest are read the long way."""
    plain = long.get_column("_text").cast(pl.Float64, strict=False).alias("value")
    rest = plain.is_null().arg_true()
    if rest.len() == 0:
        return plain
    others = long[rest].select(_number(pl.col("_text"), pl.col("_suffix"))).to_series()
    return plain.scatter(rest, others)


def _number(text: pl.Expr, suffix: pl.Expr) -> pl.Expr:
    """``"250.12 W"`` -> 250.12 (``suffix``: the header's unit after a space, or ""),
    ``Yes``/``Active`` -> 1, ``No`` -> 0.  One pass over every metric's values at once."""
    number = text.str.strip_suffix(suffix).cast(pl.Float64, strict=False)
    return pl.coalesce(number, text.replace_strict(FLAGS, default=None, return_dtype=pl.Float64))


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
