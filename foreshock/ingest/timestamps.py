"""Timestamps into UTC, with a reason for every one that cannot be trusted.

Sources write time in many ways: RFC 3339 with an offset (``...+00:00``, ``...+0000``,
``...Z``), a space instead of ``T`` (rasdaemon: ``2026-11-01 12:00:03 +0000``), naive local
time (nvidia-smi: ``2026/11/01 00:10:00.000``) or unix seconds (Prometheus).  A naive time
is only accepted when the run has a timezone (``--timezone`` or ``[ingest] timezone``):
guessing would shift every sample of a node by its UTC offset.

When clocks fall back (DST end), an hour of local time happens twice.  A naive time in
that hour is resolved by the order of the file's rows (:func:`resolve_fall_back`): a
series' first reading of a local time takes the earlier offset (summer time), a reading
whose local time is not later than one the series already had takes the later offset.
An ambiguous reading with no other reading of its series in that hour cannot be ordered
and is quarantined ("ambiguous local time").
"""

from __future__ import annotations

import polars as pl

from foreshock.contract import UTC_TS

HAS_OFFSET = r"T\d{2}:\d{2}(:\d{2}(\.\d+)?)?[+-]\d{2}:?\d{2}$"

ISO_NAIVE = "%Y-%m-%dT%H:%M:%S%.f"
ISO_AWARE = "%Y-%m-%dT%H:%M:%S%.f%z"
NAIVE_HINT = "naive timestamp (no UTC offset): pass --timezone or set [ingest] timezone"


def _normalise(text: pl.Expr) -> pl.Expr:
    t = text.str.strip_chars()
    t = t.str.replace(r"^(\d{4}-\d{2}-\d{2})[ ](\d)", "${1}T${2}")
    t = t.str.replace(r"\s+([+-]\d{2}:?\d{2})$", "${1}")
    return t.str.replace(r"(?i)(Z|\s*UTC)$", "+00:00")


