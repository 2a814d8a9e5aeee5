"""The fleet risk page: one self-contained HTML file (inline CSS, inline SVG plots, no
script, no external request) rendered from a :class:`~foreshock.reporting.fleet_status.FleetStatus`.

Plots are made for rare events: risk over time per unit on a log axis with the drain
thresholds drawn in, and calibration in equal-count bins on log–log axes (with linear
axes every bin of a rare-failure model sits in the bottom-left corner).
"""

from __future__ import annotations

import html
import io
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from foreshock.drain.actions import format_hours
from foreshock.lake.atomic import atomic_write_text
from foreshock.models.evaluation.plots import calibration_curve
from foreshock.reporting.fleet_status import FleetStatus
from foreshock.reporting.freshness import OK
from foreshock.reporting.health_section import health_section
from foreshock.reporting.html_table import table as _table
from foreshock.reporting.lemon_section import lemon_section

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
.sub { color: #666; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 0.8em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.6em 1em; min-width: 9em; background: #fafafa; }
.card .v { font-size: 1.6em; font-weight: 600; } .card .k { color: #666; font-size: 0.85em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
.drain_now { color: #b00020; font-weight: 600; } .drain_at_checkpoint { color: #c25e00; font-weight: 600; }
.run_diagnostics { color: #8a6d00; } .stale, .fail { color: #b00020; font-weight: 600; } .ok, .pass { color: #176317; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; } .plots svg { max-width: 100%; height: auto; }
.missing { color: #888; font-style: italic; }
"""

_esc = html.escape


def svg(fig: Figure) -> str:
    """A figure as inline SVG markup (text kept as paths: no font request)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _fmt(value, spec: str = "{:.3f}") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return spec.format(value)


def _lead(hours: float | None) -> str:
    """Expected lead time as the terminal shows it (``>1y`` when no failure is expected in
    any horizon: a hazard that low says "not soon", not "in 17712 h")."""
    return "–" if hours is None else format_hours(hours)


def _when(value: datetime | None) -> str:
    return "–" if value is None else f"{value:%Y-%m-%d %H:%M} UTC"


def _missing(text: str) -> str:
    return f'<p class="missing">{_esc(text)}</p>'


# --- figures -------------------------------------------------------------------------


def risk_over_time_figure(status: FleetStatus) -> Figure | None:
    """Risk over time of each top unit (log axis), with the enter/exit thresholds and the
    unit's failures marked."""
    history = status.risk_history
    if history is None or history.height == 0:
        return None
    units = status.top_units["unit_id"].to_list()
    cols = 2
    rows = math.ceil(len(units) / cols)
    fig = Figure(figsize=(11, 2.1 * rows))
    axes = fig.subplots(rows, cols, sharex=True, squeeze=False).ravel()
    floor = 1e-4
    for ax, unit in zip(axes, units):
        series = history.filter(pl.col("unit_id") == unit)
        for source, style in (("backtest", "-"), ("live", "o")):
            part = series.filter(pl.col("source") == source)
            if part.height:
                ax.plot(
                    part["ts"].to_list(),
                    np.clip(part["risk"].to_numpy(), floor, 1.0),
                    style,
                    color="tab:blue" if source == "backtest" else "tab:purple",
                    markersize=4,
                    linewidth=1,
                    label=source,
                )
        ax.axhline(status.enter_risk, color="tab:red", linestyle="--", linewidth=1, label="drain threshold")
        ax.axhline(status.exit_risk, color="tab:orange", linestyle=":", linewidth=1, label="exit threshold")
        if status.top_failures is not None:
            for failed_at in status.top_failures.filter(pl.col("unit_id") == unit)["failed_at"].to_list():
                ax.axvline(failed_at, color="black", linewidth=1.5, label="failure")
        ax.set_yscale("log")
        ax.set_ylim(floor, 1.5)
        ax.set_title(unit, fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, which="major")
    for ax in axes[len(units) :]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    fig.legend(unique.values(), unique.keys(), loc="upper right", ncol=len(unique), fontsize=8)
    fig.suptitle(f"Risk of failure within {status.horizon}, top units (log scale)", x=0.01, ha="left", fontsize=11)
    fig.autofmt_xdate()
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


# --- sections ------------------------------------------------------------------------


def _summary(status: FleetStatus) -> str:
    s = status.summary
    actions = s.get("actions", {})
    cards = [
        ("GPUs", f"{s['units']:,}"),
        ("nodes", f"{s['nodes']:,}"),
        ("racks", f"{s['racks']:,}"),
        ("failures recorded", f"{s['failures']:,}"),
        ("failures, last 7 days", f"{s.get('failures_last_7d', 0):,}"),
        ("drain now", f"{actions.get('drain_now', 0):,}"),
        ("drain at checkpoint", f"{actions.get('drain_at_checkpoint', 0):,}"),
        ("run diagnostics", f"{actions.get('run_diagnostics', 0):,}"),
        ("watch", f"{actions.get('watch', 0):,}"),
    ]
    html_cards = "".join(
        f'<div class="card"><div class="v">{v}</div><div class="k">{_esc(k)}</div></div>' for k, v in cards
    )
    modes = ", ".join(f"{_esc(str(m or 'unknown'))}: {n}" for m, n in s.get("failures_by_mode", {}).items())
    span = f"Telemetry {_when(s.get('telemetry_from'))} to {_when(s.get('telemetry_until'))}."
    return f'<div class="cards">{html_cards}</div><p>{span} Failures by mode: {modes or "none"}.</p>'


def _top_units(status: FleetStatus) -> str:
    if status.top_units is None:
        return _missing("No live scores: run foreshock score and foreshock publish.")
    rows = []
    for r in status.top_units.iter_rows(named=True):
        action = r.get("action") or "–"
        rows.append(
            [
                _esc(r["unit_id"]),
                _esc(r.get("node") or ""),
                f'<span class="{_esc(action)}">{_esc(action)}</span>',
                _fmt(r.get("risk")),
                _lead(r.get("expected_lead_time_h")),
                _esc(r.get("signals") or ""),
            ]
        )
    table = _table(
        ["unit", "node", "action", f"risk ({status.horizon})", "expected lead", "top signals"],
        rows,
        left=3,
        text_columns=(5,),
    )
    fig = risk_over_time_figure(status)
    plot = f'<div class="plots">{svg(fig)}</div>' if fig is not None else _missing("No risk history for these units.")
    return table + plot


def _backtest(status: FleetStatus) -> str:
    report = status.backtest
    if report is None:
        return _missing("No backtest: run foreshock backtest.")
    s = report["settings"]
    parts = [
        f"<p>Out of sample {_esc(str(report['scored']['start']))[:16]} to {_esc(str(report['scored']['end']))[:16]}, "
        f"{report['scored']['units']} units; at the drain budget of {s['drain_budget_per_day']:g} alerts a day.</p>"
    ]
    rows = []
    for model, per_h in report["models"].items():
        for horizon, block in sorted(per_h.items()):
            r = (block.get("operating_points") or {}).get("budget")
            snap = block["snapshot"]
            if r is None:
                rows.append([_esc(model), _esc(horizon), "not reached", "", "", "", "", _fmt(snap.get("pr_auc"))])
                continue
            rows.append(
                [
                    _esc(model),
                    _esc(horizon),
                    f"{r['caught']} / {r['failures']}",
                    _fmt(r["recall_with_precursor"], "{:.2f}"),
                    _fmt(r["precision"], "{:.2f}"),
                    _fmt(r["lead_time_p50_h"], "{:.0f} h"),
                    _fmt(r["false_alerts_per_1000_unit_days"], "{:.1f}"),
                    _fmt(snap.get("pr_auc")),
                ]
            )
    parts.append(
        _table(
            [
                "model",
                "horizon",
                "caught / failures",
                "recall (with precursor)",
                "precision",
                "lead time p50",
                "false alerts / 1,000 unit-days",
                "PR-AUC",
            ],
            rows,
            left=2,
        )
    )
    if status.calibration is not None and status.calibration.height:
        fig = calibration_curve(status.calibration, title=f"Calibration, backtest, {status.horizon} (equal-count bins)")
        parts.append(f'<div class="plots">{svg(fig)}</div>')
    return "".join(parts)


def _replay(status: FleetStatus) -> str:
    replay = status.replay
    if replay is None:
        return _missing("No replay: run foreshock replay.")
    rows = [
        [
            _esc(o["variant"]),
            str(o["failures"]),
            str(o["drained_ahead"]),
            str(o["healthy_drains"]),
            _fmt(o["gpu_hours_saved"], "{:,.0f}"),
            _fmt(o["effective_training_time"], "{:.2%}"),
        ]
        for o in replay["outcomes"]
    ]
    out = _table(
        ["policy", "failures", "drained ahead", "healthy drains", "GPU-h saved", "effective training time"], rows
    )
    if replay.get("checkpoint"):
        rows = [
            [
                _esc(c["variant"]),
                _fmt(c["unplanned_per_day"], "{:.2f}"),
                _fmt(c["planned_per_day"], "{:.2f}"),
                _fmt(c["optimal_interval_h"], "{:.1f} h"),
                _fmt(c["effective_at_optimum"], "{:.2%}"),
            ]
            for c in replay["checkpoint"]
        ]
        out += f"<p>Checkpoint interval of a {replay['settings'].get('job_gpus')}-GPU job (Young/Daly):</p>"
        out += _table(
            ["policy", "unplanned interruptions / day", "planned drains / day", "T*", "effective at T*"], rows
        )
    return f"<p>{replay['days']:.1f} days replayed over {replay['fleet_units']} units.</p>" + out


def _champion(status: FleetStatus) -> str:
    c = status.champion
    if c is None:
        return _missing("No champion registered: run foreshock train and foreshock review.")
    verdict = c["review"]
    cls = "pass" if verdict == "passed" else ("fail" if verdict == "failed" else "")
    rows = [
        ["model", _esc(f"models:/{c['name']}@champion (version {c['version']})")],
        ["run", _esc(c["run_id"] or "")],
        ["registered", _when(c["registered_at"])],
        ["review verdict", f'<span class="{cls}">{_esc(verdict)}</span>'],
        ["challenger", _esc(c["challenger"] or "none")],
        ["latest review", _esc(f"{c['latest_review'] or '–'}: {c['latest_decision'] or ''}")],
    ]
    return _table(["", ""], rows, left=2)


def _freshness(status: FleetStatus) -> str:
    """The parts ``foreshock status`` judges, as it judges them when the page was made."""
    rows = []
    for p in status.freshness:
        d = p.to_dict()
        rows.append(
            [
                _esc(p.part),
                f'<span class="{"ok" if p.state == OK else "stale"}">{_esc(p.state)}</span>',
                _when(p.newest),
                _esc(d["age"] or "–"),
                _esc(p.max_age or "–"),
                "–" if p.rows is None else f"{p.rows:,}",
                _esc(p.detail),
            ]
        )
    headers = ["part", "state", "newest", "age", "limit", "rows", "detail"]
    return _table(headers, rows, left=2, text_columns=(6,))


def render_fleet_page(status: FleetStatus) -> str:
    """The whole page as a string."""
    sections = [
        ("Fleet", _summary(status)),
        ("Top units", _top_units(status)),
        ("Latest backtest", _backtest(status)),
        ("Drain replay", _replay(status)),
        ("Telemetry health and trends", health_section(status.health)),
        ("Repeat offenders and learned actions", lemon_section(status.lemons, status.replay)),
        ("Champion model", _champion(status)),
        ("Pipeline freshness", _freshness(status)),
    ]
    body = "".join(
        f'<section id="{_esc(t.lower().replace(" ", "-"))}"><h2>{_esc(t)}</h2>{c}</section>' for t, c in sections
    )
    risk_list = status.summary.get("risk_list")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>foreshock fleet risk</title><style>{CSS}</style></head><body>"
        f"<h1>foreshock fleet risk</h1>"
        f'<p class="sub">Generated {_when(status.generated_at)}'
        f"{f' from risk list {_esc(risk_list)}' if risk_list else ''}; decision horizon {_esc(status.horizon)}, "
        f"a unit enters drain once {_esc(status.entry or f'risk >= {status.enter_risk:g}')}.</p>{body}</body></html>\n"
    )


NEWEST_PAGE = "fleet.html"


def newest_page_path(directory: Path) -> Path:
    """``<directory>/fleet.html``: a copy of the newest page, at a name that does not change."""
    return Path(directory) / NEWEST_PAGE


def write_fleet_page(status: FleetStatus, directory: Path) -> Path:
    """Write ``fleet-<timestamp>.html`` and ``fleet.html`` (the newest) under ``directory``."""
    directory = Path(directory)
    page = render_fleet_page(status)
    stamped = directory / f"fleet-{status.generated_at:%Y%m%dT%H%M%SZ}.html"
    atomic_write_text(stamped, page)
    atomic_write_text(newest_page_path(directory), page)
    return stamped
