"""``prometheus-json``: Prometheus HTTP API responses of dcgm-exporter series.

Accepts ``/api/v1/query_range`` (``resultType: matrix``, ``values: [[t, "v"], ...]``) and
``/api/v1/query`` (``vector``, ``value: [t, "v"]``).  Timestamps are unix seconds (UTC by
definition); values are strings (``"NaN"``, ``"+Inf"`` parse and are then quarantined as
not finite).  A quarantined row's line is the series' position in ``result`` (1-based).

A plain matrix (what Prometheus and the simulator write) is checked, decoded and laid out
by Polars, without holding the GIL (:func:`_polars_matrix`); any other document is read by
Python's json, whole (:func:`_plain_matrix`) or series by series, with the same texts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from itertools import chain
from operator import itemgetter
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.ingest import dcgm
from foreshock.ingest.context import IngestContext
from foreshock.ingest.reading import escape_bytes, has_undecodable, read_text
from foreshock.ingest.staged import ParsedFile, UnreadableFile
from foreshock.ingest.timestamps import unix_seconds_to_utc

LABELS = ("gpu", "Hostname", "UUID")
DISTINCT = ("unit_id", "metric")  # the staged samples' text columns whose values ParsedFile.distinct lists


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    text = read_text(path)
    if not has_undecodable(text) and (frame := _polars_matrix(text)) is not None:
        return _staged(frame, cache(lambda: _labels_of(json.loads(text))), path, ctx)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableFile(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise UnreadableFile("JSON nested too deeply to be a Prometheus API response") from None
    try:
        return _parse_document(doc, text, path, ctx)
    except RecursionError:  # a deeply nested value inside a series
        raise UnreadableFile("JSON nested too deeply to be a Prometheus API response") from None


# The documents read by Polars alone (:func:`_polars_matrix`): a successful matrix
# response, its keys in the order Prometheus writes them, JSON's whitespace anywhere
# between tokens; each series' labels texts under names as Prometheus allows them, its
# samples ``[integer of at most 18 digits, "text"]``.  No other value (number with a
# fraction or an exponent, true, false, null, nesting) and no text escaping a surrogate
# (``\ud800``), which Polars decodes otherwise than Python's json: every document this
# pattern accepts decodes to the same texts both ways (but for labels named twice,
# counted apart).
_W = r"[ \t\n\r]*"
_TEXT = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-CeEfF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))*"'
_KEY = r'"[A-Za-z_][A-Za-z0-9_]*"'
_INTEGER = r"-?(?:0|[1-9][0-9]{0,17})"


def _tokens(*parts: str) -> str:
    return _W.join(parts)


def _some(item: str) -> str:
    """Zero or more ``item`` separated by commas."""
    return f"(?:{item}(?:{_W},{_W}{item})*)?"


_SERIES = _tokens(
    r"\{", '"metric"', ":", r"\{", _some(_tokens(_KEY, ":", _TEXT)), r"\}", ",",
    '"values"', ":", r"\[", _some(_tokens(r"\[", _INTEGER, ",", _TEXT, r"\]")), r"\]", r"\}",
)  # fmt: skip
POLARS_MATRIX = "^" + _tokens(
    "", r"\{", '"status"', ":", '"success"', ",", '"data"', ":", r"\{", '"resultType"', ":", '"matrix"', ",",
    '"result"', ":", r"\[", _some(_SERIES), r"\]", r"\}", r"\}", "",
) + "$"  # fmt: skip
_KEPT = ("__name__", *LABELS)  # the labels staged
_SCHEMA = pl.Struct({
    "data": pl.Struct({"result": pl.List(pl.Struct({
        "metric": pl.Struct(dict.fromkeys(_KEPT, pl.String)), "values": pl.List(pl.List(pl.String)),
    }))}),
})  # fmt: skip


def _polars_matrix(text: str) -> pl.DataFrame | None:
    """The rows of a document :data:`POLARS_MATRIX` matches, as :func:`_parse_document`
    stages them (``_line, name, gpu, Hostname, UUID, t, value_text``), or None (another
    document, or one naming a kept label twice in a series: Polars keeps the first,
    Python's json the last).

    Checked, decoded and laid out by Polars, which lets go of the GIL: the exports' parse
    then runs beside the nvidia-smi files' (json.loads and Python per series held it, so
    the two took turns).  A time's text is its integer's digits, as ``str`` gives them."""
    doc = pl.DataFrame({"doc": [text]}, schema={"doc": pl.String})
    named = {key: pl.col("doc").str.count_matches(f'"{key}"{_W}:') for key in _KEPT}
    check = doc.select(plain=pl.col("doc").str.contains(POLARS_MATRIX), **named)
    if not check.item(0, "plain"):
        return None
    result = pl.col("doc").str.json_decode(_SCHEMA).struct.field("data").struct.field("result")
    series = (
        doc.select(result.alias("series"))
        .explode("series")
        .filter(pl.col("series").is_not_null())  # an empty result
        .select(pl.col("series").struct.field("metric").struct.unnest(), pl.col("series").struct.field("values"))
        .with_row_index("_line", offset=1)
    )
    # A label named n times in the document (the pattern allows no other text with a colon
    # after it) and held by n series: named once in each.
    held = series.select(pl.col(key).count() for key in _KEPT)
    if any(held.item(0, key) != check.item(0, key) for key in _KEPT):
        return None
    return (
        series.explode("values")
        .filter(pl.col("values").is_not_null())  # a series without samples
        .select(
            pl.col("_line").cast(pl.Int64),
            pl.col("__name__").alias("name"),
            *LABELS,
            t=pl.col("values").list.get(0),
            value_text=pl.col("values").list.get(1),
        )
    )


def _labels_of(doc: dict) -> list[dict]:
    """Each series' labels (of a document :func:`_polars_matrix` read), for the quarantine."""
    return [series["metric"] for series in doc["data"]["result"]]


