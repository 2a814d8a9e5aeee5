"""Small synthetic fleets in the feature-table layout (docs/architecture.md), built in numpy.

Memory-degradation units show a single-bit ECC rate that grows for days before the
failure (and a double-bit error near the end); sudden failures have no precursor; healthy
units have benign correctable-error bursts.  The truth is known, so tests can check what
a model recovers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from foreshock.contract import UTC_TS

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Fleet:
    features: pl.DataFrame
    failures: pl.DataFrame
    ground_truth: pl.DataFrame


def _rolling_sum(counts: np.ndarray, window: int) -> np.ndarray:
    c = np.concatenate([[0.0], np.cumsum(counts)])
    idx = np.arange(1, counts.size + 1)
    return c[idx] - c[np.maximum(idx - window, 0)]


def synthetic_fleet(
    rng: np.random.Generator,
    units: int = 60,
    days: int = 20,
    step_h: int = 1,
    degrade_share: float = 0.3,
    sudden_share: float = 0.08,
) -> Fleet:
    """A fleet with hourly (or ``step_h``) snapshots; see the module docstring."""
    hours = days * 24
    times = np.arange(0, hours, step_h)
    rows: list[dict] = []
    failures: list[dict] = []
    truth: list[dict] = []
    for u in range(units):
        unit_id = f"gpu-node{u // 8:03d}-gpu{u % 8}"
        base_rate = np.exp(rng.normal(np.log(1.0), 0.8)) / 24.0  # SBE per hour
        counts = rng.poisson(base_rate, hours).astype(float)
        bursts = rng.random(hours) < 0.002
        counts[bursts] += rng.poisson(40, bursts.sum())
        dbe = np.zeros(hours)
        temp = 60 + 5 * np.sin(np.arange(hours) / 24 * 2 * np.pi + rng.random() * 6) + rng.normal(0, 1.5, hours)
        fail_h = None
        roll = rng.random()
        if roll < degrade_share:
            onset = rng.uniform(0, hours * 0.85)
            lead = rng.uniform(36, 120)
            fail_h = onset + lead
            t = np.arange(hours)
            grow = np.clip((t - onset) / lead, 0, 1.0)
            counts += rng.poisson(base_rate * (np.exp(np.log(300) * grow) - 1) * (t >= onset))
            near = (t >= fail_h - 12) & (t < fail_h)
            dbe[near] = rng.random(near.sum()) < 0.15
            mode, onset_at = "memory", onset
        elif roll < degrade_share + sudden_share:
            fail_h = rng.uniform(24, hours)
            mode, onset_at = "sudden", None
        sbe_1d = _rolling_sum(counts, 24)
        sbe_6h = _rolling_sum(counts, 6)
        dbe_1d = _rolling_sum(dbe, 24)
        noise = rng.normal(0, 1, hours)
        alive = times[times < fail_h] if fail_h is not None else times
        rows.append(
            {
                "unit_id": np.full(alive.size, unit_id, dtype=object),
                "hour": alive,
                "node": np.full(alive.size, f"gpu-node{u // 8:03d}", dtype=object),
                "rack": np.full(alive.size, f"rack{u // 32}", dtype=object),
                "lot": np.full(alive.size, f"lot{u % 3}", dtype=object),
                "ecc_sbe_volatile_total_increase_1d": sbe_1d[alive],
                "ecc_sbe_volatile_total_increase_6h": sbe_6h[alive],
                "ecc_sbe_volatile_total_accel_6h_1d": (sbe_6h[alive] / 6 + 0.01) / (sbe_1d[alive] / 24 + 0.01),
                "ecc_dbe_volatile_total_increase_1d": dbe_1d[alive],
                "gpu_temp_c_mean_1h": temp[alive],
                "noise_level": noise[alive],
            }
        )
        if fail_h is not None and fail_h < hours:
            failed_at = T0 + timedelta(hours=float(fail_h))
            failures.append({"unit_id": unit_id, "failed_at": failed_at, "mode": mode})
            truth.append(
                {
                    "unit_id": unit_id,
                    "failed_at": failed_at,
                    "mode": mode,
                    "precursor_onset": None if onset_at is None else T0 + timedelta(hours=float(onset_at)),
                }
            )
    columns = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    hour = columns.pop("hour")
    features = pl.DataFrame(columns).select(
        "unit_id",
        (pl.lit(T0).cast(UTC_TS) + pl.duration(hours=pl.Series(hour))).alias("ts"),
        "node",
        "rack",
        pl.lit("H100").alias("model"),
        "lot",
        pl.lit(0, dtype=pl.Int32).alias("life"),
        pl.lit(T0).cast(UTC_TS).alias("life_start"),
        pl.exclude("unit_id", "node", "rack", "lot"),
    )
    failures_df = pl.DataFrame(failures, schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String})
    truth_df = pl.DataFrame(
        truth,
        schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String, "precursor_onset": UTC_TS},
    )
    return Fleet(features, failures_df, truth_df)
