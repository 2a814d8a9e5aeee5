"""Small synthetic fleets in the feature-table layout (docs/architecture.md), built in numpy.

Memory-degradation units show a single-bit ECC rate that grows for days before the
failure (and a double-bit error near the end); sudden failures have no precursor; healthy
units have benign correctable-error bursts.  The truth is known, so tests can check what
a model recovers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np
import polars as pl
import pytest

from foreshock.contract import UTC_TS

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


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
        for h in times:
            if fail_h is not None and h >= fail_h:
                break
            rows.append(
                {
                    "unit_id": unit_id,
                    "ts": T0 + timedelta(hours=int(h)),
                    "node": f"gpu-node{u // 8:03d}",
                    "rack": f"rack{u // 32}",
                    "model": "H100",
                    "lot": f"lot{u % 3}",
                    "life": 0,
                    "life_start": T0,
                    "ecc_sbe_volatile_total_increase_1d": sbe_1d[h],
                    "ecc_sbe_volatile_total_increase_6h": sbe_6h[h],
                    "ecc_sbe_volatile_total_accel_6h_1d": (sbe_6h[h] / 6 + 0.01) / (sbe_1d[h] / 24 + 0.01),
                    "ecc_dbe_volatile_total_increase_1d": dbe_1d[h],
                    "gpu_temp_c_mean_1h": temp[h],
                    "noise_level": noise[h],
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
    features = pl.DataFrame(rows).with_columns(
        pl.col("ts").cast(UTC_TS), pl.col("life_start").cast(UTC_TS), pl.col("life").cast(pl.Int32)
    )
    failures_df = pl.DataFrame(
        failures, schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String}
    )
    truth_df = pl.DataFrame(
        truth,
        schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String, "precursor_onset": UTC_TS},
    )
    return Fleet(features, failures_df, truth_df)


@pytest.fixture
def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)
