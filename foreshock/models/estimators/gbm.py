"""Gradient-boosted risk: one LightGBM classifier per horizon on "fails within H".

Training on a cutoff uses only labels known at that cutoff, by the one rule of
:mod:`foreshock.models.estimators.training` (positives within the observed part of the horizon,
negatives weighted by the observed share).  Early stopping and calibration use a purged
holdout (:func:`foreshock.models.estimators.training.purged_holdout`): a block of time ending one
horizon before the cutoff, so its labels are fully observed, holding at least
``min_holdout_failures`` distinct failures, with an embargo of one horizon between the
rows the trees fit and the holdout.  LightGBM early-stops on it and a Platt calibrator is
fitted on the *raw margins* of its rows (never on rows the trees fitted).  With
``refit_full`` the trees are then refitted on every labelled row with the early-stopped
number of rounds (the newest weeks matter most on a short history) and keep the held-out
calibration.  Without enough held-out failures there is no early stopping and no
calibration: the risk is ``sigmoid(margin - log w)``, which only undoes the class weight,
keeps the ranking, and is recorded in ``notes_`` (and logged).

Class imbalance: positive rows are up-weighted by ``sqrt(negatives / positives)``
(bounded by ``max_pos_weight``), which keeps the gradient from ignoring the rare failures
without inverse-prevalence weights, which make trees overfit a few units and push every
probability to 1.0; optionally the hardest negatives gain weight too
(:mod:`foreshock.models.estimators.training_weights`).  The risk never decreases with the
horizon (:func:`foreshock.models.estimators.base.monotone_in_horizon`).

Domain knowledge as constraints: risk may only rise with error counts (``*_increase_*``,
``*_count_*``, pending remaps/retirements), LightGBM monotone constraints, so a few dozen
failures cannot teach the trees that more errors mean less risk.  Columns that only
describe the observation window (``*_hours_since_first_increase``: the first increase *seen
in the lake*) are left out.

With ``rules`` (the ``[baseline]`` settings), the threshold rules enter as features too:
each rule's log ratio to its threshold and the log severity (``rule_*``, monotone).  The
trees then start from what operators already know and learn where it is wrong, instead
of rediscovering "errors growing fast" from a few dozen failures.

Given a Dask cluster (``dask_client``; ``[runner] kind = "dask"`` through
:func:`foreshock.models.estimators.bundle.model_factories`) and a horizon with at least
``dask_min_rows`` rows, the fits run on its workers (:mod:`foreshock.models.estimators.gbm_dask`).
A training sample left in the feature store (:class:`~foreshock.models.estimators.dataset.StoredSample`,
what :func:`~foreshock.models.estimators.bundle.train_bundle` passes on Dask) is never read whole here:
the driver labels its keys, chooses the rows, class weights and purged holdout as above,
and the workers read their shares of the rows from the store and grow every fit (early
stopping included: rounds grown in stages with the held-out metric recorded until the
rule of :func:`lightgbm.early_stopping` has stopped, the round it keeps picked from the
curve, since lightgbm.dask cannot stop early); only the holdout's margins come back for
the calibrator.  A frame already in memory keeps early stopping and calibration here and
sends the full fit to the workers.

Explanations are LightGBM's own per-row contributions (``pred_contrib=True``, TreeSHAP),
in log-odds of the raw model.  LightGBM's plumbing (Dataset binning, margins in batches)
is :mod:`foreshock.models.estimators.boosting`; the stored-sample path on Dask is
:mod:`foreshock.models.estimators.gbm_store`.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import polars as pl

from foreshock.contract import TIME_TO_FAILURE
from foreshock.models.estimators.base import (
    RISK_SCHEMA,
    frame_feature_columns,
    horizon_hours,
    horizon_names,
    monotone_in_horizon,
    risk_frame,
    top_contributions,
)
from foreshock.models.estimators.baseline import ThresholdBaseline
from foreshock.models.estimators.boosting import (
    RefitBins,
    averaged,
    early_stopped,
    failure_ids,
    holdout_record,
    member_params,
    predict_rows,
    shifted_to_refit,
    split_datasets,
    truncate,
)
from foreshock.models.estimators.calibration import PlattCalibrator, uncalibrated
from foreshock.models.estimators.dataset import FeatureSource, StoredSample
from foreshock.models.estimators.gbm_dask import dask_client, feature_matrix_of, train_on_dask
from foreshock.models.estimators.gbm_store import fit_from_store
from foreshock.models.estimators.power_spread import spread_names
from foreshock.models.estimators.ranking import query_groups, varying_columns
from foreshock.models.estimators.recipes import builtin_recipe, recipe_default
from foreshock.models.estimators.spike_guard import SpikeGuard
from foreshock.models.estimators.temperature_rise import rise_names
from foreshock.models.estimators.training import Holdout, labelled_until, purged_holdout
from foreshock.models.estimators.training_weights import class_weights, horizon_targets
from foreshock.models.estimators.window_shares import share_names

logger = logging.getLogger(__name__)

# Every default of the model is in its recipe, models/lightgbm.toml (recipes.py); the
# built-in exclusions by name, for tests that add to them:
EXCLUDED_FEATURES = tuple(builtin_recipe("gbm")["exclude"])
# The settings a saved model keeps (gbm.json) and is built from again.
SETTINGS = (
    *("horizons", "params", "lightgbm", "num_boost_round", "early_stopping_rounds", "early_stopping_metric"),
    *("max_holdout_fraction", "max_pos_weight", "refit_full", "min_holdout_failures", "fallback_rounds"),
    *("min_rounds", "seed", "monotone_increasing", "exclude", "rules", "error_counters", "fleet_weighted"),
    *("rank_by_snapshot", "drop_constant", "tune_num_leaves", "hard_negative_weight", "hard_negative_window"),
    *("window_shares", "power_spread", "temperature_rise", "members", "spike_guard", "spike_guard_quiet"),
)


def _matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass
class GradientBoostedRisk:
    """LightGBM per horizon, early-stopped and calibrated on held-out time.

    Parameters
    ----------
    horizons
        Horizons, e.g. ``["24h", "72h"]``.
    params
        LightGBM parameters overriding ``lightgbm``.
    lightgbm
        The recipe's LightGBM parameters (``[lightgbm]`` of ``models/lightgbm.toml``);
        ``min_data_in_leaf`` is an upper bound (see :meth:`_params`).
    num_boost_round
        Maximum boosting rounds.
    early_stopping_rounds
        Rounds without improvement of ``early_stopping_metric`` on held-out time.
    early_stopping_metric
        LightGBM metric watched for early stopping.  The trees only have to rank (Platt
        scaling calibrates afterwards), so the default is ``average_precision``; the log
        loss would also punish the deliberate over-prediction of the up-weighted class.
    max_holdout_fraction
        The purged holdout spans at most this share of the labelled time.
    max_pos_weight
        Upper bound of the positive-class weight.
    refit_full
        Refit on the whole training span with the early-stopped number of rounds.
    min_holdout_failures
        Distinct failures (not rows) the purged holdout must hold; fewer: no early
        stopping (``fallback_rounds``) and no calibration (recorded in ``notes_``).
    fallback_rounds
        Boosting rounds without early stopping.
    min_rounds
        Fewest rounds kept after early stopping: the first rounds' held-out score on a few
        dozen failures is mostly noise, and a handful of trees ties most rows on a few
        risk values.
    seed
        LightGBM seed (bagging, feature sampling).
    monotone_increasing
        Feature-name patterns whose effect on risk is constrained to be non-decreasing.
    exclude
        Feature-name patterns not used.
    rules
        ``[baseline]`` settings: add the threshold rules as features (None: do not).
    error_counters
        Error-family counters of the catalog, for the rules' generic growth rule.
    fleet_weighted
        Weight each training row by its unit's ``fleet_weight`` (``unit_weights``): a
        subsampled fleet is trained on as the fleet it stands for, a kept healthy unit
        counting as the units it stands for (:mod:`foreshock.models.estimators.ranking`).
    rank_by_snapshot
        One LightGBM query group per snapshot time, for a ranking objective
        (``[lightgbm] objective = "lambdarank"``): the trees learn each snapshot's order of
        units, what the top of a day's list is judged on.  Fitted here only, never on Dask.
    drop_constant
        Leave out the features that are empty or constant on the training rows (the
        trees cannot split on them, but they dilute ``feature_fraction``'s draws).
    tune_num_leaves
        ``num_leaves`` values tried on the purged holdout (the one kept scores best on it,
        on time before the cutoff only); empty: the recipe's ``num_leaves``.
    hard_negative_weight, hard_negative_window
        Negatives of units failing 1 to ``hard_negative_window`` horizons later weigh this
        many times the positives in the trees' fit (0: off; :mod:`.training_weights`).
    window_shares
        Add each error counter's window shares, ``<m>_share_6h_1d`` = its 6-hour increase
        over its 1-day one (:mod:`.window_shares`): a burst from a trend in one split.
    power_spread
        Add ``power_w_spread_<w>``, the power's spread over the utilization's
        (:mod:`.power_spread`): a failing power supply from a changing load in one split.
    temperature_rise
        Add ``temp_residual_c_rise_<a>_<b>``, the temperature residual's last hours over a
        longer window's (:mod:`.temperature_rise`): a fast thermal drift in one split.
    members
        Boosters grown per horizon, member ``k`` drawing its bagged rows and sampled
        features from ``seed + k``; the model's margin is their mean (one booster:
        :func:`~foreshock.models.estimators.boosting.averaged`).  Each member early-stops on
        the purged holdout by itself, the Platt calibrator is fitted on the mean of their
        held-out margins, and each is refitted with its own rounds.  Averaging trees grown
        from different draws lowers the variance of which splits a few rare failures win.
        1: one booster (the model without members).  Fitted here only, never on Dask.
    spike_guard, spike_guard_quiet
        Feature-name patterns the spike guard watches beside the trees (read whether or not
        ``exclude`` leaves them out of the trees): a row above the most any unit that did not
        fail within ``spike_guard_quiet`` showed in training gets at least the risk the
        training rows above it had (:mod:`.spike_guard`).  Empty: no guard.
    unit_weights
        ``unit_id, fleet_weight`` (the inventory's, :func:`foreshock.budget.fleet_weights`)
        for ``fleet_weighted``; None: every unit counts 1.  A setting of this run (not saved).
    dask_client
        A Dask cluster (:mod:`foreshock.models.estimators.gbm_dask`): a ``distributed.Client``, a
        scheduler address or ``LocalCluster`` keyword arguments; None: every fit is local.
        A setting of this run, not of the model (not saved).
    dask_min_rows
        Fewest training rows of a horizon for its full fit to run on ``dask_client``; with
        a :class:`~foreshock.models.estimators.dataset.StoredSample`, once one horizon has that many
        rows every fit of every horizon runs there (the driver holds no feature matrix).
    """

    horizons: list[str]
    params: dict = field(default_factory=dict)
    lightgbm: dict = recipe_default("gbm", "lightgbm")
    num_boost_round: int = recipe_default("gbm", "num_boost_round")
    early_stopping_rounds: int = recipe_default("gbm", "early_stopping_rounds")
    early_stopping_metric: str = recipe_default("gbm", "early_stopping_metric")
    max_holdout_fraction: float = recipe_default("gbm", "max_holdout_fraction")
    max_pos_weight: float = recipe_default("gbm", "max_pos_weight")
    refit_full: bool = recipe_default("gbm", "refit_full")
    min_holdout_failures: int = recipe_default("gbm", "min_holdout_failures")
    fallback_rounds: int = recipe_default("gbm", "fallback_rounds")
    min_rounds: int = recipe_default("gbm", "min_rounds")
    seed: int = recipe_default("gbm", "seed")
    monotone_increasing: list[str] = recipe_default("gbm", "monotone_increasing")
    exclude: list[str] = recipe_default("gbm", "exclude")
    rules: dict | None = None
    error_counters: list[str] = field(default_factory=list)
    fleet_weighted: bool = recipe_default("gbm", "fleet_weighted")
    rank_by_snapshot: bool = recipe_default("gbm", "rank_by_snapshot")
    drop_constant: bool = recipe_default("gbm", "drop_constant")
    tune_num_leaves: list[int] = recipe_default("gbm", "tune_num_leaves")
    hard_negative_weight: float = recipe_default("gbm", "hard_negative_weight")
    hard_negative_window: float = recipe_default("gbm", "hard_negative_window")
    window_shares: bool = recipe_default("gbm", "window_shares")
    power_spread: bool = recipe_default("gbm", "power_spread")
    temperature_rise: bool = recipe_default("gbm", "temperature_rise")
    members: int = recipe_default("gbm", "members")
    spike_guard: list[str] = recipe_default("gbm", "spike_guard")
    spike_guard_quiet: str = recipe_default("gbm", "spike_guard_quiet")
    unit_weights: pl.DataFrame | None = None
    dask_client: Any = None
    dask_min_rows: int = 0
    kind: str = "gbm"
    rules_: ThresholdBaseline | None = None
    feature_names_: list[str] = field(default_factory=list)
    boosters_: dict[str, lgb.Booster] = field(default_factory=dict)
    calibrators_: dict[str, PlattCalibrator] = field(default_factory=dict)
    best_rounds_: dict[str, int] = field(default_factory=dict)
    notes_: list[str] = field(default_factory=list)
    holdouts_: dict[str, dict] = field(default_factory=dict)
    guard_: SpikeGuard = field(default_factory=SpikeGuard)

    def __post_init__(self) -> None:
        self.horizons = horizon_names(self.horizons)

    def _params(self, positive_rows: int) -> dict:
        """LightGBM parameters; a leaf needs at most 1/20 of the positive rows, so the
        high-risk region can still be split on a small (e.g. daily) data set instead of
        tying all its rows on one risk."""
        monotone = [int(_matches(n, self.monotone_increasing)) for n in self.feature_names_]
        leaf = int(np.clip(positive_rows // 20, 5, self.lightgbm["min_data_in_leaf"]))
        params = {**self.lightgbm, "min_data_in_leaf": leaf, **self.params, "seed": self.seed}
        if any(monotone):
            params.setdefault("monotone_constraints", monotone)
            params.setdefault("monotone_constraints_method", "intermediate")
        return params

    def fit(self, frame: pl.DataFrame, failures: pl.DataFrame, *, until: datetime | None = None) -> GradientBoostedRisk:
        """Fit one booster and one calibrator per horizon on labels known at ``until``.

        ``frame`` may carry ``sample_weight`` (healthy rows subsampled, weighted by the
        inverse rate: :mod:`foreshock.models.estimators.dataset`) and ``censored_at`` (drains).  It may
        also be a sample left in the feature store (:class:`StoredSample`): with a Dask
        cluster and ``dask_min_rows`` rows it is read by the workers only
        (:func:`~foreshock.models.estimators.gbm_store.fit_from_store`), otherwise it is read here and fitted as a frame.
        """
        if isinstance(frame, StoredSample):
            if until is None:
                until = frame.keys.get_column("ts").max()
            if self._on_dask(self.dask_min_rows) and isinstance(frame.source, FeatureSource):  # a cluster, no groups
                # labels, weights and the holdout come from the keys alone (a few bytes a row)
                labelled = labelled_until(frame.keys, failures, self.horizons, until, weighted=True)
                targets = self._targets(labelled)
                if self._on_dask(max(rows.size for rows, _, _ in targets.values())):
                    return fit_from_store(self, frame, labelled, targets, until)
                del labelled, targets
            frame = frame.frame()
        if until is None:
            until = frame.get_column("ts").max()
        labelled = labelled_until(frame, failures, self.horizons, until, weighted=True)
        if self.rank_by_snapshot:  # a query group is a run of rows of one snapshot time
            labelled = labelled.sort("ts", maintain_order=True)
        self._resolve_features(frame, frame)
        guard, guard_notes = self.fit_guard(labelled, until)
        x_all = self._matrix(labelled)
        ts_all = labelled.get_column("ts").to_numpy()
        failure_ttf = failure_ids(labelled), labelled.get_column(TIME_TO_FAILURE).to_numpy()
        targets = self._targets(labelled)
        del labelled
        self.boosters_, self.calibrators_, self.best_rounds_, self.notes_, self.holdouts_ = {}, {}, {}, [], {}
        # the full fits of horizons with at least dask_min_rows rows run on the Dask cluster
        use_dask = self._on_dask(max(rows.size for rows, _, _ in targets.values()))
        # Every horizon early-stops first, then every horizon is refitted: the refits of
        # horizons on the same rows share one binning (RefitBins) without holding it while
        # another horizon's early-stopping Datasets exist.  Notes keep the horizons' order.
        notes: dict[str, list[str]] = {h: [] for h in self.horizons}
        with dask_client(self.dask_client) if use_dask else nullcontext() as client:
            refits, bins = {}, RefitBins()
            for h in self.horizons:
                self.notes_ = notes[h]
                refits[h] = self._early_stop(h, targets.pop(h), x_all, ts_all, failure_ttf, until)
            for h in [h for h in self.horizons if refits[h] is not None]:
                self.notes_ = notes[h]
                self._refit(client, h, refits.pop(h), x_all, ts_all, bins)
            del bins
        self.notes_ = [note for h in self.horizons for note in notes[h]] + guard_notes
        self.guard_ = guard
        if self.dask_client is not None and self.members > 1:
            self.notes_.append(f"{self.members} members fitted in this process: averaged members never run on Dask")
            logger.warning("gbm %s", self.notes_[-1])
        return self

    def _early_stop(
        self, h: str, target: tuple, x_all: np.ndarray, ts_all: np.ndarray, failure_ttf: tuple, until: datetime
    ) -> dict | None:
        """Horizon ``h``'s early-stopped trees and held-out calibration (or the fixed round
        count without a holdout).  Returns what its refit on every row needs (:meth:`_refit`),
        or None when there is none (``refit_full`` off: the early-stopped trees are kept)."""
        rows, y, w = target
        pos_weight, class_w, params, split = self._horizon_setup(h, rows, y, w, ts_all, failure_ttf, until)
        refit = {"rows": rows, "y": y, "weight": w * class_w, "params": params, "margin": None}
        if split is None:
            refit["member_rounds"] = [self._without_holdout(h, pos_weight)] * self.members
            refit["calibrator"] = uncalibrated(np.log(pos_weight))
            return refit
        # The raw matrix is never copied whole: a horizon's rows are a view when every
        # row is labelled (no drain), the splits are subsets of binned data.
        x = x_all if rows.size == x_all.shape[0] else x_all[rows]
        ts = ts_all[rows] if self.rank_by_snapshot else None
        fit, hold = split.fit, split.holdout
        dtrain, dvalid = split_datasets(
            x, y, fit, hold, refit["weight"][fit], w[hold], params, self.feature_names_, self.seed
        )
        if ts is not None:
            dtrain.set_group(query_groups(ts[fit]))
            dvalid.set_group(query_groups(ts[hold]))
        hold_rows = np.flatnonzero(hold)
        boosters, member_rounds, margins = [], [], []
        for member in range(self.members):  # num_leaves is chosen by the first member, the others keep it
            booster, chosen = early_stopped(
                member_params(params, member), dtrain, dvalid, self.early_stopping_metric, self.num_boost_round,
                self.early_stopping_rounds, self.tune_num_leaves if member == 0 else None,
            )  # fmt: skip
            params = chosen if member == 0 else params
            rounds = max(booster.best_iteration or self.num_boost_round, self.min_rounds)
            margins.append(predict_rows(booster, x, hold_rows, num_iteration=rounds))
            boosters.append(booster)
            member_rounds.append(rounds)
        del dtrain, dvalid
        margin = np.mean(margins, axis=0)
        calibrator = PlattCalibrator(link="margin").fit(margin, y[hold], w[hold])
        self.holdouts_[h] = holdout_record(split)
        if self.tune_num_leaves:  # the value chosen on the holdout
            self.holdouts_[h]["num_leaves"] = int(params["num_leaves"])
        if self.members > 1:
            self.holdouts_[h]["member_rounds"] = member_rounds
        if not self.refit_full:
            self.boosters_[h], self.calibrators_[h], self.best_rounds_[h] = (
                averaged([truncate(b, r) for b, r in zip(boosters, member_rounds)]),
                calibrator,
                member_rounds[0],
            )
            return None
        refit.update(params=params, member_rounds=member_rounds, calibrator=calibrator, margin=margin)
        refit.update(hold_rows=hold_rows, hold_weight=w[hold])
        return refit

    def _refit(self, client: Any, h: str, refit: dict, x_all: np.ndarray, ts_all: np.ndarray, bins: RefitBins) -> None:
        """Horizon ``h``'s trees on every labelled row with the rounds of :meth:`_early_stop`
        (on the Dask cluster of ``client`` for ``dask_min_rows`` rows, else here on the
        binning ``bins`` keeps), the held-out calibration moved to them."""
        rows, y, weight, params, member_rounds = (refit[k] for k in ("rows", "y", "weight", "params", "member_rounds"))
        rounds = member_rounds[0]  # what the model records; Dask grows one member only
        x = x_all if rows.size == x_all.shape[0] else x_all[rows]
        if client is not None and y.size >= self.dask_min_rows:
            booster = train_on_dask(client, params, x, y, weight, rounds, self.feature_names_)
            self._note_dask_constraints(params, f"full fit on {y.size} rows")
        else:
            group = query_groups(ts_all[rows]) if self.rank_by_snapshot else None
            full = bins.dataset(x, y, weight, group, params, self.feature_names_, rows)
            booster = averaged(
                [lgb.train(member_params(params, k), full, num_boost_round=r) for k, r in enumerate(member_rounds)]
            )
        calibrator = refit["calibrator"]
        if refit["margin"] is not None:
            margin = predict_rows(booster, x, refit["hold_rows"])
            calibrator = shifted_to_refit(calibrator, refit["margin"], margin, refit["hold_weight"])
        self.boosters_[h], self.calibrators_[h], self.best_rounds_[h] = booster, calibrator, rounds

    def _horizon_setup(
        self,
        horizon: str,
        rows: np.ndarray,
        y: np.ndarray,
        w: np.ndarray,
        ts_all: np.ndarray,
        failure_ttf: tuple[np.ndarray, np.ndarray],
        until: datetime,
    ) -> tuple[float, np.ndarray, dict, Holdout | None]:
        """``(positive class weight, each row's class weight, LightGBM parameters, purged
        holdout or None)`` of a horizon's training rows (``rows`` of the labelled sample;
        ``failure_ttf``: every labelled row's failure id and hours to its known failure)."""
        failure_id, ttf = failure_ttf
        hard = (self.hard_negative_weight, self.hard_negative_window)
        pos_weight, class_w = class_weights(y, w, ttf[rows], horizon_hours(horizon), self.max_pos_weight, *hard)
        split = purged_holdout(
            ts_all[rows], y > 0, failure_id[rows], until, horizon, self.min_holdout_failures, self.max_holdout_fraction
        )
        return pos_weight, class_w, self._params(int(y.sum())), split

    def _without_holdout(self, horizon: str, pos_weight: float) -> int:
        """Records (and logs) that ``horizon`` has too few held-out failures to early-stop
        and calibrate on; returns the fixed round count used instead."""
        self.notes_.append(
            f"horizon {horizon}: fewer than {self.min_holdout_failures} failures in a purged holdout ending "
            f"{horizon} before the cutoff; fixed {self.fallback_rounds} rounds, risk left uncalibrated "
            f"(sigmoid of the margin less log {pos_weight:.2f}, ranking only)"
        )
        logger.warning("gbm %s", self.notes_[-1])
        return self.fallback_rounds

    def _on_dask(self, rows: int) -> bool:
        """Whether a sample whose largest horizon has ``rows`` rows is fitted on the Dask
        cluster: there is one, the sample has ``dask_min_rows`` rows, no query groups and one
        member (``rank_by_snapshot`` and ``members`` are fitted here only, on the store's
        samples as on frames)."""
        local = self.rank_by_snapshot or self.members > 1
        return self.dask_client is not None and rows >= self.dask_min_rows and not local

    def _resolve_features(self, names: pl.DataFrame, data: pl.DataFrame) -> None:
        """``feature_names_`` and ``rules_`` from the columns of ``names``; the rules whose
        limit is learnt from the data (the generic growth rules) read ``data``."""
        self.feature_names_ = [n for n in frame_feature_columns(names) if not _matches(n, self.exclude)]
        if self.drop_constant and data is names:  # the training rows are here (not on Dask)
            self.feature_names_ = varying_columns(data, self.feature_names_)
        if not self.feature_names_:
            raise ValueError("no numeric feature columns to train on")
        if self.window_shares:
            self.feature_names_ += share_names(self.feature_names_)
        if self.power_spread:
            self.feature_names_ += spread_names(self.feature_names_)
        if self.temperature_rise:
            self.feature_names_ += rise_names(self.feature_names_)
        self.rules_ = None
        if self.rules is not None:  # the growth rules' limits from their columns' values in data
            self.rules_ = self._baseline().resolve_on(names, data)
            self.feature_names_ += list(self.rules_.rule_features(names.head(1)))

    def guarded(self, columns: list[str]) -> list[str]:
        """The columns of ``columns`` the spike guard watches."""
        return [n for n in columns if _matches(n, self.spike_guard)]

    def fit_guard(self, labelled: pl.DataFrame, until: datetime) -> tuple[SpikeGuard, list[str]]:
        """The spike guard from labelled training rows that hold its columns."""
        names = self.guarded(frame_feature_columns(labelled))
        if not names:
            return SpikeGuard(), []
        return SpikeGuard.fit(labelled, names, self.horizons, until, self.spike_guard_quiet)

    def _baseline(self) -> ThresholdBaseline:
        return ThresholdBaseline(self.horizons, dict(self.rules), list(self.error_counters))

    def _targets(self, labelled: pl.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per horizon: the labelled rows it trains on, their labels and weights."""
        return horizon_targets(labelled, self.horizons, self.unit_weights if self.fleet_weighted else None)

    def _note_dask_constraints(self, params: dict, what: str) -> None:
        method = params.get("monotone_constraints_method", "basic")
        if method != "basic" and "monotone_constraints" in params:
            self.notes_.append(
                f"{what} grown on Dask: LightGBM's distributed learner has only "
                f"basic monotone constraints (this model asks for {method})"
            )
            logger.warning("gbm %s", self.notes_[-1])

    def _matrix(self, frame: pl.DataFrame) -> np.ndarray:
        """Feature matrix in ``feature_names_`` order (:func:`feature_matrix_of`)."""
        return feature_matrix_of(frame, self.feature_names_, self.rules_)

    def _check(self) -> None:
        if not self.boosters_:
            raise RuntimeError("GradientBoostedRisk is not fitted: call fit() or load()")

    def predict_raw(self, frame: pl.DataFrame, horizon: str) -> np.ndarray:
        """The uncalibrated booster probability for one horizon."""
        self._check()
        return self.boosters_[horizon].predict(self._matrix(frame))

    def predict_margin(self, frame: pl.DataFrame, horizon: str) -> np.ndarray:
        """The booster's raw margin (log-odds before its sigmoid) for one horizon."""
        self._check()
        return self.boosters_[horizon].predict(self._matrix(frame), raw_score=True)

    def predict_risk(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Calibrated risk per horizon, never lower for a longer horizon."""
        self._check()
        x = self._matrix(frame)
        risks = {h: self.calibrators_[h].predict(self.boosters_[h].predict(x, raw_score=True)) for h in self.horizons}
        risks = monotone_in_horizon(self.guard_.raise_risks(frame, risks))
        parts = [risk_frame(frame, h, risks[h]) for h in self.horizons]
        return pl.concat(parts) if parts else pl.DataFrame(schema=RISK_SCHEMA)

    def explain(self, frame: pl.DataFrame, top: int = 3) -> pl.DataFrame:
        """Top signals per row from ``pred_contrib`` (log-odds contributions, largest first);
        where the spike guard raised the risk, its feature is among them (:mod:`.spike_guard`)."""
        self._check()
        x = self._matrix(frame)
        parts = []
        for h in self.horizons:
            contrib = np.asarray(self.boosters_[h].predict(x, pred_contrib=True))
            parts.append(top_contributions(frame, h, self.feature_names_, x, contrib[:, :-1], top))  # last: bias
            if self.guard_.limits:  # a risk the spike guard raised names its feature first
                risk = self.calibrators_[h].predict(contrib.sum(axis=1))  # the contributions sum to the margin
                parts.append(self.guard_.explanations(frame, h, risk))
        out = pl.concat(parts)
        if len(parts) == len(self.horizons):
            return out
        keys = ["unit_id", "ts", "horizon"]
        return out.sort([*keys, "contribution"], descending=[False, False, False, True]).filter(
            pl.int_range(pl.len()).over(keys) < top
        )

    def feature_importance(self, horizon: str) -> dict[str, float]:
        """Total gain per feature for one horizon."""
        self._check()
        gain = self.boosters_[horizon].feature_importance(importance_type="gain")
        return dict(zip(self.feature_names_, map(float, gain)))

    def save(self, path: Path) -> None:
        """LightGBM's own model text per horizon plus a JSON of calibration and settings."""
        self._check()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        files = {}
        for h, booster in self.boosters_.items():
            name = f"booster_{h}.txt"
            booster.save_model(str(path / name))
            files[h] = name
        state = {
            "kind": self.kind,
            **{key: getattr(self, key) for key in SETTINGS},
            "rules_": self.rules_.state() if self.rules_ is not None else None,
            "feature_names_": self.feature_names_,
            "boosters_": files,
            "calibrators_": {h: c.to_dict() for h, c in self.calibrators_.items()},
            "best_rounds_": self.best_rounds_,
            "notes_": self.notes_,
            "holdouts_": self.holdouts_,
            "guard_": self.guard_.state(),
        }
        (path / "gbm.json").write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, path: Path) -> GradientBoostedRisk:
        path = Path(path)
        state = json.loads((path / "gbm.json").read_text())
        # a setting saved before it existed keeps the recipe's value (e.g. "lightgbm",
        # saved since the recipes: the built-in one's, unchanged since)
        settings = {key: state[key] for key in SETTINGS if key in state}
        model = cls(**settings)
        model.feature_names_ = state["feature_names_"]
        model.rules_ = ThresholdBaseline.from_state(state["rules_"]) if state["rules_"] else None
        model.boosters_ = {h: lgb.Booster(model_file=str(path / f)) for h, f in state["boosters_"].items()}
        model.calibrators_ = {h: PlattCalibrator.from_dict(c) for h, c in state["calibrators_"].items()}
        model.best_rounds_ = {h: int(r) for h, r in state["best_rounds_"].items()}
        model.notes_ = list(state["notes_"])
        model.holdouts_ = dict(state.get("holdouts_", {}))
        model.guard_ = SpikeGuard.from_state(state.get("guard_"))
        return model
