"""Training aimed at the top of each day's list: query groups and fleet weights.

Operators act on the few units at the top of a day's list
(:mod:`foreshock.models.evaluation.top_of_list`).  Two settings of the gradient-boosted
model (``models/lightgbm.toml``) aim its training there:

* ``rank_by_snapshot``: every snapshot time is one LightGBM *query group*, so a ranking
  objective (``lambdarank``) learns the order of the units within a snapshot, the
  decision a daily list makes, instead of one probability for every row of every day;
* ``fleet_weighted``: each row counts as many times as its unit's ``fleet_weight`` (a
  subsampled fleet's inventory: a kept healthy drive standing for 20).  The trees are then
  trained on the fleet the top of the list is judged on, where the healthy units with bad
  counters, the negatives hardest to rank below the failing ones, are 20 times as many as
  in the kept sample;
* ``drop_constant``: the features empty or constant on the training rows are left out,
  so ``feature_fraction``'s draws pick among the features that can split.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from foreshock.budget import WEIGHT_COLUMN


def query_groups(ts: np.ndarray | None) -> np.ndarray | None:
    """Sizes of the runs of equal snapshot times of ``ts`` (rows sorted by time), the query
    groups LightGBM expects; None for None (no ranking objective)."""
    if ts is None:
        return None
    if ts.size == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])
    if starts.size > 1 and np.any(ts[starts[1:]] < ts[starts[:-1]]):
        raise ValueError("query groups need rows sorted by snapshot time")
    return np.diff(np.r_[starts, ts.size])


def unit_weight_of(frame: pl.DataFrame, unit_weights: pl.DataFrame | None) -> np.ndarray:
    """Each row's ``fleet_weight`` from ``unit_weights`` (``unit_id, fleet_weight``); 1 for a
    unit it does not list, or everywhere without it."""
    if unit_weights is None or WEIGHT_COLUMN not in unit_weights.columns:
        return np.ones(frame.height)
    weights = unit_weights.select(pl.col("unit_id").cast(pl.String), pl.col(WEIGHT_COLUMN).cast(pl.Float64))
    return (
        frame.select(pl.col("unit_id").cast(pl.String))
        .join(weights, on="unit_id", how="left", maintain_order="left")
        .get_column(WEIGHT_COLUMN)
        .fill_null(1.0)
        .to_numpy()
    )


def varying_columns(frame: pl.DataFrame, columns: list[str]) -> list[str]:
    """The ``columns`` of ``frame`` holding at least two distinct non-null values."""
    if not columns:
        return []
    spread = frame.select([(pl.col(c).max() != pl.col(c).min()).fill_null(False).alias(c) for c in columns]).row(0)
    return [c for c, varies in zip(columns, spread) if varies]
