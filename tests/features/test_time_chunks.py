"""A long history featured in small pieces of time equals the one-shot result.

A run works through time chunk by chunk (``UpdatePlan.chunks``): every shard's first pass
over a few blocks of snapshots, then those dates are written, then the next chunk.  With
the chunks forced small (``[features] block_days``, ``max_task_rows``), a daily disk fleet
of 90 days becomes about thirty chunks; the stored snapshots must be those of one pass over
the whole span, across chunk boundaries too: a counter's time since its first increase, a
disk replaced mid-history (a new life that never sees the old disk's errors), the lot's
failure rate and the cohort's hazard built from failures of earlier chunks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.features import build
from foreshock.features.build import build_features, plan_update, update_features
from foreshock.features.spec import feature_spec
from foreshock.features.store import last_snapshot, scan_features
from foreshock.lake.merge import merge_into_lake

T0 = datetime(2025, 1, 1, tzinfo=UTC)
DAYS = 90
DISKS = [f"disk{d}" for d in range(8)]
CATALOG = """
metrics:
  reallocated_sectors: {kind: counter, family: error, unit: sectors}
  pending_sectors: {kind: gauge, family: error, unit: sectors}
  disk_temp_c: {kind: gauge, family: thermal, unit: celsius}
"""
SICK_FROM = 30  # disk0 remaps sectors from this day on
REPAIRED = T0 + timedelta(days=40, hours=13)  # disk1 fails and is replaced (counters from 0)
FAILED_LATE = T0 + timedelta(days=61, hours=2)  # disk2 fails without a precursor


def _reallocated(disk: int, day: int) -> float:
    if disk == 0 and day >= SICK_FROM:
        return float(3 * (day - SICK_FROM + 1))
    if disk == 1 and 35 <= day <= 40:
        return float(10 * (day - 34))  # errors of the disk that fails on day 40
    if disk == 1 and day > 40:
        return 0.0  # the replacement
    return 0.0


def _config(tmp_path, **features):
    catalog = tmp_path / "disks.yaml"
    catalog.write_text(CATALOG)
    return load_config(None, data_dir=tmp_path / "data").with_overrides(
        {
            "paths": {"catalog": str(catalog)},
            "lake": {"shards": 2},
            "features": {
                "snapshot_every": "1d",
                "windows": ["1d", "3d", "7d"],
                "baseline_window": "7d",
                "expected_sample_every": "1d",
                **features,
            },
        }
    )


def _write_fleet(config) -> None:
    inventory = pl.DataFrame(
        {
            "unit_id": DISKS,
            "node": [f"store{i // 4}" for i in range(len(DISKS))],
            "rack": "r1",
            "model": ["HDD-16T" if i % 2 else "HDD-18T" for i in range(len(DISKS))],
            "lot": [f"lot{i % 3}" for i in range(len(DISKS))],
            "installed_at": [T0 - timedelta(days=200 + i) for i in range(len(DISKS))],
        }
    ).with_columns(pl.col("installed_at").cast(UTC_TS))
    rows = []
    for i, disk in enumerate(DISKS):
        for day in range(DAYS):
            if (i == 2 and day == 61) or (i == 3 and day in (20, 21)):
                continue  # the failed disk's slot is empty that day; a missed poll
            ts = T0 + timedelta(days=day, hours=6)
            rows += [
                (disk, ts, "reallocated_sectors", _reallocated(i, day)),
                (disk, ts, "pending_sectors", 1.0 if i == 0 and day >= SICK_FROM + 5 else 0.0),
                (disk, ts, "disk_temp_c", 35.0 + i + (4.0 if i == 4 and 50 <= day < 70 else 0.0)),
            ]
    samples = pl.DataFrame(rows, schema=["unit_id", "ts", "metric", "value"], orient="row")
    failures = pl.DataFrame(
        {"unit_id": ["disk1", "disk2"], "failed_at": [REPAIRED, FAILED_LATE], "mode": ["media", "sudden"]}
    ).with_columns(pl.col("failed_at").cast(UTC_TS))
    for table, frame in (("inventory", inventory), ("samples", samples), ("failures", failures)):
        merge_into_lake(config.lake_dir, table, frame, 2)


def _row(frame: pl.DataFrame, unit: str, day: int) -> dict:
    return frame.filter((pl.col("unit_id") == unit) & (pl.col("ts") == T0 + timedelta(days=day))).row(0, named=True)


@pytest.fixture(scope="module")
def chunked(tmp_path_factory):
    """The fleet featured in chunks of 3 days, one block per chunk; and the chunks' ends
    as the store had them when each chunk was staged.  Built once for the module: both
    tests only read it."""
    config = _config(tmp_path_factory.mktemp("chunked"), block_days=3, max_task_rows=0)
    _write_fleet(config)
    stored_when_staged = []
    stage = build.stage_shard

    def spying_stage(config, shard, blocks):
        stored_when_staged.append((blocks[0][0], last_snapshot(config.features_dir)))
        return stage(config, shard, blocks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "stage_shard", spying_stage)
        plan = plan_update(config, full=True)
        chunks = plan.chunks(feature_spec(config))
        assert update_features(config, full=True) > 0
    return config, chunks, stored_when_staged


def test_a_history_featured_in_chunks_equals_one_pass(chunked):
    config, chunks, _ = chunked
    assert len(chunks) >= 25
    # every date of the run in exactly one chunk
    days = [day for _, spans in chunks for day, _, _ in spans]
    assert len(days) == len(set(days)) == DAYS - 1

    stored = scan_features(config).collect().sort("unit_id", "ts")
    one_pass = build_features(config.lake_dir, config)
    assert stored.height == one_pass.height > 0
    assert_frame_equal(stored, one_pass, check_exact=False, rel_tol=1e-9, abs_tol=1e-9)

    # The features that reach back across chunk boundaries are there, with their values.
    sick = _row(stored, "disk0", SICK_FROM + 4)  # first increase: day SICK_FROM, 06:00
    assert sick["reallocated_sectors_hours_since_first_increase"] == pytest.approx(3 * 24 + 18)
    assert sick["reallocated_sectors_increase_7d"] == 12.0
    replaced = _row(stored, "disk1", 42)
    assert replaced["life"] == 1
    assert replaced["reallocated_sectors_increase_7d"] in (0.0, None)
    assert replaced["reallocated_sectors_hours_since_first_increase"] is None
    old = _row(stored, "disk1", 40)
    assert old["life"] == 0 and old["reallocated_sectors_increase_7d"] > 0
    lot = _row(stored, "disk4", 45)  # disk1's lot (lot1): its failure is 4 days old
    assert lot["lot_failure_rate_7d"] > 0
    assert _row(stored, "disk4", 80)["lot_failure_rate_7d"] == 0.0
    # disk7 shares disk1's cohort (model and lot) and has run longer than disk1 had when it
    # failed: Nelson-Aalen 1 failure / 2 lives at risk at that age
    assert _row(stored, "disk7", 80)["cohort_cum_hazard"] == pytest.approx(0.5)


def test_each_chunk_is_written_before_the_next_is_staged(chunked):
    config, chunks, stored_when_staged = chunked
    firsts = {first: stored for first, stored in stored_when_staged}
    assert len(firsts) == len(chunks)
    for (blocks, _), (_, spans) in zip(chunks[1:], chunks):
        # when a chunk's shards start, the store holds every date of the chunk before
        assert firsts[blocks[0][0]].date() == spans[-1][0]
    assert stored_when_staged[0][1] is None
