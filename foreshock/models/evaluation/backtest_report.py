"""The backtest as people read it: Markdown tables, and the files of a backtest directory.

The computation lives in :mod:`foreshock.models.evaluation.backtest` (folds, fits,
scores) and :mod:`foreshock.models.evaluation.judging` (the report's figures); this module
only renders and writes, and reads a written result back: ``scores.parquet`` (the
out-of-sample scores), ``report.json`` (the judged report) and ``report.md`` (the same
as Markdown, every model side by side).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from foreshock.lake.atomic import atomic_write_parquet, atomic_write_text
from foreshock.models.evaluation.backtest import BacktestResult
from foreshock.models.evaluation.operating_points import RULES_MODEL
from foreshock.models.evaluation.verdict import budget_title, reweighted_line, verdict_lines

SCORES_FILE = "scores.parquet"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
FILES = (SCORES_FILE, REPORT_JSON, REPORT_MD)


@dataclass(frozen=True)
class SavedBacktest:
    """A backtest result read back from its directory (:func:`read_result`)."""

    scores: pl.DataFrame
    report: dict
    markdown: str


def write_result(result: BacktestResult, out_dir: Path) -> Path:
    """Write ``scores.parquet``, ``report.json`` and ``report.md`` (atomically) to ``out_dir``."""
    out_dir = Path(out_dir)
    atomic_write_parquet(result.scan_scores(), out_dir / SCORES_FILE)  # streamed from the result's files
    atomic_write_text(out_dir / REPORT_JSON, json.dumps(result.report, indent=2, default=str) + "\n")
    atomic_write_text(out_dir / REPORT_MD, render_markdown(result.report))
    return out_dir


def scores_path(out_dir: Path) -> Path:
    """``<out_dir>/scores.parquet``, for readers that scan only some of the scores (the
    fleet page, the replay)."""
    return Path(out_dir) / SCORES_FILE


def read_report(out_dir: Path) -> dict | None:
    """The judged report (``report.json``), or None when no backtest wrote one in ``out_dir``."""
    path = Path(out_dir) / REPORT_JSON
    return json.loads(path.read_text()) if path.is_file() else None


def read_result(out_dir: Path) -> SavedBacktest:
    """Read a result written by :func:`write_result` (raises naming the files that are missing)."""
    out_dir = Path(out_dir)
    missing = [name for name in FILES if not (out_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{out_dir}: not a backtest result, missing {', '.join(missing)}")
    return SavedBacktest(
        scores=pl.read_parquet(out_dir / SCORES_FILE),
        report=json.loads((out_dir / REPORT_JSON).read_text()),
        markdown=(out_dir / REPORT_MD).read_text(),
    )


_POINT_TITLES = {
    "budget": "drain budget, prospective: at most {drain_budget_per_day:g} new alerts a day, the day's highest "
    "risks first (no threshold fitted to any period)",
    "budget_floor": "same drain budget with an entry floor fixed in advance: only units with risk >= "
    "{entry_floor:g} enter alert (a calibrated risk set in the configuration, nothing fitted to any period)",
    "target_precision": "target precision {target_precision:g}, prospective: threshold chosen on the earlier folds "
    "(first fold not judged)",
    "policy": "policy threshold (enter at risk >= {enter_risk:g}, leave below {exit_risk:g})",
    "budget_upper_bound": "UPPER BOUND, not achievable in operation: the drain budget with the entry floor that "
    "caught the most failures in the test period itself",
}
RULES_TITLE = "rules (binary, as run today; no budget)"


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _thresholds(r: dict) -> str:
    values = r.get("thresholds") or [r.get("threshold")]
    return " / ".join("–" if v is None else (v if isinstance(v, str) else f"{v:.4g}") for v in values)


def _point_row(label: str, r: dict | None) -> str:
    if r is None:
        return f"| {label} | not reached | | | | | | | | | | | | | |"
    return (
        f"| {label} | {_thresholds(r)} | {_fmt(r['alerts_per_day'])} | {r['caught']} / {r['failures']} "
        f"| {r.get('caught_within_horizon', '–')} "
        f"| {_fmt(r['recall'])} | {_fmt(r['recall_with_precursor'])} / {_fmt(r['recall_without_precursor'])} "
        f"| {_fmt(r['precision'])} | {r.get('early_alerts', '–')} | {_fmt(r['precision_per_unit'])} | {r['late_alerts']} "
        f"| {r.get('drained_then_failed', 0)} "
        f"| {_fmt(r['lead_time_p10_h'], 0)} / {_fmt(r['lead_time_p50_h'], 0)} / {_fmt(r['lead_time_p90_h'], 0)} "
        f"| {_fmt(r['false_alerts_per_1000_unit_days'])} | {_fmt(r['gpu_hours_saved'], 0)} |"
    )


def render_markdown(report: dict) -> str:
    """The report as Markdown: snapshot metrics, then each operating point, models side by side."""
    s = report["settings"]
    lines = [
        "# Backtest report",
        "",
        f"Out-of-sample period {report['scored']['start']} to {report['scored']['end']}, "
        f"{report['scored']['units']} units. A failure is caught by an alert started between "
        f"{s['alert_window']} and {s['min_lead_time']} before it (one alert credits one failure); an alert "
        "is true when its unit fails within the horizon, late when it fails sooner than "
        f"{s['min_lead_time']} (neither caught nor true); *caught within the horizon* counts the catches "
        "made by an alert that was also true (an earlier one catches its failure but counts as false), and *of the false: early* the false alerts on units that failed later than the horizon but within the alert window. Only snapshots and alerts whose horizon ended "
        "within the data are labelled. Metric definitions: docs/metrics.md.",
        "",
    ]
    if "reweighted" in s:
        lines += [reweighted_line(s), ""]
    models = report["models"]
    horizons = sorted({h for m in models.values() for h in m}, key=lambda h: (len(h), h))
    for horizon in horizons:
        lines += [f"## Horizon {horizon}", "", "Snapshot level (resolved snapshots only):", ""]
        lines += [
            "| model | PR-AUC | C-index | calibration error | mean risk | failure rate | resolved / unresolved "
            "| largest tie |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for model, per_h in models.items():
            if horizon not in per_h:
                continue
            m = per_h[horizon]["snapshot"]
            lines.append(
                f"| {model} | {_fmt(m['pr_auc'], 3)} | {_fmt(m['c_index'], 3)} | {_fmt(m['calibration_error'], 4)} "
                f"| {_fmt(m['mean_risk'], 4)} | {_fmt(m['failure_rate'], 4)} "
                f"| {m['snapshots']} / {m['unresolved_snapshots']} | {_fmt(m['largest_tie_share'], 3)} |"
            )
        for point, title in _POINT_TITLES.items():
            if point == "budget_floor" and "entry_floor" not in s:
                continue  # no floor configured: no such point
            title = budget_title(s) if point == "budget" and "budget" in s else title
            lines += ["", f"At the {_policy_title(s) if point == 'policy' else title.format(**s)}:", ""]
            lines += [
                "| model | threshold per fold | alerts/day | caught / failures | caught within the horizon "
                "| recall | recall with / without precursor | precision per alert | of the false: early "
                "| precision per unit | late alerts "
                "| drained then failed | lead time p10 / p50 / p90 (h) | false alerts per 1000 unit-days "
                "| GPU-hours saved |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            ]
            for model, per_h in models.items():
                points = per_h.get(horizon, {}).get("operating_points", {})
                if model == RULES_MODEL:
                    if point == "budget":
                        lines.append(_point_row(RULES_TITLE, points.get("as_run_today")))
                    continue
                lines.append(_point_row(model, points.get(point)))
            if point == "policy" and s.get("model_entries"):
                lines += ["", *_own_entry_lines(s["model_entries"])]
            if point == "budget":
                lines += verdict_lines(report, horizon)
            elif point == "budget_floor":
                lines += verdict_lines(report, horizon, "against_rules_at_floor")
        lines += ["", "By failure mode at the drain budget (recall, median lead time in h):", ""]
        modes = sorted(
            {
                mode
                for per_h in models.values()
                for mode in (
                    (per_h.get(horizon, {}).get("operating_points", {}).get("budget") or {}).get("by_mode") or {}
                )
            }
        )
        if modes:
            lines += ["| model | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
            for model, per_h in models.items():
                r = (per_h.get(horizon, {}).get("operating_points", {}).get("budget") or {}).get("by_mode", {})
                if model == RULES_MODEL:
                    continue
                cells = [
                    f"{r[m]['caught']}/{r[m]['failures']}, {_fmt(r[m]['lead_time_p50_h'], 0)}" if m in r else "–"
                    for m in modes
                ]
                lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines.append("")
    notes = [n for f in report.get("folds", []) for n in f["notes"]]
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


def _own_entry_lines(entries: dict) -> list[str]:
    """The models judged at the policy point at an entry of their own (``[policy.models.<name>]``)."""
    return [
        f"{model} is judged at its own entry ([policy.models.{model}]): a unit enters once {entry}."
        for model, entry in entries.items()
    ]


def _policy_title(s: dict) -> str:
    """The policy point's title from the report's settings: how a unit enters (the decision
    risk, the second horizon's alone, either, or each on its own threshold and hold) and
    leaves."""
    if s.get("second_horizon") and not s.get("second_only") and s.get("decision_enter_risk") is not None:
        ratio = s["exit_risk"] / s["enter_risk"]
        return (
            f"policy threshold (enter once the risk has held >= {s['decision_enter_risk']:g} for "
            f"{s['decision_enter_for']} or, at the decision horizon only, the {s['second_horizon']} risk >= "
            f"{s['second_enter_risk']:g} for {s['enter_for']}; leave once the risk is below "
            f"{ratio * s['decision_enter_risk']:.2g} and the {s['second_horizon']} risk below "
            f"{ratio * s['second_enter_risk']:.2g})"
        )
    title = _POINT_TITLES["policy"]
    if s.get("second_only"):
        title = title.replace(
            "at risk >= {enter_risk:g}",
            "at the {second_horizon} risk >= {second_enter_risk:g} alone (at the decision horizon only; "
            "its own risk does not enter)",
        )
    elif s.get("second_horizon"):
        title = title.replace(
            "at risk >= {enter_risk:g}",
            "at risk >= {enter_risk:g} or, at the decision horizon only, the {second_horizon} risk >= "
            "{second_enter_risk:g}",
        )
    if s.get("enter_for"):
        title = title.replace("enter at ", "enter once held for {enter_for} at ")
    return title.format(**s)
