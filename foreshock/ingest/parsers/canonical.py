"""``canonical``: the contract's own tables as CSV or Parquet ("bring your own telemetry").

A file is ``inventory``, ``samples``, ``events``, ``failures`` or ``drains`` by its name
(``samples.csv``, ``samples-2026-11.parquet``, ``samples/part-0.parquet``) or else by its
columns.  Timestamps: ISO 8601 with ``Z`` or an offset (CSV) or Datetime columns
(Parquet); naive ones need a timezone.  ``samples.metric`` may be a catalog alias.
``events.count`` defaults to 1.  A ``catalog.yaml`` next to the files is used by
``ingest_path`` (merged over the configured catalog).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from foreshock.contract import KEYS, REQUIRED_INVENTORY, SCHEMAS, TIME_COLUMN
from foreshock.ingest.context import IngestContext
from foreshock.ingest.csv_table import read_csv_table
from foreshock.ingest.staged import ParsedFile, UnreadableFile
from foreshock.ingest.timestamps import datetime_to_utc, is_naive, parse_utc, resolve_fall_back
from foreshock.lake.columns import distinct_values

REQUIRED: dict[str, tuple[str, ...]] = {
    "inventory": REQUIRED_INVENTORY,
    "samples": ("unit_id", "ts", "metric", "value"),
    "events": ("unit_id", "ts", "source", "code"),
    "failures": ("unit_id", "failed_at"),
    "drains": ("unit_id", "drained_at"),
}


def table_of(path: Path, columns: list[str]) -> str | None:
    """Which canonical table a file holds, from its name, else its columns."""
    names = [path.stem.lower(), path.parent.name.lower()]
    for table in ("inventory", "samples", "events", "failures", "drains"):
        if any(n == table or n.startswith(f"{table}-") or n.startswith(f"{table}_") for n in names):
            if set(REQUIRED[table]) <= set(columns):
                return table
    for table in ("samples", "events", "failures", "drains", "inventory"):
        if set(REQUIRED[table]) <= set(columns):
            return table
    return None


def read_frame(path: Path) -> tuple[pl.DataFrame, pl.Series | None]:
    """The file as a frame with ``_line``, ``_reason``, ``_field`` (CSV: all strings)."""
    if path.suffix.lower() == ".parquet":
        try:
            frame = pl.read_parquet(path)
        except Exception as exc:  # polars raises several error types for broken files
            raise UnreadableFile(f"cannot read Parquet: {str(exc).splitlines()[0][:200]}") from None
        frame = frame.with_row_index("_line", offset=1).with_columns(
            pl.col("_line").cast(pl.Int64), _reason=pl.lit(None, dtype=pl.String), _field=pl.lit(None, dtype=pl.String)
        )
        return frame, None
    return read_csv_table(path)


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    frame, raw_lines = read_frame(path)
    data_columns = [c for c in frame.columns if not c.startswith("_")]
    table = table_of(path, data_columns)
    if table is None:
        raise UnreadableFile(
            f"columns {data_columns} match no canonical table (inventory needs {list(REQUIRED['inventory'])}, "
            f"samples {list(REQUIRED['samples'])}, events {list(REQUIRED['events'])}, failures {list(REQUIRED['failures'])})"
        )
    distinct: dict[str, pl.Series] = {}
    staged = stage_table(table, frame, ctx, distinct)
    parsed = ParsedFile(path=path, raw_lines=raw_lines)
    if raw_lines is None:
        plain = frame.drop("_line", "_reason", "_field")
        parsed.raw_lookup = lambda rows: _row_text(plain, rows)
    parsed.add(table, staged, distinct)
    return parsed


def stage_table(
    table: str, frame: pl.DataFrame, ctx: IngestContext, found: dict[str, pl.Series] | None = None
) -> pl.DataFrame:
    """Typed staged rows of one canonical table, with a reason for every bad field.
    ``found``: given a dict, the distinct values of the text columns taken as they are
    (``unit_id``, ``metric`` as the catalog names it) are put in it."""
    reasons: list[pl.Expr] = [pl.col("_reason")]
    fields: list[pl.Expr] = [pl.col("_field")]
    exprs: dict[str, pl.Expr] = {}
    clean: dict[str, pl.Series] = {}  # distinct values of text columns taken as they are
    for name, dtype in SCHEMAS[table].items():
        if name not in frame.columns:
            if name in REQUIRED[table]:
                raise UnreadableFile(f"{table} file lacks column {name!r}")
            continue
        value, reason, naive, distinct = _typed(name, dtype, frame, table, ctx)
        if naive is not None and name == TIME_COLUMN[table]:
            exprs["_naive"] = naive.alias("_naive")
        if distinct is not None:
            clean[name] = distinct
        exprs[name] = value.alias(name)
        reasons.append(reason)
        fields.append(pl.when(reason.is_not_null()).then(pl.lit(name)))
    if table == "events" and "count" not in frame.columns:
        exprs["count"] = pl.lit(1, dtype=pl.Int64).alias("count")
    extra = [
        pl.col(c).cast(pl.String)
        for c in frame.columns
        if table == "inventory" and c not in SCHEMAS[table] and not c.startswith("_")
    ]
    staged = frame.select(
        "_line",
        *exprs.values(),
        *extra,
        _reason=pl.coalesce(reasons),
        _field=pl.coalesce(fields),
    )
    time_col = TIME_COLUMN[table]
    if time_col and "_naive" in staged.columns:
        group = [k for k in KEYS[table] if k != time_col]
        staged = resolve_fall_back(staged, time_col, group, ctx.timezone).with_columns(
            _field=pl.coalesce("_field", pl.when(pl.col("_reason").str.starts_with("ambiguous")).then(pl.lit(time_col)))
        )
        staged = staged.drop("_naive")
    if table == "samples":
        # The metric names, known already when the column was taken as it is (the rows
        # since are the file's, in the same number, with the same metrics).
        distinct = clean.get("metric")
        names = (distinct if distinct is not None else staged.get_column("metric").drop_nulls().unique()).to_list()
        mapping = {n: ctx.catalog.resolve(n) or n for n in names}
        if any(alias != name for alias, name in mapping.items()):
            staged = staged.with_columns(pl.col("metric").replace_strict(mapping, default=None, return_dtype=pl.String))
            if "metric" in clean:
                clean["metric"] = pl.Series("metric", sorted(set(mapping.values())), dtype=pl.String)
    if found is not None:
        found.update({name: clean[name] for name in ("unit_id", "metric") if name in clean})
    return staged


def _typed(
    name: str, dtype: pl.DataType, frame: pl.DataFrame, table: str, ctx: IngestContext
) -> tuple[pl.Expr, pl.Expr, pl.Expr | None, pl.Series | None]:
    """Column ``name`` of ``frame`` as the contract's ``dtype``: ``(value, reason it is bad
    or null, whether a time is naive (times only), the distinct values of a text column
    taken as it is)``."""
    naive, distinct = None, None
    source_dtype = frame.schema[name]
    column = pl.col(name)
    text = column.cast(pl.String).str.strip_chars()
    missing = column.is_null() | (text == "")
    if isinstance(dtype, pl.Datetime):
        if isinstance(source_dtype, pl.Datetime):
            value, reason = datetime_to_utc(column, source_dtype, ctx.timezone)
            naive = pl.lit(getattr(source_dtype, "time_zone", None) is None)
        else:
            value, reason = parse_utc(text, ctx.timezone)
            naive = is_naive(text).fill_null(False)
        if name not in REQUIRED[table]:
            reason = pl.when(~missing).then(reason)  # an optional time may be empty
    elif dtype == pl.Float64 and source_dtype.is_numeric():
        # A typed number (Parquet) is null only where it is missing: no text to build.
        value = column.cast(pl.Float64)
        reason = pl.when(column.is_null()).then(pl.lit(f"missing {name}"))
    elif dtype == pl.Int64 and source_dtype.is_integer():
        value = column.cast(pl.Int64, strict=False)
        reason = (
            pl.when(column.is_null())
            .then(pl.lit(f"missing {name}"))
            .when(value.is_null())
            .then(pl.format("{} is not an integer: '{}'", pl.lit(name), text.str.slice(0, 40)))
        )
    elif dtype == pl.Float64:
        value = (
            column.cast(pl.Float64, strict=False) if source_dtype != pl.String else text.cast(pl.Float64, strict=False)
        )
        reason = (
            pl.when(missing)
            .then(pl.lit(f"missing {name}"))
            .when(value.is_null())
            .then(pl.format("{} is not a number: '{}'", pl.lit(name), text.str.slice(0, 40)))
        )
    elif dtype == pl.Int64:
        as_float = (column if source_dtype != pl.String else text).cast(pl.Float64, strict=False)
        value = pl.when(as_float == as_float.round()).then(as_float.cast(pl.Int64, strict=False))
        reason = (
            pl.when(missing)
            .then(pl.lit(f"missing {name}"))
            .when(value.is_null())
            .then(pl.format("{} is not an integer: '{}'", pl.lit(name), text.str.slice(0, 40)))
        )
    else:
        distinct = _clean_distinct(frame.get_column(name)) if source_dtype == pl.String else None
        if distinct is not None:
            missing = column.is_null()  # no value to strip or empty: skip a string pass
            value = column
        else:
            value = pl.when(~missing).then(text)
        required = name in REQUIRED[table] or name == "unit_id"
        reason = pl.when(missing).then(pl.lit(f"missing {name}")) if required else pl.lit(None, dtype=pl.String)
    return value, reason, naive, distinct


def _clean_distinct(column: pl.Series) -> pl.Series | None:
    """The distinct values (without null) of a text column none of whose values has
    surrounding blanks or is empty, else None (checked over its distinct values: ids and
    metric names repeat on every row)."""
    distinct = distinct_values(column).drop_nulls()
    if bool((distinct == distinct.str.strip_chars()).all()) and not bool((distinct == "").any()):
        return distinct
    return None


def _row_text(frame: pl.DataFrame, rows: pl.DataFrame) -> pl.Series:
    index = (rows.get_column("_line") - 1).clip(0, max(frame.height - 1, 0))
    picked = frame[index.to_list()]
    return pl.Series([str(r)[:500] for r in picked.iter_rows(named=True)], dtype=pl.String)
