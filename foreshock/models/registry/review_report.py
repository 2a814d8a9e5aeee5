"""The review as people read it: Markdown and self-contained HTML, with its plots.

The measuring and the decision live in :mod:`foreshock.models.registry.review`; this module only
renders and writes ``<reports_dir>/review-<timestamp>.{md,html}`` (plots in
``<reports_dir>/review-<timestamp>/``).
"""

from __future__ import annotations

import base64
import html
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from foreshock.contract import TIME_TO_FAILURE
from foreshock.lake.atomic import atomic_write_text
from foreshock.models.evaluation import plots
from foreshock.models.registry.review import OUT_OF_SAMPLE, TABLE_ROWS, Evaluation, ReviewResult


def review_figures(result: ReviewResult) -> dict[str, Any]:
    """PR curve, calibration, lead-time histogram and survival curves of both versions."""
    evaluations = [e for e in (result.champion, result.challenger) if e is not None]

    def tagged(frame: pl.DataFrame, evaluation: Evaluation, role: str) -> pl.DataFrame:
        return frame.with_columns(pl.lit(f"{role} v{evaluation.version}").alias("model"))

    roles = ["champion", "challenger"] if result.champion else ["challenger"]
    scored = pl.concat([tagged(e.scored, e, r) for e, r in zip(evaluations, roles)], how="diagonal_relaxed")
    lead_times = pl.concat(
        [tagged(e.lead_times.select("lead_time_h"), e, r) for e, r in zip(evaluations, roles)], how="diagonal_relaxed"
    )
    figures = {
        "pr_curve": plots.pr_curve(scored, title=f"Precision-recall on the review window ({result.horizon})"),
        "calibration": plots.calibration_curve(scored, title=f"Calibration on the review window ({result.horizon})"),
        "lead_time_histogram": plots.lead_time_histogram(lead_times),
    }
    if TIME_TO_FAILURE in result.challenger.scored.columns and result.challenger.scored.height:
        figures["survival_by_risk_decile"] = plots.survival_by_risk_decile(
            result.challenger.scored,
            end=result.window[1],
            title=f"Survival by challenger risk decile (v{result.challenger.version})",
        )
    return figures


