"""A small canonical fleet written with foreshock.lake.merge.merge_into_lake (no simulator),
imported by the features tests by name (a module of its own: ``conftest`` is not unique
across test folders)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.contract import UTC_TS
from foreshock.lake.merge import merge_into_lake

T0 = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass
class Fleet:
    inventory: pl.DataFrame
    samples: pl.DataFrame
    events: pl.DataFrame
    failures: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String})
    )

    def write(self, lake_dir: Path, shards: int = 2, until: datetime | None = None) -> None:
        """Write the fleet into a lake, optionally only what was known at ``until``."""
        samples, events, failures = self.samples, self.events, self.failures
        if until is not None:
            samples = samples.filter(pl.col("ts") <= until)
            events = events.filter(pl.col("ts") <= until)
            failures = failures.filter(pl.col("failed_at") <= until)
        merge_into_lake(lake_dir, "inventory", self.inventory, shards)
        merge_into_lake(lake_dir, "samples", samples, shards)
        merge_into_lake(lake_dir, "events", events, shards)
        merge_into_lake(lake_dir, "failures", failures, shards)


def make_fleet(seed: int, units: int = 8, days: float = 3, every_min: int = 10, failures: int = 1) -> Fleet:
    """GPUs with an SBE counter that grows and resets, temperature following power, XIDs."""
    rng = np.random.default_rng(seed)
    ids = [f"gpu-node{n:03d}-gpu{g}" for n in range(units // 4 + 1) for g in range(4)][:units]
    inventory = pl.DataFrame(
        {
            "unit_id": ids,
            "node": [u.rsplit("-", 1)[0] for u in ids],
            "rack": [f"rack{(i // 4) % 2}" for i in range(units)],
            "model": ["H100" if i % 3 else "A100" for i in range(units)],
            "lot": [f"lot{i % 2}" for i in range(units)],
            "installed_at": [T0 - timedelta(days=30 + i) for i in range(units)],
        }
    )
    steps = int(days * 24 * 60 / every_min)
    times = [T0 + timedelta(minutes=every_min * k) for k in range(steps)]
    frames = []
    for i, unit in enumerate(ids):
        keep = rng.random(steps) > 0.05  # scrapes go missing now and then
        if i == 1:
            keep[steps // 3 : steps // 3 + 30] = False  # a long silence
        ts = [t for t, k in zip(times, keep) if k]
        n = len(ts)
        sbe = np.cumsum(rng.poisson(0.3 if i % 2 else 0.02, n)).astype(float)
        reset_at = int(rng.integers(1, n))
        sbe[reset_at:] -= sbe[reset_at - 1] + rng.integers(0, 2)  # driver reload mid-way
        sbe = np.maximum(sbe, 0)
        power = 300 + 100 * rng.random(n)
        temp = 30 + 0.1 * power + rng.normal(0, 1, n) + (5 if i == 2 else 0)
        for metric, values in (("ecc_sbe_volatile_total", sbe), ("power_w", power), ("gpu_temp_c", temp)):
            frames.append(pl.DataFrame({"unit_id": unit, "ts": ts, "metric": metric, "value": values}))
    samples = pl.concat(frames).with_columns(pl.col("ts").cast(UTC_TS))
    n_events = units * 3
    events = pl.DataFrame(
        {
            "unit_id": rng.choice(ids, n_events).tolist(),
            "ts": [T0 + timedelta(minutes=int(m)) for m in rng.integers(0, int(days * 1440), n_events)],
            "source": "xid",
            "code": rng.choice([48, 79, 13, 63], n_events).tolist(),
            "count": 1,
        }
    ).with_columns(pl.col("ts").cast(UTC_TS))
    fail_rows = [
        {
            "unit_id": ids[(3 * k + 1) % units],
            "failed_at": T0 + timedelta(hours=float(rng.uniform(12, days * 24 - 6))),
            "mode": "hbm",
        }
        for k in range(failures)
    ]
    fails = pl.DataFrame(fail_rows, schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String})
    return Fleet(inventory, samples, events, fails)


def one_unit(
    samples: list[tuple[datetime, str, float]], unit: str = "gpu-node001-gpu0", installed: datetime | None = None
) -> Fleet:
    """One GPU's ``(ts, metric, value)`` samples, no events, no failures."""
    inventory = pl.DataFrame(
        {
            "unit_id": [unit],
            "node": ["gpu-node001"],
            "rack": ["rack0"],
            "model": ["H100"],
            "lot": ["lot0"],
            "installed_at": [installed or T0 - timedelta(days=10)],
        }
    )
    frame = pl.DataFrame(
        {
            "unit_id": unit,
            "ts": [s[0] for s in samples],
            "metric": [s[1] for s in samples],
            "value": [s[2] for s in samples],
        }
    ).with_columns(pl.col("ts").cast(UTC_TS))
    events = pl.DataFrame(
        schema={"unit_id": pl.String, "ts": UTC_TS, "source": pl.String, "code": pl.Int64, "count": pl.Int64}
    )
    return Fleet(inventory, frame, events)


def snapshot_row(frame: pl.DataFrame, ts: datetime, unit: str = "gpu-node001-gpu0") -> dict:
    """The one feature snapshot of ``unit`` at ``ts``."""
    rows = frame.filter((pl.col("unit_id") == unit) & (pl.col("ts") == ts)).to_dicts()
    assert len(rows) == 1, f"expected one snapshot at {ts}, got {len(rows)}"
    return rows[0]


def with_test_windows(config):
    """``config`` with windows 1h, 6h and 1d, a 1-day baseline and 10-minute samples expected."""
    return config.with_overrides(
        {"features": {"windows": ["1h", "6h", "1d"], "baseline_window": "1d", "expected_sample_every": "10m"}}
    )
