"""Fitting the gradient-boosted model from a sample left in the feature store, on Dask.

:meth:`GradientBoostedRisk.fit <foreshock.models.estimators.gbm.GradientBoostedRisk.fit>`
comes here when its sample is a :class:`~foreshock.models.estimators.dataset.StoredSample`,
a Dask cluster is given and a horizon has ``dask_min_rows`` rows: the driver never holds a
feature matrix, only the labelled keys.  The model's own decisions (rows, class weight,
purged holdout, features and rules) are the model's methods, called on ``model``; this
module is the order of the fits on the workers.  Kept apart from
:mod:`foreshock.models.estimators.gbm` because the model reads whole without it: a frame
in memory never takes this path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from foreshock.contract import TIME_TO_FAILURE
from foreshock.models.estimators.boosting import failure_ids, holdout_record, shifted_to_refit, truncate
from foreshock.models.estimators.calibration import PlattCalibrator, uncalibrated
from foreshock.models.estimators.dataset import StoredSample
from foreshock.models.estimators.gbm_dask import StoreParts, dask_client, early_stopped_round, grow_from_store


def fit_from_store(
    model: Any,
    stored: StoredSample,
    labelled: pl.DataFrame,
    targets: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    until: datetime,
) -> Any:
    """``model.fit`` with every fit on the Dask cluster and no feature matrix here.

    The driver holds the labelled keys (``unit_id, ts``, labels, weights, failure ids)
    and decides everything the local path decides from them: the rows of each horizon,
    the class weight, the purged holdout and its embargo.  The workers build their
    shares of the matrix from the feature store (:class:`~foreshock.models.estimators.gbm_dask.StoreParts`).
    Early stopping grows rounds in stages with the held-out metric of every round
    recorded until :func:`lightgbm.early_stopping`'s rule stops, and keeps the round it
    would (:func:`~foreshock.models.estimators.gbm_dask.early_stopped_round`; lightgbm.dask cannot stop early); the
    holdout margins are predicted on a worker and only they come back for the Platt
    calibrator; the refit and its intercept shift are those of the local path."""
    head = stored.head()
    growth = growth_columns(model, head)
    data = stored.source.rows(None, until, ["unit_id", "ts", *growth], keys=stored.keys) if growth else head
    model._resolve_features(head, data)
    del data
    guard, guard_notes = model.fit_guard(guard_rows(model, stored, head, labelled, until), until)
    ts_all = labelled.get_column("ts").to_numpy()
    failure_ttf = failure_ids(labelled), labelled.get_column(TIME_TO_FAILURE).to_numpy()
    keys = labelled.select("unit_id", "ts")
    del labelled
    model.boosters_, model.calibrators_, model.best_rounds_, model.notes_, model.holdouts_ = {}, {}, {}, [], {}
    with dask_client(model.dask_client) as client:
        parts = StoreParts(client, stored.source, keys, stored.columns, until, model.feature_names_, model.rules_)
        for h in model.horizons:
            rows, y, w = targets.pop(h)
            pos_weight, class_w, params, split = model._horizon_setup(h, rows, y, w, ts_all, failure_ttf, until)
            if split is not None:
                fit, hold = split.fit, split.holdout
                holdout = parts.holdout(rows[hold], y[hold], w[hold])
                metric = model.early_stopping_metric
                grown = grow_from_store(
                    parts,
                    {**params, "metric": metric},
                    rows[fit],
                    y[fit],
                    (w * class_w)[fit],
                    model.num_boost_round,
                    holdout=holdout,
                    patience=model.early_stopping_rounds,
                )
                model._note_dask_constraints(params, f"early stopping on {int(fit.sum())} rows")
                best = early_stopped_round(grown.scores, model.early_stopping_rounds, metric)
                rounds = max(best, model.min_rounds)
                hold_x = holdout.x
                del holdout
                margin = parts.margins(grown.booster, hold_x, num_iteration=rounds)
                calibrator = PlattCalibrator(link="margin").fit(margin, y[hold], w[hold])
                model.holdouts_[h] = holdout_record(split)
                if model.refit_full:
                    booster = grow_from_store(parts, params, rows, y, w * class_w, rounds).booster
                    model._note_dask_constraints(params, f"full fit on {y.size} rows")
                    calibrator = shifted_to_refit(calibrator, margin, parts.margins(booster, hold_x), w[hold])
                else:
                    booster = truncate(grown.booster, rounds)
                del hold_x
            else:
                rounds = model._without_holdout(h, pos_weight)
                booster = grow_from_store(parts, params, rows, y, w * class_w, rounds).booster
                model._note_dask_constraints(params, f"full fit on {y.size} rows")
                calibrator = uncalibrated(np.log(pos_weight))
            model.boosters_[h] = booster
            model.calibrators_[h] = calibrator
            model.best_rounds_[h] = rounds
    model.notes_ += guard_notes
    model.guard_ = guard
    return model


def guard_rows(
    model: Any, stored: StoredSample, head: pl.DataFrame, labelled: pl.DataFrame, until: datetime
) -> pl.DataFrame:
    """The labelled keys with the spike guard's columns (of those the sample's ``head`` has)
    read from the store (none: the keys)."""
    keys = labelled.select("unit_id", "ts", TIME_TO_FAILURE)
    columns = model.guarded(list(head.columns))
    if not columns:
        return keys
    values = stored.source.rows(None, until, ["unit_id", "ts", *columns], keys=stored.keys)
    return keys.join(values.select("unit_id", "ts", *columns), on=["unit_id", "ts"], how="left")


def growth_columns(model: Any, head: pl.DataFrame) -> list[str]:
    """The columns whose values set a rule's limit (the generic growth rules': a
    quantile over the sample), read for every row; the other rules need names only."""
    return [] if model.rules is None else model._baseline().growth_columns(head)
