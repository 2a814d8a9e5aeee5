"""Any telemetry a catalog declares: daily disk SMART-style counters, 1-day snapshots."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from fleet_helpers import T0

from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.features.build import build_features
from foreshock.lake.merge import merge_into_lake

DISK_CATALOG = """
metrics:
  reallocated_sectors: {kind: counter, family: error, unit: sectors}
  pending_sectors: {kind: gauge, family: error, unit: sectors}
  disk_temp_c: {kind: gauge, family: thermal, unit: celsius}
  power_on_hours: {kind: counter, family: other, unit: hours}
"""
DISKS = [f"stor{n:02d}-sd{d}" for n in range(2) for d in "abc"]
DAYS = 20


@pytest.fixture
def disk_config(tmp_path):
    catalog = tmp_path / "disks.yaml"
    catalog.write_text(DISK_CATALOG)
    return load_config(None, data_dir=tmp_path / "data").with_overrides(
        {
            "paths": {"catalog": str(catalog)},
            "features": {
                "snapshot_every": "1d",
                "windows": ["1d", "3d", "7d"],
                "baseline_window": "7d",
                "expected_sample_every": "1d",
            },
        }
    )


def _reallocated(day: int) -> float:
    # The first disk starts remapping sectors on day 10, faster and faster.
    return float(sum(range(1, day - 8))) if day >= 10 else 0.0


def _write_disks(config) -> None:
    inventory = pl.DataFrame(
        {
            "unit_id": DISKS,
            "node": [d.split("-")[0] for d in DISKS],
            "rack": "r1",
            "model": "HDD-16T",
            "lot": ["L1", "L1", "L2", "L2", "L2", "L1"],
            "installed_at": [T0 - timedelta(days=400)] * len(DISKS),
        }
    ).with_columns(pl.col("installed_at").cast(UTC_TS))
    rows = []
    for i, disk in enumerate(DISKS):
        for day in range(DAYS):
            if i == 1 and day == 12:
                continue  # one SMART poll missed
            ts = T0 + timedelta(days=day, hours=6)
            rows += [
                (disk, ts, "reallocated_sectors", _reallocated(day) if i == 0 else 0.0),
                (disk, ts, "pending_sectors", 1.0 if i == 0 and day >= 15 else 0.0),
                (disk, ts, "disk_temp_c", 35.0 + (6.0 if i == 2 and day >= 17 else 0.0)),
                (disk, ts, "power_on_hours", 9600.0 + 24 * day),
            ]
    samples = pl.DataFrame(rows, schema=["unit_id", "ts", "metric", "value"], orient="row")
    merge_into_lake(config.lake_dir, "inventory", inventory, 2)
    merge_into_lake(config.lake_dir, "samples", samples, 2)


def test_daily_disk_counters_get_daily_snapshots_and_windows(disk_config):
    _write_disks(disk_config)
    out = build_features(disk_config.lake_dir, disk_config)

    assert (out["ts"].dt.hour() == 0).all()
    assert out["ts"].min() == T0 + timedelta(days=1)
    assert out["ts"].max() == T0 + timedelta(days=DAYS - 1)  # the last poll (day 19, 06:00) is after it
    assert not any(c.startswith(("gpu_temp_c", "ecc_")) for c in out.columns)
    for name in (
        "reallocated_sectors_increase_3d",
        "reallocated_sectors_accel_1d_7d",
        "reallocated_sectors_hours_since_first_increase",
        "pending_sectors_max_7d",
        "disk_temp_c_drift_c_1d",
        "disk_temp_c_drift_c_3d",
        "power_on_hours_increase_7d",
    ):
        assert name in out.columns

    sick = out.filter(pl.col("unit_id") == DISKS[0]).sort("ts")
    day15 = sick.filter(pl.col("ts") == T0 + timedelta(days=15)).row(0, named=True)
    # Polls of days 12, 13, 14 fall in (day 12 00:00, day 15 00:00].
    assert day15["reallocated_sectors_increase_3d"] == _reallocated(14) - _reallocated(11)
    assert day15["reallocated_sectors_increase_1d"] == _reallocated(14) - _reallocated(13)
    assert day15["reallocated_sectors_accel_1d_7d"] == pytest.approx(
        (_reallocated(14) - _reallocated(13)) / ((_reallocated(14) - _reallocated(7)) / 7)
    )
    assert day15["reallocated_sectors_hours_since_first_increase"] == pytest.approx(4 * 24 + 18)  # day 10, 06:00
    assert day15["power_on_hours_increase_7d"] == 7 * 24

    missed = out.filter((pl.col("unit_id") == DISKS[1]) & (pl.col("ts") == T0 + timedelta(days=14))).row(0, named=True)
    assert missed["telemetry_missing_frac_3d"] == pytest.approx(1 / 3)
    assert missed["telemetry_missing_frac_1d"] == 0.0

    hot = out.filter((pl.col("unit_id") == DISKS[2]) & (pl.col("ts") == T0 + timedelta(days=19))).row(0, named=True)
    # Two hot days (17, 18) inside the 7-day baseline: 35 for five days and 41 for two.
    assert hot["disk_temp_c_drift_c_1d"] == pytest.approx(41 - (5 * 35 + 2 * 41) / 7)
    # No power gauge in this catalog: no temperature-vs-power fit.
    assert out["temp_residual_c_3d"].null_count() == out.height


def test_windows_that_do_not_fit_the_snapshot_grid_are_refused(disk_config):
    from foreshock.features.spec import feature_spec

    bad = disk_config.with_overrides({"features": {"windows": ["12h", "3d"]}})
    with pytest.raises(ValueError, match="12h is not a whole multiple of snapshot_every = 1d"):
        feature_spec(bad)
