"""``xid-log``: NVIDIA driver Xid reports in kernel logs (syslog or journalctl).

Reads lines such as (rsyslog RFC 3339 and ``journalctl -o short-iso``)::

    2026-11-01T12:00:03.123456+00:00 gpu-node001 kernel: [123456.789012] NVRM: Xid (PCI:0000:3b:00): 79, pid=2817, name=python3, GPU has fallen off the bus.
    2026-11-01T12:00:03+0000 gpu-node001 kernel: NVRM: Xid (PCI:0000:3b:00): 48, ...

Every other line is noise and is not counted.  The GPU is found through the inventory:
(host, PCI bus id) -> unit, with the bus id normalised (domain of 4 or 8 hex digits, any
case, function suffix optional).  Each Xid line is one event: source ``xid``, code = the
Xid number, count 1.

A batch's files are parsed together (:func:`parse_files`): their lines are read into one
frame and every step runs once over it; a file alone is a batch of one.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from foreshock.ingest.context import IngestContext, normalise_pci
from foreshock.ingest.reading import raw_lines_later, read_many_lines
from foreshock.ingest.staged import ParsedFile, conform_shared, parse_alone, rows_by_file
from foreshock.ingest.timestamps import parse_utc

XID_LINE = r"^(\S+)\s+(\S+)\s+kernel:\s*(?:\[\s*[\d.]+\]\s*)?NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\):\s*(\d+)\b"


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    """One file (:func:`parse_files` of it alone); raises its :class:`UnreadableFile`."""
    return parse_alone(parse_files, path, ctx)


def parse_files(
    paths: list[Path], indices: list[int], ctx: IngestContext
) -> tuple[dict[int, ParsedFile | Exception], dict[str, list[pl.DataFrame]]]:
    """Several kernel logs at once: ``(per index a ParsedFile or the error that rejects
    the file, {"events": [staged rows of every file, with _file = its index]})``, each
    file's rows in the order its own parse gives them (undecodable Xid lines, then its Xid
    lines).  ``OSError`` propagates."""
    source = read_many_lines(paths, indices)
    results: dict[int, ParsedFile | Exception] = dict(source.errors)
    xid = source.lines.filter(pl.col("_text").str.contains("NVRM: Xid", literal=True))
    xid = xid.with_columns(pl.col("_text").str.extract_groups(XID_LINE).alias("m")).unnest("m")
    xid = xid.rename({"1": "stamp", "2": "host", "3": "pci", "4": "code_text"})
    pci_map = {p: normalise_pci(p) for p in xid.get_column("pci").drop_nulls().unique().to_list()}
    units = ctx.unit_by_host_pci()
    xid = xid.with_columns(
        pci_norm=pl.col("pci").replace_strict(pci_map, default=None, return_dtype=pl.String)
        if pci_map
        else pl.lit(None, dtype=pl.String)
    ).with_columns(key=pl.format("{}|{}", "host", "pci_norm"))
    ts, ts_reason = parse_utc(pl.col("stamp"), ctx.timezone)
    unit = (
        pl.col("key").replace_strict(units, default=None, return_dtype=pl.String)
        if units
        else pl.lit(None, dtype=pl.String)
    )
    matched = pl.col("code_text").is_not_null()
    staged = xid.with_columns(
        ts=ts, _ts_reason=ts_reason, unit_id=unit, code=pl.col("code_text").cast(pl.Int64, strict=False)
    ).with_columns(
        _reason=pl.when(~matched)
        .then(
            pl.lit(
                "malformed Xid line: expected '<time> <host> kernel: NVRM: Xid (PCI:<bus>): <code>, ...' "
                "with an RFC 3339 time (rsyslog default, or journalctl -o short-iso)"
            )
        )
        .when(pl.col("_ts_reason").is_not_null())
        .then(pl.col("_ts_reason"))
        .when(pl.col("pci_norm").is_null())
        .then(pl.format("bad PCI bus id '{}'", "pci"))
        .when(pl.col("unit_id").is_null())
        .then(pl.format("unknown unit: no inventory GPU on host '{}' at PCI {}", "host", "pci_norm"))
        .otherwise(pl.lit(None, dtype=pl.String)),
        _field=pl.when(~matched)
        .then(pl.lit("line"))
        .when(pl.col("_ts_reason").is_not_null())
        .then(pl.lit("timestamp"))
        .when(pl.col("unit_id").is_null())
        .then(pl.lit("pci")),
        source=pl.lit("xid"),
        count=pl.lit(1, dtype=pl.Int64),
    )
    events = conform_shared(staged, "events")
    # A line that is not text is quarantined when it is an Xid report; other kernel
    # noise with stray bytes is not counted, like any other noise line.
    xid_bad = source.bad.filter(pl.col("_raw").str.contains("NVRM: Xid", literal=True))
    if xid_bad.height:  # each file's undecodable Xid lines before its other rows
        events = pl.concat([conform_shared(xid_bad, "events"), events]).sort("_file", maintain_order=True)
    shared = {"events": [events]}
    counts = rows_by_file(shared)
    with_xid = set(xid.get_column("_file").unique().to_list())
    for path, index in zip(paths, indices):
        if index not in results:
            parsed = ParsedFile(path=path, raw_lookup=raw_lines_later(path), row_count=counts.get(index, 0))
            if index not in with_xid:
                parsed.notes.append("no NVRM Xid lines")
            results[index] = parsed
    return results, shared
