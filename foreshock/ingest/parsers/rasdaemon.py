"""``rasdaemon``: memory errors from rasdaemon's ``mc_event`` table (EDAC reports).

Two forms: the SQLite database rasdaemon keeps (``/var/lib/rasdaemon/ras-mc_event.db``,
table ``mc_event``), copied to ``<landing>/.../<host>/ras-mc_event.db``, and a CSV export
of that table (``sqlite3 -header -csv ras-mc_event.db 'select * from mc_event'``) with
an extra ``host`` (or ``hostname``) column.  The SQLite file does not say which host it
came from, so its directory name is the host.

Each row is a *report* of ``err_count`` errors, not a cumulative counter, so rows become
**events** (source ``edac``, count = ``err_count``) rather than samples; features count
them per window like Xid events.  The code says how bad: 0 corrected, 1 uncorrected,
2 fatal, 3 deferred, 4 info.  The unit is the DIMM: ``<host>-dimm<label>``, the EDAC
label with characters outside the id alphabet replaced by ``_``
(``CPU_SrcID#0_Ha#0_Chan#1_DIMM#0`` -> ``CPU_SrcID_0_Ha_0_Chan_1_DIMM_0``), or
``mc<mc>.<top>.<middle>.<lower>`` when the label is missing.  DIMMs are not in a GPU
inventory: the check is that the *host* is a known node.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl

from foreshock.ingest.context import IngestContext
from foreshock.ingest.csv_table import read_csv_table
from foreshock.ingest.manifest import shown_name
from foreshock.ingest.staged import ParsedFile, UnreadableFile
from foreshock.ingest.timestamps import parse_utc

SQLITE_MAGIC = b"SQLite format 3\x00"
TABLE = "mc_event"
SEVERITY = {"corrected": 0, "uncorrected": 1, "fatal": 2, "deferred": 3, "info": 4}
COLUMNS = ("timestamp", "err_count", "err_type", "label", "mc", "top_layer", "middle_layer", "lower_layer")


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    with open(path, "rb") as handle:
        magic = handle.read(len(SQLITE_MAGIC))
    if magic == SQLITE_MAGIC:
        table, raw_lines = _read_sqlite(path), None
        host = pl.lit(shown_name(path.parent.name))
    else:
        table, raw_lines = read_csv_table(path)
        missing = [c for c in ("timestamp", "err_count", "err_type") if c not in table.columns]
        if missing:
            raise UnreadableFile(f"rasdaemon CSV lacks column(s) {missing}")
        host_col = "host" if "host" in table.columns else "hostname" if "hostname" in table.columns else None
        host = pl.col(host_col).str.strip_chars() if host_col else pl.lit(shown_name(path.parent.name))
    for name in COLUMNS:
        if name not in table.columns:
            table = table.with_columns(pl.lit(None, dtype=pl.String).alias(name))
    if "_reason" not in table.columns:
        table = table.with_columns(_reason=pl.lit(None, dtype=pl.String), _field=pl.lit(None, dtype=pl.String))
    label = pl.col("label").str.strip_chars().str.replace_all(r"[^A-Za-z0-9._:\-]+", "_").str.strip_chars("_")
    generic = pl.col("label").is_null() | label.is_in(["", "unknown_memory", "any_memory"]) | (label == "")
    location = pl.format(
        "mc{}.{}.{}.{}", *(pl.col(c).fill_null("x") for c in ("mc", "top_layer", "middle_layer", "lower_layer"))
    )
    ts, ts_reason = parse_utc(pl.col("timestamp"), ctx.timezone)
    severity = (
        pl.col("err_type")
        .str.strip_chars()
        .str.to_lowercase()
        .replace_strict(SEVERITY, default=None, return_dtype=pl.Int64)
    )
    count = pl.col("err_count").str.strip_chars().cast(pl.Int64, strict=False)
    staged = table.with_columns(
        _node=host,
        unit_id=pl.format("{}-dimm{}", host, pl.when(generic).then(location).otherwise(label)),
        ts=ts,
        _ts_reason=ts_reason,
        code=severity,
        count=count,
        source=pl.lit("edac"),
    ).with_columns(
        _reason=pl.coalesce(
            "_reason",
            "_ts_reason",
            pl.when(pl.col("code").is_null()).then(
                pl.format(
                    "unknown err_type '{}' (expected Corrected, Uncorrected, Fatal, Deferred or Info)", "err_type"
                )
            ),
            pl.when(pl.col("count").is_null()).then(pl.format("err_count is not an integer: '{}'", "err_count")),
            pl.when(pl.col("count") < 0).then(pl.lit("negative err_count")),
        ),
        _field=pl.coalesce(
            "_field",
            pl.when(pl.col("_ts_reason").is_not_null()).then(pl.lit("timestamp")),
            pl.when(pl.col("code").is_null()).then(pl.lit("err_type")),
            pl.when(pl.col("count").is_null() | (pl.col("count") < 0)).then(pl.lit("err_count")),
        ),
    )
    parsed = ParsedFile(path=path, raw_lines=raw_lines)
    if raw_lines is None:
        rows = table.drop("_reason", "_field", "_line", strict=False)
        parsed.raw_lookup = lambda quarantined: _row_text(rows, quarantined)
    parsed.add(
        "events", staged.select("unit_id", "ts", "source", "code", "count", "_line", "_field", "_reason", "_node")
    )
    return parsed


def _read_sqlite(path: Path) -> pl.DataFrame:
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            names = {r[0] for r in connection.execute("select name from sqlite_master where type='table'")}
            if TABLE not in names:
                raise UnreadableFile(f"SQLite file has no '{TABLE}' table (tables: {sorted(names)})")
            present = [r[1] for r in connection.execute(f"pragma table_info({TABLE})")]
            wanted = [c for c in COLUMNS if c in present]
            rows = connection.execute(f"select {', '.join(wanted)} from {TABLE} order by rowid").fetchall()
        finally:
            connection.close()
    except sqlite3.DatabaseError as exc:
        raise UnreadableFile(f"cannot read the SQLite database: {exc}") from None
    data = {c: [None if r[i] is None else str(r[i]) for r in rows] for i, c in enumerate(wanted)}
    return (
        pl.DataFrame(data, schema={c: pl.String for c in wanted})
        .with_row_index("_line", offset=1)
        .with_columns(pl.col("_line").cast(pl.Int64))
    )


def _row_text(rows: pl.DataFrame, quarantined: pl.DataFrame) -> pl.Series:
    index = (quarantined.get_column("_line") - 1).clip(0, max(rows.height - 1, 0))
    picked = rows.drop("_line", strict=False)[index.to_list()]
    return pl.Series([str(r) for r in picked.iter_rows(named=True)], dtype=pl.String)
