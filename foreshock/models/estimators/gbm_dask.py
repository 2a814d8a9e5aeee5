"""Boosting on Dask workers with ``lightgbm.dask``, for training samples past one machine.

:class:`~foreshock.models.estimators.gbm.GradientBoostedRisk` trains here when it is given a Dask
cluster and a horizon's training rows reach ``dask_min_rows``, in one of two ways:

* a training sample left in the feature store (``StoredSample``): the driver keeps the
  keys, labels, weights and the purged holdout and nothing else; :class:`StoreParts` has
  each worker build its share of the feature matrix from the store's files (tasks take the
  files and row positions, not frames); :func:`grow_from_store` grows the early-stopping
  fit in stages until the early-stopping rule stops on the held-out curve, which the
  worker holding the holdout computes (lightgbm.dask has no early stopping of its own);
  that worker predicts the holdout's margins for the Platt calibrator, and the refit is
  grown the same way.  The driver's memory stays that of the keys;
* a frame in memory (:func:`train_on_dask`): early stopping and calibration run on the
  driver, and only the full fit goes to the workers, every n-th row of the driver's matrix
  scattered to each.

LightGBM's data-parallel learner (``tree_learner = "data"``) takes the bins of each feature
from one worker's rows and sums the split histograms over the network; the trees differ
slightly from a single-machine fit (other bin edges, other floating-point sums, each
worker's own bagging), the ranking of units does not (``tests/models/test_gbm_dask.py``).

Boosters come back to the driver as model text (a plain :class:`lightgbm.Booster`), so
prediction, calibration and the bundle are the same as for a local fit.  ``distributed``
comes with the ``dask`` extra; nothing is imported from it unless a cluster is used.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import lightgbm as lgb
import numpy as np
import polars as pl

from foreshock.models.estimators.power_spread import spread_columns
from foreshock.models.estimators.temperature_rise import rise_columns
from foreshock.models.estimators.window_shares import share_columns

if TYPE_CHECKING:
    from distributed import Client

    from foreshock.models.estimators.baseline import ThresholdBaseline
    from foreshock.models.estimators.dataset import FeatureSource

logger = logging.getLogger(__name__)

# set by lightgbm.dask itself from the workers (threads per worker, the workers holding data)
_WORKER_SET = ("num_threads", "num_machines", "machines", "local_listen_port")


@contextmanager
def dask_client(target: Client | str | dict) -> Iterator[Client]:
    """A client of the cluster ``target`` names: a ``distributed.Client`` (used as is,
    left open), a scheduler address (``tcp://host:8786``, connected and closed here) or
    ``LocalCluster`` keyword arguments (a cluster started and stopped here)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ValueError("training on Dask needs the dask extra: uv sync --extra dask") from None
    if isinstance(target, Client):
        yield target
        return
    if isinstance(target, str):
        with Client(target) as client:
            yield client
        return
    with LocalCluster(**target) as cluster, Client(cluster) as client:
        yield client


def dask_target(runner: dict) -> str | dict:
    """The cluster of a ``[runner]`` section for :func:`dask_client`: its ``dask_address``,
    or a ``LocalCluster`` of ``local_workers`` single-threaded processes when it is empty."""
    if runner["dask_address"]:
        return str(runner["dask_address"])
    return {"n_workers": int(runner["local_workers"]), "threads_per_worker": 1, "processes": True}


def _classifier(client: Client, params: dict, rounds: int):
    """A ``DaskLGBMClassifier`` of ``rounds`` rounds with the local fit's LightGBM parameters
    (less those lightgbm.dask sets from the workers)."""
    from lightgbm.dask import DaskLGBMClassifier

    settings = {k: v for k, v in params.items() if k not in _WORKER_SET and k != "seed"}
    ordered = _InWorkerOrder(client)
    return DaskLGBMClassifier(client=ordered, n_estimators=rounds, random_state=params["seed"], **settings)


class _InWorkerOrder:
    """``client`` as lightgbm.dask sees it, with the data parts listed in worker order.

    lightgbm.dask numbers the workers (LightGBM's machine ranks) in the order
    ``client.who_has`` lists their data parts, which follows a set of the parts' random
    keys: any order, from one fit to the next.  The rank decides which worker's rows
    find the bins of which features, so with the rows of share k on worker k
    (:func:`train_on_dask`, :meth:`StoreParts.spread`) the same sample gave one of two
    models by chance.  Listed by the workers' sorted addresses, rank k is worker k and
    holds share k: the same cluster and sample grow the same trees."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._rank = {worker: k for k, worker in enumerate(_workers(client))}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def who_has(self, futures=None, **kwargs) -> dict:
        held = self._client.who_has(futures, **kwargs)
        last = len(self._rank)
        return dict(sorted(held.items(), key=lambda item: self._rank.get(next(iter(item[1]), None), last)))


def _fit(model, *args, **kwargs) -> None:
    with warnings.catch_warnings():  # threads per worker are the workers' own: that is the point
        warnings.filterwarnings("ignore", message="Parameter n_jobs will be ignored")
        model.fit(*args, **kwargs)


# How long a cluster whose workers are (re)starting gets to have one before a fit gives up.
WORKER_WAIT_S = 60


def _workers(client: Client) -> list[str]:
    """The cluster's workers, sorted by address; a cluster with none at the moment (its
    nannies restarting them) is given :data:`WORKER_WAIT_S` seconds to have one again."""
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        with suppress(TimeoutError):
            client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise ValueError(f"the Dask cluster has no workers (waited {WORKER_WAIT_S} s for one)")
    return workers


def _scatter_to(client: Client, worker: str, values: np.ndarray) -> tuple[Any, tuple, np.dtype]:
    """``values`` sent to ``worker``: ``(future, shape, dtype)``, a block for :func:`_stack`.

    Under a key of its own (``hash=False``): scattered under the hash of its content, the
    same block sent again right after a fit (the same matrix for the next horizon) took the
    key the last fit's futures were releasing, and the scheduler dropped it under the new
    fit ("lost dependencies")."""
    block = np.ascontiguousarray(values)
    return client.scatter(block, workers=[worker], direct=True, hash=False), block.shape, block.dtype


def _stack(blocks: list[tuple[Any, tuple, np.dtype]]):
    """One Dask array of ``(future, shape, dtype)`` blocks, in order."""
    import dask.array as da

    return da.concatenate([da.from_delayed(f, shape=shape, dtype=dtype) for f, shape, dtype in blocks])


def train_on_dask(
    client: Client,
    params: dict,
    x: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray,
    rounds: int,
    feature_names: list[str],
) -> lgb.Booster:
    """``rounds`` boosting rounds of a binary classifier on ``x`` split across the workers
    of ``client`` (every n-th row to each of the n workers, scattered to it), with the same
    LightGBM parameters as a local :func:`lightgbm.train`; returns the booster.

    The matrix is the driver's (a training frame in memory); :class:`StoreParts` builds it
    on the workers instead."""
    workers = _workers(client)
    # Every n-th row to each worker: LightGBM finds the bins of a feature on one worker's
    # rows, so each worker's rows must look like the whole sample (the frame is sorted by
    # unit: contiguous blocks would bin on half of the units).
    shares = min(len(workers), x.shape[0])
    parts: dict[str, list] = {"x": [], "y": [], "w": []}
    for k, worker in enumerate(workers[:shares]):
        for key, values in (("x", x), ("y", y), ("w", weight)):
            parts[key].append(_scatter_to(client, worker, values[k::shares]))
    model = _classifier(client, params, rounds)
    _fit(
        model,
        _stack(parts["x"]),
        _stack(parts["y"]),
        sample_weight=_stack(parts["w"]),
        feature_name=list(feature_names),
    )
    logger.info("gbm: %d rounds on %d rows across %d Dask workers", rounds, x.shape[0], shares)
    # a driver-side booster from the model text (no client, no network settings)
    return lgb.Booster(model_str=model.booster_.model_to_string())


# Metrics LightGBM maximises (the others it minimises), for the early-stopping rule.
_HIGHER_IS_BETTER = ("auc", "average_precision", "map", "ndcg", "auc_mu")


def early_stopped_round(scores: list[float], patience: int, metric: str) -> int:
    """The round (1-based) ``lightgbm.early_stopping(patience)`` keeps for this per-round
    held-out ``metric`` curve: the best score so far (strictly better replaces it), stopping
    once ``patience`` rounds pass without one; the best round of the whole curve when that
    never happens."""
    return _patience(scores, patience, metric)[0]


def _patience(scores: list[float], patience: int, metric: str) -> tuple[int, bool]:
    """:func:`early_stopped_round`, and whether the curve already stopped."""
    higher = metric.split("@")[0] in _HIGHER_IS_BETTER
    best, best_round = None, 0
    for i, score in enumerate(scores):
        if best is None or (score > best if higher else score < best):
            best, best_round = score, i
        elif i - best_round >= patience:
            return best_round + 1, True
    return best_round + 1, False


# Features computed from their names at fitting and scoring (the recipe's window_shares,
# power_spread and temperature_rise): the mark in a name, and what computes those columns.
_DERIVED = (("_share_", share_columns), ("_spread_", spread_columns), ("_rise_", rise_columns))


def feature_matrix_of(frame: pl.DataFrame, names: list[str], rules: ThresholdBaseline | None) -> np.ndarray:
    """Feature matrix of ``names`` (Float32, row-major as LightGBM reads it, filled one
    column at a time: no second copy), the ``rules``' features computed on the fly; also
    what a Dask worker builds from its share of the feature store."""
    derived = rules.rule_features(frame) if rules is not None else {}
    for mark, columns_of in _DERIVED:
        derived.update(columns_of(frame, [n for n in names if mark in n and n not in frame.columns]))
    columns = [
        pl.Series(name, derived[name]).cast(pl.Float32)
        if name in derived
        else frame.get_column(name).cast(pl.Float32)
        if name in frame.columns
        else pl.Series(name, np.full(frame.height, np.nan, dtype=np.float32))  # a metric no longer reported
        for name in names
    ]
    if not columns:
        return np.empty((frame.height, 0), dtype=np.float32)
    # Polars writes the row-major matrix itself (numpy filling it a column at a time
    # strides through memory); nulls become NaN
    return pl.DataFrame(columns).to_numpy(order="c")


def _read_part(
    source: FeatureSource,
    keys: pl.DataFrame,
    rows: np.ndarray,
    columns: list[str],
    until: datetime,
    feature_names: list[str],
    rules: ThresholdBaseline | None,
) -> np.ndarray:
    """On a worker: the feature matrix of ``keys[rows]`` read from the store's files."""
    wanted = keys.select(pl.all().gather(rows))
    frame = source.rows(None, until, columns, keys=wanted)
    if frame.height != wanted.height or not frame.select("unit_id", "ts").equals(wanted):
        raise ValueError(f"feature store: {frame.height} rows read for {wanted.height} keys (store changed?)")
    return feature_matrix_of(frame, feature_names, rules)