def _result_of(doc) -> tuple[str, list]:
    """``(resultType, result)`` of a Prometheus API response: a matrix or a vector.

    Raises
    ------
    UnreadableFile
        When ``doc`` is not a successful query's response with a list of series.
    """
    if not isinstance(doc, dict) or "status" not in doc:
        raise UnreadableFile("not a Prometheus API response (no 'status')")
    if doc.get("status") != "success":
        raise UnreadableFile(f"Prometheus query failed: {doc.get('errorType', '?')}: {doc.get('error', '?')}")
    if "data" not in doc:
        raise UnreadableFile("not a Prometheus API response (no 'data' object)")
    data = doc["data"]
    kind = data.get("resultType") if isinstance(data, dict) else None
    if kind not in ("matrix", "vector"):
        raise UnreadableFile(f"resultType {kind!r} is not a time series (expected 'matrix' or 'vector')")
    result = data.get("result")
    if not isinstance(result, list):
        raise UnreadableFile("'data.result' is not a list")
    return kind, result


def _points(series, kind: str) -> tuple[list[str | None], list[str]]:
    """A series' samples as ``(times, values)`` texts; a malformed sample gets no time and
    its JSON (cut short) as its value."""
    if not isinstance(series, dict):
        points = [series]
    else:
        points = series.get("values") if kind == "matrix" else [series.get("value")]
    if not isinstance(points, list):
        points = [None]
    # The common, well-formed case: every sample a list of two.  ``map`` of the built-ins
    # ``type``, ``len`` and ``str`` runs without a Python frame per sample (a generator of
    # isinstance checks and list comprehensions cost most of this parser's time); a list
    # subclass takes the general path, which gives it the same texts.
    if set(map(type, points)) <= {list} and set(map(len, points)) <= {2}:
        times, values = zip(*points) if points else ((), ())
        return list(map(str, times)), list(map(str, values))
    times = [str(p[0]) if isinstance(p, list) and len(p) == 2 else None for p in points]
    values = [str(p[1]) if isinstance(p, list) and len(p) == 2 else json.dumps(p)[:60] for p in points]
    return times, values


