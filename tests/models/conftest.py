"""Fixtures of the model tests (synthetic fleets live in ``synthetic_fleet.py``)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng(seed) -> np.random.Generator:
    """A numpy generator from the session's printed seed."""
    return np.random.default_rng(seed)
