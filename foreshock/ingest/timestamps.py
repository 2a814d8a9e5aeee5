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

from collections.abc import Callable
from datetime import date, timedelta
from functools import partial

import polars as pl

from foreshock.contract import UTC_TS

HAS_OFFSET = r"T\d{2}:\d{2}(:\d{2}(\.\d+)?)?[+-]\d{2}:?\d{2}$"

ISO_NAIVE = "%Y-%m-%dT%H:%M:%S%.f"
ISO_AWARE = "%Y-%m-%dT%H:%M:%S%.f%z"
NAIVE_HINT = "naive timestamp (no UTC offset): pass --timezone or set [ingest] timezone"


# UTC days that ended with a leap second (23:59:60), from the IERS announcements (none
# since 2016; leap seconds are to stop by 2035).  A ``:60`` second on any other day is a
# clock or formatting fault: the parsers would read it as the next day's midnight.
LEAP_SECOND_DAYS = tuple(
    date.fromisoformat(day)
    for day in (
        "1972-06-30 1972-12-31 1973-12-31 1974-12-31 1975-12-31 1976-12-31 1977-12-31 1978-12-31 "
        "1979-12-31 1981-06-30 1982-06-30 1983-06-30 1985-06-30 1987-12-31 1989-12-31 1990-12-31 "
        "1992-06-30 1993-06-30 1994-06-30 1995-12-31 1997-06-30 1998-12-31 2005-12-31 2008-12-31 "
        "2012-06-30 2015-06-30 2016-12-31"
    ).split()
)
LEAP_EPOCH_DAYS = [(day - date(1970, 1, 1)).days for day in LEAP_SECOND_DAYS]
NORMAL, LEAP, FAKE_LEAP = 0, 1, 2


def leap_seconds(
    text: pl.Expr, ts: pl.Expr, reason: pl.Expr, to_ts: Callable[[pl.Expr], pl.Expr]
) -> tuple[pl.Expr, pl.Expr]:
    """``(ts, reason)`` with second 60 judged: a real leap second (23:59:60 UTC on a day
    of :data:`LEAP_SECOND_DAYS`; parsers read it as the next midnight) is kept as the last
    microsecond of its day; any other is quarantined rather than stored as the next minute.

    ``to_ts`` builds ``ts`` from a text expression.  Which rows have second 60 is asked of
    the text in one pass (:func:`_second_60`, which parses only the rows holding ``:60``):
    judged as expressions over ``ts``, the check made Polars parse every time again.
    """
    code = text.map_batches(partial(_second_60, to_ts=to_ts), return_dtype=pl.Int8, is_elementwise=True)
    kept = (
        pl.when(code == LEAP)
        .then(ts.dt.truncate("1s") - timedelta(microseconds=1))
        .when(code == FAKE_LEAP)
        .then(pl.lit(None, dtype=UTC_TS))
        .otherwise(ts)
    )
    message = pl.lit("leap second (second 60) on a day without one")  # the quarantined line shows the time
    return kept, pl.coalesce(reason, pl.when(code == FAKE_LEAP).then(message))


