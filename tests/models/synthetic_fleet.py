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


def within_a_day_of_failure(features: pl.DataFrame, failures: pl.DataFrame) -> np.ndarray:
    """Per row of ``features``: whether its unit fails within the next 24 hours."""
    return (
        features.join(failures.select("unit_id", "failed_at"), on="unit_id", how="left")
        .select(((pl.col("failed_at") - pl.col("ts")).dt.total_hours().is_between(0, 24)).fill_null(False))
        .to_series()
        .to_numpy()
    )


def with_power_jitter(features: pl.DataFrame, failures: pl.DataFrame, rng: np.random.Generator) -> pl.DataFrame:
    """The fleet with the feature store's ``power_w_jitter_max_1d``: a few watts a point on
    a healthy GPU, tens in the day before a failure."""
    jitter = rng.gamma(2.0, 2.0, features.height)
    near = within_a_day_of_failure(features, failures)
    jitter[near] = rng.uniform(40, 90, near.sum())
    return features.with_columns(pl.Series("power_w_jitter_max_1d", jitter, dtype=pl.Float32))


def fitted_for_a_day(features: pl.DataFrame, failures: pl.DataFrame, **settings):
    """A 24-hour LightGBM model fitted on ``features`` with the recipe ``settings``, and 300 of
    its known healthy rows to probe it with."""
    from foreshock.contract import label_column
    from foreshock.models.estimators.gbm import GradientBoostedRisk
    from foreshock.models.estimators.training import labelled_until

    model = GradientBoostedRisk(horizons=["24h"], **settings).fit(features, failures)
    known = labelled_until(features, failures, ["24h"]).filter(pl.col(label_column("24h")) == 0)
    return model, known.head(300)


def check_recipe_feature(tmp_path, seed: int, add_inputs, name: str, probes, **settings) -> None:
    """A recipe setting that reads the feature ``name`` (derived from others, or stored): on a
    60-unit fleet whose inputs ``add_inputs(features, failures, rng)`` writes, the model fitted
    with ``settings`` has ``name`` among its features and rates the first of ``probes(probe, rng)`` above the
    second (:func:`assert_ranks_above`)."""
    rng = np.random.default_rng(seed)
    fleet = synthetic_fleet(rng, units=60, days=14)
    model, probe = fitted_for_a_day(add_inputs(fleet.features, fleet.failures, rng), fleet.failures, **settings)
    assert name in model.feature_names_
    assert_ranks_above(model, *probes(probe, rng), tmp_path)


def assert_ranks_above(model, higher: pl.DataFrame, lower: pl.DataFrame, tmp_path, factor: float = 1.5) -> None:
    """``model`` rates the rows of ``higher`` at least ``factor`` times those of ``lower`` (the
    median ratio), and a saved copy, computing its derived inputs again from their names,
    scores the same."""
    risk_higher = model.predict_risk(higher).get_column("risk").to_numpy()
    risk_lower = model.predict_risk(lower).get_column("risk").to_numpy()
    assert np.median(risk_higher / risk_lower) > factor
    model.save(tmp_path / "m")
    again = type(model).load(tmp_path / "m")
    assert again.predict_risk(higher).equals(model.predict_risk(higher))


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


def daily_disk_fleet(
    rng: np.random.Generator,
    disks: int = 400,
    days: int = 60,
    *,
    fail_share: tuple[float, float] = (0.2, 0.2),
    silent_share: float = 0.2,
    strength: tuple[float, float] = (0.3, 3.0),
    fail_days: tuple[int, int] = (15, 90),
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Disks with SMART-style daily snapshots: a reallocated-sector count that grows for
    5-15 days before most failures.

    A disk fails (within ``fail_days`` of T0; after ``days`` it is censored) with
    probability ``fail_share[0] + fail_share[1] * age / 1500 days`` (older disks fail more
    often); ``silent_share`` of the failures have no precursor; the precursor's daily
    growth rate is drawn from ``strength``.
    """
    rows, failures = [], []
    for d in range(disks):
        installed_days = float(rng.uniform(30, 1500))
        fails = rng.random() < fail_share[0] + fail_share[1] * installed_days / 1500
        fail_day = int(rng.integers(*fail_days)) if fails else None
        onset = None if fail_day is None or rng.random() < silent_share else fail_day - int(rng.integers(5, 15))
        rate = float(rng.uniform(*strength))
        sectors = 0.0
        for day in range(days):
            if fail_day is not None and day >= fail_day:
                break
            grow = rng.poisson(0.05 + (rate if onset is not None and day >= onset else 0.0))
            sectors += grow
            rows.append(
                {
                    "unit_id": f"disk{d:03d}",
                    "ts": T0 + timedelta(days=day),
                    "life_start": T0,
                    "reallocated_sectors_increase_3d": float(grow * 3),
                    "reallocated_sectors_last": sectors,
                    "drive_temp_c_mean_1d": float(rng.normal(40, 3)),
                    "age_days": installed_days + day,
                }
            )
        if fail_day is not None and fail_day < days:
            failures.append({"unit_id": f"disk{d:03d}", "failed_at": T0 + timedelta(days=fail_day, hours=6)})
    features = pl.DataFrame(rows).with_columns(pl.col("ts").cast(UTC_TS), pl.col("life_start").cast(UTC_TS))
    failed = pl.DataFrame(failures).with_columns(pl.col("failed_at").cast(UTC_TS), pl.lit("media").alias("mode"))
    return features, failed
