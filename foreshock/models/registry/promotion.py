"""Act on the registry: run a review and promote, approve a version by hand, roll back.

:func:`run_review` measures and decides (:func:`foreshock.models.registry.review.review_versions`:
the challenger's recipe refitted before the review window, both versions scored on the
window only, guardrails against bootstrap intervals), writes the report (:mod:`foreshock.models.registry.review_report`) and logs it to MLflow
(:func:`foreshock.models.registry.tracking.log_review`) whatever the outcome; only when every
guardrail holds does ``champion`` move to the challenger: the registered version, i.e. the
same recipe refitted on all history by ``foreshock train``.  A person can still promote any
version by hand (:func:`approve`) or move ``champion`` back (:func:`rollback`); both
record who and why as tags on the version.
"""

from __future__ import annotations

import getpass
from typing import Any

import polars as pl

from foreshock.models.registry import registry, tracking
from foreshock.models.registry.review import ReviewResult, review_versions
from foreshock.models.registry.review_data import ReviewData
from foreshock.models.registry.review_report import write_report


def run_review(
    config: Any,
    labelled: pl.DataFrame | ReviewData,
    failures: pl.DataFrame,
    *,
    promote: bool = True,
    drains: pl.DataFrame | None = None,
) -> ReviewResult:
    """Review the challenger against the champion and promote it if the guardrails hold.

    Parameters
    ----------
    config
        :class:`~foreshock.config.Config` (``[models] name``/``horizon``, ``[review]``,
        ``[backtest]`` for the operating point, ``reports_dir``).
    labelled
        The feature store with the outcomes known now (:class:`~foreshock.models.registry.review_data.ReviewData`,
        read window by window) or snapshots labelled in memory
        (``models.training.labelled_until``): the review window is taken from its end.
    failures
        Canonical failures table (for lead times).
    promote
        ``False`` to write the report without moving any alias (a dry run).
    drains
        Canonical drains (they censor the labels of the challenger's refit before the window).

    Returns
    -------
    ReviewResult
        The guardrail checks, the decision, the report paths and the MLflow run id.

    Raises
    ------
    LookupError
        When nothing is registered under the model name yet.
    """
    tracking.tracking_uri(config.mlflow_dir)
    result = review_versions(config, labelled, failures, promote=promote, drains=drains)
    write_report(result, config.reports_dir)
    result.run_id = tracking.log_review(result, config)
    verdict = "not compared" if result.champion is None else ("passed" if result.passed else "failed")
    registry.tag_version(
        result.model_name,
        result.challenger.version,
        {"foreshock.review": verdict, "foreshock.review_run_id": result.run_id},
    )
    if result.promoted:
        window = result.window
        registry.set_champion(
            result.model_name,
            result.challenger.version,
            action="review",
            by="foreshock review",
            reason=f"guardrails held on {window[0]:%Y-%m-%d %H:%M} .. {window[1]:%Y-%m-%d %H:%M} UTC (review run {result.run_id})",
        )
    return result


def approve(config: Any, version: str | int, *, by: str | None = None, reason: str = "") -> str | None:
    """Promote ``version`` to champion by hand; records who (default ``$USER``) and why.

    Returns the previous champion version.
    """
    tracking.tracking_uri(config.mlflow_dir)
    return registry.set_champion(
        config.model_name, version, action="approved", by=by or _user(), reason=reason or "approved by hand"
    )


def rollback(config: Any, version: str | int, *, by: str | None = None, reason: str = "") -> str | None:
    """Move ``champion`` back to an earlier ``version``; scoring loads it from then on."""
    tracking.tracking_uri(config.mlflow_dir)
    return registry.set_champion(
        config.model_name, version, action="rollback", by=by or _user(), reason=reason or "rollback"
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "unknown"
