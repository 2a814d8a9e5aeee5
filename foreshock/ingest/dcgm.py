"""dcgm-exporter series (from Prometheus JSON or text scrapes) into samples and events.

Shared by the ``prometheus-json`` and ``prometheus-text`` parsers.  Input is one row per
series sample with the series' labels already extracted.

* unit: ``<Hostname>-gpu<gpu>``; without those labels, the ``UUID`` label through the
  inventory's ``uuid`` column.
* metric: the series name through the catalog's aliases; unknown names are quarantined.
* ``DCGM_FI_DEV_XID_ERRORS`` is a gauge holding the *last* XID code, not a count.  An
  event (source ``dcgm-xid``, count 1) is made where the code changes to a non-zero value.
  The value before a file's first sample of a unit is taken from the unit's latest
  ``dcgm-xid`` event already in the lake, so a code that is still held at the start of the
  next day's file is not counted again.  (A return to 0 that happened in an earlier file is
  not stored, so a 79 -> 0 -> 79 whose second 79 opens a new file is missed; ingest the
  gauge in time order.)
* violation counters (catalog unit ``us``): DCGM 3.3 and later report ns.  A scrape's
  ``# HELP`` text declares the unit (``... (in ns)``); Prometheus JSON carries no unit, so
  ``[ingest] violation_unit`` (default ``us``) says what the source reports.  Values are
  converted to the catalog's unit, so the lake always holds µs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from foreshock.ingest.context import TIME_UNIT_SECONDS, IngestContext
from foreshock.lake.read import scan_table

XID_GAUGE = "DCGM_FI_DEV_XID_ERRORS"
XID_SOURCE = "dcgm-xid"


def _none() -> pl.Expr:
    return pl.lit(None, dtype=pl.String)


def resolve_series_name(ctx: IngestContext, name: str) -> str | None:
    """The catalog metric of a series name; OpenMetrics adds ``_total`` to a counter's
    family name, so ``X_total`` is also tried as ``X``."""
    metric = ctx.catalog.resolve(name)
    if metric is None and name.endswith("_total"):
        metric = ctx.catalog.resolve(name.removesuffix("_total"))
    return metric


@dataclass
class LakeRead:
    """XID events that depend on the stored ones (:attr:`ParsedFile.reads_lake`), staged
    again when called with another context (its view of the lake); ``files``: the files
    (``_file``) whose events they are, when the rows are several files'."""

    again: Callable[[IngestContext], pl.DataFrame]
    files: frozenset[int] = frozenset()

    def __call__(self, turn: IngestContext) -> pl.DataFrame:
        return self.again(turn)


def stage_series(
    frame: pl.DataFrame,
    ctx: IngestContext,
    declared_units: dict | None = None,
    lake_reads: list[LakeRead] | None = None,
) -> dict[str, pl.DataFrame]:
    """Samples and XID events from long series rows.

    ``frame`` columns: ``name, gpu, Hostname, UUID, ts, ts_reason, value_text, _line``
    (and optionally ``_raw``, and ``_file`` for the rows of several files parsed together:
    each file's series are then its own, and ``_file`` is kept).  Returns staged ``samples``
    and ``events``.  ``declared_units``: time units declared by series name
    (:func:`_time_unit_factors`); with ``_file``, by file index first.  ``lake_reads``:
    given a list, when the events depend on the stored XID events, a :class:`LakeRead` is
    appended (:func:`xid_events`).
    """
    declared_units = declared_units or {}
    by_file = "_file" in frame.columns
    uuid_map = ctx.unit_by_uuid()
    unit_from_labels = pl.when(pl.col("Hostname").is_not_null() & pl.col("gpu").is_not_null()).then(
        pl.format("{}-gpu{}", pl.col("Hostname"), pl.col("gpu"))
    )
    by_uuid = pl.col("UUID").replace_strict(uuid_map, default=None, return_dtype=pl.String) if uuid_map else _none()
    if uuid_map and not frame.select((pl.col("Hostname").is_null() | pl.col("gpu").is_null()).any()).item():
        by_uuid = _none()  # every row is named by its labels: no look-up of each row's UUID
    frame = frame.with_columns(unit_id=unit_from_labels.otherwise(by_uuid))
    frame = frame.with_columns(value=pl.col("value_text").str.strip_chars().cast(pl.Float64, strict=False))

    names = frame.get_column("name").unique().drop_nulls().to_list()
    resolved = {n: resolve_series_name(ctx, n) for n in names if n != XID_GAUGE}
    unit_reason = (
        pl.when(pl.col("unit_id").is_null())
        .then(pl.lit("cannot tell the unit: no Hostname/gpu labels and the UUID label is not in the inventory"))
        .otherwise(_none())
    )
    value_reason = (
        pl.when(pl.col("value").is_null())
        .then(pl.format("value is not a number: '{}'", pl.col("value_text").str.slice(0, 40)))
        .otherwise(_none())
    )
    common_reason = pl.coalesce(pl.col("ts_reason"), unit_reason)
    common_field = (
        pl.when(pl.col("ts_reason").is_not_null())
        .then(pl.lit("timestamp"))
        .when(pl.col("unit_id").is_null())
        .then(pl.lit("labels"))
    )

    metric_map = {n: m for n, m in resolved.items() if m is not None}
    series, factor_expr = _with_factors(frame.filter(pl.col("name") != XID_GAUGE), ctx, resolved, declared_units)
    samples = series.with_columns(
        metric=pl.col("name").replace_strict(metric_map, default=None, return_dtype=pl.String),
    )
    samples = _with_reasons(samples, factor_expr, common_reason, common_field, value_reason, ctx.catalog.source)
    out = {
        "samples": samples.select(
            "unit_id",
            "ts",
            "metric",
            "value",
            "_line",
            "_field",
            "_reason",
            *(["_raw"] if "_raw" in samples.columns else []),
            *(["_file"] if by_file else []),
        )
    }
    xid = frame.filter(pl.col("name") == XID_GAUGE)
    if xid.height:
        out["events"] = xid_events(xid, ctx, common_reason, common_field, lake_reads)
    return out


