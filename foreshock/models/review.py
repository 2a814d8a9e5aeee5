"""Champion/challenger review: same window, same metrics, guardrails, a report either way.

``foreshock review`` loads the registered versions behind the aliases ``challenger`` and
``champion``, re-scores both on the same recent labelled window (snapshots whose outcome
over the decision horizon is known), measures both with :mod:`models.metrics` at the
drain-budget operating point, and checks the guardrails of ``[review]``:

* recall at the drain budget may drop by at most ``max_recall_drop`` (default 0: not lower);
* precision at the drain budget may drop by at most ``max_precision_drop``;
* the challenger's calibration error must be at most ``max_calibration_error``.

A metric that cannot be measured (e.g. recall in a window without failures) fails its
guardrail: an automatic promotion of a model that drains hardware needs evidence.  The
report (Markdown and HTML with the side-by-side table and plots) is written under
``data/reports/review-<timestamp>.{md,html}`` and logged to an MLflow run, whatever the
outcome.  Only when every guardrail holds does ``champion`` move to the challenger.
A person can still promote any version by hand (:func:`approve`), which records who and
why as tags on the version.
"""

from __future__ import annotations

import base64
import getpass
import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from foreshock.durations import parse_duration
from foreshock.lake import atomic_write_text
from foreshock.models import plots, registry

# Rows of the side-by-side table: metric key, label, how to print it.
TABLE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("recall", "recall at drain budget", "{:.3f}"),
    ("precision", "precision at drain budget", "{:.3f}"),
    ("caught", "failures caught", "{:.0f}"),
    ("failures", "failures in window", "{:.0f}"),
    ("alerts", "alerts", "{:.0f}"),
    ("lead_time_p10_h", "lead time p10 (h)", "{:.1f}"),
    ("lead_time_p50_h", "lead time p50 (h)", "{:.1f}"),
    ("lead_time_p90_h", "lead time p90 (h)", "{:.1f}"),
    ("false_alerts_per_1000_unit_days", "false alerts / 1,000 unit-days", "{:.2f}"),
    ("pr_auc", "PR-AUC", "{:.3f}"),
    ("calibration_error", "calibration error", "{:.4f}"),
)


@dataclass(frozen=True)
class Guardrails:
    """Limits a challenger must respect to replace the champion automatically."""

    max_recall_drop: float = 0.0
    max_precision_drop: float = 0.05
    max_calibration_error: float = 0.05

    @classmethod
    def from_config(cls, config: Any) -> Guardrails:
        section = config.section("review")
        defaults = cls()
        return cls(
            max_recall_drop=float(section.get("max_recall_drop", defaults.max_recall_drop)),
            max_precision_drop=float(section.get("max_precision_drop", defaults.max_precision_drop)),
            max_calibration_error=float(section.get("max_calibration_error", defaults.max_calibration_error)),
        )


@dataclass(frozen=True)
class GuardrailCheck:
    """One guardrail, the values it compared and whether it held."""

    name: str
    rule: str
    challenger: float
    champion: float | None
    passed: bool


@dataclass
class Evaluation:
    """One registered version measured on the review window."""

    version: str
    run_id: str
    primary: str
    metrics: dict[str, float]
    scored: pl.DataFrame  # unit_id, ts, model, risk, label, time_to_failure_h (+ life)
    lead_times: pl.DataFrame  # model, lead_time_h: one row per caught failure
    trained_range: tuple[datetime, datetime] | None = None


@dataclass
class ReviewResult:
    """The outcome of a review: checks, decision, report paths, MLflow run."""

    model_name: str
    horizon: str
    window: tuple[datetime, datetime]
    challenger: Evaluation
    champion: Evaluation | None
    checks: list[GuardrailCheck]
    promoted: bool
    decision: str
    report_md: Path | None = None
    report_html: Path | None = None
    run_id: str | None = None
    figures: dict[str, Path] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    def table(self) -> pl.DataFrame:
        """The side-by-side table: ``metric, champion, challenger, change``."""
        rows = []
        for key, label, _ in TABLE_ROWS:
            new = self.challenger.metrics.get(key, math.nan)
            old = self.champion.metrics.get(key, math.nan) if self.champion else math.nan
            rows.append({"metric": label, "champion": old, "challenger": new, "change": new - old})
        return pl.DataFrame(
            rows, schema={"metric": pl.String, "champion": pl.Float64, "challenger": pl.Float64, "change": pl.Float64}
        )


# --------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------