def parse_local(text: pl.Expr, timezone: str, naive_format: str) -> tuple[pl.Expr, pl.Expr]:
    """``(ts, reason)`` for a source that only writes naive local time (nvidia-smi).

    Cheaper than :func:`parse_utc`: one parse, no offset handling.  The reason is a fixed
    text (the raw line in the quarantine shows the value).
    """
    naive = text.str.to_datetime(naive_format, strict=False, time_unit="us")
    ts = (
        naive.dt.replace_time_zone(timezone, ambiguous="earliest", non_existent="null")
        .dt.convert_time_zone("UTC")
        .cast(UTC_TS)
    )
    reason = (
        pl.when(naive.is_null())
        .then(pl.lit(f"bad timestamp (expected {naive_format.replace('%.f', '.fff')})"))
        .when(ts.is_null())
        .then(pl.lit(f"timestamp does not exist in {timezone} (DST gap)"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )
    return ts, reason


def parse_utc(text: pl.Expr, timezone: str | None, naive_format: str = ISO_NAIVE) -> tuple[pl.Expr, pl.Expr]:
    """Expressions ``(ts, reason)`` for a column of timestamp text.

    ``ts`` is ``Datetime("us", "UTC")`` (null when rejected); ``reason`` says why a
    timestamp was rejected and is null when it was accepted.
    """
    t = _normalise(text)
    has_offset = t.str.contains(HAS_OFFSET)
    aware = t.str.to_datetime(ISO_AWARE, strict=False, time_unit="us")
    naive_text = t if naive_format == ISO_NAIVE else text.str.strip_chars()
    naive = naive_text.str.to_datetime(naive_format, strict=False, time_unit="us")
    if timezone:
        localised = naive.dt.replace_time_zone(
            timezone, ambiguous="earliest", non_existent="null"
        ).dt.convert_time_zone("UTC")
    else:
        localised = pl.lit(None, dtype=UTC_TS)
    ts = pl.when(has_offset).then(aware).otherwise(localised).cast(UTC_TS)
    bad = pl.format("bad timestamp '{}'", text.str.slice(0, 60))
    reason = (
        pl.when(text.is_null() | (text.str.strip_chars() == ""))
        .then(pl.lit("missing timestamp"))
        .when(has_offset & aware.is_null())
        .then(bad)
        .when(has_offset)
        .then(pl.lit(None, dtype=pl.String))
        .when(naive.is_null())
        .then(bad)
        .when(pl.lit(timezone is None))
        .then(pl.lit(NAIVE_HINT))
        .when(localised.is_null())
        .then(pl.format("timestamp '{}' does not exist in {}", text, pl.lit(timezone or "")))
        .otherwise(pl.lit(None, dtype=pl.String))
    )
    return ts, reason


def is_naive(text: pl.Expr) -> pl.Expr:
    """True where a timestamp text has no UTC offset (what :func:`parse_utc` localises)."""
    return ~_normalise(text).str.contains(HAS_OFFSET)


def resolve_fall_back(
    frame: pl.DataFrame, time_col: str, group: list[str], timezone: str | None, reason_col: str = "_reason"
) -> pl.DataFrame:
    """Resolve naive times in a DST fall-back hour by the file's row order (module notes).

    ``frame`` holds ``time_col`` already localised with the earlier offset, ``_line`` (the
    file order), the ``group`` columns that name one series and optionally ``_naive``
    (False for rows whose text had an offset: they are left alone).  Rows whose time is
    ambiguous get the later offset when they repeat an earlier local time of their
    series, or a reason in ``reason_col`` when they are their series' only ambiguous row.
    """
    if not timezone or frame.height == 0:
        return frame
    if "_naive" in frame.columns and not frame.get_column("_naive").any():
        return frame  # every time had an offset: nothing to resolve
    ts = pl.col(time_col)
    local = ts.dt.convert_time_zone(timezone).dt.replace_time_zone(None)
    later = (
        local.dt.replace_time_zone(timezone, ambiguous="latest", non_existent="null")
        .dt.convert_time_zone("UTC")
        .cast(UTC_TS)
    )
    naive = pl.col("_naive") if "_naive" in frame.columns else pl.lit(True)
    ambiguous = (naive & ts.is_not_null() & (later != ts)).fill_null(False)
    # Whether a time is ambiguous depends on the time alone: ask once per distinct time.
    distinct = frame.lazy().filter(naive).select(ts.unique()).with_columns(_naive=pl.lit(True))
    if not distinct.select(ambiguous.any()).collect().item():
        return frame
    flagged = frame.with_columns(_ambiguous=ambiguous)
    order = flagged.with_row_index("_row")
    rows = (
        order.filter("_ambiguous")
        .select("_row", "_line", *group, _local=local, _later=later)
        .sort("_line", "_row")
        .with_columns(
            _prior=pl.col("_local").cum_max().shift(1).over(group),
            _count=pl.len().over(group),
        )
        .with_columns(
            _repeat=(pl.col("_prior") >= pl.col("_local")).fill_null(False),
            _lone=pl.col("_count") == 1,
        )
        .select("_row", "_later", "_repeat", "_lone", "_local")
    )
    message = pl.format(
        "ambiguous local time '{}' in {} (clocks fell back; no other reading of this series in that hour "
        "to order it): give times with a UTC offset",
        pl.col("_local").dt.strftime("%Y-%m-%d %H:%M:%S"),
        pl.lit(timezone),
    )
    resolved = order.join(rows, on="_row", how="left", maintain_order="left").with_columns(
        pl.when(pl.col("_repeat") & ~pl.col("_lone")).then(pl.col("_later")).otherwise(ts).alias(time_col),
        pl.coalesce(pl.col(reason_col), pl.when(pl.col("_lone")).then(message)).alias(reason_col),
    )
    return resolved.drop("_row", "_later", "_repeat", "_lone", "_local", "_ambiguous")


def datetime_to_utc(column: pl.Expr, dtype: pl.DataType, timezone: str | None) -> tuple[pl.Expr, pl.Expr]:
    """``(ts, reason)`` for a column that is already a Datetime (Parquet input)."""
    if getattr(dtype, "time_zone", None):
        ts = column.dt.convert_time_zone("UTC").cast(UTC_TS)
        return ts, pl.when(column.is_null()).then(pl.lit("missing timestamp")).otherwise(pl.lit(None, dtype=pl.String))
    if timezone:
        ts = (
            column.dt.replace_time_zone(timezone, ambiguous="earliest", non_existent="null")
            .dt.convert_time_zone("UTC")
            .cast(UTC_TS)
        )
        reason = (
            pl.when(column.is_null())
            .then(pl.lit("missing timestamp"))
            .when(ts.is_null())
            .then(pl.lit(f"timestamp does not exist in {timezone}"))
        )
        return ts, reason.otherwise(pl.lit(None, dtype=pl.String))
    return pl.lit(None, dtype=UTC_TS), pl.lit(NAIVE_HINT)


def unix_seconds_to_utc(seconds: pl.Expr) -> pl.Expr:
    """Unix seconds (float allowed) -> ``Datetime("us", "UTC")``."""
    return (
        (seconds * 1_000_000).round().cast(pl.Int64, strict=False).cast(pl.Datetime("us")).dt.replace_time_zone("UTC")
    )