def _with_reasons(
    samples: pl.DataFrame,
    factor: pl.Expr,
    common_reason: pl.Expr,
    common_field: pl.Expr,
    value_reason: pl.Expr,
    catalog_source: str,
) -> pl.DataFrame:
    """``samples`` (with ``metric`` resolved, null when unknown) with each value in the
    catalog's unit (``factor``) and each row's ``_reason`` and ``_field`` (null: the row
    parsed): the time's or the unit's (``common_*``), an unknown metric, a value that is
    not a number.  Reason texts are built for every row a branch sees, so only when some
    row needs one (most files: none)."""
    failing = pl.col("ts_reason").is_not_null() | pl.col("unit_id").is_null()
    if not samples.select((failing | pl.col("metric").is_null() | pl.col("value").is_null()).any()).item():
        return samples.with_columns(value=pl.col("value") * factor, _reason=_none(), _field=_none())
    return samples.with_columns(
        value=pl.col("value") * factor,
        _reason=pl.coalesce(
            common_reason,
            pl.when(pl.col("metric").is_null()).then(
                pl.format("unknown metric '{}' (not in the metric catalog {})", pl.col("name"), pl.lit(catalog_source))
            ),
            value_reason,
        ),
        _field=pl.coalesce(
            common_field,
            pl.when(pl.col("metric").is_null()).then(pl.lit("__name__")),
            pl.when(pl.col("value").is_null()).then(pl.lit("value")),
        ),
        metric=pl.coalesce(pl.col("metric"), pl.col("name")),
    )


def _with_factors(
    series: pl.DataFrame, ctx: IngestContext, resolved: dict[str, str | None], declared_units: dict
) -> tuple[pl.DataFrame, pl.Expr]:
    """``series`` and the factor of each row's value into the catalog's unit
    (:func:`_time_unit_factors`); with ``_file``, each file's own declarations
    (``declared_units`` by file), joined as a column ``_factor``."""
    if "_file" not in series.columns:
        factors = _time_unit_factors(ctx, resolved, declared_units)
        if not factors:
            return series, pl.lit(1.0)
        return series, pl.col("name").replace_strict(factors, default=1.0, return_dtype=pl.Float64)
    rows = [
        (file, name, factor)
        for file in series.get_column("_file").unique().to_list()
        for name, factor in _time_unit_factors(ctx, resolved, declared_units.get(file, {})).items()
    ]
    if not rows:
        return series, pl.lit(1.0)
    schema = {"_file": series.schema["_file"], "name": pl.String, "_factor": pl.Float64}
    factors = pl.DataFrame(rows, schema=schema, orient="row")
    series = series.join(factors, on=["_file", "name"], how="left", maintain_order="left")
    return series, pl.col("_factor").fill_null(1.0)


def _time_unit_factors(
    ctx: IngestContext, resolved: dict[str, str | None], declared_units: dict[str, str]
) -> dict[str, float]:
    """The factor that turns each series of a time metric from the unit its exporter
    declares (else ``ctx.violation_unit``) into the catalog's unit, by series name."""
    factors = {}
    for name, metric in resolved.items():
        if metric is None:
            continue
        target = ctx.catalog[metric].unit
        if target in TIME_UNIT_SECONDS:
            declared = declared_units.get(name, ctx.violation_unit)
            factors[name] = TIME_UNIT_SECONDS[declared] / TIME_UNIT_SECONDS[target]
    return factors