def review_window(labelled: pl.DataFrame, horizon: str, config: Any) -> tuple[datetime, datetime]:
    """The recent labelled window both versions are measured on.

    Only snapshots whose outcome over ``horizon`` is known count (``fails_within_<h>`` not
    null).  ``[review] window`` (a duration) sets its length; by default it is the last
    third of the labelled span, like the backtest's out-of-sample share.
    """
    label = plots.label_column(horizon)
    known = labelled.filter(pl.col(label).is_not_null())
    if known.height == 0:
        raise ValueError(f"no snapshot has a known {horizon} outcome yet: nothing to review on")
    first, last = known["ts"].min(), known["ts"].max()
    length = config.section("review").get("window")
    span = parse_duration(length) if length else (last - first) / 3
    return max(first, last - span), last


def measure_at_budget(
    scores: pl.DataFrame,
    failures: pl.DataFrame,
    horizon: str,
    config: Any,
) -> tuple[dict[str, float], pl.DataFrame]:
    """Metrics of one risk series at the drain-budget operating point.

    Judged by :func:`models.backtest.evaluate`, the code that judges backtests, so a
    review's numbers mean exactly what the backtest report's numbers mean.

    Parameters
    ----------
    scores
        ``unit_id, ts, risk`` of one model and horizon.
    failures
        Canonical failures table.
    horizon
        The horizon the risks are for (alert precision is judged over it).
    config
        ``[backtest]`` gives the drain budget, ``W`` and ``L_min``; ``[policy]`` the costs.

    Returns
    -------
    tuple
        ``{metric: value}`` (NaN where undefined, e.g. recall without failures) and the
        caught failures' lead times ``model, lead_time_h``.
    """
    from foreshock.models.backtest import evaluate as judge  # the backtest's own judging, same code

    series = scores.select("unit_id", "ts", "risk")
    if series.height == 0:
        raise ValueError("no scores to measure on the review window")
    model = str(scores["model"][0]) if "model" in scores.columns else "model"
    report = judge(
        series.with_columns(pl.lit(model).alias("model"), pl.lit(horizon).alias("horizon")), failures, config
    )
    judged = report["models"][model][horizon]
    at_budget = judged["operating_points"]["budget"] or {}
    measured = {**at_budget, **judged["snapshot"]}
    values = {
        key: float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
        for key, value in measured.items()
        if key != "by_mode"
    }
    lead_times = registry.lead_times_at_budget(series.with_columns(pl.lit(model).alias("model")), failures, config)
    return values, lead_times


def evaluate(
    loaded: registry.LoadedBundle,
    window_frame: pl.DataFrame,
    failures: pl.DataFrame,
    horizon: str,
    config: Any,
) -> Evaluation:
    """Score one version's primary model on the window and measure it at the drain budget."""
    bundle = loaded.bundle
    if horizon not in bundle.horizons:
        raise ValueError(f"version {loaded.version} has no {horizon} horizon (has {bundle.horizons})")
    scores = bundle.score(window_frame).filter((pl.col("model") == bundle.primary) & (pl.col("horizon") == horizon))
    measured, lead_times = measure_at_budget(scores, failures, horizon, config)
    trained = getattr(bundle, "trained_range", None)
    return Evaluation(
        version=loaded.version,
        run_id=loaded.run_id,
        primary=bundle.primary,
        metrics=measured,
        scored=plots.scores_with_labels(scores, window_frame, horizon),
        lead_times=lead_times,
        trained_range=tuple(trained) if trained else None,
    )


def check_guardrails(
    challenger: Mapping[str, float], champion: Mapping[str, float], guardrails: Guardrails
) -> list[GuardrailCheck]:
    """Compare challenger with champion metric by metric (NaN never passes)."""

    def ok(value: bool, *values: float) -> bool:
        return all(v is not None and math.isfinite(v) for v in values) and value

    new_recall, old_recall = challenger.get("recall", math.nan), champion.get("recall", math.nan)
    new_precision, old_precision = challenger.get("precision", math.nan), champion.get("precision", math.nan)
    calibration = challenger.get("calibration_error", math.nan)
    return [
        GuardrailCheck(
            "recall at drain budget",
            f"challenger >= champion - {guardrails.max_recall_drop:g}",
            new_recall,
            old_recall,
            ok(new_recall >= old_recall - guardrails.max_recall_drop - 1e-12, new_recall, old_recall),
        ),
        GuardrailCheck(
            "precision at drain budget",
            f"challenger >= champion - {guardrails.max_precision_drop:g}",
            new_precision,
            old_precision,
            ok(new_precision >= old_precision - guardrails.max_precision_drop - 1e-12, new_precision, old_precision),
        ),
        GuardrailCheck(
            "calibration error",
            f"challenger <= {guardrails.max_calibration_error:g}",
            calibration,
            None,
            ok(calibration <= guardrails.max_calibration_error, calibration),
        ),
    ]


