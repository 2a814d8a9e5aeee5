"""Boosting on Dask workers with ``lightgbm.dask``, for training samples past one machine.

:class:`~foreshock.models.gbm.GradientBoostedRisk` hands the *full* fits here (the refit on
every labelled row after early stopping, or the fixed-round fit without a holdout) when it
is given a Dask cluster and the horizon's training rows reach ``dask_min_rows``.  Early
stopping and calibration stay on the driver: the round count and the Platt calibrator come
from the purged holdout exactly as in the local path, so the only thing that changes with
the runner is where the trees of the final fit are grown.  LightGBM's data-parallel
learner (``tree_learner = "data"``) gives each worker every n-th row, takes the bins of
each feature from one worker's rows and sums the split histograms over the network; the
trees differ slightly from a single-machine fit (other bin edges, other floating-point
sums), the ranking of units does not (``tests/models/test_gbm_dask.py``).

The result is a plain :class:`lightgbm.Booster` rebuilt from its model text on the
driver, so prediction, calibration and the bundle (LightGBM's model text) are the same as
for a local fit.  ``distributed`` comes with the ``dask`` extra; nothing is imported from
it unless a cluster is used.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import lightgbm as lgb
import numpy as np

if TYPE_CHECKING:
    from distributed import Client

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
    LightGBM parameters as a local :func:`lightgbm.train`; returns the booster."""
    import dask.array as da
    from lightgbm.dask import DaskLGBMClassifier

    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise ValueError("the Dask cluster has no workers")
    # Every n-th row to each worker: LightGBM finds the bins of a feature on one worker's
    # rows, so each worker's rows must look like the whole sample (the frame is sorted by
    # unit: contiguous blocks would bin on half of the units).
    shares = min(len(workers), x.shape[0])
    parts: dict[str, list] = {"x": [], "y": [], "w": []}
    for k, worker in enumerate(workers[:shares]):
        for key, values in (("x", x), ("y", y), ("w", weight)):
            block = np.ascontiguousarray(values[k::shares])
            future = client.scatter(block, workers=[worker], direct=True)
            parts[key].append(da.from_delayed(future, shape=block.shape, dtype=block.dtype))
    settings = {k: v for k, v in params.items() if k not in _WORKER_SET and k != "seed"}
    model = DaskLGBMClassifier(client=client, n_estimators=rounds, random_state=params["seed"], **settings)
    with warnings.catch_warnings():  # threads per worker are the workers' own: that is the point
        warnings.filterwarnings("ignore", message="Parameter n_jobs will be ignored")
        model.fit(
            da.concatenate(parts["x"]),
            da.concatenate(parts["y"]),
            sample_weight=da.concatenate(parts["w"]),
            feature_name=list(feature_names),
        )
    logger.info("gbm: %d rounds on %d rows across %d Dask workers", rounds, x.shape[0], shares)
    # a driver-side booster from the model text (no client, no network settings)
    return lgb.Booster(model_str=model.booster_.model_to_string())
