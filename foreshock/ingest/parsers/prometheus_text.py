"""``prometheus-text``: text exposition scrapes of dcgm-exporter (``/metrics`` output).

Sample lines ``NAME{label="v",...} VALUE [TIMESTAMP_MS]``; ``# HELP``/``# TYPE`` comments
and an OpenMetrics ``# EOF`` are read for units only.  Timestamps are milliseconds in the
Prometheus text format and seconds in OpenMetrics (a file ending in ``# EOF``).  A scrape saved without timestamps
says nothing about when it was taken (the file's mtime is when it was copied, not
scraped): pass ``--scrape-time`` for such files, otherwise the file is rejected.
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

SAMPLE = r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+(?:\.\d+)?))?\s*$"
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
    return pl.col("labels").str.extract(rf'(?:^|,)\s*{name}="([^"]*)"', 1)


def parse(path: Path, ctx: IngestContext) -> ParsedFile:
    source = read_lines(path)
    lines = source.lines
    body = lines.filter((pl.col("_text").str.strip_chars() != "") & ~pl.col("_text").str.starts_with("#"))
    if body.height == 0:
        raise UnreadableFile("no samples (only comments or blank lines)")
    parts = body.with_columns(pl.col("_text").str.strip_chars().str.extract_groups(SAMPLE).alias("m")).unnest("m")
    parts = parts.rename({"1": "name", "2": "labels", "3": "value_text", "4": "ts_ms"})
    matched = pl.col("name").is_not_null()
    if (
        parts.filter(matched).height
        and parts.filter(matched & pl.col("ts_ms").is_not_null()).height == 0
        and ctx.scrape_time is None
    ):
        raise UnreadableFile("scrape has no sample timestamps: pass --scrape-time (when the scrape was taken, in UTC)")
    openmetrics = lines.filter(pl.col("_text").str.strip_chars() == "# EOF").height > 0
    stamp = pl.col("ts_ms").cast(pl.Float64, strict=False)
    sample_ts = unix_seconds_to_utc(stamp) if openmetrics else unix_seconds_to_utc(stamp / 1000)
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
        ts_reason=pl.when(~matched)
        .then(pl.lit("malformed line: expected NAME{labels} VALUE [TIMESTAMP_MS]"))
        .when(pl.col("ts_ms").is_null() & pl.lit(ctx.scrape_time is None))
        .then(pl.lit("sample has no timestamp and no --scrape-time was given"))
        .otherwise(pl.lit(None, dtype=pl.String)),
        name=pl.col("name").fill_null("<malformed>"),
    )
    staged = dcgm.stage_series(frame, ctx, declared_units(lines.get_column("_text")))
    parsed = ParsedFile(path=path, raw_lines=source.raw_lines)
    if source.bad.height:
        parsed.add("samples", source.bad)
    for table, rows in staged.items():
        parsed.add(
            table,
            rows.with_columns(
                _field=pl.when(pl.col("_reason").str.starts_with("malformed"))
                .then(pl.lit("line"))
                .otherwise(pl.col("_field"))
            ),
        )
    return parsed