def _margins(model_text: str, x: np.ndarray, num_iteration: int | None) -> np.ndarray:
    """On a worker: raw margins of ``x`` by the booster of ``model_text``."""
    return lgb.Booster(model_str=model_text).predict(x, num_iteration=num_iteration, raw_score=True)


def average_precision(score: np.ndarray, y: np.ndarray, weight: np.ndarray) -> float:
    """Weighted average precision as LightGBM's ``average_precision`` metric computes it:
    rows by descending score, tied scores taken together, the precision at each distinct
    score weighted by the positives it adds; 1 when every row or no row is positive."""
    order = np.argsort(-score, kind="stable")
    s, w = score[order], weight[order]
    positive = np.where(y[order] > 0, w, 0.0)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    pos, rows = np.cumsum(np.add.reduceat(positive, starts)), np.cumsum(np.add.reduceat(w, starts))
    total = pos[-1] if pos.size else 0.0
    if total <= 0 or total == rows[-1]:
        return 1.0
    return float(np.sum(np.diff(pos, prepend=0.0) * (pos / rows)) / total)


# Held-out metrics computed here, round by round, without lightgbm.dask's eval sets.
_CURVES = {"average_precision": average_precision}


def _held_out_curve(
    model_text: str, x: np.ndarray, y: np.ndarray, weight: np.ndarray, start: int, rounds: int, metric: str
) -> list[float]:
    """On the worker holding the holdout: ``metric`` after each of rounds ``start + 1`` ..
    ``start + rounds``, the margins grown one tree at a time (as LightGBM's own score
    updater does for a validation set)."""
    booster = lgb.Booster(model_str=model_text)
    weight = np.asarray(weight, dtype=np.float32).astype(np.float64)  # LightGBM keeps weights as float32
    margin = booster.predict(x, num_iteration=start, raw_score=True) if start else np.zeros(x.shape[0])
    out = []
    for r in range(start, start + rounds):
        margin = margin + booster.predict(x, start_iteration=r, num_iteration=1, raw_score=True)
        out.append(_CURVES[metric](margin, y, weight))
    return out