def _second_60(text: pl.Series, to_ts: Callable[[pl.Expr], pl.Expr]) -> pl.Series:
    """Per row :data:`NORMAL`, :data:`LEAP` or :data:`FAKE_LEAP` (see :func:`leap_seconds`).
    A ``:60`` in a time that parses can only be its seconds (minutes and offsets stop at 59)."""
    codes = pl.zeros(len(text), pl.Int8, eager=True)
    rows = text.str.contains(":60", literal=True).fill_null(False).arg_true()
    if rows.len() == 0:
        return codes
    parsed = pl.DataFrame({"text": text.gather(rows)}).select(to_ts(pl.col("text"))).to_series()
    seconds = parsed.dt.epoch("s")  # a leap second reads as 00:00:00 of the next day
    real = (seconds % 86400 == 0) & (seconds // 86400 - 1).is_in(LEAP_EPOCH_DAYS)
    judged = pl.select(
        pl.when(parsed.is_null()).then(NORMAL).when(real).then(LEAP).otherwise(FAKE_LEAP).cast(pl.Int8)
    ).to_series()
    return codes.scatter(rows, judged)


def _normalise(text: pl.Expr) -> pl.Expr:
    t = text.str.strip_chars()
    t = t.str.replace(r"^(\d{4}-\d{2}-\d{2})[ ](\d)", "${1}T${2}")
    t = t.str.replace(r"\s+([+-]\d{2}:?\d{2})$", "${1}")
    return t.str.replace(r"(?i)(Z|\s*UTC)$", "+00:00")


def parse_local(text: pl.Expr, timezone: str, naive_format: str) -> tuple[pl.Expr, pl.Expr]:
    """``(ts, reason)`` for a source that only writes naive local time (nvidia-smi).

    Cheaper than :func:`parse_utc`: one parse, no offset handling.  The reason is a fixed
    text (the raw line in the quarantine shows the value).  Second 60: :func:`leap_seconds`.
    """
    ts, reason = _parse_local(text, timezone, naive_format)
    return leap_seconds(text, ts, reason, lambda t: _parse_local(t, timezone, naive_format)[0])


def parse_local_column(text: pl.Series, timezone: str, naive_format: str) -> pl.DataFrame:
    """:func:`parse_local` of a column of text: a frame of ``ts`` and ``reason``, a row per
    value.  Each step is computed once (as expressions, the reason and the leap-second
    check would parse every time again); a column with a ``:60`` anywhere (a leap second
    or a fault, rare) takes the expressions."""
    if text.str.contains(":60", literal=True).any():
        ts, reason = parse_local(pl.col("_text"), timezone, naive_format)
        return pl.DataFrame({"_text": text}).select(ts.alias("ts"), reason.alias("reason"))
    naive = naive_times(text, naive_format)
    ts = naive.dt.replace_time_zone(timezone, ambiguous="earliest", non_existent="null").dt.convert_time_zone("UTC")
    frame = pl.DataFrame({"_naive": naive, "ts": ts.cast(UTC_TS)})
    return frame.select("ts", _local_reason(pl.col("_naive"), pl.col("ts"), timezone, naive_format).alias("reason"))


# Naive formats ending in seconds and a fraction, with the texts (a regular expression)
# that hold exactly three digits of it: Polars parses ``%.f`` ten times slower than the
# fields before it (a day of a 1,024-GPU fleet's nvidia-smi lines: 45 against 4 ms), so
# such texts are parsed without it and their milliseconds added (:func:`naive_times`).
MILLISECOND_TEXTS = {"%Y/%m/%d %H:%M:%S%.f": r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$"}


def naive_times(text: pl.Series, naive_format: str) -> pl.Series:
    """``text.str.to_datetime(naive_format, strict=False, time_unit="us")``: when the
    format is one of :data:`MILLISECOND_TEXTS` and every text has its three digits of
    milliseconds, from the texts without them plus their milliseconds (the same times and
    nulls: a text that does not parse has fields that do not, whatever its fraction)."""
    pattern = MILLISECOND_TEXTS.get(naive_format)
    if pattern is None or not text.len() or text.null_count() or not text.str.contains(pattern).all():
        return text.str.to_datetime(naive_format, strict=False, time_unit="us")
    seconds = text.str.slice(0, len(text[0]) - 4).str.to_datetime(naive_format[:-3], strict=False, time_unit="us")
    millis = text.str.slice(len(text[0]) - 3).cast(pl.Int64)
    return pl.select(seconds + pl.duration(milliseconds=millis, time_unit="us")).to_series().alias(text.name)


def _parse_local(text: pl.Expr, timezone: str, naive_format: str) -> tuple[pl.Expr, pl.Expr]:
    naive = text.str.to_datetime(naive_format, strict=False, time_unit="us")
    ts = (
        naive.dt.replace_time_zone(timezone, ambiguous="earliest", non_existent="null")
        .dt.convert_time_zone("UTC")
        .cast(UTC_TS)
    )
    return ts, _local_reason(naive, ts, timezone, naive_format)


def _local_reason(naive: pl.Expr, ts: pl.Expr, timezone: str, naive_format: str) -> pl.Expr:
    """Why a naive local time was rejected (null: it was not), from its parse and its UTC time."""
    return (
        pl.when(naive.is_null())
        .then(pl.lit(f"bad timestamp (expected {naive_format.replace('%.f', '.fff')})"))
        .when(ts.is_null())
        .then(pl.lit(f"timestamp does not exist in {timezone} (DST gap)"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )


def parse_utc(text: pl.Expr, timezone: str | None, naive_format: str = ISO_NAIVE) -> tuple[pl.Expr, pl.Expr]:
    """Expressions ``(ts, reason)`` for a column of timestamp text.

    ``ts`` is ``Datetime("us", "UTC")`` (null when rejected); ``reason`` says why a
    timestamp was rejected and is null when it was accepted.  Second 60: :func:`leap_seconds`.
    """
    ts, reason = _parse_utc(text, timezone, naive_format)
    return leap_seconds(text, ts, reason, lambda t: _parse_utc(t, timezone, naive_format)[0])


def _parse_utc(text: pl.Expr, timezone: str | None, naive_format: str) -> tuple[pl.Expr, pl.Expr]:
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
