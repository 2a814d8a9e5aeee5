"""The training rows and weights of the gradient-boosted model, hardest negatives included.

Per horizon (:func:`horizon_targets`) the rows whose label is known at the cutoff train at
their label weight (the observed share of the horizon) times their sample weight (a
subsampled healthy row stands for the rows it was drawn from) times, with fleet weights,
their unit's ``fleet_weight``.  On top of that, the class weights of the trees' fit
(:func:`class_weights`): positive rows are up-weighted by ``sqrt(negatives / positives)``
within ``[1, max_pos_weight]`` (:func:`positive_weight`).

*Hard negatives* are the negative rows of units that do fail, but later than the label
horizon: more than one horizon and at most ``window`` horizons after the snapshot.  On
real disks they are what keeps the top of a day's list imprecise: the model picks the
right drives, but weeks before their failure, and a flag more than a horizon ahead counts
as false.  Yet they train at almost no weight: a row near a failure is always kept in the
training sample at weight 1 (:mod:`foreshock.models.estimators.dataset`), while a
subsampled healthy row stands for tens of rows.  With ``strength`` k > 0 their weights
are multiplied by one factor so that together they weigh k times the positives (after
the positives' class weight); a factor below 1 is never applied (they only gain weight).

Only failures known at the training cutoff count: ``time_to_failure_h`` comes from
:func:`foreshock.models.estimators.training.labelled_until`, which ignores failures not
detected by then, so a unit failing after the cutoff is a healthy unit here.  The factor
enters the weights the trees are grown on only; early stopping and calibration read the
held-out rows at their own weights, so the risk stays calibrated to the fleet.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from foreshock.contract import label_column, weight_column
from foreshock.models.estimators.base import sample_weights
from foreshock.models.estimators.ranking import unit_weight_of


def horizon_targets(
    labelled: pl.DataFrame, horizons: list[str], unit_weights: pl.DataFrame | None
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per horizon: ``(rows, labels, weights)`` of the labelled rows it trains on
    (``unit_weights``: ``unit_id, fleet_weight`` to weight by, None: every unit counts 1)."""
    sample = sample_weights(labelled)
    if unit_weights is not None:
        sample = sample * unit_weight_of(labelled, unit_weights)
    targets = {}
    for h in horizons:
        y_col = labelled.get_column(label_column(h))
        label_weight = labelled.get_column(weight_column(h)).cast(pl.Float64).to_numpy()
        rows = np.flatnonzero((label_weight > 0) & y_col.is_not_null().to_numpy())
        y = y_col.to_numpy()[rows].astype(np.float64)
        if y.sum() == 0:
            raise ValueError(f"horizon {h}: no failure among {y.size} labelled snapshots; cannot train")
        targets[h] = (rows, y, label_weight[rows] * sample[rows])
    return targets


def positive_weight(y: np.ndarray, w: np.ndarray, bound: float) -> float:
    """``sqrt(negatives / positives)`` by weight, within ``[1, bound]``: enough for the trees
    to see the rare failures, far from inverse prevalence (which pushes every margin up and
    ties probabilities at 1.0)."""
    pos = float(np.dot(w, y))
    neg = float(w.sum() - pos)
    return float(np.clip(np.sqrt(max(neg, 1.0) / max(pos, 1.0)), 1.0, bound))


def hard_negative_rows(y: np.ndarray, hours_to_failure: np.ndarray, horizon_h: float, window: float) -> np.ndarray:
    """Mask of the negatives whose unit's next known failure is more than one horizon
    (``horizon_h`` hours) and at most ``window`` horizons after the snapshot
    (``hours_to_failure``: NaN when no failure is known)."""
    ttf = np.nan_to_num(np.asarray(hours_to_failure, dtype=np.float64), nan=np.inf)
    return (np.asarray(y) == 0) & (ttf > horizon_h) & (ttf <= window * horizon_h)


def class_weights(
    y: np.ndarray,
    w: np.ndarray,
    hours_to_failure: np.ndarray,
    horizon_h: float,
    max_pos_weight: float,
    strength: float = 0.0,
    window: float = 2.0,
) -> tuple[float, np.ndarray]:
    """``(positive weight, each row's class weight)`` of a horizon's training rows.

    Parameters
    ----------
    y, w
        The rows' labels (1 = fails within the horizon) and weights (label and sample
        weights).
    hours_to_failure
        Hours from each snapshot to its unit's next failure known at the cutoff (NaN: none).
    horizon_h
        The label horizon in hours.
    max_pos_weight
        Upper bound of the positive weight.
    strength
        k: the hard negatives together weigh k times the weighted positives (0: no
        emphasis; they keep their weight when they already weigh more).
    window
        Hard negatives fail within this many horizons of the snapshot (beyond the first).
    """
    if strength < 0 or window <= 1:
        raise ValueError(f"hard negatives: weight {strength} must be >= 0 and window {window} > 1 (horizons)")
    pos_weight = positive_weight(y, w, max_pos_weight)
    class_w = np.where(y > 0, pos_weight, 1.0)
    if strength > 0:
        hard = hard_negative_rows(y, hours_to_failure, horizon_h, window)
        hard_total = float(w[hard].sum())
        if hard_total > 0:
            factor = strength * pos_weight * float(np.dot(w, y)) / hard_total
            class_w[hard] = max(factor, 1.0)
    return pos_weight, class_w
