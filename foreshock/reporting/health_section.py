"""The fleet page's "Telemetry health and trends" section: what the newest publish found
about the telemetry itself (``telemetry_health.jsonl``) and the units whose correctable
ECC errors or row remaps are rising (``watch.jsonl``), each with a small inline SVG
sparkline of its trend.  Read from the outbox directory ``LATEST`` names, like the risk
list the page shows.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import polars as pl

from foreshock.drain.health_files import read_findings, read_watch
from foreshock.reporting.html_table import table

_esc = html.escape
MAX_FINDINGS = 60  # rows of the findings table (the files hold them all)
MAX_WATCH = 40


def health_view(outbox: Path | None) -> dict | None:
    """``{"findings", "watch"}`` frames of a publish directory, or None when it has neither."""
    if outbox is None:
        return None
    findings, watch = read_findings(outbox), read_watch(outbox)
    if findings is None and watch is None:
        return None
    return {"findings": findings, "watch": watch}


def sparkline(values: list[float | None], width: int = 120, height: int = 24) -> str:
    """A polyline of ``values`` (oldest first) as inline SVG; the last point is marked."""
    points = [0.0 if v is None or not math.isfinite(v) else float(v) for v in values]
    if not points:
        return ""
    top = max(points) or 1.0
    step = width / max(len(points) - 1, 1)
    xy = [(i * step, height - 2 - (v / top) * (height - 4)) for i, v in enumerate(points)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    x, y = xy[-1]
    return (
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="trend, peak {top:g}"><polyline fill="none" stroke="#1f77b4" stroke-width="1.5" '
        f'points="{line}"/><circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="#b00020"/></svg>'
    )


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}"
    if hasattr(value, "strftime"):
        return f"{value:%Y-%m-%d %H:%M}"
    return _esc(str(value))


def _rows(frame: pl.DataFrame, columns: list[str]) -> str:
    rows = [[_cell(r.get(c)) for c in columns] for r in frame.iter_rows(named=True)]
    return table(columns, rows, left=len(columns))


def grouped_gaps(findings: pl.DataFrame) -> pl.DataFrame:
    """The findings with a node's scrape gaps that read alike (the whole node went silent)
    as one row, ``unit_id`` saying how many GPUs; other findings as they are."""
    gaps = findings.filter(pl.col("kind") == "scrape_gap")
    if gaps.height == 0:
        return findings
    rows = (
        gaps.group_by("kind", "node", "metric", "detail", "check", maintain_order=True)
        .agg(pl.col("since").min(), pl.col("unit_id").sort())
        .with_columns(
            pl.when(pl.col("unit_id").list.len() > 1)
            .then(pl.format("{} GPUs: {}", pl.col("unit_id").list.len(), pl.col("unit_id").list.join(", ")))
            .otherwise(pl.col("unit_id").list.first())
            .alias("unit_id")
        )
    )
    return pl.concat([rows.select(findings.columns), findings.filter(pl.col("kind") != "scrape_gap")])


def _findings(findings: pl.DataFrame | None) -> str:
    if findings is None:
        return '<p class="missing">No telemetry health in the newest publish ([health] enabled = false).</p>'
    if findings.height == 0:
        return "<p>No telemetry health finding: every unit reports every metric its peers report, nothing stuck.</p>"
    counts = findings.group_by("kind").len().sort("len", descending=True)
    summary = ", ".join(f"{_esc(k)}: {n}" for k, n in counts.iter_rows())
    rows = grouped_gaps(findings)
    shown = rows.head(MAX_FINDINGS)
    more = f" (the first {MAX_FINDINGS} rows; all in telemetry_health.csv)" if rows.height > MAX_FINDINGS else ""
    table = _rows(shown, ["kind", "unit_id", "node", "metric", "since", "detail", "check"])
    return f"<p>{findings.height} finding(s){more}: {summary}.</p>{table}"


def _watch(watch: pl.DataFrame | None) -> str:
    if watch is None:
        return ""
    if watch.height == 0:
        return "<p>Watch list: no unit's correctable ECC errors or row remaps are rising.</p>"
    shown = watch.head(MAX_WATCH)
    rows = []
    for r in shown.iter_rows(named=True):
        rows.append(
            "<tr>"
            + "".join(f'<td class="l">{_cell(r.get(c))}</td>' for c in ("unit_id", "node", "metric", "trend", "action"))
            + f"<td>{_cell(r.get('risk'))}</td><td>{_cell(r.get('rate_per_day'))}</td>"
            + f"<td>{_cell(r.get('prev_rate_per_day'))}</td><td>{sparkline(r.get('sparkline') or [])}</td></tr>"
        )
    headers = ["unit", "node", "metric", "trend", "action", "risk", "rate / day", "window before", "trend plot"]
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    more = f" (the first {MAX_WATCH}; all in watch.csv)" if watch.height > MAX_WATCH else ""
    return (
        f"<p>Watch list: {watch.height} unit-metric(s) rising or accelerating, whatever their risk{more}. "
        "The plot is the increase over the trend window, oldest left, newest marked.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def health_section(view: dict | None) -> str:
    """The section's HTML (findings, then the watch list)."""
    if view is None:
        return '<p class="missing">No telemetry health or watch list: run foreshock publish.</p>'
    return _findings(view["findings"]) + _watch(view["watch"])
