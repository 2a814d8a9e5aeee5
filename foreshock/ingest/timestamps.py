"""Timestamps into UTC, with a reason for every one that cannot be trusted.

Sources write time in many ways: RFC 3339 with an offset (``...+00:00``, ``...+0000``,
``...Z``), a space instead of ``T`` (rasdaemon: ``2026-11-01 12:00:03 +0000``), naive local
time (nvidia-smi: ``2026/11/01 00:10:00.000``) or unix seconds (Prometheus).  A naive time
is only accepted when the run has a timezone (``--timezone`` or ``[ingest] timezone``):
guessing would shift every sample of a node by its UTC offset.
"""

from __future__ import annotations

import polars as pl

from foreshock.contract import UTC_TS

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
    has_offset = t.str.contains(r"T\d{2}:\d{2}(:\d{2}(\.\d+)?)?[+-]\d{2}:?\d{2}$")
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
