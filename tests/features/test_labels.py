"""Labels: horizons, lives, and survival intervals on small hand-made fleets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from foreshock.contract import UTC_TS
from foreshock.features.labels import add_labels, survival_intervals

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _snapshots(units: list[str], hours: int, feature: float = 1.0) -> pl.DataFrame:
    rows = [
        {"unit_id": u, "ts": T0 + timedelta(hours=h), "life_start": T0 - timedelta(days=30), "sbe_increase_1h": feature}
        for u in units
        for h in range(hours)
    ]
    return pl.DataFrame(rows, schema_overrides={"ts": UTC_TS, "life_start": UTC_TS})


def _failures(rows: list[tuple[str, datetime]]) -> pl.DataFrame:
    return pl.DataFrame(
        {"unit_id": [u for u, _ in rows], "failed_at": [t for _, t in rows], "mode": [None] * len(rows)},
        schema={"unit_id": pl.String, "failed_at": UTC_TS, "mode": pl.String},
    )


def test_horizons_flag_only_snapshots_within_reach_of_the_failure():
    frame = _snapshots(["a", "b"], hours=100)
    failed_at = T0 + timedelta(hours=80, minutes=30)
    labelled = add_labels(frame, _failures([("a", failed_at)]), ["24h", "72h"])

    a = labelled.filter(pl.col("unit_id") == "a")
    # Snapshots after the failure belong to the next life, not to this one.
    assert a.filter(pl.col("life") == 0)["ts"].max() == T0 + timedelta(hours=80)
    life0 = a.filter(pl.col("life") == 0)
    hours_left = (failed_at - life0["ts"].to_list()[0]).total_seconds() / 3600
    assert life0["time_to_failure_h"][0] == pytest.approx(hours_left)
    within_24h = life0.filter(pl.col("fails_within_1d"))["ts"]
    assert within_24h.min() == failed_at - timedelta(hours=23, minutes=30)  # 57:00
    within_72h = life0.filter(pl.col("fails_within_3d"))["ts"]
    assert within_72h.min() == T0 + timedelta(hours=9)
    assert within_72h.len() == 72

    b = labelled.filter(pl.col("unit_id") == "b")
    assert b.height == 100
    assert not b["fails_within_3d"].any()
    assert b["time_to_failure_h"].null_count() == 100


def test_horizon_names_follow_format_duration():
    labelled = add_labels(_snapshots(["a"], 3), _failures([]), ["6h", timedelta(days=7)])
    assert {"fails_within_6h", "fails_within_7d"} <= set(labelled.columns)


def test_snapshot_at_the_failure_is_dropped_and_replacement_starts_a_new_life():
    frame = _snapshots(["a"], hours=60)
    first, second = T0 + timedelta(hours=10), T0 + timedelta(hours=40, minutes=15)
    labelled = add_labels(frame, _failures([("a", second), ("a", first)]), ["24h"])

    assert first not in labelled["ts"].to_list()  # the snapshot exactly at the failure
    lives = labelled.group_by("life").agg(pl.col("ts").min().alias("t0"), pl.col("ts").max().alias("t1"), pl.len())
    lives = lives.sort("life")
    assert lives["life"].to_list() == [0, 1, 2]
    assert lives["t1"].to_list()[:2] == [T0 + timedelta(hours=9), T0 + timedelta(hours=40)]
    # The new life starts at the failure that ended the previous one.
    life_start = labelled.group_by("life").agg(pl.col("life_start").first()).sort("life")["life_start"].to_list()
    assert life_start == [T0 - timedelta(days=30), first, second]
    last_life = labelled.filter(pl.col("life") == 2)
    assert last_life["time_to_failure_h"].null_count() == last_life.height
    life1 = labelled.filter(pl.col("life") == 1)
    assert life1["fails_within_1d"].sum() == 24  # 17:00 .. 40:00


def test_survival_intervals_end_with_the_event_in_the_failure_interval():
    frame = _snapshots(["a", "b"], hours=6)
    failed_at = T0 + timedelta(hours=3, minutes=30)
    intervals = survival_intervals(frame, _failures([("a", failed_at)]), "1h")

    assert intervals.columns[:5] == ["unit_id", "life", "start", "stop", "event"]
    assert "sbe_increase_1h" in intervals.columns
    a0 = intervals.filter((pl.col("unit_id") == "a") & (pl.col("life") == 0))
    base = 30 * 24
    assert a0["start"].to_list() == [base + h for h in range(4)]
    assert a0["stop"].to_list() == pytest.approx([base + 1, base + 2, base + 3, base + 3.5])
    assert a0["event"].to_list() == [0, 0, 0, 1]
    # After the failure the slot's new GPU is timed from its own start.
    a1 = intervals.filter((pl.col("unit_id") == "a") & (pl.col("life") == 1))
    assert a1["start"].to_list() == pytest.approx([0.5, 1.5])
    assert a1["event"].sum() == 0
    b = intervals.filter(pl.col("unit_id") == "b")
    assert b["event"].sum() == 0 and b.height == 6
    assert (intervals["stop"] > intervals["start"]).all()


def test_survival_intervals_feed_lifelines():
    from lifelines import CoxTimeVaryingFitter

    frame = _snapshots([f"u{i}" for i in range(6)], hours=30)
    frame = frame.with_columns(
        pl.when(pl.col("unit_id").is_in(["u0", "u1", "u2"])).then(5.0).otherwise(0.0).alias("sbe_increase_1h")
        + pl.col("ts").dt.hour().cast(pl.Float64) / 100
    )
    fails = _failures(
        [
            ("u0", T0 + timedelta(hours=20)),
            ("u1", T0 + timedelta(hours=12, minutes=5)),
            ("u4", T0 + timedelta(hours=25)),
        ]
    )
    intervals = survival_intervals(frame, fails, "1h").with_columns(pl.format("{}-{}", "unit_id", "life").alias("id"))
    fitter = CoxTimeVaryingFitter()
    fitter.fit(
        intervals.drop("unit_id", "life").to_pandas(),
        id_col="id",
        event_col="event",
        start_col="start",
        stop_col="stop",
    )
    assert fitter.params_["sbe_increase_1h"] > 0
