"""The `features` Prefect flow on a real lake: partitions, incrementality, CLI."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from fleet_helpers import T0, make_fleet
from polars.testing import assert_frame_equal

from foreshock.config import load_config
from foreshock.features.build import build_features
from foreshock.features.store import feature_files, scan_features
from foreshock.pipelines.features_flow import features_flow

SEED = 3


def _config(tmp_path):
    return load_config(None, data_dir=tmp_path / "data").with_overrides(
        {
            "features": {"windows": ["1h", "6h", "1d"], "baseline_window": "1d", "expected_sample_every": "10m"},
            "lake": {"shards": 2},
        }
    )


def _stamps(config) -> dict:
    return {p: p.stat().st_mtime_ns for p in feature_files(config.features_dir)}


def test_flow_writes_partitions_and_only_computes_new_snapshots(prefect_server, tmp_path, capsys):
    config = _config(tmp_path)
    fleet = make_fleet(SEED, units=8, days=2.5, failures=1)
    first_cut = T0 + timedelta(hours=30, minutes=5)
    fleet.write(config.lake_dir, until=first_cut)

    first = features_flow(config.to_settings())
    files = feature_files(config.features_dir)
    assert first["rows"] > 0
    assert {p.parent.parent.name for p in files} == {"date=2026-11-01", "date=2026-11-02"}
    assert {p.parent.name for p in files} == {"shard=00", "shard=01"}
    stored = scan_features(config).collect()
    assert stored.height == first["rows"]
    assert stored["ts"].max() == T0 + timedelta(hours=30)

    # Nothing new in the lake: a second run (here through the CLI, which runs the same
    # flow) computes nothing and rewrites nothing.
    from foreshock.pipelines.cli import main

    before = _stamps(config)
    assert main(["--data-dir", str(config.data_dir), "features"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert _stamps(config) == before

    # More telemetry arrives: only the snapshots after the last stored one are computed ...
    fleet.write(config.lake_dir)
    later = features_flow(config.to_settings())
    assert later["snapshots_from"] == (T0 + timedelta(hours=31)).isoformat()
    new_rows = scan_features(config).filter(pl.col("ts") > T0 + timedelta(hours=30)).collect().height
    assert later["rows"] == new_rows > 0

    # ... and the incremental store equals a full computation from scratch.
    incremental = scan_features(config).collect().sort("unit_id", "ts")
    full = build_features(config.lake_dir, config)
    assert_frame_equal(incremental, full, check_exact=False, rel_tol=1e-9, abs_tol=1e-9)


def test_scan_features_aligns_columns_across_partitions(tmp_path):
    from foreshock.features.store import write_features

    features_dir = tmp_path / "features"
    day1 = pl.DataFrame({"unit_id": ["a"], "ts": [T0 + timedelta(hours=1)], "x_mean_1h": [1.0]})
    day2 = pl.DataFrame(
        {"unit_id": ["a", "b"], "ts": [T0 + timedelta(days=1)] * 2, "x_mean_1h": [2.0, 3.0], "y_last": [5.0, 6.0]}
    )
    write_features(day1.with_columns(pl.col("ts").dt.cast_time_unit("us")), features_dir, 2)
    write_features(day2.with_columns(pl.col("ts").dt.cast_time_unit("us")), features_dir, 2)
    out = scan_features(features_dir).collect().sort("ts", "unit_id")
    assert out.columns == ["unit_id", "ts", "x_mean_1h", "y_last"]
    assert out["y_last"].to_list() == [None, 5.0, 6.0]
    # Writing a snapshot again replaces its row instead of duplicating it.
    write_features(
        day1.with_columns(pl.col("ts").dt.cast_time_unit("us"), pl.lit(9.0).alias("x_mean_1h")), features_dir, 2
    )
    again = scan_features(features_dir).collect()
    assert again.height == 3 and again.filter(pl.col("unit_id") == "a").sort("ts")["x_mean_1h"].to_list() == [9.0, 2.0]


def test_feature_rows_in_any_order_land_sorted_in_their_date_and_shard(tmp_path):
    """Rows handed over in any order are stored one file per date and lake shard, each
    sorted by unit and time and holding exactly its rows."""
    from foreshock.features.store import feature_files, write_features
    from foreshock.lake.layout import shard_of

    units = [f"gpu-{i:03d}" for i in range(40)]
    rows = pl.DataFrame(
        {
            "unit_id": units * 30,
            "ts": [T0 + timedelta(hours=3 * (i // 40)) for i in range(1200)],
            "x_mean_1h": [float(i) for i in range(1200)],
        }
    ).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    features_dir = tmp_path / "features"
    assert write_features(rows.sample(fraction=1.0, shuffle=True, seed=5), features_dir, 4) == 1200
    files = feature_files(features_dir)
    assert len(files) == 4 * 4  # 90 hours: four dates, four shards each
    stored = []
    for path in files:
        part = pl.read_parquet(path)
        day, shard = path.parent.parent.name.split("=")[1], int(path.parent.name.split("=")[1])
        assert part.equals(part.sort("unit_id", "ts"))
        assert {shard_of(u, 4) for u in part["unit_id"]} == {shard}
        assert {t.date().isoformat() for t in part["ts"]} == {day}
        stored.append(part)
    assert_frame_equal(pl.concat(stored).sort("unit_id", "ts"), rows.sort("unit_id", "ts"))
