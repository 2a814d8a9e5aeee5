"""A small synthetic fleet for the registry and review tests (and a check of its premise).

Units are snapshotted every 2 hours for a few weeks; a third of them fail.  Before a
failure one feature rises (the *precursor*): correctable-error growth in the usual fleet,
temperature drift in the "misleading" fleet, where the error counter is noise.  A model
trained on the misleading fleet has learnt the wrong signal, which is what a review must
catch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from foreshock.config import Config, load_config
from foreshock.contract import UTC_TS

START = datetime(2026, 1, 1, tzinfo=UTC)
SBE = "ecc_sbe_volatile_increase_24h"
TEMP = "gpu_temp_drift_c_24h"
RAMP_H = 96.0  # the precursor builds up over the last 4 days of a unit's life


def synthetic_fleet(
    seed: int,
    units: int = 24,
    days: int = 15,
    failing: int = 9,
    precursor: str = SBE,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Feature snapshots and failures of a fleet whose failures announce themselves.

    Returns
    -------
    tuple
        ``features`` (``unit_id, ts, node, rack, model, lot, life, life_start`` and the two
        feature columns) and ``failures`` (``unit_id, failed_at, mode``).
    """
    rng = np.random.default_rng(seed)
    step_h = 2
    hours = np.arange(0, days * 24, step_h, dtype=float)
    doomed = set(rng.choice(units, failing, replace=False).tolist())
    frames, failed = [], []
    for u in range(units):
        unit_id, node = f"gpu-node{u // 8:03d}-gpu{u % 8}", f"gpu-node{u // 8:03d}"
        fail_h = float(rng.uniform(0.35, 0.9) * days * 24) if u in doomed else np.inf
        alive = hours[hours < fail_h]
        ramp = np.clip(1.0 - (fail_h - alive) / RAMP_H, 0.0, 1.0)
        sbe = rng.poisson(1.0 + (6.0 * ramp if precursor == SBE else 0.0 * ramp)).astype(float)
        temp = rng.normal(0.0, 1.0, alive.size) + (4.0 * ramp if precursor == TEMP else 0.0)
        frames.append(
            pl.DataFrame(
                {
                    "unit_id": unit_id,
                    "ts": [START + timedelta(hours=float(h)) for h in alive],
                    "node": node,
                    "rack": f"rack{u // 16}",
                    SBE: sbe,
                    TEMP: temp,
                }
            )
        )
        if np.isfinite(fail_h):
            failed.append((unit_id, START + timedelta(hours=fail_h), "memory"))
    features = (
        pl.concat(frames)
        .with_columns(
            pl.col("ts").cast(UTC_TS),
            pl.lit("H100").alias("model"),
            pl.lit("lot-a").alias("lot"),
            pl.lit(0, dtype=pl.Int32).alias("life"),
            pl.lit(START).cast(UTC_TS).alias("life_start"),
        )
        .sort("unit_id", "ts")
    )
    failures = pl.DataFrame(failed, schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String}, orient="row")
    return features, failures


def fast_config(data_dir, name: str, **review: float) -> Config:
    """Default configuration with a model name of its own and a quick LightGBM.

    One LightGBM thread: on a loaded 2-core machine OpenMP threads contend and training
    gets tens of times slower.
    """
    overrides = {
        "models": {
            "name": name,
            "gbm": {"params": {"num_threads": 1}, "num_boost_round": 80, "early_stopping_rounds": 15},
        },
        "backtest": {"drain_budget_per_day": 1, "folds": 1},
    }
    if review:
        overrides["review"] = review
    return load_config(data_dir=data_dir).with_overrides(overrides)


def test_failures_are_preceded_by_their_precursor(seed):
    features, failures = synthetic_fleet(seed)
    last = features.group_by("unit_id").agg(pl.col("ts").max(), pl.col(SBE).tail(12).mean().alias("late"))
    early = features.group_by("unit_id").agg(pl.col(SBE).head(24).mean().alias("early"))
    doomed = last.join(early, on="unit_id").join(failures, on="unit_id")
    assert failures.height == 9
    assert (doomed["failed_at"] > doomed["ts"]).all()  # no snapshot at or after a failure
    assert doomed["late"].mean() > doomed["early"].mean() + 3  # the precursor is there


def train_and_register(config: Config, features: pl.DataFrame, failures: pl.DataFrame):
    """What ``foreshock train`` does, in process: fit, backtest, log and register."""
    from foreshock.models.estimators.bundle import train_bundle
    from foreshock.models.evaluation.backtest import walk_forward
    from foreshock.models.registry.tracking import log_training, training_inputs

    bundle = train_bundle(features, failures, config)
    backtest = walk_forward(features, failures, config)
    return log_training(bundle, backtest, config, **training_inputs(bundle, backtest, features, failures, config))
