"""Cohort baseline hazard: the Nelson–Aalen estimate agrees with lifelines."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from fleet_helpers import T0

from foreshock.contract import UTC_TS
from foreshock.features.context import cohort_hazard_increments, life_table


def test_cohort_hazard_matches_lifelines_nelson_aalen():
    from lifelines import NelsonAalenFitter

    units = [f"gpu-node001-gpu{i}" for i in range(6)]
    inventory = pl.DataFrame(
        {"unit_id": units, "node": "gpu-node001", "rack": "r1", "model": "H100", "lot": "L7", "installed_at": [T0] * 6}
    ).with_columns(pl.col("installed_at").cast(UTC_TS))
    failed = {units[0]: 10, units[1]: 20, units[2]: 35}
    failures = pl.DataFrame(
        {"unit_id": list(failed), "failed_at": [T0 + timedelta(hours=h) for h in failed.values()]}
    ).with_columns(pl.col("failed_at").cast(UTC_TS))
    as_of = T0 + timedelta(hours=40)
    # A failure after as_of is not known yet and must not count.
    late = pl.concat(
        [
            failures,
            pl.DataFrame({"unit_id": [units[3]], "failed_at": [as_of + timedelta(hours=1)]}).with_columns(
                pl.col("failed_at").cast(UTC_TS)
            ),
        ]
    )

    curve = cohort_hazard_increments(life_table(inventory, late), inventory, as_of)

    # Lives seen by as_of: the first GPUs (3 failed, 3 running 40 h) and the 3 replacements.
    durations = [10, 20, 35, 40, 40, 40, 30, 20, 5]
    events = [1, 1, 1, 0, 0, 0, 0, 0, 0]
    reference = NelsonAalenFitter(nelson_aalen_smoothing=False).fit(durations, events)
    expected = reference.cumulative_hazard_.iloc[:, 0]
    assert curve["age_h"].to_list() == [10.0, 20.0, 35.0]
    for age, value in zip(curve["age_h"], curve["cum_hazard"]):
        assert value == pytest.approx(expected.loc[age])
