"""``prometheus-text``: text exposition scrapes of dcgm-exporter (``/metrics`` output).

Sample lines ``NAME{label="v",...} VALUE [TIMESTAMP]``, in the Prometheus text format or
OpenMetrics (a file with a ``# EOF`` line).  ``# HELP``/``# TYPE`` comments are read for
units and types only.  OpenMetrics details:

* an exemplar after the sample (``m{gpu="0"} 33 # {trace_id="x"} 99.5``) is not part of
  it: 33 is stored;
* ``# EOF`` ends the exposition: a sample line after it is quarantined;
* a counter's ``X_total`` sample resolves through the catalog as ``X`` when ``X_total`` is
  not a name of its own, and ``X_created`` (the time the series was created) is skipped.

Timestamps are milliseconds in the Prometheus text format and seconds in OpenMetrics;
since the two units differ by a factor of 1000, a timestamp that is only plausible in the
other unit (>= 1e11 is milliseconds) is read in that unit and the file's report says so.
A scrape saved without timestamps says nothing about when it was taken (the file's mtime
is when it was copied, not scraped): pass ``--scrape-time`` for such files, otherwise the
file is rejected.

A batch's files are parsed together (:func:`parse_files`): their lines are read into one
frame and every step runs once over it, each file's rules (its ``# HELP`` units, ``# TYPE``
families, ``# EOF``, timestamp units) applied to its own lines; a file alone is a batch of one.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import polars as pl

from foreshock.ingest import dcgm
from foreshock.ingest.context import IngestContext
from foreshock.ingest.reading import raw_lines_later, read_many_lines
from foreshock.ingest.staged import ParsedFile, UnreadableFile, conform_shared, own_tables, parse_alone, rows_by_file
from foreshock.ingest.timestamps import unix_seconds_to_utc

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
# Label values may hold "}" and escaped quotes; an OpenMetrics exemplar (" # {...} v [t]")
# follows the sample and is not part of it.
LABEL_SET = r'\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\}'
TIMESTAMP = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
SAMPLE = rf"^({NAME})(?:{LABEL_SET})?\s+(\S+)(?:\s+({TIMESTAMP}))?(?:\s+#\s.*)?\s*$"
# Unix time in seconds stays below 1e11 until the year 5138; in milliseconds it is above
# 1e11 for any time after 1973: the magnitude tells a misdeclared unit apart.
MILLISECONDS_FROM = 1e11
YEAR_2000 = 946_684_800.0
# Families whose "<name>_created" sample is a creation time, not a measurement.
CREATED_TYPES = ("counter", "histogram", "summary", "gaugehistogram")
HELP_UNIT = re.compile(r"\(in (ns|us|µs|ms|s)\)|\bin (nanoseconds|microseconds|milliseconds)\b")
WORD_UNITS = {"nanoseconds": "ns", "microseconds": "us", "milliseconds": "ms"}


def declared_units(lines: pl.DataFrame) -> dict[int, dict[str, str]]:
    """Time units declared in ``# HELP NAME ... (in ns)`` comments, by file (``_file``)
    and metric name."""
    units: dict[int, dict[str, str]] = {}
    helps = lines.filter(pl.col("_text").str.starts_with("# HELP "))
    for file, line in helps.select("_file", "_text").iter_rows():
        parts = line.split(None, 3)
        if len(parts) < 4:
            continue
        match = HELP_UNIT.search(parts[3])
        if match:
            unit = match.group(1) or WORD_UNITS[match.group(2)]
            units.setdefault(file, {})[parts[2]] = "us" if unit == "µs" else unit
    return units


def _label(name: str) -> pl.Expr:
    return pl.col("labels").str.extract(rf'(?:^|,)\s*{name}="((?:[^"\\]|\\.)*)"', 1)


def created_families(lines: pl.DataFrame, parts: pl.DataFrame) -> pl.DataFrame:
    """``(_file, name)`` of the samples ``X_created`` that are creation times: in that file
    ``X`` is typed as a counter, histogram or summary, or ``X_total`` is also exposed
    (OpenMetrics; client libraries)."""
    names = parts.select("_file", "name").drop_nulls().unique(maintain_order=True)
    candidates = names.filter(pl.col("name").str.ends_with("_created"))
    if candidates.height == 0:  # the common case: no look at the comments
        return candidates
    typed = set()
    for file, line in lines.filter(pl.col("_text").str.starts_with("# TYPE ")).select("_file", "_text").iter_rows():
        words = line.split()
        if len(words) >= 4 and words[3] in CREATED_TYPES:
            typed.add((file, words[2]))
    present = set(names.iter_rows())
    return candidates.filter(
        pl.Series(
            [(f, n[:-8]) in typed or (f, f"{n[:-8]}_total") in present for f, n in candidates.iter_rows()],
            dtype=pl.Boolean,
        )
    )


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    """One scrape (:func:`parse_files` of it alone); raises its :class:`UnreadableFile`."""
    return parse_alone(parse_files, path, ctx)


def parse_files(
    paths: list[Path], indices: list[int], ctx: IngestContext
) -> tuple[dict[int, ParsedFile | Exception], dict[str, list[pl.DataFrame]]]:
    """Several scrapes at once: ``(per index a ParsedFile or the error that rejects the
    file, staged rows of every file by table, with _file = its index)``, each file's rows in
    the order its own parse gives them.  Parsed ahead of the batch's turn (``ctx.ahead``),
    every file's rows are its own tables instead, and a file whose XID events depend on the
    stored ones has them staged again in its turn (:attr:`ParsedFile.in_turn`).  ``OSError``
    propagates."""
    source = read_many_lines(paths, indices)
    results: dict[int, ParsedFile | Exception] = dict(source.errors)
    frame, notes = _series_rows(source.lines, results, ctx)
    lake_reads: list[dcgm.LakeRead] = []
    staged = dcgm.stage_series(frame, ctx, declared_units(source.lines), lake_reads)
    shared = {table: [conform_shared(_line_fields(rows), table)] for table, rows in staged.items()}
    if source.bad.height:  # each file's undecodable lines before its samples
        samples = pl.concat([conform_shared(source.bad, "samples"), *shared.get("samples", [])])
        shared["samples"] = [samples.sort("_file", maintain_order=True)]
    counts = rows_by_file(shared)
    reads_lake = lake_reads[0].files if lake_reads else frozenset()
    for path, index in zip(paths, indices):
        if index not in results:
            results[index] = ParsedFile(
                path=path,
                raw_lookup=raw_lines_later(path),
                notes=notes.get(index, []),
                row_count=counts.get(index, 0),
                reads_lake=index in reads_lake,
            )
    if not ctx.ahead:
        return results, shared
    own_tables(results, shared)
    for index in reads_lake:  # the XID events again in the batch's turn (the lake as it is then)
        results[index].in_turn = partial(_events_in_turn, lake_reads[0], index, {})
    return results, {}


def _events_in_turn(again: dcgm.LakeRead, index: int, done: dict, turn: IngestContext) -> dict[str, pl.DataFrame]:
    """File ``index``'s XID events staged with the context ``turn`` (the batch's events are
    staged once per context, ``done``, for all the files that ask)."""
    if id(turn) not in done:
        done.clear()
        done[id(turn)] = _line_fields(again(turn))
    events = done[id(turn)]
    return {"events": events.filter(pl.col("_file") == index).drop("_file")}


def _series_rows(
    lines: pl.DataFrame, results: dict[int, ParsedFile | Exception], ctx: IngestContext
) -> tuple[pl.DataFrame, dict[int, list[str]]]:
    """The sample lines of every file (``lines``, with ``_file``) as series rows for
    :func:`dcgm.stage_series`, with each file's notes; the files rejected on the way are
    entered in ``results`` (no samples; samples without timestamps and no scrape time)."""
    stripped = pl.col("_text").str.strip_chars()
    body = lines.filter((stripped != "") & ~pl.col("_text").str.starts_with("#"))
    with_body = set(body.get_column("_file").unique().to_list())
    for index in lines.get_column("_file").unique().to_list():
        if index not in with_body:
            results[index] = UnreadableFile("no samples (only comments or blank lines)")
    parts = body.with_columns(stripped.str.extract_groups(SAMPLE).alias("m")).unnest("m")
    parts = parts.rename({"1": "name", "2": "labels", "3": "value_text", "4": "ts_ms"})
    notes: dict[int, list[str]] = {}
    created = created_families(lines, parts)
    if created.height:
        skipped = parts.join(created, on=["_file", "name"], how="semi").group_by("_file").len()
        for index, count in skipped.iter_rows():
            notes.setdefault(index, []).append(f"{count} '_created' samples skipped (creation times, not measurements)")
        parts = parts.join(created, on=["_file", "name"], how="anti", maintain_order="left")
    matched = pl.col("name").is_not_null()
    if ctx.scrape_time is None:
        timed = parts.group_by("_file").agg(any=matched.any(), timed=(matched & pl.col("ts_ms").is_not_null()).any())
        for index in timed.filter(pl.col("any") & ~pl.col("timed")).get_column("_file").to_list():
            results[index] = UnreadableFile(
                "scrape has no sample timestamps: pass --scrape-time (when the scrape was taken, in UTC)"
            )
        parts = parts.filter(~pl.col("_file").is_in(list(results)))
    eof = lines.filter(stripped == "# EOF").group_by("_file").agg(_eof=pl.col("_line").min())
    parts = parts.join(eof, on="_file", how="left", maintain_order="left")
    openmetrics = pl.col("_eof").is_not_null()
    stamp = pl.col("ts_ms").cast(pl.Float64, strict=False)
    # OpenMetrics timestamps are seconds, the Prometheus text format's milliseconds; a
    # timestamp whose magnitude only makes sense in the other unit is read in that unit.
    in_ms = stamp.abs() >= MILLISECONDS_FROM
    seconds = pl.when(in_ms).then(stamp / 1000).otherwise(stamp)
    other_unit = pl.when(openmetrics).then(in_ms).otherwise(~in_ms & (stamp >= YEAR_2000)).fill_null(False)
    misdeclared = parts.filter(other_unit).group_by("_file").agg(count=pl.len(), openmetrics=openmetrics.first())
    for index, count, is_openmetrics in misdeclared.iter_rows():
        spec, found = ("OpenMetrics", "milliseconds") if is_openmetrics else ("Prometheus text format", "seconds")
        expected = "seconds" if is_openmetrics else "milliseconds"
        notes.setdefault(index, []).append(
            f"{count} timestamps in {found} (the {spec} says {expected}): read as {found}"
        )
    scrape_ts = (
        pl.lit(ctx.scrape_time).cast(pl.Datetime("us", "UTC"))
        if ctx.scrape_time
        else pl.lit(None, dtype=pl.Datetime("us", "UTC"))
    )
    frame = parts.with_columns(
        gpu=_label("gpu"),
        Hostname=_label("Hostname"),
        UUID=_label("UUID"),
        ts=pl.when(pl.col("ts_ms").is_not_null()).then(unix_seconds_to_utc(seconds)).otherwise(scrape_ts),
        ts_reason=pl.when(openmetrics & (pl.col("_line") > pl.col("_eof")))
        .then(pl.lit("line after '# EOF' (an OpenMetrics exposition ends there)"))
        .when(~matched)
        .then(pl.lit("malformed line: expected NAME{labels} VALUE [TIMESTAMP]"))
        .when(pl.col("ts_ms").is_null() & pl.lit(ctx.scrape_time is None))
        .then(pl.lit("sample has no timestamp and no --scrape-time was given"))
        .otherwise(pl.lit(None, dtype=pl.String)),
        name=pl.col("name").fill_null("<malformed>"),
    )
    return frame, notes


def _line_fields(rows: pl.DataFrame) -> pl.DataFrame:
    """Staged rows whose reason is the line's (malformed, after ``# EOF``) with ``line`` as their field."""
    return rows.with_columns(
        _field=pl.when(pl.col("_reason").str.starts_with("malformed") | pl.col("_reason").str.starts_with("line "))
        .then(pl.lit("line"))
        .otherwise(pl.col("_field"))
    )
