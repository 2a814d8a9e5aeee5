"""A daily SMART-style disk fleet in the canonical contract (docs/byot.md), for evaluations.

Disks report once a day: ``reallocated_sectors`` and ``uncorrectable_errors`` (cumulative
counters), ``pending_sectors`` and ``drive_temp_c`` (gauges).  A failing disk has, with
probability ``precursor_share``, a degradation onset 5-20 days before it fails, after which
its sector counts grow fast; the others fail suddenly.  A few healthy disks have bursts of
reallocations that never lead to a failure (what makes the operators' rules imperfect).  A
failed disk is replaced the next day by a new one in the same slot (counters from zero).

Writes ``inventory.csv``, ``samples.csv``, ``failures.csv`` and ``catalog.yaml`` into
``out`` and returns the configuration overrides of docs/byot.md for it.

Usage::

    uv run python benchmarks/smart_fleet.py OUT_DIR [--disks 1000] [--days 120] [--seed 3]
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CATALOG = """metrics:
  reallocated_sectors:  {kind: counter, family: error,   unit: sectors, aliases: [smart_5_raw]}
  pending_sectors:      {kind: gauge,   family: error,   unit: sectors, aliases: [smart_197_raw]}
  uncorrectable_errors: {kind: counter, family: error,   unit: count,   aliases: [smart_187_raw]}
  drive_temp_c:         {kind: gauge,   family: thermal, unit: celsius, min: 0, max: 90}
"""


# The feature settings of daily telemetry, shared with the other daily-disk tools.
DAILY_SNAPSHOTS = Path(__file__).resolve().parents[1] / "features" / "daily-snapshots.toml"


def config_toml(catalog: Path) -> str:
    """The configuration of docs/byot.md for this fleet (daily snapshots, 14-day horizon)."""
    daily = DAILY_SNAPSHOTS.read_text()
    return f'''[paths]
catalog = "{catalog}"

{daily}
[backtest]
alert_window = "30d"
min_lead_time = "1d"
drain_budget_per_day = 1
'''


def generate(
    out: Path,
    disks: int = 1000,
    days: int = 120,
    seed: int = 3,
    daily_failure_rate: float = 0.002,
    precursor_share: float = 0.7,
    noisy_share: float = 0.03,
) -> dict[str, int]:
    """Write the fleet into ``out``; returns counts (disks, samples, failures)."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    samples: dict[str, list] = {"unit_id": [], "ts": [], "metric": [], "value": []}
    failures: dict[str, list] = {"unit_id": [], "failed_at": [], "mode": []}
    inventory = []
    for d in range(disks):
        unit = f"disk{d:05d}"
        inventory.append(
            {
                "unit_id": unit,
                "node": f"store{d // 12:04d}",
                "rack": f"rack{d // 240:02d}",
                "model": "HDD-16T" if d % 3 else "HDD-18T",
                "lot": f"lot{rng.integers(0, 8)}",
                "installed_at": (T0 - timedelta(days=int(rng.integers(30, 900)))).isoformat(),
            }
        )
        noisy = rng.random() < noisy_share
        day = 0
        while day < days:
            # One life: when does this disk fail (None: not within the simulated days)?
            life = rng.geometric(daily_failure_rate)
            fail_day = day + life if day + life < days else None
            has_precursor = fail_day is not None and rng.random() < precursor_share
            onset = fail_day - int(rng.integers(5, 21)) if has_precursor else None
            realloc = uncorrectable = 0.0
            base_temp = rng.normal(38, 3)
            last = fail_day if fail_day is not None else days
            for t in range(day, last):
                degrading = onset is not None and t >= onset
                burst = noisy and rng.random() < 0.05
                realloc += rng.poisson(0.02 + (4.0 if degrading else 0.0) + (6.0 if burst else 0.0))
                uncorrectable += rng.poisson(0.002 + (0.4 if degrading else 0.0))
                pending = rng.poisson(0.05 + (3.0 if degrading else 0.0) + (1.0 if burst else 0.0))
                temp = base_temp + rng.normal(0, 1.5) + (2.0 if degrading else 0.0)
                ts = T0 + timedelta(days=t, minutes=int(rng.integers(0, 30)))
                for metric, value in (
                    ("reallocated_sectors", realloc),
                    ("uncorrectable_errors", uncorrectable),
                    ("pending_sectors", float(pending)),
                    ("drive_temp_c", round(float(temp), 1)),
                ):
                    samples["unit_id"].append(unit)
                    samples["ts"].append(ts)
                    samples["metric"].append(metric)
                    samples["value"].append(float(value))
            if fail_day is None:
                break
            failed_at = T0 + timedelta(days=fail_day, hours=int(rng.integers(1, 23)))
            failures["unit_id"].append(unit)
            failures["failed_at"].append(failed_at)
            failures["mode"].append("media" if has_precursor else "sudden")
            day = fail_day + 1  # replaced the next day: a new life, counters from zero
    pl.DataFrame(inventory).write_csv(out / "inventory.csv")
    frame = pl.DataFrame(samples).with_columns(pl.col("ts").dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
    frame.write_csv(out / "samples.csv")
    pl.DataFrame(
        failures, schema={"unit_id": pl.String, "failed_at": pl.Datetime("us", "UTC"), "mode": pl.String}
    ).with_columns(pl.col("failed_at").dt.strftime("%Y-%m-%dT%H:%M:%SZ")).write_csv(out / "failures.csv")
    (out / "catalog.yaml").write_text(CATALOG)
    return {"disks": disks, "samples": frame.height, "failures": len(failures["unit_id"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--disks", type=int, default=1000)
    parser.add_argument("--days", type=int, default=120)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    print(generate(args.out, args.disks, args.days, args.seed))
    print(config_toml(args.out / "catalog.yaml"))


if __name__ == "__main__":
    main()
