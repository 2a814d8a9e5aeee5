"""Fixtures of the features tests; the fleet builders are in ``fleet_helpers``."""

from __future__ import annotations

import pytest

from foreshock.config import load_config


@pytest.fixture
def small_config(tmp_path):
    return load_config(None, data_dir=tmp_path / "data").with_overrides(
        {"features": {"windows": ["1h", "6h", "24h"], "baseline_window": "24h", "expected_sample_every": "10m"}}
    )