def xid_events(
    xid: pl.DataFrame,
    ctx: IngestContext,
    common_reason: pl.Expr,
    common_field: pl.Expr,
    lake_reads: list[LakeRead] | None = None,
) -> pl.DataFrame:
    """Events where the XID gauge changes to a non-zero code (see module notes); with
    ``_file`` (several files' rows), each file's series on their own.

    ``lake_reads``: given a list, when some unit's first code is not 0 (its events depend on
    the stored ones), a :class:`LakeRead` is appended that returns the events again as a
    context ``turn`` sees the lake: a file parsed ahead of its batch's turn (``ctx.ahead``:
    nothing stored is read) gets its events from it in its turn, without being parsed again
    (:attr:`ParsedFile.in_turn`)."""
    keys = ["_file", "unit_id"] if "_file" in xid.columns else ["unit_id"]
    xid = xid.with_columns(
        code=pl.col("value").cast(pl.Int64, strict=False),
        _reason=pl.coalesce(
            common_reason,
            pl.when(
                pl.col("value").is_null()
                | ~pl.col("value").is_finite()
                | (pl.col("value") != pl.col("value").round())
                | (pl.col("value") < 0)
            ).then(pl.format("XID code is not a non-negative integer: '{}'", pl.col("value_text").str.slice(0, 40))),
        ),
        _field=pl.coalesce(common_field, pl.when(pl.col("value").is_null()).then(pl.lit("value"))),
    )
    bad = xid.filter(pl.col("_reason").is_not_null()).with_columns(code=pl.lit(None, dtype=pl.Int64))
    good = xid.filter(pl.col("_reason").is_null()).sort(*keys, "ts", "_line")
    columns = ["unit_id", "ts", "code", "_line", "_field", "_reason", *(["_raw"] if "_raw" in xid.columns else [])]
    columns += keys[:-1]

    def events(prior: pl.DataFrame | None) -> pl.DataFrame:
        """The events of ``good`` and ``bad``, given each unit's stored code before its
        first sample (``prior``; None: no sample)."""
        changes = good
        if prior is not None:
            changes = (
                good.join(prior, on=keys, how="left", maintain_order="left")
                .with_columns(previous=pl.col("code").shift(1).over(keys))
                .with_columns(previous=pl.coalesce("previous", "prior_code", pl.lit(0, dtype=pl.Int64)))
                .filter((pl.col("code") != 0) & (pl.col("code") != pl.col("previous")))
            )
        found = pl.concat([changes.select(columns), bad.select(columns)], how="vertical_relaxed")
        if len(keys) > 1:  # file by file, as each file's own parse gives them
            found = found.sort("_file", maintain_order=True)
        return found.with_columns(source=pl.lit(XID_SOURCE), count=pl.lit(1, dtype=pl.Int64))

    if not good.height:
        return events(None)
    firsts = _held_firsts(good, keys)
    if firsts.height and lake_reads is not None:
        files = frozenset(firsts.get_column("_file").to_list()) if len(keys) > 1 else frozenset()
        lake_reads.append(LakeRead(lambda turn: events(_prior_codes(turn, firsts, keys)), files))
    return events(_prior_codes(ctx, firsts, keys))


def _held_firsts(good: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The units (with the time) whose first sample in ``good`` (sorted by unit and time)
    holds a non-zero code: only theirs are looked up in the lake.  A first reading of 0
    makes no event whatever came before it, and most units never report an XID, so most
    files need no look into the lake at all."""
    return (
        good.group_by(keys)
        .agg(first_ts=pl.col("ts").first(), first_code=pl.col("code").first())
        .filter(pl.col("first_code") != 0)
        .drop("first_code")
    )


def _prior_codes(ctx: IngestContext, firsts: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Each unit's (per ``keys``) latest dcgm-xid code stored before its first sample
    (``firsts``: :func:`_held_firsts`); none when parsed ahead of the batch's turn
    (``ctx.ahead``: the batch before may still be storing its events)."""
    if firsts.height == 0 or ctx.ahead:
        return firsts.select(keys).clear().with_columns(prior_code=pl.lit(None, dtype=pl.Int64))
    stored = _stored_xid_events(ctx)
    if stored.height == 0:
        return firsts.select(keys).clear().with_columns(prior_code=pl.lit(None, dtype=pl.Int64))
    return (
        stored.join(firsts, on="unit_id", how="inner")
        .filter(pl.col("ts") < pl.col("first_ts"))
        .sort("unit_id", "ts")
        .group_by(keys)
        .agg(prior_code=pl.col("code").last())
        .with_columns(pl.col("unit_id").cast(pl.String))
    )


def _stored_xid_events(ctx: IngestContext) -> pl.DataFrame:
    """The lake's ``dcgm-xid`` events (unit, time, code), read once per batch (its context):
    every file of the batch that holds the gauge looks its units' prior codes up in them,
    and the lake does not change while a batch is parsed.  All of them: a file only keeps
    those of its units before its first sample."""
    key = "stored:dcgm-xid"
    if key not in ctx._lookups:
        events = scan_table(ctx.lake_dir, "events").filter(pl.col("source") == XID_SOURCE)
        ctx._lookups[key] = events.select("unit_id", "ts", "code").collect()
    return ctx._lookups[key]
