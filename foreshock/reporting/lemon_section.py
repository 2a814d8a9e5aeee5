"""The fleet page's "Repeat offenders and learned actions" section: the units and nodes
with repeated failures, drains or replacements in the ``[lemon] window`` (each with its
history), what the replay says replacing them saved, and how the learned chooser fared
against the fixed cost model (``replay.json``'s ``lemons`` and ``learned``).
"""

from __future__ import annotations

import html
from datetime import datetime

import polars as pl

from foreshock.drain.lemons import LemonSettings, lake_lemons, lemon_summary
from foreshock.reporting.html_table import table

_esc = html.escape
MAX_ROWS = 80  # incidents shown; the status command and the lake hold them all


def lemon_view(config, until: datetime | None) -> dict | None:
    """``{"summary", "history"}`` of the repeat offenders in the window before ``until``."""
    if until is None:
        return None
    table, history = lake_lemons(config, until)
    return {"summary": lemon_summary(table, LemonSettings.from_config(config)), "history": history}


def _table(headers: list[str], rows: list[list[str]]) -> str:
    return table(headers, rows, left=len(headers))  # the section's tables are all left-aligned


def _history(history: pl.DataFrame) -> str:
    if history.height == 0:
        return '<p class="missing">No repeat offender in the window.</p>'
    rows = [
        [
            _esc(r["node"] or ""),
            _esc(r["unit_id"]),
            _esc(r["lemon"]),
            f"{r['at']:%Y-%m-%d %H:%M}",
            _esc(r["kind"]),
            _esc(r["detail"] or ""),
        ]
        for r in history.head(MAX_ROWS).to_dicts()
    ]
    return _table(["node", "unit", "repeat offender", "when (UTC)", "incident", "detail"], rows)


def _replay(replay: dict | None) -> str:
    if not replay:
        return ""
    out = ""
    if replay.get("lemons"):
        rows = [
            [
                _esc(r["variant"]),
                str(r["replacements"]),
                str(r["avoided_failures"]),
                f"{r['replacing_saved_gpu_h']:+,.0f}",
            ]
            for r in replay["lemons"]
        ]
        out += "<p>Replay: replacing repeat offenders instead of draining and returning them "
        out += "(later failures of a replaced unit assumed avoided: an upper bound).</p>"
        out += _table(["policy", "replacements", "failures avoided", "GPU-h saved by replacing"], rows)
    if replay.get("learned"):
        rows = [
            [
                _esc(r["variant"]),
                f"{r['difference_gpu_h']:+,.0f} ({r['interval'][0]:+,.0f} to {r['interval'][1]:+,.0f})",
                "-" if r["learned_threshold"] is None else f"{r['learned_threshold']:g}",
                "yes" if r["better"] else "no: the fixed model stays",
            ]
            for r in replay["learned"]
        ]
        out += "<p>Replay: the learned chooser against the fixed cost model on the later half of the "
        out += "recorded decisions (GPU-h, negative = learned costs less; bootstrap interval over units).</p>"
        out += _table(["policy", "learned - fixed", "learned drains from", "better by its interval"], rows)
    return out


def lemon_section(view: dict | None, replay: dict | None) -> str:
    """The section's HTML."""
    if view is None:
        return '<p class="missing">No telemetry in the lake: run foreshock ingest.</p>' + _replay(replay)
    return f"<p>{_esc(view['summary'])}.</p>" + _history(view["history"]) + _replay(replay)