def _description(labels: dict | str) -> str:
    """A series' labels as shown beside a quarantined row (already a text when the series
    held undecodable bytes)."""
    if isinstance(labels, str):
        return labels
    return json.dumps(labels, sort_keys=True, ensure_ascii=False)[:300]


def _plain_matrix(result: list) -> tuple[list[dict], dict[str, list], list[int], pl.Series, pl.Series] | None:
    """``(descriptions, per_series, counts, times, values)`` as the loop of
    :func:`_parse_document` gives them, for a matrix whose series are all plain: a dict
    each, with a dict of labels (``__name__`` a text), a list of ``[time, value]`` lists,
    the times integers (of 64 bits) or all texts; None otherwise (the loop then reads it).
    Whole-document steps instead of a few per series (the per-series checks and texts
    cost as much as ``json.loads`` itself): the same texts, ``str`` of each time and value."""
    if not set(map(type, result)) <= {dict}:
        return None
    labels = [series.get("metric", {}) for series in result]
    points = [series.get("values") for series in result]
    if not set(map(type, labels)) <= {dict} or not set(map(type, points)) <= {list}:
        return None
    flat = list(chain.from_iterable(points))
    if flat and not (set(map(type, flat)) <= {list} and set(map(len, flat)) <= {2}):
        return None
    per_series: dict[str, list] = {"name": [label.get("__name__") for label in labels]}
    if not set(map(type, per_series["name"])) <= {str, type(None)}:
        return None
    for key in LABELS:
        values = [label.get(key) for label in labels]
        if not set(map(type, values)) <= {str, type(None)}:
            values = [None if value is None else str(value) for value in values]
        per_series[key] = values
    times, values = list(map(itemgetter(0), flat)), list(map(itemgetter(1), flat))
    time_texts = None
    if set(map(type, times)) <= {int}:
        try:  # str of an integer is its Int64's text
            time_texts = pl.Series(times, dtype=pl.Int64).cast(pl.String)
        except TypeError:  # beyond 64 bits: the texts below
            pass
    if time_texts is None:
        time_texts = pl.Series(list(map(str, times)), dtype=pl.String)
    value_texts = pl.Series(values if set(map(type, values)) <= {str} else list(map(str, values)), dtype=pl.String)
    return labels, per_series, list(map(len, points)), time_texts, value_texts