@dataclass
class StoreParts:
    """The training sample's feature matrix, built by the workers from the feature store.

    The driver holds the sample's keys only (``unit_id, ts`` in its row order: a few bytes
    a row), sent once to every worker.  A part is a task on one worker that takes the
    store's files and a row selection (positions in ``keys``), reads those rows' features
    day by day (:meth:`~foreshock.models.estimators.dataset.FeatureSource.rows`) and returns their
    matrix (Float32, ``feature_names`` order, the rule features computed there): no
    feature frame or matrix travels through the driver.  The workers must see the store's
    paths (a shared file system, as for the lake) and have ``foreshock`` installed.
    """

    client: Client
    source: FeatureSource
    keys: pl.DataFrame
    columns: list[str]
    until: datetime
    feature_names: list[str]
    rules: ThresholdBaseline | None = None
    workers: list[str] = field(init=False)
    _keys: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.workers = _workers(self.client)
        self._keys = self.client.scatter(self.keys.select("unit_id", "ts"), broadcast=True, hash=False)

    def read(self, rows: np.ndarray, worker: str) -> tuple[Any, tuple, np.dtype]:
        """A future of the matrix of ``rows`` built on ``worker``, with its shape and dtype."""
        future = self.client.submit(
            _read_part,
            self.source,
            self._keys,
            np.ascontiguousarray(rows),
            self.columns,
            self.until,
            self.feature_names,
            self.rules,
            workers=[worker],
            allow_other_workers=False,
            pure=False,
        )
        return future, (rows.size, len(self.feature_names)), np.dtype(np.float32)

    def spread(self, rows: np.ndarray, *vectors: np.ndarray) -> tuple[Any, ...]:
        """Dask arrays of ``rows``' matrix and of each per-row vector, every n-th row on each
        of the n workers."""
        # Every n-th row to each worker: LightGBM finds the bins of a feature on one worker's
        # rows, so each worker's rows must look like the whole sample (the rows are sorted by
        # unit: contiguous blocks would bin on half of the units).
        shares = max(min(len(self.workers), rows.size), 1)
        x, vs = self._place(
            [(worker, slice(k, None, shares)) for k, worker in enumerate(self.workers[:shares])], rows, vectors
        )
        return (_stack(x), *(_stack(v) for v in vs))

    def _place(self, places: list[tuple[str, slice]], rows: np.ndarray, vectors: tuple[np.ndarray, ...]):
        """For each ``(worker, rows taken)``: the matrix of those rows built there and each
        vector's same rows sent there, as blocks (``(future, shape, dtype)``)."""
        x, vs = [], [[] for _ in vectors]
        for worker, take in places:
            x.append(self.read(rows[take], worker))
            for out, values in zip(vs, vectors, strict=True):
                out.append(_scatter_to(self.client, worker, values[take]))
        return x, vs

    def holdout(self, rows: np.ndarray, y: np.ndarray, weight: np.ndarray) -> HeldOut:
        """The held-out rows on one worker: their matrix (built there), labels and weights."""
        worker = self.workers[0]
        x = self.read(rows, worker)
        y_f, w_f = (_scatter_to(self.client, worker, v)[0] for v in (y, weight))
        return HeldOut(x, y_f, w_f, worker, rows, y, weight)

    def everywhere(self, rows: np.ndarray, *vectors: np.ndarray) -> tuple[Any, ...]:
        """Like :meth:`spread`, but all of ``rows`` on every worker (block k on worker k):
        the held-out rows as lightgbm.dask's eval sets need them, so that each worker
        scores the same holdout (:func:`grow_from_store`, a metric not in :data:`_CURVES`)."""
        x, vs = self._place([(worker, slice(None)) for worker in self.workers], rows, vectors)
        return (x, *vs)

    def margins(self, booster: lgb.Booster, part: tuple[Any, tuple, np.dtype], num_iteration: int | None = None):
        """Raw margins of a part, predicted on the worker holding it; only they come back."""
        text = booster.model_to_string()
        return np.asarray(self.client.submit(_margins, text, part[0], num_iteration, pure=False).result())


