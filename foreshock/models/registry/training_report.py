"""The plots of a training run: how the backtest's out-of-sample scores did.

Rendering only: the figures are built from the backtest scores, the labelled snapshots
and the caught failures' lead times (:mod:`foreshock.models.evaluation.lead_times`);
:func:`foreshock.models.registry.tracking.log_training` logs them as ``plots/<name>.png``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from foreshock.contract import TIME_TO_FAILURE
from foreshock.models.estimators.bundle import feature_importance
from foreshock.models.evaluation import plots

if TYPE_CHECKING:
    from foreshock.models.estimators.bundle import RiskBundle


def training_figures(
    bundle: RiskBundle,
    scores: pl.DataFrame | None,
    horizon: str,
    *,
    labelled: pl.DataFrame | None = None,
    lead_times: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """PR and calibration curves of every model, survival by the primary model's risk
    decile, the lead-time histogram and the primary model's feature importance.

    Parameters
    ----------
    bundle
        The trained bundle (primary model, boosters for the importance plot).
    scores
        The backtest's out-of-sample scores ``unit_id, ts, model, horizon, risk``.
    horizon
        The decision horizon the outcome plots are drawn for.
    labelled
        Labelled snapshots for the outcome plots; without them (or without scores) the
        PR, calibration and survival plots are skipped.
    lead_times
        ``model, lead_time_h`` of the caught failures; the histogram is skipped without it.

    Returns
    -------
    dict
        ``{name: matplotlib Figure}``.
    """
    figures = {}
    if labelled is not None and scores is not None:
        scored = plots.scores_with_labels(scores, labelled, horizon)
        figures["pr_curve"] = plots.pr_curve(scored, title=f"Precision-recall, backtest, {horizon}")
        figures["calibration"] = plots.calibration_curve(scored, title=f"Calibration, backtest, {horizon}")
        primary = scored.filter(pl.col("model") == bundle.primary)
        if primary.height and TIME_TO_FAILURE in primary.columns:
            figures["survival_by_risk_decile"] = plots.survival_by_risk_decile(
                primary, title=f"Survival by {bundle.primary} risk decile ({horizon})"
            )
    if lead_times is not None:
        figures["lead_time_histogram"] = plots.lead_time_histogram(lead_times)
    importance = feature_importance(bundle)
    if importance:
        figures["feature_importance"] = plots.feature_importance(
            importance, title=f"Feature importance ({bundle.primary}, total gain)"
        )
    return figures
