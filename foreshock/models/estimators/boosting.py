"""LightGBM plumbing of the gradient-boosted model: Datasets binned once, margins in batches.

What :class:`~foreshock.models.estimators.gbm.GradientBoostedRisk` does with LightGBM
that is not the model's own decisions: the threads that bin a Dataset, the early-stopping
Datasets cut from one binning, margins of many rows without copying them, a booster cut to
its early-stopped rounds, and what both fit paths (a frame here, a stored sample on Dask:
:mod:`foreshock.models.estimators.gbm_store`) share about a horizon's purged holdout.
"""

from __future__ import annotations

import os
import re

import lightgbm as lgb
import numpy as np
import polars as pl

from foreshock.models.estimators.calibration import PlattCalibrator
from foreshock.models.estimators.training import Holdout

# Threads that bin the training matrix into a LightGBM Dataset (the trees still grow on
# ``num_threads``).  Binning is the same whatever the thread count (a feature's bins come
# from its own values; each row is binned alone), so the models are too; it is a third
# of a fit's CPU on a few hundred features.  The backtest's fold workers set it to 1: they
# already keep every core busy (:func:`set_dataset_threads`).
_dataset_threads = max(1, min(os.cpu_count() or 1, 4))


def set_dataset_threads(threads: int) -> None:
    """Threads binning LightGBM Datasets in this process (1 where processes run side by side)."""
    global _dataset_threads
    _dataset_threads = max(1, int(threads))


def binning(params: dict) -> dict:
    """``params`` for constructing a Dataset: the same bins with :data:`_dataset_threads` threads."""
    return {**params, "num_threads": _dataset_threads}


def split_datasets(
    x: np.ndarray,
    y: np.ndarray,
    fit: np.ndarray,
    hold: np.ndarray,
    fit_weight: np.ndarray,
    hold_weight: np.ndarray,
    params: dict,
    feature_names: list[str],
    seed: int,
) -> tuple[lgb.Dataset, lgb.Dataset]:
    """Early-stopping Datasets without copying the fit rows' raw features.

    The bins are those LightGBM would compute on the fit rows (from up to
    ``bin_construct_sample_cnt`` of them, its own sample size); every row is binned
    with them once, and the fit and holdout rows are subsets of those bins (the
    holdout is binned by the fit rows' bins, as with ``reference=``).  When the fit
    rows are the sample itself, the Dataset that found the bins already holds them
    binned: it is the fit Dataset, and only the holdout rows are binned again (the
    same bins, rows and order as the subset, one binning of the fit rows fewer)."""
    fit_rows = np.flatnonzero(fit)
    limit = int(params.get("bin_construct_sample_cnt", 200_000))
    if fit_rows.size > limit:
        sampled = np.sort(np.random.default_rng(seed).choice(fit_rows, limit, replace=False))
    else:
        sampled = fit_rows
    bins = lgb.Dataset(x[sampled], y[sampled], feature_name=feature_names, params=binning(params)).construct()
    if sampled is fit_rows:
        bins.set_weight(fit_weight)
        hold_rows = np.flatnonzero(hold)
        dvalid = lgb.Dataset(
            x[hold_rows],
            y[hold],
            weight=hold_weight,
            reference=bins,
            feature_name=feature_names,
            params=binning(params),
        ).construct()
        return bins, dvalid
    binned = lgb.Dataset(x, y, reference=bins, feature_name=feature_names, params=binning(params)).construct()
    del bins
    return subset(binned, fit_rows, y[fit], fit_weight), subset(binned, np.flatnonzero(hold), y[hold], hold_weight)


class RefitBins:
    """The binned Dataset of a refit on every row, kept for the next horizon's refit.

    Binning depends on the rows and the Dataset parameters only (never on labels or
    weights), so two horizons refitted on the same rows with the same LightGBM parameters
    (no drain censors either, and ``min_data_in_leaf``, which enters the binning through
    ``feature_pre_filter``, agrees) grow on one binning: the second gets its own labels
    and weights on it, and the same trees as from a binning of its own.  Otherwise the
    rows are binned again, as LightGBM would.  It holds one binned Dataset at a time."""

    def __init__(self) -> None:
        self._data: lgb.Dataset | None = None
        self._rows: np.ndarray | None = None
        self._params: dict | None = None

    def dataset(
        self,
        x: np.ndarray,
        y: np.ndarray,
        weight: np.ndarray,
        group: np.ndarray | None,
        params: dict,
        feature_names: list[str],
        rows: np.ndarray,
    ) -> lgb.Dataset:
        """The constructed Dataset of ``x`` (the labelled sample's ``rows``) with labels
        ``y`` and ``weight``: the kept one when its rows and parameters are these (query
        groups and all-one weights, which LightGBM leaves unset, are always binned anew)."""
        params = binning(params)
        if (
            self._data is not None
            and group is None
            and self._params == params
            and np.array_equal(self._rows, rows)
            and not np.all(weight == 1)
        ):
            self._data.set_label(y)
            self._data.set_weight(weight)
            return self._data
        self._data = None  # the previous binning is freed before the next is built
        self._data = lgb.Dataset(
            x, y, weight=weight, group=group, feature_name=feature_names, params=params, free_raw_data=True
        ).construct()
        self._rows, self._params = (rows, params) if group is None else (None, None)
        return self._data