@dataclass
class HeldOut:
    """The holdout on one worker (:meth:`StoreParts.holdout`): futures of its matrix part
    (with shape and dtype), labels and weights; its rows, labels and weights as the driver
    has them."""

    x: tuple[Any, tuple, np.dtype]
    y: Any
    weight: Any
    worker: str
    rows: np.ndarray
    labels: np.ndarray
    weights: np.ndarray


@dataclass
class Grown:
    """What :func:`grow_from_store` returns: the booster and, with a holdout, its curve."""

    booster: lgb.Booster
    scores: list[float] = field(default_factory=list)


def grow_from_store(
    parts: StoreParts,
    params: dict,
    rows: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray,
    rounds: int,
    holdout: HeldOut | None = None,
    patience: int | None = None,
) -> Grown:
    """Up to ``rounds`` rounds on ``rows`` (positions in ``parts.keys``), their matrix built
    on the workers once; with ``holdout``, the held-out ``params["metric"]`` of every round.

    lightgbm.dask has no early stopping (LightGBM issues #3712, #4189, #4493: each worker
    would decide alone, and one stopping early leaves the others waiting for it), so the
    rounds are grown in stages of ``2 x patience`` rounds, each continuing the booster of
    the last (``init_model``; the bagging seed moves on by one per stage, so stages do not
    repeat each other's bags), until :func:`early_stopped_round`'s rule has stopped on the
    curve so far or ``rounds`` are grown; the caller picks the round from the curve.

    The curve is computed on the worker holding the holdout, one tree at a time
    (:func:`_held_out_curve`, LightGBM's definition of the metric), not by lightgbm.dask's
    eval sets: with those, ``fit`` fetches a data part of every worker to the client to
    check that it holds eval rows, which would bring a share of the matrix to the driver
    after all.  For a metric not computed here (:data:`_CURVES`), the eval sets are used
    anyway, with the whole holdout on every worker (LightGBM reports the metric of the eval
    rows of the worker that returns the model), and the driver briefly holds those parts.
    """
    x, y_d, w_d = parts.spread(rows, y, weight)  # one read of the store, for every stage
    metric = str(params.get("metric", ""))
    kwargs: dict[str, Any] = {}
    if holdout is not None and metric not in _CURVES:
        logger.warning("gbm: held-out %s on Dask through lightgbm.dask's eval sets (see grow_from_store)", metric)
        hx, hy, hw = parts.everywhere(holdout.rows, holdout.labels, holdout.weights)
        kwargs = {"eval_X": (_stack(hx),), "eval_y": (_stack(hy),), "eval_sample_weight": [_stack(hw)]}
        kwargs["eval_names"] = ["holdout"]
    stage = rounds if holdout is None or not patience else 2 * patience
    booster, scores, grown = None, [], 0
    while grown < rounds:
        n = min(stage, rounds - grown)
        model = _classifier(parts.client, {**params, "seed": params["seed"] + grown // stage}, n)
        more = {"init_model": booster} if booster is not None else {}
        _fit(model, x, y_d, sample_weight=w_d, feature_name=list(parts.feature_names), **kwargs, **more)
        booster = model.booster_
        if holdout is not None and kwargs:
            scores += list(model.evals_result_["holdout"][metric])
        elif holdout is not None:
            text = booster.model_to_string()
            curve = parts.client.submit(
                _held_out_curve,
                text,
                holdout.x[0],
                holdout.y,
                holdout.weight,
                grown,
                n,
                metric,
                workers=[holdout.worker],
                pure=False,
            )
            scores += curve.result()
        grown += n
        if holdout is not None and patience and _patience(scores, patience, metric)[1]:
            break
    logger.info("gbm: %d rounds on %d rows built on %d Dask workers", grown, rows.size, len(parts.workers))
    return Grown(lgb.Booster(model_str=booster.model_to_string()), scores)
