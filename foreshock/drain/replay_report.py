"""The replay as people read it: Markdown table, JSON, the drain log as CSV, and the plots.

The computation lives in :mod:`foreshock.drain.replay`; this module only renders and writes.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from foreshock.drain.replay import ReplayReport
from foreshock.drain.replay_plots import plot_replay
from foreshock.lake.atomic import atomic_write_text

_COLUMNS = (
    ("variant", "policy", "{}"),
    ("failures", "failures", "{}"),
    ("drained_then_failed", "drained then failed (recorded drains)", "{}"),
    ("drained_ahead", "drained ahead", "{}"),
    ("healthy_drains", "healthy drains", "{}"),
    ("drains", "drains", "{}"),
    ("drains_per_day", "drains/day", "{:.2f}"),
    ("gpu_hours_lost", "GPU-h lost", "{:,.0f}"),
    ("gpu_hours_saved", "GPU-h saved", "{:,.0f}"),
    ("effective_training_time", "effective training time", "{:.2%}"),
    ("median_lead_time_h", "median lead (h)", "{:.1f}"),
)


def markdown_table(report: ReplayReport) -> str:
    """The replay table in Markdown (one row per variant)."""
    head = "| " + " | ".join(title for _, title, _ in _COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in _COLUMNS) + "|"
    lines = [head, rule]
    for outcome in report.outcomes:
        cells = []
        for name, _, fmt in _COLUMNS:
            value = getattr(outcome, name)
            cells.append("-" if value is None else fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _interval(hours: float) -> str:
    if hours == float("inf"):
        return "∞"
    return f"{hours / 24:.1f} d" if hours >= 72 else f"{hours:.1f} h"


def checkpoint_markdown(report: ReplayReport) -> list[str]:
    """The Young/Daly checkpoint section: lambda, T* and effective training time per variant."""
    if not report.checkpoint:
        return []
    s = report.settings
    lines = [
        "## Checkpoint interval",
        "",
        (
            f"A job of {s['job_gpus']} GPUs with the failure rate of this fleet; restart cost tau = "
            f"{s['restart_cost_h'] * 60:.0f} min (checkpoint write + restart). Young/Daly interval "
            "T* = sqrt(2 tau / lambda), lambda = the job's unplanned interruptions; drains add planned ones. "
            f"Effective training time at T* and at the configured {s['checkpoint_interval_h']:g} h interval."
        ),
        "",
        "| policy | lambda (unplanned / day) | planned drains / day | T* | effective at T* | "
        f"effective at {s['checkpoint_interval_h']:g} h |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for plan in report.checkpoint:
        lines.append(
            f"| {plan.variant} | {plan.unplanned_per_day:.2f} | {plan.planned_per_day:.2f} | "
            f"{_interval(plan.optimal_interval_h)} | {plan.effective_at_optimum:.2%} | "
            f"{plan.effective_at_configured:.2%} |"
        )
    return [*lines, ""]


def lemon_markdown(report: ReplayReport) -> list[str]:
    """What replacing repeat offenders saved, against draining and returning them."""
    lemon = report.settings.get("lemon")
    if not lemon:
        return []
    lines = [
        "## Repeat offenders: replace instead of drain and return",
        "",
        (
            f"A unit with {lemon['count']} incidents (failures, drains, replacements), or a node with "
            f"{lemon['node_count']}, within {lemon['window_h'] / 24:g} days is a repeat offender; the policy "
            f"recommends `replace` for one it would drain (same guards and budgets). A replacement costs the "
            f"job's drain plus the unit out for {lemon['replace_turnaround_h'] / 24:g} days; hardware cost is "
            "not counted. Assumption: a replaced unit's later recorded failures (from the minimum lead time "
            "after the replacement on) were the old hardware's and are avoided; the new hardware keeps the old "
            "one's recorded risks and gets no failures of its own, so the saving is an upper bound where a "
            "node, not the GPU, is at fault."
        ),
        "",
    ]
    if not lemon["replace"]:
        return [*lines, "`[lemon] replace = false`: not replayed.", ""]
    if not report.lemons:
        return [*lines, "No repeat offender reached a drain in this replay: nothing to compare.", ""]
    lines += [
        "| policy | replacements | failures avoided | GPU-h saved with replace | drain and return | replacing saved |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in report.lemons:
        lines.append(
            f"| {row['variant']} | {row['replacements']} | {row['avoided_failures']} | "
            f"{row['gpu_hours_saved_with_replace']:,.0f} | {row['gpu_hours_saved_drain_and_return']:,.0f} | "
            f"{row['replacing_saved_gpu_h']:+,.0f} |"
        )
    return [*lines, ""]


def learned_markdown(report: ReplayReport) -> list[str]:
    """The learned chooser against the fixed cost model on the same recorded decisions."""
    if not report.learned:
        return []
    first = report.learned[0]
    lines = [
        "## Learned chooser against the fixed cost model",
        "",
        (
            "Each model's replayed decisions (one per unit and day at risk above the lowest band) with their "
            "realised GPU-hours; the learned chooser is fitted on the decisions before the split and valued on "
            "those after it (doubly robust estimate), against what the fixed policy's decisions realised there. "
            f"Interval: {first['confidence']:.0%} bootstrap over units. Negative = the learned chooser costs less. "
            'It replaces the fixed model (`[policy] chooser = "learned"`) only when the whole interval is below 0.'
        ),
        "",
        "| policy | split | records fit / valued | fixed GPU-h | learned GPU-h | learned - fixed (interval) "
        "| learned drains from | better by its interval |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in report.learned:
        low, high = row["interval"]
        threshold = "-" if row["learned_threshold"] is None else f"{row['learned_threshold']:g}"
        lines.append(
            f"| {row['variant']} | {str(row['split_at'])[:16]} | {row['train_records']} / {row['test_records']} | "
            f"{row['fixed_gpu_h']:,.0f} | {row['learned_gpu_h']:,.0f} | "
            f"{row['difference_gpu_h']:+,.0f} ({low:+,.0f} to {high:+,.0f}) | {threshold} | "
            f"{'yes' if row['better'] else 'no'} |"
        )
    lines += [
        "",
        "Realised GPU-hours per decision and risk band, fitted on the earlier half (drained: doubly robust; "
        "drains = recorded drains in the band, the rest from the cost model with the band's failure share):",
        "",
        "| policy | band | records | failed within the horizon | drains | not drained GPU-h | drained GPU-h |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in report.learned:
        for band in row["estimates"]:
            lines.append(
                f"| {row['variant']} | {band['label']} | {band['records']} | {band['failure_share']:.0%} | "
                f"{band['drains']} | {band['none_gpu_h']:,.0f} | {band['drain_gpu_h']:,.0f} |"
            )
    return [*lines, ""]


REPLAY_DIR = "replay"  # under the reports directory
MARKDOWN_FILE = "replay.md"
SUMMARY_FILE = "replay.json"


def replay_dir(reports_dir: Path) -> Path:
    """``<reports_dir>/replay/``: where ``foreshock replay`` writes its report."""
    return Path(reports_dir) / REPLAY_DIR


def read_summary(directory: Path) -> dict | None:
    """The replay's ``replay.json`` (period, settings, outcomes), or None when none was written."""
    path = Path(directory) / SUMMARY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def write_report(report: ReplayReport, directory: Path, *, plots: bool = True) -> dict[str, Path]:
    """Write ``replay.md``, ``replay.json``, ``replay_drains.csv`` and the plots."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    figures = {}
    if plots:
        figures = plot_replay(report, directory)
        files.update(figures)
    s = report.settings
    md = [
        "# Drain policy replay",
        "",
        (
            f"Backtest period {report.start:%Y-%m-%d %H:%M} to {report.end:%Y-%m-%d %H:%M} UTC "
            f"({report.days:.1f} days), {report.fleet_units} units."
        ),
        (
            f"Decision horizon {s['horizon']}; enter/exit risk {s['enter_risk']}/{s['exit_risk']}"
            + (f" (a unit enters drain once {s['entry']})" if "entry" in s else "")
            + _own_entries(s.get("model_entries"))
            + "; "
            f"at most {s['max_drained_share_cluster']:.0%} of the cluster and "
            f"{s['max_drained_share_per_domain']:.0%} of a fault domain out; "
            f"{s['max_new_drains_per_run']} new drains per run"
            + (
                f"; daily drain budget {s['daily_budget']['text']}."
                if s.get("daily_budget")
                else "; no daily drain budget."
            )
        ),
        (
            f"An unplanned failure costs {s['failure_loss_gpu_h']:,.0f} GPU-h (job of {s['job_gpus']} GPUs: "
            f"half a checkpoint interval plus restart); a drain costs {s['drain_cost_gpu_h']:,.0f} GPU-h. "
            f"Drained ahead = drain effective within {s['alert_window_h']:.0f}h before the failure and at "
            f"least {s['min_lead_time_h']:.0f}h before it."
        ),
        "",
        markdown_table(report),
        "",
    ]
    if report.fleet_units < s["job_gpus"]:
        md += [
            f"Note: the fleet ({report.fleet_units} units) is smaller than one job ({s['job_gpus']} GPUs), so "
            "each failure costs a larger share of the fleet's GPU-hours than it would on a fleet filled with "
            "such jobs; effective training time is pessimistic here (set `[policy] job_gpus`).",
            "",
        ]
    md += checkpoint_markdown(report)
    md += lemon_markdown(report)
    md += learned_markdown(report)
    if any(o.precursor_failures is not None for o in report.outcomes):
        md += ["Failures with a precursor (simulator ground truth) drained ahead:", ""]
        for o in report.outcomes:
            if o.precursor_failures is not None:
                md.append(f"- {o.variant}: {o.precursor_drained_ahead} of {o.precursor_failures}")
        md.append("")
    md += [f"![{name}]({path.name})" for name, path in figures.items()]
    files["replay.md"] = directory / MARKDOWN_FILE
    atomic_write_text(files["replay.md"], "\n".join(md) + "\n")
    payload = {
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "days": report.days,
        "fleet_units": report.fleet_units,
        "settings": report.settings,
        "outcomes": report.table().to_dicts(),
        "checkpoint": [asdict(plan) for plan in report.checkpoint],
        "lemons": report.lemons,
        "learned": report.learned,
    }
    files["replay.json"] = directory / SUMMARY_FILE
    atomic_write_text(files["replay.json"], json.dumps(payload, indent=2, default=str) + "\n")
    files["replay_drains.csv"] = directory / "replay_drains.csv"
    atomic_write_text(files["replay_drains.csv"], report.drains.write_csv())
    return files


def _own_entries(entries: dict | None) -> str:
    """The models replayed at an entry of their own (``[policy.models.<name>]``), in words."""
    if not entries:
        return ""
    return "".join(
        f"; {model} enters at its own entry ([policy.models.{model}]): {entry}" for model, entry in entries.items()
    )