# --------------------------------------------------------------------------------------
# The review
# --------------------------------------------------------------------------------------


def run_review(config: Any, labelled: pl.DataFrame, failures: pl.DataFrame, *, promote: bool = True) -> ReviewResult:
    """Review the challenger against the champion and promote it if the guardrails hold.

    Parameters
    ----------
    config
        :class:`~foreshock.config.Config` (``[models] name``/``horizon``, ``[review]``,
        ``[backtest]`` for the operating point, ``reports_dir``).
    labelled
        Feature snapshots labelled with what is known now (``models.training.labelled_until``):
        the review window is taken from its end.
    failures
        Canonical failures table (for lead times).
    promote
        ``False`` to write the report without moving any alias (a dry run).

    Returns
    -------
    ReviewResult
        The guardrail checks, the decision, the report paths and the MLflow run id.

    Raises
    ------
    LookupError
        When nothing is registered under the model name yet.
    """
    import mlflow

    name = config.model_name
    registry.tracking_uri(config.data_dir)
    client = mlflow.MlflowClient()
    horizon = registry.decision_horizon(config)
    challenger_version = registry.alias_version(name, registry.CHALLENGER, client=client)
    champion_version = registry.alias_version(name, registry.CHAMPION, client=client)
    if challenger_version is None:
        raise LookupError(f"registered model {name!r} has no challenger: run `foreshock train` first")

    window = review_window(labelled, horizon, config)
    label = plots.label_column(horizon)
    window_frame = labelled.filter(pl.col("ts").is_between(window[0], window[1]) & pl.col(label).is_not_null())
    challenger = evaluate(
        registry.load_version(name, challenger_version.version), window_frame, failures, horizon, config
    )
    same = champion_version is not None and str(champion_version.version) == str(challenger_version.version)
    champion = None
    if champion_version is not None and not same:
        champion = evaluate(
            registry.load_version(name, champion_version.version), window_frame, failures, horizon, config
        )

    guardrails = Guardrails.from_config(config)
    checks = check_guardrails(challenger.metrics, champion.metrics, guardrails) if champion else []
    held = bool(checks) and all(check.passed for check in checks)
    # A challenger that was champion before and was replaced (a rollback or a hand
    # approval of another version) must not win its place back by itself: that would
    # undo a person's decision at the next scheduled review.
    demoted = not same and "foreshock.promotion" in (challenger_version.tags or {})
    if same:
        decision = f"version {challenger.version} is already champion: nothing to promote"
    elif champion is None:
        decision = f"no champion: version {challenger.version} needs `foreshock review --approve {challenger.version}`"
    elif demoted:
        decision = (
            f"kept version {champion.version} as champion: challenger {challenger.version} was champion before and "
            f"was replaced; only `foreshock review --approve {challenger.version}` brings it back"
        )
    elif not held:
        failed = ", ".join(check.name for check in checks if not check.passed)
        decision = f"kept version {champion.version} as champion: challenger {challenger.version} failed {failed}"
    elif not promote:
        decision = f"dry run: version {challenger.version} passed every guardrail but was not promoted"
    else:
        decision = f"promoted version {challenger.version} to champion (was {champion.version}): every guardrail held"
    promoted = held and promote and not demoted

    result = ReviewResult(
        model_name=name,
        horizon=horizon,
        window=window,
        challenger=challenger,
        champion=champion,
        checks=checks,
        promoted=promoted,
        decision=decision,
    )
    _write_and_log(result, config, client)
    if promoted:
        registry.set_champion(
            name,
            challenger.version,
            action="review",
            by="foreshock review",
            reason=f"guardrails held on {window[0]:%Y-%m-%d %H:%M} .. {window[1]:%Y-%m-%d %H:%M} UTC (review run {result.run_id})",
            client=client,
        )
    return result


def approve(config: Any, version: str | int, *, by: str | None = None, reason: str = "") -> str | None:
    """Promote ``version`` to champion by hand; records who (default ``$USER``) and why.

    Returns the previous champion version.
    """
    registry.tracking_uri(config.data_dir)
    return registry.set_champion(
        config.model_name, version, action="approved", by=by or _user(), reason=reason or "approved by hand"
    )


