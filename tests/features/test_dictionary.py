"""The feature dictionary (features/dictionary.md) says what every column the build writes is."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from fleet_helpers import make_fleet

from foreshock.catalog import load_catalog
from foreshock.config import load_config
from foreshock.features.build import build_features, spec_feature_columns
from foreshock.features.dictionary import (
    CONTEXT_COLUMNS,
    PATTERNS,
    builtin_config,
    builtin_dictionary,
    describe_columns,
    render_dictionary,
)
from foreshock.features.spec import feature_spec
from foreshock.features.store import partition_path, scan_features
from foreshock.pipelines.cli import main

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "features" / "dictionary.md"
CATALOGS = sorted((ROOT / "features" / "catalogs").glob("*.yaml"))


def test_committed_dictionary_is_what_the_code_generates():
    assert COMMITTED.read_text() == builtin_dictionary(), (
        "features/dictionary.md is stale: run `foreshock dictionary --builtin --out features/dictionary.md`"
    )


def test_every_pattern_describes_some_column_of_the_builtin_features():
    # the optional peer-relative, rising-share and health columns too ([features] peer_relative,
    # rising_share and [health] features, off by default)
    spec = replace(
        feature_spec(builtin_config()), peer_relative=True, rising_share=True, health_window=timedelta(days=1)
    )
    columns = describe_columns(spec)
    assert [c.name for c in columns] == spec_feature_columns(spec)
    unused = [p.shown for p in PATTERNS if not any(c.pattern is p for c in columns)]
    assert not unused, f"patterns no column has: {unused}"
    by_name = {c.name: c for c in columns}
    # units and windows as a reader needs them
    assert (
        by_name["ecc_sbe_volatile_total_increase_1d"].unit,
        by_name["ecc_sbe_volatile_total_increase_1d"].window,
    ) == (
        "count",
        "1d",
    )
    assert (
        by_name["gpu_temp_c_drift_c_6h"].unit == "celsius"
        and by_name["gpu_temp_c_drift_c_6h"].window == "6h against 7d"
    )
    assert by_name["pcie_replay_total_accel_1h_7d"].window == "1h over 7d"
    assert (
        by_name["ecc_sbe_volatile_total_rising_share_6h"].unit,
        by_name["ecc_sbe_volatile_total_rising_share_6h"].window,
    ) == ("share", "6h")
    assert by_name["telemetry_gap_hours"].unit == "h"


def test_every_column_a_small_fleet_gets_matches_one_pattern(tmp_path):
    """The columns the features stage really writes, not only the ones it lists."""
    config = load_config(None, data_dir=tmp_path / "data").with_overrides(
        {"features": {"windows": ["1h", "6h", "24h"], "baseline_window": "24h"}}
    )
    make_fleet(7, units=8, days=2, failures=1).write(config.lake_dir)
    frame = build_features(config.lake_dir, config)
    assert frame.height > 0
    features = [c for c, t in frame.schema.items() if c not in CONTEXT_COLUMNS]
    assert all(frame.schema[c] == pl.Float64 for c in features)
    described = describe_columns(feature_spec(config), features)
    assert sorted(c.name for c in described) == sorted(features)
    assert set(frame.columns) - set(features) <= set(CONTEXT_COLUMNS)


def test_a_column_no_pattern_describes_is_an_error():
    spec = feature_spec(builtin_config())
    with pytest.raises(ValueError, match="gpu_temp_c_wobble_1d"):
        describe_columns(spec, ["gpu_temp_c_mean_1d", "gpu_temp_c_wobble_1d"])
    # a pattern's metric placeholder only takes metrics of its kind: a counter has no mean
    with pytest.raises(ValueError, match="ecc_sbe_volatile_total_mean_1d"):
        describe_columns(spec, ["ecc_sbe_volatile_total_mean_1d"])


@pytest.mark.parametrize("path", CATALOGS, ids=[p.name for p in CATALOGS])
def test_example_catalog_loads_and_its_features_are_described(path, tmp_path):
    catalog = load_catalog(path)
    assert catalog.by(kind="counter", family="error"), "an example without an error counter shows little"
    for metric in catalog:
        assert metric.unit and metric.description, metric.name
        assert len(set(metric.aliases)) == len(metric.aliases)
    # daily telemetry, as docs/byot.md configures it
    site = tmp_path / "foreshock.toml"
    site.write_text(
        f'[paths]\ncatalog = "{path}"\n[features]\nsnapshot_every = "1d"\nwindows = ["1d", "3d", "7d", "30d"]\n'
        'baseline_window = "30d"\nexpected_sample_every = "1d"\n'
    )
    config = load_config(site, data_dir=tmp_path / "data")
    assert config.catalog.names() == catalog.names()
    text = render_dictionary(config, "an example")
    for metric in catalog:
        assert f"| `{metric.name}_last` |" in text


def test_the_command_writes_the_committed_dictionary(tmp_path, capsys):
    out = tmp_path / "dictionary.md"
    assert main(["--data-dir", str(tmp_path / "data"), "dictionary", "--builtin", "--out", str(out)]) == 0
    assert out.read_text() == COMMITTED.read_text()
    assert main(["--data-dir", str(tmp_path / "data"), "dictionary"]) == 0
    assert "| `telemetry_gap_hours` |" in capsys.readouterr().out


def test_asking_the_store_for_a_feature_it_does_not_hold_fails_naming_it(tmp_path):
    features_dir = tmp_path / "features"
    stored = pl.DataFrame(
        {
            "unit_id": ["gpu-0", "gpu-1"],
            "ts": [datetime(2026, 11, 1, tzinfo=UTC)] * 2,
            "telemetry_missing_frac_1d": [0.0, 0.5],
            "xid_class_memory_count_1d": [0.0, 2.0],
        }
    )
    path = partition_path(features_dir, date(2026, 11, 1), 0)
    path.parent.mkdir(parents=True)
    stored.write_parquet(path)
    got = scan_features(features_dir, columns=["xid_class_memory_count_1d"]).collect()
    assert got.columns == ["unit_id", "ts", "xid_class_memory_count_1d"] and got.height == 2
    with pytest.raises(ValueError, match=r"'missing_fraction_1d' \(closest: telemetry_missing_frac_1d") as raised:
        scan_features(features_dir, columns=["xid_class_memory_count_1d", "missing_fraction_1d", "gap_h"])
    assert "'gap_h'" in str(raised.value)
    with pytest.raises(ValueError, match="no features stored"):
        scan_features(tmp_path / "empty", columns=["telemetry_gap_hours"])
