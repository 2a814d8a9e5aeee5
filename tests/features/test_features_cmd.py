"""`foreshock features` without a Prefect API: the plan runs here, without Prefect."""

from __future__ import annotations

from fleet_helpers import make_fleet
from polars.testing import assert_frame_equal
from prefect_free import run_without_prefect_api

from foreshock.config import load_config
from foreshock.features.build import build_features
from foreshock.features.store import scan_features


def test_the_command_without_an_api_stores_the_features_without_prefect(tmp_path):
    """No temporary server (nor Prefect's import) for a command nobody records: the store
    it writes is the in-memory build's, and a second run finds nothing to do."""
    settings = tmp_path / "foreshock.toml"
    settings.write_text('[features]\nwindows = ["1h", "6h", "1d"]\nbaseline_window = "1d"\n')
    config = load_config(settings, data_dir=tmp_path / "data")
    make_fleet(5, units=6, days=2, failures=1).write(config.lake_dir)
    arguments = ["--config", str(settings), "--data-dir", str(config.data_dir), "features"]

    first = run_without_prefect_api(tmp_path, arguments)
    assert first.returncode == 0, first.stderr
    assert "prefect loaded: False" in first.stdout
    stored = scan_features(config).collect().sort("unit_id", "ts")
    assert f"features: {stored.height} unit snapshots" in first.stdout
    assert_frame_equal(stored, build_features(config.lake_dir, config))
    again = run_without_prefect_api(tmp_path, arguments)
    assert "up to date" in again.stdout and "prefect loaded: False" in again.stdout
