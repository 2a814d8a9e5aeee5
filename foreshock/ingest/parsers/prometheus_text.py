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
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from foreshock.ingest import dcgm
from foreshock.ingest.context import IngestContext
from foreshock.ingest.reading import read_lines
from foreshock.ingest.staged import ParsedFile, UnreadableFile
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


def declared_units(lines: pl.Series) -> dict[str, str]:
    """Time units declared in ``# HELP NAME ... (in ns)`` comments, by metric name."""
    units = {}
    for line in lines.filter(lines.str.starts_with("# HELP ")).to_list():
        parts = line.split(None, 3)
        if len(parts) < 4:
            continue
        match = HELP_UNIT.search(parts[3])
        if match:
            unit = match.group(1) or WORD_UNITS[match.group(2)]
            units[parts[2]] = "us" if unit == "µs" else unit
    return units


def _label(name: str) -> pl.Expr:
    return pl.col("labels").str.extract(rf'(?:^|,)\s*{name}="((?:[^"\\]|\\.)*)"', 1)


def created_families(lines: pl.Series, names: list[str]) -> set[str]:
    """Sample names ``X_created`` that are creation times: ``X`` is typed as a counter,
    histogram or summary, or ``X_total`` is also exposed (OpenMetrics; client libraries)."""
    typed = set()
    for line in lines.filter(lines.str.starts_with("# TYPE ")).to_list():
        parts = line.split()
        if len(parts) >= 4 and parts[3] in CREATED_TYPES:
            typed.add(parts[2])
    present = set(names)
    return {n for n in names if n.endswith("_created") and (n[:-8] in typed or f"{n[:-8]}_total" in present)}


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    source = read_lines(path)
    lines = source.lines
    body = lines.filter((pl.col("_text").str.strip_chars() != "") & ~pl.col("_text").str.starts_with("#"))
    if body.height == 0:
        raise UnreadableFile("no samples (only comments or blank lines)")
    parts = body.with_columns(pl.col("_text").str.strip_chars().str.extract_groups(SAMPLE).alias("m")).unnest("m")
    parts = parts.rename({"1": "name", "2": "labels", "3": "value_text", "4": "ts_ms"})
    text = lines.get_column("_text")
    created = created_families(text, parts.get_column("name").drop_nulls().unique().to_list())
    notes = []
    if created:
        skipped = parts.filter(pl.col("name").is_in(sorted(created)))
        parts = parts.filter(~pl.col("name").is_in(sorted(created)) | pl.col("name").is_null())
        notes.append(f"{skipped.height} '_created' samples skipped (creation times, not measurements)")
    matched = pl.col("name").is_not_null()
    if (
        parts.filter(matched).height
        and parts.filter(matched & pl.col("ts_ms").is_not_null()).height == 0
        and ctx.scrape_time is None
    ):
        raise UnreadableFile("scrape has no sample timestamps: pass --scrape-time (when the scrape was taken, in UTC)")
    eof = lines.filter(pl.col("_text").str.strip_chars() == "# EOF").get_column("_line")
    openmetrics = eof.len() > 0
    stamp = pl.col("ts_ms").cast(pl.Float64, strict=False)
    # OpenMetrics timestamps are seconds, the Prometheus text format's milliseconds; a
    # timestamp whose magnitude only makes sense in the other unit is read in that unit.
    in_ms = stamp.abs() >= MILLISECONDS_FROM
    seconds = pl.when(in_ms).then(stamp / 1000).otherwise(stamp)
    other_unit = (in_ms if openmetrics else ~in_ms & (stamp >= YEAR_2000)).fill_null(False)
    misdeclared = parts.filter(other_unit).height
    if misdeclared:
        spec, found = ("OpenMetrics", "milliseconds") if openmetrics else ("Prometheus text format", "seconds")
        expected = "seconds" if openmetrics else "milliseconds"
        notes.append(f"{misdeclared} timestamps in {found} (the {spec} says {expected}): read as {found}")
    sample_ts = unix_seconds_to_utc(seconds)
    scrape_ts = (
        pl.lit(ctx.scrape_time).cast(pl.Datetime("us", "UTC"))
        if ctx.scrape_time
        else pl.lit(None, dtype=pl.Datetime("us", "UTC"))
    )
    frame = parts.with_columns(
        gpu=_label("gpu"),
        Hostname=_label("Hostname"),
        UUID=_label("UUID"),
        ts=pl.when(pl.col("ts_ms").is_not_null()).then(sample_ts).otherwise(scrape_ts),
        ts_reason=pl.when(pl.lit(openmetrics) & (pl.col("_line") > (eof.min() if openmetrics else 0)))
        .then(pl.lit("line after '# EOF' (an OpenMetrics exposition ends there)"))
        .when(~matched)
        .then(pl.lit("malformed line: expected NAME{labels} VALUE [TIMESTAMP]"))
        .when(pl.col("ts_ms").is_null() & pl.lit(ctx.scrape_time is None))
        .then(pl.lit("sample has no timestamp and no --scrape-time was given"))
        .otherwise(pl.lit(None, dtype=pl.String)),
        name=pl.col("name").fill_null("<malformed>"),
    )
    lake_reads: list = []
    staged = dcgm.stage_series(frame, ctx, declared_units(text), lake_reads)
    parsed = ParsedFile(path=path, raw_lines=source.raw_lines, notes=notes, reads_lake=bool(lake_reads))
    if source.bad.height:
        parsed.add("samples", source.bad)
    for table, rows in staged.items():
        parsed.add(table, _line_fields(rows))
    if lake_reads and ctx.ahead:  # the XID events again in the batch's turn (the lake as it is then)
        parsed.in_turn = lambda turn: {"events": _line_fields(lake_reads[0](turn))}
    return parsed


def _line_fields(rows: pl.DataFrame) -> pl.DataFrame:
    """Staged rows whose reason is the line's (malformed, after ``# EOF``) with ``line`` as their field."""
    return rows.with_columns(
        _field=pl.when(pl.col("_reason").str.starts_with("malformed") | pl.col("_reason").str.starts_with("line "))
        .then(pl.lit("line"))
        .otherwise(pl.col("_field"))
    )
