"""Fixtures for the ingest tests: a configured data directory and a small landing directory."""

from __future__ import annotations

import pytest
from landing_files import Landing, write_landing

from foreshock.config import load_config


@pytest.fixture
def config(tmp_path):
    return load_config(data_dir=tmp_path / "data").with_overrides({"ingest": {"timezone": "UTC"}})


@pytest.fixture
def landing(tmp_path) -> Landing:
    return write_landing(tmp_path / "raw")
