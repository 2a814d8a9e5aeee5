"""Feature snapshots from a real Parquet lake: point-in-time correctness, counters, gaps, lives."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from fleet_helpers import T0, Fleet, make_fleet, one_unit, snapshot_row, with_test_windows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from foreshock.contract import UTC_TS
from foreshock.features.build import build_features, spec_feature_columns
from foreshock.features.spec import feature_spec

SEED = 20261101


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    print(f"seed={SEED}")
    return make_fleet(SEED, units=8, days=2.5, failures=2)


@pytest.fixture(scope="module")
def full_features(fleet, tmp_path_factory):
    from foreshock.config import load_config

    config = with_test_windows(load_config(None, data_dir=tmp_path_factory.mktemp("full")))
    fleet.write(config.lake_dir)
    return config, build_features(config.lake_dir, config)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut_minutes=st.integers(min_value=3 * 60, max_value=int(2.5 * 24 * 60) - 1))
def test_features_never_look_past_the_snapshot(fleet, full_features, tmp_path_factory, cut_minutes):
    """Features from the data known at a cut time t equal the features from all data, for
    every snapshot at or before t (telemetry, events and failure tickets all truncated)."""
    from foreshock.config import load_config

    config, full = full_features
    cut = T0 + timedelta(minutes=cut_minutes)
    truncated_config = with_test_windows(load_config(None, data_dir=tmp_path_factory.mktemp("cut")))
    fleet.write(truncated_config.lake_dir, until=cut)
    truncated = build_features(truncated_config.lake_dir, truncated_config)

    assert truncated.height > 0
    assert truncated["ts"].max() <= cut
    expected = full.filter(pl.col("ts") <= truncated["ts"].max())
    assert truncated["ts"].max() > cut - timedelta(hours=2)
    assert_frame_equal(truncated, expected, check_exact=False, rel_tol=1e-9, abs_tol=1e-9)


def test_every_feature_is_named_after_its_window_and_is_float(full_features):
    config, full = full_features
    spec = feature_spec(config)
    features = spec_feature_columns(spec)
    assert set(features) <= set(full.columns)
    assert all(full.schema[c] == pl.Float64 for c in features)
    for name in (
        "ecc_sbe_volatile_total_increase_1d",
        "ecc_sbe_volatile_total_accel_1h_1d",
        "gpu_temp_c_drift_c_6h",
        "temp_residual_c_6h",
        "xid_class_memory_count_1d",
        "xid_48_count_6h",
        "telemetry_missing_frac_1h",
        "rack_error_rate_1d",
        "lot_failure_rate_1d",
        "cohort_cum_hazard",
        "age_days",
        "power_w_excursion_6h",
    ):
        assert name in features
    assert full.select("unit_id", "ts").is_duplicated().sum() == 0
    # Snapshots sit on the snapshot grid.
    assert (full["ts"].dt.minute() == 0).all() and (full["ts"].dt.second() == 0).all()


def test_counter_reset_mid_window_counts_the_value_after_the_reset(tmp_path):
    from foreshock.config import load_config

    config = with_test_windows(load_config(None, data_dir=tmp_path))
    start = T0 + timedelta(hours=23)
    values = [95, 100, 110, 120, 3, 5, 15, 20, 0, 2, 4, 4, 4]  # driver reload at 23:40, reboot at 00:20
    rows = [(start + timedelta(minutes=10 * i), "ecc_sbe_volatile_total", float(v)) for i, v in enumerate(values)]
    one_unit(rows).write(config.lake_dir)  # spans two date partitions
    out = build_features(config.lake_dir, config)

    at_midnight = snapshot_row(out, T0 + timedelta(days=1))  # samples 23:10 .. 00:00
    assert at_midnight["ecc_sbe_volatile_total_increase_1h"] == pytest.approx(5 + 10 + 10 + 3 + 2 + 10)
    one_am = snapshot_row(out, T0 + timedelta(days=1, hours=1))  # 00:10 .. 01:00, reset to 0 at 00:20
    assert one_am["ecc_sbe_volatile_total_increase_1h"] == pytest.approx(5 + 0 + 2 + 2 + 0 + 0)
    assert one_am["ecc_sbe_volatile_total_increase_6h"] == pytest.approx(40 + 9)
    assert one_am["ecc_sbe_volatile_total_last"] == 4
    # The last step up was at 00:40; the first in the longest window at 23:10.
    assert one_am["ecc_sbe_volatile_total_hours_since_last_increase"] == pytest.approx(20 / 60)
    assert one_am["ecc_sbe_volatile_total_hours_since_first_increase"] == pytest.approx(110 / 60)


def test_gap_grows_then_the_silent_unit_leaves_service(tmp_path):
    from foreshock.config import load_config

    config = with_test_windows(load_config(None, data_dir=tmp_path))
    every = timedelta(minutes=10)
    times = [T0 + every * i for i in range(1, 13)]  # 00:10 .. 02:00
    times += [T0 + timedelta(hours=5) + every * i for i in range(1, 7)]  # silent 02:00 .. 05:10
    times += [T0 + timedelta(hours=40) + every * i for i in range(1, 7)]  # back after 35 h
    rows = [(t, "gpu_temp_c", 60.0 + k % 3) for k, t in enumerate(times)] + [
        (t, "ecc_sbe_volatile_total", 10.0 + (k >= 12) * 7) for k, t in enumerate(times)
    ]
    one_unit(rows).write(config.lake_dir)
    out = build_features(config.lake_dir, config)

    gaps = {h: snapshot_row(out, T0 + timedelta(hours=h))["telemetry_gap_hours"] for h in (2, 3, 4, 5)}
    assert gaps == pytest.approx({2: 0.0, 3: 1.0, 4: 2.0, 5: 3.0})
    four = snapshot_row(out, T0 + timedelta(hours=4))
    assert four["gpu_temp_c_mean_1h"] is None and four["gpu_temp_c_max_1h"] is None
    assert four["telemetry_missing_frac_1h"] == 1.0
    assert four["telemetry_missing_frac_6h"] == pytest.approx(1 - 12 / 36)
    # The step across the 3-hour silence is booked when the unit comes back.
    assert snapshot_row(out, T0 + timedelta(hours=6))["ecc_sbe_volatile_total_increase_1h"] == 7
    # Silent for more than the longest window (1 day): out of service, no snapshots.
    silent = out.filter(
        (pl.col("ts") > T0 + timedelta(hours=29, minutes=10)) & (pl.col("ts") <= T0 + timedelta(hours=40))
    )
    assert silent.height == 0
    back = snapshot_row(out, T0 + timedelta(hours=41))
    assert back["telemetry_gap_hours"] == 0
    # A step across a silence longer than the longest window is unknown, not an increase.
    assert back["ecc_sbe_volatile_total_increase_1d"] == 0


def test_a_replaced_gpu_starts_a_new_life_without_the_old_errors(tmp_path):
    from foreshock.config import load_config

    config = with_test_windows(load_config(None, data_dir=tmp_path))
    unit = "gpu-node001-gpu0"
    every = timedelta(minutes=10)
    times = [T0 + every * i for i in range(1, 6 * 24)]  # one day
    failures = [T0 + timedelta(hours=6, minutes=5), T0 + timedelta(hours=15, minutes=30)]
    value, rows = 0.0, []
    for t in times:
        if t <= failures[0]:
            value += 50  # the first GPU is dying
        elif failures[1] < t:
            value = 0.0  # the third GPU in the slot is clean
        elif t <= failures[0] + every:
            value = 0.0  # the replacement starts from zero ...
        else:
            value += 1  # ... and logs a few errors
        rows.append((t, "ecc_sbe_volatile_total", value))
    fleet = one_unit(rows, installed=T0 - timedelta(days=3))
    fleet.failures = pl.DataFrame(
        {"unit_id": [unit, unit], "failed_at": failures, "mode": ["hbm", "hbm"]}
    ).with_columns(pl.col("failed_at").cast(UTC_TS))
    fleet.write(config.lake_dir)
    out = build_features(config.lake_dir, config)

    lives = out.group_by("life").agg(pl.col("ts").min(), pl.col("life_start").first()).sort("life")
    assert lives["life"].to_list() == [0, 1, 2]
    assert lives["life_start"].to_list() == [T0 - timedelta(days=3), *failures]
    seven = snapshot_row(out, T0 + timedelta(hours=7))
    assert seven["life"] == 1
    # The old GPU's 50-per-sample errors are not this GPU's: only its own steps count.
    assert seven["ecc_sbe_volatile_total_increase_6h"] == pytest.approx(5)
    assert seven["age_days"] == pytest.approx((55 / 60) / 24)
    late = snapshot_row(out, T0 + timedelta(hours=20))
    assert late["life"] == 2 and late["ecc_sbe_volatile_total_increase_1d"] == 0
    assert late["telemetry_missing_frac_1d"] == pytest.approx(0.0, abs=0.05)  # only since the swap


def test_peer_features_compare_units_at_the_same_snapshot(full_features):
    _, full = full_features
    # Unit 2 runs 5 C hotter than its power draw predicts (make_fleet).
    hot = full.filter(pl.col("unit_id") == "gpu-node000-gpu2")["temp_residual_c_6h"].drop_nulls()
    others = full.filter(pl.col("unit_id") != "gpu-node000-gpu2")["temp_residual_c_6h"].drop_nulls()
    assert hot.mean() > 2.0 and abs(others.mean()) < 1.5
    rates = full["rack_error_rate_1d"].drop_nulls()
    assert rates.min() >= 0 and rates.max() <= 1 and rates.max() > 0


def test_lot_failure_rate_and_cohort_hazard_use_only_past_failures(full_features, fleet):
    _, full = full_features
    first = fleet.failures.sort("failed_at").row(0, named=True)
    lot = fleet.inventory.filter(pl.col("unit_id") == first["unit_id"])["lot"][0]
    lot_units = fleet.inventory.filter(pl.col("lot") == lot).height
    rows = full.filter(pl.col("lot") == lot).sort("ts")
    before = rows.filter(pl.col("ts") < first["failed_at"])
    after = rows.filter((pl.col("ts") >= first["failed_at"]) & (pl.col("ts") < first["failed_at"] + timedelta(hours=1)))
    assert (before["lot_failure_rate_1h"] == 0).all()
    assert (after["lot_failure_rate_1h"] >= 1 / lot_units - 1e-12).all()
    # The cohort hazard moves only on days after a failure.
    day_of_failure = first["failed_at"].replace(hour=0, minute=0, second=0, microsecond=0)
    assert (full.filter(pl.col("ts") < day_of_failure + timedelta(days=1))["cohort_cum_hazard"] == 0).all()
