"""Small fleets written by the health tests (imported by name: conftest modules are not):
raw samples with one planted telemetry problem per unit, and feature snapshots with one
accelerating, one steady and one flat ECC trend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from foreshock.contract import UTC_TS

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HOURS = 48
STEP = timedelta(minutes=10)
END = T0 + HOURS * timedelta(hours=1) - STEP
UNITS = [f"gpu-node{n:03d}-gpu{g}" for n in (1, 2, 3) for g in range(4)]
# One problem per unit (the others are healthy peers of the same model).
STUCK = "gpu-node001-gpu1"  # pcie_replay_total stops moving 30 h before the end
VANISHED = "gpu-node001-gpu2"  # gpu_temp_c stops 5 h before the end, the rest goes on
MISSING = "gpu-node001-gpu3"  # never reports power_w
GAP = "gpu-node002-gpu0"  # nothing at all from hour 20 to hour 23
SENTINEL = "gpu-node002-gpu1"  # ecc_sbe_volatile_total = 0xFFFFFFFF throughout
AT_BOUND = "gpu-node002-gpu2"  # gpu_temp_c at the catalog maximum (130) for the last 30 h
DUPLICATE = ("gpu-node001-gpu3", "gpu-node002-gpu3")  # one uuid in the inventory
UNRESET = "gpu-node001-gpu0"  # drained at hour 10, back at 12: its volatile SBE count stays 5
EXPECTED = {
    ("stuck_counter", STUCK, "pcie_replay_total"),
    ("vanished_metric", VANISHED, "gpu_temp_c"),
    ("missing_metric", MISSING, "power_w"),
    ("scrape_gap", GAP, None),
    ("sentinel", SENTINEL, "ecc_sbe_volatile_total"),
    ("sentinel", AT_BOUND, "gpu_temp_c"),
    ("duplicate_uuid", DUPLICATE[0], None),
    ("duplicate_uuid", DUPLICATE[1], None),
    ("no_reset_after_repair", UNRESET, "ecc_sbe_volatile_total"),
}


def _value(unit: str, metric: str, k: int, hour: float) -> float | None:
    """The reading of ``metric`` on ``unit`` at sample ``k`` (None: no sample)."""
    if metric == "gpu_temp_c":
        if unit == VANISHED and hour >= HOURS - 5:
            return None
        if unit == AT_BOUND and hour >= HOURS - 30:
            return 130.0
        return 40.0 + (k * 7 + len(unit)) % 11
    if metric == "pcie_replay_total":
        return float(min(k, int((HOURS - 30) * 6))) if unit == STUCK else float(k)
    if metric == "power_w":
        return None if unit == MISSING else 300.0 + (k * 13) % 50
    if metric == "ecc_sbe_volatile_total":
        return 4294967295.0 if unit == SENTINEL else (5.0 if unit == UNRESET else 0.0)
    raise AssertionError(metric)


def raw_samples() -> pl.DataFrame:
    rows = []
    for k in range(HOURS * 6):
        ts, hour = T0 + k * STEP, k / 6
        for unit in UNITS:
            if unit == GAP and 20 <= hour < 23:
                continue
            if unit == UNRESET and 10 <= hour < 12:  # drained: silent, and that is expected
                continue
            for metric in ("gpu_temp_c", "pcie_replay_total", "power_w", "ecc_sbe_volatile_total"):
                value = _value(unit, metric, k, hour)
                if value is not None:
                    rows.append((unit, ts, metric, value))
    return pl.DataFrame(
        rows, schema={"unit_id": pl.String, "ts": UTC_TS, "metric": pl.String, "value": pl.Float64}, orient="row"
    )


def inventory() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "unit_id": UNITS,
            "node": [u.split("-gpu")[0] for u in UNITS],
            "rack": ["r1"] * len(UNITS),
            "model": ["H100"] * len(UNITS),
            "installed_at": [T0 - timedelta(days=90)] * len(UNITS),
            "uuid": ["GPU-shared" if u in DUPLICATE else f"GPU-{i:04d}" for i, u in enumerate(UNITS)],
        }
    ).with_columns(pl.col("installed_at").cast(UTC_TS))


def drains() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "unit_id": [UNRESET],
            "drained_at": [T0 + timedelta(hours=10)],
            "returned_at": [T0 + timedelta(hours=12)],
            "action": ["drain_now"],
            "source": ["test"],
        }
    ).with_columns(pl.col("drained_at", "returned_at").cast(UTC_TS))


# Feature snapshots: hourly, 9 days, ECC increases over each window.
ACCEL, STEADY, FLAT = "gpu-node009-gpu0", "gpu-node009-gpu1", "gpu-node009-gpu2"
WINDOWS = [timedelta(hours=1), timedelta(hours=6), timedelta(days=1), timedelta(days=7)]


def _per_hour(unit: str, hour: int, last: int) -> float:
    """Correctable errors of ``unit`` in hour ``hour`` (of ``last``)."""
    if unit == STEADY:
        return 1.0 if hour % 6 == 0 else 0.0  # 4 a day, every day
    if unit == ACCEL:
        return 2.0 if hour > last - 24 else (1.0 if hour % 4 == 0 else 0.0)  # 48 in the last day, 6 a day before
    return 0.0


def trend_features() -> pl.DataFrame:
    hours = 9 * 24
    rows = []
    for unit in (ACCEL, STEADY, FLAT):
        per_hour = [_per_hour(unit, h, hours - 1) for h in range(hours)]
        for h in range(hours):
            row = {"unit_id": unit, "ts": T0 + timedelta(hours=h)}
            for w in WINDOWS:
                span = int(w.total_seconds() // 3600)
                name = {1: "1h", 6: "6h", 24: "1d", 168: "7d"}[span]
                row[f"ecc_sbe_aggregate_total_increase_{name}"] = float(sum(per_hour[max(0, h - span + 1) : h + 1]))
            rows.append(row)
    return pl.DataFrame(rows).with_columns(pl.col("ts").cast(UTC_TS))
