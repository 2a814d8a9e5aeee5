"""``tickets``: failure / RMA tickets (CSV) -> ``failures``.

Columns ``ticket_id, opened_at, node, gpu_index, gpu_uuid, category, summary`` (the
simulator's and a typical ticket export's).  The unit is ``<node>-gpu<gpu_index>``; when
those are empty, ``gpu_uuid`` through the inventory; a ``unit_id`` column is also accepted.
``failed_at`` = ``opened_at`` (or a ``failed_at`` column), ``mode`` = ``category``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from foreshock.contract import UTC_TS
from foreshock.ingest.context import IngestContext
from foreshock.ingest.csv_table import read_csv_table
from foreshock.ingest.staged import ParsedFile, UnreadableFile
from foreshock.ingest.timestamps import parse_utc


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    table, raw_lines = read_csv_table(path)
    cols = set(table.columns)
    time_col = "failed_at" if "failed_at" in cols else "opened_at" if "opened_at" in cols else None
    if time_col is None:
        raise UnreadableFile("ticket CSV needs an 'opened_at' or 'failed_at' column")
    if not ({"node", "gpu_index"} <= cols or "unit_id" in cols or "gpu_uuid" in cols):
        raise UnreadableFile("ticket CSV needs 'node' and 'gpu_index', 'unit_id' or 'gpu_uuid' to name the GPU")

    def col(name: str) -> pl.Expr:
        return pl.col(name).str.strip_chars().replace("", None) if name in cols else pl.lit(None, dtype=pl.String)

    uuid_map = ctx.unit_by_uuid()
    by_slot = pl.when(col("node").is_not_null() & col("gpu_index").is_not_null()).then(
        pl.format("{}-gpu{}", col("node"), col("gpu_index"))
    )
    by_uuid = (
        col("gpu_uuid").replace_strict(uuid_map, default=None, return_dtype=pl.String)
        if uuid_map
        else pl.lit(None, dtype=pl.String)
    )
    unit = pl.coalesce(col("unit_id"), by_slot.otherwise(by_uuid))
    ts, ts_reason = parse_utc(col(time_col), ctx.timezone)
    mode = col("category") if "category" in cols else col("mode")
    # A ticket opened after the failure: the failure is known from the ticket (detected_at).
    detected_col = "opened_at" if time_col == "failed_at" and "opened_at" in cols else "detected_at"
    detected, _ = parse_utc(col(detected_col), ctx.timezone) if detected_col in cols else (pl.lit(None), None)
    staged = table.with_columns(
        unit_id=unit, failed_at=ts, mode=mode, detected_at=detected.cast(UTC_TS), _ts_reason=ts_reason
    ).with_columns(
        _reason=pl.coalesce(
            "_reason",
            "_ts_reason",
            pl.when(pl.col("unit_id").is_null()).then(
                pl.lit("cannot tell the unit: no node/gpu_index and the gpu_uuid is not in the inventory")
            ),
        ),
        _field=pl.coalesce(
            "_field",
            pl.when(pl.col("_ts_reason").is_not_null()).then(pl.lit(time_col)),
            pl.when(pl.col("unit_id").is_null()).then(pl.lit("node")),
        ),
    )
    parsed = ParsedFile(path=path, raw_lines=raw_lines)
    parsed.add("failures", staged.select("unit_id", "failed_at", "mode", "detected_at", "_line", "_field", "_reason"))
    return parsed