def _format(value: float | None, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return spec.format(value)


def _table_rows(result: ReviewResult) -> list[list[str]]:
    rows = []
    for key, label, spec in TABLE_ROWS:
        new = result.challenger.metrics.get(key, math.nan)
        old = result.champion.metrics.get(key, math.nan) if result.champion else math.nan
        change = new - old if math.isfinite(new) and math.isfinite(old) else math.nan
        rows.append([label, _format(old, spec), _format(new, spec), _format(change, "{:+" + spec[2:])])
    return rows


def _headers(result: ReviewResult) -> list[str]:
    champion = f"champion v{result.champion.version}" if result.champion else "champion (none)"
    return ["metric", champion, f"challenger v{result.challenger.version}", "change"]


def _range_note(evaluation: Evaluation, window: tuple[datetime, datetime]) -> str:
    if not evaluation.trained_range:
        return ""
    start, end = evaluation.trained_range
    overlap = max(timedelta(0), min(end, window[1]) - max(start, window[0]))
    share = overlap / (window[1] - window[0]) if window[1] > window[0] else 0.0
    return f"v{evaluation.version} trained on {start:%Y-%m-%d} .. {end:%Y-%m-%d} ({share:.0%} of the window in-sample)"


def _interval(check: Any) -> str:
    if check.interval is None:
        return ""
    return f"{_format(check.interval.low, '{:.3f}')} .. {_format(check.interval.high, '{:.3f}')}"


def _notes(result: ReviewResult) -> list[str]:
    """Where each version's training ends against the window, and what the bootstrap was."""
    notes = []
    if result.champion is not None and (note := _range_note(result.champion, result.window)):
        notes.append(f"champion {note}")
    if note := _range_note(result.challenger, result.window):
        refitted = not any(c.name == OUT_OF_SAMPLE for c in result.checks)
        notes.append(f"challenger {'recipe refitted before the window' if refitted else 'as registered'}: {note}")
    if result.refit_range is not None:
        start, end = result.refit_range
        notes.append(
            f"v{result.challenger.version} as registered (what a promotion makes champion): the same recipe "
            f"fitted on all history, {start:%Y-%m-%d} .. {end:%Y-%m-%d}"
        )
    if result.budget:
        notes.append(f"measured at the drain budget: {result.budget}")
    if result.rules is not None:
        m = result.rules.metrics
        notes.append(
            f"ranked rules on the same window at the same budget: {_format(m.get('caught'), '{:.0f}')} of "
            f"{_format(m.get('failures'), '{:.0f}')} failures caught, precision {_format(m.get('precision'), '{:.3f}')}"
        )
    if result.settings is not None:
        notes.append(
            f"intervals: {result.settings.confidence:.0%} paired bootstrap over units, "
            f"{result.settings.bootstrap} resamples"
        )
    return notes


def render_markdown(result: ReviewResult, figure_dir: str | None = None) -> str:
    """The review as Markdown; plots are linked from ``figure_dir`` when given."""
    headers = _headers(result)
    lines = [
        f"# Model review: {result.model_name}",
        "",
        f"{DECISION_LINE} {result.decision}",
        "",
        f"- window: {result.window[0]:%Y-%m-%d %H:%M} .. {result.window[1]:%Y-%m-%d %H:%M} UTC, "
        f"horizon {result.horizon}, snapshots with a known outcome only",
    ]
    lines += [f"- {note}" for note in _notes(result)]
    lines += ["", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in _table_rows(result)]
    lines += ["", "## Guardrails", ""]
    if result.checks:
        lines += [
            "| guardrail | rule | challenger | champion (or rules) | interval | result |",
            "|---|---|---|---|---|---|",
        ]
        for check in result.checks:
            lines.append(
                f"| {check.name} | {check.rule} | {_format(check.challenger, '{:.4f}')} | "
                f"{_format(check.champion, '{:.4f}')} | {_interval(check)} | {'pass' if check.passed else 'FAIL'} |"
            )
    else:
        lines.append("No guardrail was checked.")
    if figure_dir is not None and result.figures:
        lines += ["", "## Plots", ""]
        lines += [f"![{name}]({figure_dir}/{path.name})" for name, path in result.figures.items()]
    return "\n".join(lines) + "\n"


def render_html(result: ReviewResult) -> str:
    """The review as one self-contained HTML page (plots embedded as PNG data URIs)."""
    esc = html.escape
    headers = "".join(f"<th>{esc(h)}</th>" for h in _headers(result))
    body = "".join("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in _table_rows(result))
    checks = "".join(
        f"<tr><td>{esc(c.name)}</td><td>{esc(c.rule)}</td><td>{_format(c.challenger, '{:.4f}')}</td>"
        f'<td>{_format(c.champion, "{:.4f}")}</td><td>{esc(_interval(c))}</td><td class="{"pass" if c.passed else "fail"}">'
        f"{'pass' if c.passed else 'FAIL'}</td></tr>"
        for c in result.checks
    )
    notes = "".join(f"<li>{esc(note)}</li>" for note in _notes(result))
    images = "".join(
        f'<figure><img alt="{esc(name)}" src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}">'
        f"<figcaption>{esc(name)}</figcaption></figure>"
        for name, path in result.figures.items()
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Model review: {esc(result.model_name)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 10px; text-align: right; }} td:first-child {{ text-align: left; }}
.pass {{ color: #176317; }} .fail {{ color: #b00020; font-weight: bold; }}
figure {{ display: inline-block; margin: 0.5em; }} img {{ max-width: 560px; }}
</style></head><body>
<h1>Model review: {esc(result.model_name)}</h1>
<p><strong>Decision:</strong> {esc(result.decision)}</p>
<ul><li>window: {result.window[0]:%Y-%m-%d %H:%M} .. {result.window[1]:%Y-%m-%d %H:%M} UTC, horizon {esc(result.horizon)}</li>{notes}</ul>
<table><thead><tr>{headers}</tr></thead><tbody>{body}</tbody></table>
<h2>Guardrails</h2>
{f"<table><thead><tr><th>guardrail</th><th>rule</th><th>challenger</th><th>champion (or rules)</th><th>interval</th><th>result</th></tr></thead><tbody>{checks}</tbody></table>" if checks else "<p>No guardrail was checked.</p>"}
<h2>Plots</h2>
{images}
</body></html>
"""


REVIEW_PREFIX = "review-"
DECISION_LINE = "**Decision:**"


def latest_review(reports_dir: Path) -> tuple[str, str | None] | None:
    """The newest review's Markdown file name and its decision, or None when no review was written."""
    reviews = sorted(Path(reports_dir).glob(f"{REVIEW_PREFIX}*.md"))
    if not reviews:
        return None
    decision = None
    for line in reviews[-1].read_text().splitlines():
        if line.startswith(DECISION_LINE):
            decision = line.removeprefix(DECISION_LINE).strip()
    return reviews[-1].name, decision


def write_report(result: ReviewResult, reports_dir: Path) -> None:
    """Write the review's plots, Markdown and HTML under ``reports_dir``.

    Sets ``result.figures``, ``result.report_md`` and ``result.report_html``.
    """
    base = f"{REVIEW_PREFIX}{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    reports_dir = Path(reports_dir)
    result.figures = plots.save_figures(review_figures(result), reports_dir / base)
    result.report_md = reports_dir / f"{base}.md"
    result.report_html = reports_dir / f"{base}.html"
    atomic_write_text(result.report_md, render_markdown(result, figure_dir=base))
    atomic_write_text(result.report_html, render_html(result))