def early_stopped(
    params: dict,
    dtrain: lgb.Dataset,
    dvalid: lgb.Dataset,
    metric: str,
    rounds: int,
    patience: int,
    num_leaves: list[int] | None = None,
) -> tuple[lgb.Booster, dict]:
    """The booster early-stopped on ``dvalid`` and its parameters; with ``num_leaves``, one
    fit per value and the one whose best held-out ``metric`` is highest (ties: the first).
    The holdout ends before the cutoff, so the choice sees no later time."""
    best: tuple[float, lgb.Booster, dict] | None = None
    for leaves in num_leaves or [params.get("num_leaves")]:
        trial = params if leaves is None else {**params, "num_leaves": int(leaves)}
        booster = lgb.train(
            {**trial, "metric": metric},
            dtrain,
            num_boost_round=rounds,
            valid_sets=[dvalid],
            callbacks=[lgb.early_stopping(patience, verbose=False)],
        )
        score = float(booster.best_score.get("valid_0", {}).get(metric, float("-inf")))
        if best is None or score > best[0]:
            best = (score, booster, trial)
    return best[1], best[2]


def member_params(params: dict, member: int) -> dict:
    """The LightGBM parameters of an averaged model's ``member``-th booster: member 0's are
    ``params`` (a model of one member is the model without members), member ``k``'s draw its
    rows and features (bagging, feature sampling) from ``seed + k``.  Binning never depends
    on the seed here, so every member grows on the same binned Dataset."""
    return params if member == 0 else {**params, "seed": int(params.get("seed", 0)) + member}


_TREE = re.compile(r"^Tree=\d+\n", re.MULTILINE)
_SCALED = ("leaf_value=", "internal_value=")


def averaged(boosters: list[lgb.Booster]) -> lgb.Booster:
    """One booster whose margin is the mean of ``boosters``' margins (one booster: itself).

    A booster's margin is the sum of its trees' leaf values, so the trees of every member
    with their leaf values divided by the number of members sum to the mean margin; each
    tree's TreeSHAP contributions scale with its leaf values, so explanations are the
    members' mean too.  Built from LightGBM's own model text (the header and parameters of
    the first member; the per-tree byte sizes left out, LightGBM then reads the trees one
    after another): what is saved, loaded, logged and explained is one ordinary booster."""
    if len(boosters) == 1:
        return boosters[0]
    scale = 1.0 / len(boosters)
    head, tail, trees = "", "", []
    for booster in boosters:
        text = booster.model_to_string()
        if booster.num_model_per_iteration() != 1 or "\nis_linear=1\n" in text:
            raise ValueError("only boosters of one tree per round without linear leaves can be averaged")
        start, end = _TREE.search(text).start(), text.index("end of trees")
        if not head:
            head = "\n".join(line for line in text[:start].split("\n") if not line.startswith("tree_sizes="))
            tail = text[end:]
        trees += [block for block in _TREE.split(text[start:end]) if block.strip()]
    body = []
    for i, block in enumerate(trees):
        lines = [
            line.split("=", 1)[0] + "=" + " ".join(repr(float(v) * scale) for v in line.split("=", 1)[1].split())
            if line.startswith(_SCALED)
            else line
            for line in block.split("\n")
        ]
        body.append(f"Tree={i}\n" + "\n".join(lines))
    return lgb.Booster(model_str=head + "".join(body) + tail)


def subset(binned: lgb.Dataset, rows: np.ndarray, label: np.ndarray, weight: np.ndarray) -> lgb.Dataset:
    """Rows of the fold's binned Dataset with their own labels and weights."""
    part = binned.subset(rows.tolist()).construct()
    part.set_label(label)
    part.set_weight(weight)
    return part


def predict_rows(
    booster: lgb.Booster, x: np.ndarray, rows: np.ndarray, *, num_iteration: int | None = None, batch: int = 100_000
) -> np.ndarray:
    """Raw margins of ``x[rows]``, gathered a batch at a time (no copy of all the rows)."""
    out = [
        booster.predict(x[rows[i : i + batch]], num_iteration=num_iteration, raw_score=True)
        for i in range(0, rows.size, batch)
    ]
    return np.concatenate(out) if out else np.zeros(0)


def truncate(booster: lgb.Booster, rounds: int) -> lgb.Booster:
    """A booster holding only its first ``rounds`` trees (so saving keeps what predicts)."""
    return lgb.Booster(model_str=booster.model_to_string(num_iteration=rounds))


def failure_ids(labelled: pl.DataFrame) -> np.ndarray:
    """Per row, the failure it may precede (``unit#life``): the holdout counts distinct ones."""
    return labelled.select(pl.format("{}#{}", "unit_id", "life")).to_series().to_numpy()


def shifted_to_refit(
    calibrator: PlattCalibrator, margin: np.ndarray, refit_margin: np.ndarray, weight: np.ndarray
) -> PlattCalibrator:
    """The holdout's calibrator for the trees refitted on every row.  Those start from
    another average (LightGBM boosts from the weighted base rate of its rows): the intercept
    moves so that they predict the same mean risk over the holdout (``refit_margin``) as the
    calibrated early-stopped trees did (``margin``)."""
    target = float(np.average(calibrator.predict(margin), weights=weight))
    return calibrator.shifted_to_mean(refit_margin, target, weight)


def holdout_record(split: Holdout) -> dict:
    """What the model records of a horizon's purged holdout (``holdouts_``)."""
    return {
        "start": split.start.isoformat(),
        "end": split.end.isoformat(),
        "failures": split.failures,
        "rows": int(split.holdout.sum()),
        "fit_rows": int(split.fit.sum()),
    }
