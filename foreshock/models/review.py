"""Champion/challenger review: measure both versions on the same window and decide.

A review loads the registered versions behind the aliases ``challenger`` and
``champion``, re-scores both on the same recent labelled window (snapshots whose outcome
over the decision horizon is known), measures both with :mod:`foreshock.models.metrics`
at the drain-budget operating point, and checks the guardrails of ``[review]``:

* recall at the drain budget may drop by at most ``max_recall_drop`` (default 0: not lower);
* precision at the drain budget may drop by at most ``max_precision_drop``;
* the challenger's calibration error must be at most ``max_calibration_error``.

A metric that cannot be measured (e.g. recall in a window without failures) fails its
guardrail: an automatic promotion of a model that drains hardware needs evidence.

This module measures and decides (:func:`review_versions`); the report is rendered by
:mod:`foreshock.models.review_report`, logged by :func:`foreshock.models.tracking.log_review`
and acted on (``champion`` moved only when every guardrail holds) by
:func:`foreshock.models.promotion.run_review`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from foreshock.contract import label_column
from foreshock.durations import parse_duration
from foreshock.models import plots, registry
from foreshock.models.base import decision_horizon
from foreshock.models.lead_times import lead_times_at_budget

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
    label = label_column(horizon)
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

    Judged by :func:`foreshock.models.backtest.judge_scores`, the code that judges backtests, so a
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
    from foreshock.models.backtest import judge_scores  # the backtest's own judging, same code

    series = scores.select("unit_id", "ts", "risk")
    if series.height == 0:
        raise ValueError("no scores to measure on the review window")
    model = str(scores["model"][0]) if "model" in scores.columns else "model"
    report = judge_scores(
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
    lead_times = lead_times_at_budget(series.with_columns(pl.lit(model).alias("model")), failures, config)
    return values, lead_times


def measure_version(
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


def decide(
    challenger: Evaluation,
    champion: Evaluation | None,
    checks: list[GuardrailCheck],
    *,
    already_champion: bool,
    demoted: bool,
    promote: bool,
) -> tuple[str, bool]:
    """The decision sentence and whether ``champion`` moves to the challenger.

    ``already_champion``: both aliases point at the same version.  ``demoted``: the
    challenger was champion before and was replaced (a rollback or a hand approval of
    another version); it must not win its place back by itself, which would undo a
    person's decision at the next scheduled review.
    """
    held = bool(checks) and all(check.passed for check in checks)
    if already_champion:
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
    return decision, held and promote and not demoted


def review_versions(
    config: Any, labelled: pl.DataFrame, failures: pl.DataFrame, *, promote: bool = True
) -> ReviewResult:
    """Measure the challenger and the champion on the same window and decide.

    Nothing is written and no alias moves: :func:`foreshock.models.promotion.run_review`
    does that with the result.  The MLflow tracking URI must be set
    (:func:`foreshock.models.tracking.tracking_uri`).

    Parameters
    ----------
    config
        :class:`~foreshock.config.Config` (``[models] name``/``horizon``, ``[review]``,
        ``[backtest]`` for the operating point).
    labelled
        Feature snapshots labelled with what is known now (``models.training.labelled_until``):
        the review window is taken from its end.
    failures
        Canonical failures table (for lead times).
    promote
        ``False`` for a dry run: the decision never promotes.

    Raises
    ------
    LookupError
        When nothing is registered under the model name yet.
    """
    import mlflow

    name = config.model_name
    client = mlflow.MlflowClient()
    horizon = decision_horizon(config)
    challenger_version = registry.alias_version(name, registry.CHALLENGER, client=client)
    champion_version = registry.alias_version(name, registry.CHAMPION, client=client)
    if challenger_version is None:
        raise LookupError(f"registered model {name!r} has no challenger: run `foreshock train` first")

    window = review_window(labelled, horizon, config)
    label = label_column(horizon)
    window_frame = labelled.filter(pl.col("ts").is_between(window[0], window[1]) & pl.col(label).is_not_null())
    challenger = measure_version(
        registry.load_version(name, challenger_version.version), window_frame, failures, horizon, config
    )
    same = champion_version is not None and str(champion_version.version) == str(challenger_version.version)
    champion = None
    if champion_version is not None and not same:
        champion = measure_version(
            registry.load_version(name, champion_version.version), window_frame, failures, horizon, config
        )
    checks = check_guardrails(challenger.metrics, champion.metrics, Guardrails.from_config(config)) if champion else []
    demoted = not same and "foreshock.promotion" in (challenger_version.tags or {})
    decision, promoted = decide(challenger, champion, checks, already_champion=same, demoted=demoted, promote=promote)
    return ReviewResult(
        model_name=name,
        horizon=horizon,
        window=window,
        challenger=challenger,
        champion=champion,
        checks=checks,
        promoted=promoted,
        decision=decision,
    )