def rollback(config: Any, version: str | int, *, by: str | None = None, reason: str = "") -> str | None:
    """Move ``champion`` back to an earlier ``version``; scoring loads it from then on."""
    registry.tracking_uri(config.data_dir)
    return registry.set_champion(
        config.model_name, version, action="rollback", by=by or _user(), reason=reason or "rollback"
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "unknown"


# --------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------


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
    if "time_to_failure_h" in result.challenger.scored.columns and result.challenger.scored.height:
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


def render_markdown(result: ReviewResult, figure_dir: str | None = None) -> str:
    """The review as Markdown; plots are linked from ``figure_dir`` when given."""
    headers = _headers(result)
    lines = [
        f"# Model review: {result.model_name}",
        "",
        f"**Decision:** {result.decision}",
        "",
        f"- window: {result.window[0]:%Y-%m-%d %H:%M} .. {result.window[1]:%Y-%m-%d %H:%M} UTC, "
        f"horizon {result.horizon}, snapshots with a known outcome only",
    ]
    for evaluation in (result.champion, result.challenger):
        if evaluation is not None and (note := _range_note(evaluation, result.window)):
            lines.append(f"- {note}")
    lines += ["", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in _table_rows(result)]
    lines += ["", "## Guardrails", ""]
    if result.checks:
        lines += ["| guardrail | rule | challenger | champion | result |", "|---|---|---|---|---|"]
        for check in result.checks:
            lines.append(
                f"| {check.name} | {check.rule} | {_format(check.challenger, '{:.4f}')} | "
                f"{_format(check.champion, '{:.4f}')} | {'pass' if check.passed else 'FAIL'} |"
            )
    else:
        lines.append("No champion to compare with: no guardrail was checked.")
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
        f'<td>{_format(c.champion, "{:.4f}")}</td><td class="{"pass" if c.passed else "fail"}">'
        f"{'pass' if c.passed else 'FAIL'}</td></tr>"
        for c in result.checks
    )
    notes = "".join(
        f"<li>{esc(note)}</li>"
        for e in (result.champion, result.challenger)
        if e is not None and (note := _range_note(e, result.window))
    )
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
{f"<table><thead><tr><th>guardrail</th><th>rule</th><th>challenger</th><th>champion</th><th>result</th></tr></thead><tbody>{checks}</tbody></table>" if checks else "<p>No champion to compare with: no guardrail was checked.</p>"}
<h2>Plots</h2>
{images}
</body></html>
"""


def _write_and_log(result: ReviewResult, config: Any, client: Any) -> None:
    """Write the report under ``reports_dir`` and log it, with the metrics, to MLflow."""
    import mlflow

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = f"review-{stamp}"
    reports_dir = Path(config.reports_dir)
    figure_dir = reports_dir / base
    result.figures = plots.save_figures(review_figures(result), figure_dir)
    result.report_md = reports_dir / f"{base}.md"
    result.report_html = reports_dir / f"{base}.html"
    atomic_write_text(result.report_md, render_markdown(result, figure_dir=base))
    atomic_write_text(result.report_html, render_html(result))

    exp_id = registry.experiment_id(registry.experiment_name(config))
    champion = result.champion.version if result.champion else "none"
    with mlflow.start_run(experiment_id=exp_id, run_name=f"review-v{result.challenger.version}-vs-{champion}") as run:
        mlflow.set_tags(
            {
                "foreshock.kind": "review",
                "foreshock.model_name": result.model_name,
                "foreshock.challenger": result.challenger.version,
                "foreshock.champion": champion,
                "foreshock.decision": result.decision,
                "foreshock.promoted": str(result.promoted).lower(),
            }
        )
        mlflow.log_params(
            {
                "window.start": result.window[0].isoformat(),
                "window.end": result.window[1].isoformat(),
                "horizon": result.horizon,
                **{f"review.{k}": str(v) for k, v in config.section("review").items()},
            }
        )
        for role, evaluation in (("challenger", result.challenger), ("champion", result.champion)):
            if evaluation is not None:
                mlflow.log_metrics({f"{role}.{k}": v for k, v in evaluation.metrics.items() if math.isfinite(v)})
        mlflow.log_artifact(str(result.report_md), "review")
        mlflow.log_artifact(str(result.report_html), "review")
        for path in result.figures.values():
            mlflow.log_artifact(str(path), "review/plots")
        result.run_id = run.info.run_id
    verdict = "passed" if result.passed else ("not compared" if not result.checks else "failed")
    client.set_model_version_tag(result.model_name, result.challenger.version, "foreshock.review", verdict)
    client.set_model_version_tag(result.model_name, result.challenger.version, "foreshock.review_run_id", result.run_id)
