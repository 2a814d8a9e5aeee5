"""Fixtures of the health tests: the built-in configuration and its ``[health]`` settings."""

from __future__ import annotations

import pytest

from foreshock.config import load_config
from foreshock.health.settings import HealthSettings


@pytest.fixture
def health_config(tmp_path):
    return load_config(data_dir=tmp_path / "data")


@pytest.fixture
def settings(health_config) -> HealthSettings:
    """The built-in ``[health]`` settings (the defaults are what the tests check)."""
    return HealthSettings.from_config(health_config)
