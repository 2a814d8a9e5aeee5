"""Champion/challenger review: out of sample, on the same window, with intervals.

A review takes the recent labelled window (snapshots whose outcome over the decision
horizon is known; ``[review] window`` long, default the last third of the labelled span)
and asks whether the challenger's recipe is at least as good as the champion there:

1. **The challenger is refitted before the window** (:func:`foreshock.models.evaluation.comparison.fit_before_window`):
   the configured recipe (``[models]``, the one ``foreshock train`` registered) is trained on
   snapshots before ``window_start - H`` with labels as known at ``window_start`` (the
   training's censoring-correct labels, cutoff at the window start), so no training label
   looks into the window.  The registered champion is scored as it is (the report says how
   much of the window it was trained on).
2. **Both are scored on the window only** and measured at the drain-budget operating point
   by the backtest's own judging (:func:`measure_at_budget`).
3. **Paired unit bootstrap** (:func:`foreshock.models.evaluation.comparison.bootstrap`, ``[review]
   bootstrap`` resamples, ``confidence`` coverage) gives intervals of recall, precision,
   PR-AUC and PR-AUC / base rate, and of the differences challenger - champion.
4. **Guardrails read the intervals** (:func:`foreshock.models.evaluation.comparison.check_guardrails`):
   a recall / precision drop counts only when the whole interval of the difference lies
   below ``-max_recall_drop`` / ``-max_precision_drop``; the challenger's calibration error
   must be at most ``max_calibration_error``; the lower end of its PR-AUC / base rate must
   be at least ``min_pr_auc_lift`` (a constant base-rate predictor has ratio 1 and cannot
   pass).  A metric that cannot be measured fails its guardrail.
5. **Never a model worse than the rules** (:func:`measure_rules`,
   :func:`foreshock.models.evaluation.comparison.rules_checks`): the severity-ranked threshold
   rules (resolved on the same history as the refit) are measured at the same budget on the
   same window, and the challenger's catches and precision must not lie below theirs (the
   whole interval of challenger - rules below the allowed drop fails), so a challenger worse
   than the rules is not promoted, and the decision names the guardrail it failed.

What is promoted is the registered challenger: the same recipe refitted on all history
by ``foreshock train``.  This module measures and decides (:func:`review_versions`); the
report is rendered by :mod:`foreshock.models.registry.review_report`, logged by
:func:`foreshock.models.registry.tracking.log_review` and acted on by
:func:`foreshock.models.registry.promotion.run_review`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from foreshock.contract import label_column
from foreshock.durations import parse_duration
from foreshock.models.estimators.base import decision_horizon
from foreshock.models.estimators.baseline import ThresholdBaseline
from foreshock.models.evaluation import comparison, plots
from foreshock.models.evaluation.comparison import GuardrailCheck, Interval, ReviewSettings, UnitTable
from foreshock.models.evaluation.lead_times import lead_times_at_budget
from foreshock.models.evaluation.operating_points import OperatingPoints
from foreshock.models.evaluation.verdict import RANKED_RULES
from foreshock.models.registry import registry
from foreshock.models.registry.review_data import ReviewData, ReviewWindow

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

# The guardrail that fails when the challenger's recipe cannot be refitted before the window.
OUT_OF_SAMPLE = "challenger refitted before the window"


@dataclass
class Evaluation:
    """One version measured on the review window.

    For the challenger, the scores come from its recipe refitted before the window
    (``trained_range`` is that fit's); ``version``/``run_id`` name the registered
    all-history fit that a promotion would make champion.
    """

    version: str
    run_id: str
    primary: str
    metrics: dict[str, float]
    scored: pl.DataFrame  # unit_id, ts, model, risk, label, time_to_failure_h (+ life)
    lead_times: pl.DataFrame  # model, lead_time_h: one row per caught failure
    trained_range: tuple[datetime, datetime] | None = None
    units: UnitTable | None = None  # per-unit counts at the budget point, for the bootstrap


RULES_VERSION = "ranked rules"


@dataclass
class ReviewResult:
    """The outcome of a review: intervals, checks, decision, report paths, MLflow run."""

    model_name: str
    horizon: str
    window: tuple[datetime, datetime]
    challenger: Evaluation
    champion: Evaluation | None
    checks: list[GuardrailCheck]
    promoted: bool
    decision: str
    intervals: dict[str, dict[str, Interval]] = field(default_factory=dict)
    settings: ReviewSettings | None = None
    rules: Evaluation | None = None  # the ranked rules on the same window, at the same budget
    budget: str = ""  # the drain budget both were measured at, in words
    refit_range: tuple[datetime, datetime] | None = None  # the registered challenger's (all history)
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


def batch_rows(config: Any) -> int:
    """Window rows scored at a time: the backtest's ``[backtest] score_batch_rows``."""
    return int(config.section("backtest")["score_batch_rows"])


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

    Judged by :func:`foreshock.models.evaluation.judging.judge_scores`, the code that judges backtests, so a
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
    from foreshock.models.evaluation.judging import judge_scores  # the backtest's own judging, same code

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


def measure_bundle(
    bundle: Any,
    rows: ReviewWindow,
    failures: pl.DataFrame,
    horizon: str,
    config: Any,
    *,
    version: str,
    run_id: str,
) -> Evaluation:
    """Score ``bundle``'s primary model on the window; measure it at the drain budget and
    per unit (for the bootstrap)."""
    if horizon not in bundle.horizons:
        raise ValueError(f"version {version} has no {horizon} horizon (has {bundle.horizons})")
    scores = rows.score(
        lambda batch: bundle.score(batch, [bundle.primary]).filter(pl.col("horizon") == horizon),
        ["model", "horizon", "unit_id", "ts"],
    )
    trained = getattr(bundle, "trained_range", None)
    return _evaluation(
        scores,
        rows.labels,
        failures,
        horizon,
        config,
        version=version,
        run_id=run_id,
        primary=bundle.primary,
        trained_range=tuple(trained) if trained else None,
    )


def _evaluation(
    scores: pl.DataFrame,
    window_labels: pl.DataFrame,
    failures: pl.DataFrame,
    horizon: str,
    config: Any,
    *,
    version: str,
    run_id: str,
    primary: str,
    trained_range: tuple | None = None,
) -> Evaluation:
    """The window's ``scores`` (``unit_id, ts, risk``, one horizon) measured at the drain
    budget and per unit (for the bootstrap)."""
    measured, lead_times = measure_at_budget(scores, failures, horizon, config)
    return Evaluation(
        version=version,
        run_id=run_id,
        primary=primary,
        metrics=measured,
        scored=plots.scores_with_labels(scores, window_labels, horizon),
        lead_times=lead_times,
        trained_range=trained_range,
        units=comparison.unit_table(scores.select("unit_id", "ts", "risk"), failures, horizon, config),
    )


def measure_version(
    loaded: registry.LoadedBundle,
    rows: ReviewWindow,
    failures: pl.DataFrame,
    horizon: str,
    config: Any,
) -> Evaluation:
    """Score one registered version's primary model on the window, as registered."""
    return measure_bundle(loaded.bundle, rows, failures, horizon, config, version=loaded.version, run_id=loaded.run_id)


def measure_challenger(
    loaded: registry.LoadedBundle,
    data: ReviewData,
    rows: ReviewWindow,
    failures: pl.DataFrame,
    window: tuple[datetime, datetime],
    horizon: str,
    config: Any,
    drains: pl.DataFrame | None = None,
) -> tuple[Evaluation, str | None]:
    """The challenger's recipe refitted before the window, measured on it.

    Returns the evaluation (named after the registered version ``loaded``) and ``None``,
    or, when the recipe cannot be fitted on the history before the window (e.g. no failure
    there) or is not the registered one (another primary model), the registered version
    measured as it is and the reason: the review then fails its out-of-sample guardrail.
    """
    try:
        before = comparison.fit_before_window(data.source, failures, config, window[0], horizon, drains=drains)
    except ValueError as exc:
        return measure_version(loaded, rows, failures, horizon, config), str(exc)
    if before.primary != loaded.bundle.primary:  # the configuration is not the registered recipe
        reason = f"the configured primary model {before.primary!r} is not version {loaded.version}'s {loaded.bundle.primary!r}"
        return measure_version(loaded, rows, failures, horizon, config), reason
    evaluation = measure_bundle(before, rows, failures, horizon, config, version=loaded.version, run_id=loaded.run_id)
    return evaluation, None


def measure_rules(
    data: ReviewData,
    rows: ReviewWindow,
    failures: pl.DataFrame,
    window: tuple[datetime, datetime],
    horizon: str,
    config: Any,
) -> Evaluation | None:
    """The severity-ranked threshold rules on the window, at the drain budget.

    The rules are bound to the feature columns, and their usual-growth thresholds taken,
    on the history the challenger is refitted on (before ``window_start - H``); their
    severity ranks the window's units.  None when there is no such history (the
    challenger's out-of-sample guardrail fails then anyway).  Of the history only the
    columns the growth rules learn their limits from are read.
    """
    history = data.history(comparison.training_cut(window[0], horizon))
    head = history.scan().head(1).collect()
    if head.height == 0:
        return None
    rules = ThresholdBaseline.from_config(config)
    growth = rules.growth_columns(head)
    values = history.scan().select(history.columns(growth)).collect(engine="streaming") if growth else head
    rules.resolve_on(head, values)
    del values
    scores = rows.score(
        lambda batch: batch.select("unit_id", "ts").with_columns(
            pl.Series("risk", rules.severity(batch), dtype=pl.Float64),
            pl.lit(RANKED_RULES).alias("model"),
            pl.lit(horizon).alias("horizon"),
        ),
        ["unit_id", "ts"],
    )
    return _evaluation(
        scores, rows.labels, failures, horizon, config, version=RULES_VERSION, run_id="", primary=RANKED_RULES
    )


def guardrail_checks(
    challenger: Evaluation,
    champion: Evaluation | None,
    settings: ReviewSettings,
    *,
    refit_error: str | None,
    rules: Evaluation | None = None,
) -> tuple[dict[str, dict[str, Interval]], list[GuardrailCheck]]:
    """Bootstrap intervals of both versions on the window and the guardrails against them;
    with ``rules``, also the challenger against the ranked rules (intervals ``rules`` and
    ``vs_rules``: challenger - rules, the same resampled units)."""
    intervals = comparison.bootstrap(
        challenger.units, champion.units if champion else None, settings.bootstrap, settings.confidence
    )
    checks = comparison.check_guardrails(intervals, challenger.metrics.get("calibration_error", math.nan), settings)
    if rules is not None:
        paired = comparison.bootstrap(challenger.units, rules.units, settings.bootstrap, settings.confidence)
        intervals["rules"], intervals["vs_rules"] = paired["champion"], paired["difference"]
        checks += comparison.rules_checks(paired, settings)
    if refit_error is not None:
        checks.insert(
            0, GuardrailCheck(OUT_OF_SAMPLE, f"training ends before the window ({refit_error})", math.nan, None, False)
        )
    return intervals, checks


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
        failed = "".join(f"; it failed {check.name}" for check in checks if not check.passed)
        decision = (
            f"no champion: version {challenger.version} needs `foreshock review --approve {challenger.version}`{failed}"
        )
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
    return decision, held and promote and not demoted and not already_champion and champion is not None


def review_versions(
    config: Any,
    labelled: pl.DataFrame | ReviewData,
    failures: pl.DataFrame,
    *,
    promote: bool = True,
    drains: pl.DataFrame | None = None,
) -> ReviewResult:
    """Refit the challenger's recipe before the window, measure it and the champion on
    the window, bootstrap the differences and decide.

    Nothing is written and no alias moves: :func:`foreshock.models.registry.promotion.run_review`
    does that with the result.  The MLflow tracking URI must be set
    (:func:`foreshock.models.registry.tracking.tracking_uri`).

    Parameters
    ----------
    config
        :class:`~foreshock.config.Config` (``[models] name``/``horizon``, ``[review]``,
        ``[backtest]`` for the operating point).
    labelled
        The feature store with every snapshot's outcome known now
        (:meth:`ReviewData.from_store <foreshock.models.registry.review_data.ReviewData.from_store>`:
        read window by window), or snapshots labelled in memory
        (``models.training.labelled_until``): the review window is taken from its end, the
        challenger's refit from what precedes it.
    failures
        Canonical failures table (for lead times).
    promote
        ``False`` for a dry run: the decision never promotes.
    drains
        Canonical drains: they censor the labels of the challenger's refit, as in training.

    Raises
    ------
    LookupError
        When nothing is registered under the model name yet.
    """
    import mlflow

    name = config.model_name
    client = mlflow.MlflowClient()
    horizon = decision_horizon(config)
    settings = ReviewSettings.from_config(config)
    challenger_version = registry.alias_version(name, registry.CHALLENGER, client=client)
    champion_version = registry.alias_version(name, registry.CHAMPION, client=client)
    if challenger_version is None:
        raise LookupError(f"registered model {name!r} has no challenger: run `foreshock train` first")

    data = labelled if isinstance(labelled, ReviewData) else ReviewData.from_labelled(labelled, batch_rows(config))
    window = review_window(data.labels, horizon, config)
    rows = data.window(window, horizon)
    registered = registry.load_version(name, challenger_version.version)
    challenger, refit_error = measure_challenger(registered, data, rows, failures, window, horizon, config, drains)
    same = champion_version is not None and str(champion_version.version) == str(challenger_version.version)
    champion = None
    if champion_version is not None and not same:
        champion = measure_version(
            registry.load_version(name, champion_version.version), rows, failures, horizon, config
        )
    rules = measure_rules(data, rows, failures, window, horizon, config)
    intervals, checks = guardrail_checks(challenger, champion, settings, refit_error=refit_error, rules=rules)
    demoted = not same and "foreshock.promotion" in (challenger_version.tags or {})
    decision, promoted = decide(challenger, champion, checks, already_champion=same, demoted=demoted, promote=promote)
    refit = getattr(registered.bundle, "trained_range", None)
    return ReviewResult(
        model_name=name,
        horizon=horizon,
        window=window,
        challenger=challenger,
        champion=champion,
        checks=checks,
        promoted=promoted,
        decision=decision,
        intervals=intervals,
        settings=settings,
        refit_range=tuple(refit) if refit else None,
        rules=rules,
        budget=OperatingPoints.from_config(config).budget.describe(),
    )