def _series_by_series(
    result: list, kind: str, check_bytes: bool, undecodable: list[int]
) -> tuple[list, dict[str, list], list[int], list, list]:
    """``(descriptions, per_series, counts, times, values)`` of any ``result``, one series
    at a time (the reading of every document :func:`_plain_matrix` does not take); the
    lines of series holding bytes that are not UTF-8 go to ``undecodable``.

    Per series its labels, described only for a quarantined row (rare; a json.dumps per
    series was a tenth of this parser's time), or its description's text; the labels once
    per series (repeated along its samples by one gather at the end, not by Python lists
    as long as the samples); the samples' times and values as texts."""
    descriptions: list[dict | str] = []
    per_series: dict[str, list] = {"name": [], **{k: [] for k in LABELS}}
    counts: list[int] = []
    times_of: list = []
    values_of: list = []
    for series in result:
        labels = series.get("metric", {}) if isinstance(series, dict) else {}
        labels = labels if isinstance(labels, dict) else {}
        description: dict | str = labels
        if check_bytes and has_undecodable(dumped := json.dumps(series, ensure_ascii=False)):
            undecodable.append(len(counts) + 1)
            description = json.dumps(labels, sort_keys=True, ensure_ascii=False)
            description = escape_bytes(description.encode("utf-8", errors="surrogateescape"))[:300]
            # The frame needs valid text: the bad bytes become U+FFFD (the row is quarantined).
            series = json.loads(dumped.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace"))
            labels = series.get("metric", {}) if isinstance(series, dict) else {}
            labels = labels if isinstance(labels, dict) else {}
        descriptions.append(description)
        times, values = _points(series, kind)
        counts.append(len(times))
        times_of.extend(times)
        values_of.extend(values)
        per_series["name"].append(labels.get("__name__"))
        for key in LABELS:
            value = labels.get(key)
            per_series[key].append(None if value is None else str(value))
    return descriptions, per_series, counts, times_of, values_of


def _parse_document(doc, text: str, path: Path, ctx: IngestContext) -> ParsedFile:
    kind, result = _result_of(doc)
    undecodable: list[int] = []  # series holding bytes that are not UTF-8: quarantined whole
    check_bytes = has_undecodable(text)
    plain = _plain_matrix(result) if kind == "matrix" and not check_bytes else None
    descriptions, per_series, counts, times_of, values_of = plain or _series_by_series(
        result, kind, check_bytes, undecodable
    )
    series_rows = pl.DataFrame(
        {"_line": range(1, len(counts) + 1), **per_series},
        schema={"_line": pl.Int64, "name": pl.String, **{k: pl.String for k in LABELS}},
    )
    frame = series_rows.select(pl.all().gather(pl.Series(np.repeat(np.arange(len(counts)), counts)))).with_columns(
        t=pl.Series(times_of, dtype=pl.String), value_text=pl.Series(values_of, dtype=pl.String)
    )
    return _staged(frame, lambda: descriptions, path, ctx, undecodable)


def _staged(
    frame: pl.DataFrame,
    descriptions: Callable[[], list[dict | str]],
    path: Path,
    ctx: IngestContext,
    undecodable: list[int] | None = None,
) -> ParsedFile:
    """The parsed file of a document's rows (``_line, name, gpu, Hostname, UUID, t,
    value_text``; ``descriptions()``: each series' labels, asked for when a row is
    quarantined; ``undecodable``: the lines of series holding bytes that are not UTF-8)."""
    undecodable = undecodable or []
    seconds = pl.col("t").cast(pl.Float64, strict=False)
    frame = frame.with_columns(ts=unix_seconds_to_utc(seconds), name=pl.col("name").fill_null("<no __name__>"))
    bad_time = pl.col("ts").is_null()  # a time that is missing, not a number or not finite
    if undecodable or frame.select(bad_time.any()).item():  # reason texts only when a row needs one
        ts_reason = (
            pl.when(pl.col("_line").is_in(pl.Series(undecodable, dtype=pl.Int64).implode()))
            .then(pl.lit("undecodable bytes (not UTF-8) in this series"))
            .when(pl.col("t").is_null())
            .then(pl.format('malformed sample {} (expected [time, "value"])', pl.col("value_text")))
            .when(seconds.is_null() | ~seconds.is_finite())
            .then(pl.format("bad timestamp '{}'", pl.col("t")))
            .otherwise(pl.lit(None, dtype=pl.String))
        )
    else:
        ts_reason = pl.lit(None, dtype=pl.String)
    frame = frame.with_columns(
        ts_reason=ts_reason, _raw=pl.format('[{}, "{}"]', pl.col("t").fill_null("?"), pl.col("value_text"))
    )
    parsed = ParsedFile(path=path)
    lake_reads: list = []
    for table, staged in dcgm.stage_series(frame, ctx, lake_reads=lake_reads).items():
        # the file's units and metric names, found on its few rows (later steps would
        # search a whole batch's rows for them)
        distinct = None
        if table == "samples":
            distinct = {name: staged.get_column(name).drop_nulls().unique(maintain_order=True) for name in DISTINCT}
        parsed.add(table, staged, distinct)

    def lookup(rows: pl.DataFrame) -> pl.Series:
        labels_of = descriptions()
        index = (rows.get_column("_line") - 1).clip(0, max(len(labels_of) - 1, 0))
        texts = [_description(labels_of[i]) for i in index.to_list()] if labels_of else [""] * rows.height
        labels = pl.Series(texts, dtype=pl.String)
        return (
            pl.DataFrame({"l": labels, "r": rows.get_column("_raw")}).select(pl.format("{} {}", "l", "r")).to_series()
        )

    parsed.raw_lookup = lookup
    parsed.reads_lake = bool(lake_reads)
    if lake_reads and ctx.ahead:  # the XID events again in the batch's turn (the lake as it is then)
        parsed.in_turn = lambda turn: {"events": lake_reads[0](turn)}
    return parsed
