"""Bucket rollups do not depend on the row order of a raw partition."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from conftest import make_fleet
from polars.testing import assert_frame_equal

from foreshock.catalog import load_catalog
from foreshock.features.rollups import rollup_samples


def test_rollup_of_a_shuffled_partition_equals_the_sorted_one(seed):
    fleet = make_fleet(seed % 1000, units=4, days=1)
    catalog = load_catalog()
    ordered = fleet.samples.sort("unit_id", "ts", "metric")
    shuffled = ordered.sample(fraction=1.0, shuffle=True, seed=seed)
    args = (fleet.failures, catalog, timedelta(hours=1), timedelta(days=1))
    keys = ["unit_id", "life", "metric", "bucket"]
    expected, expected_scrapes = rollup_samples(ordered, *args)
    got, got_scrapes = rollup_samples(shuffled, *args)
    assert expected.height > 0
    assert_frame_equal(got.sort(keys), expected.sort(keys))
    assert_frame_equal(got_scrapes.sort(keys[:2] + ["bucket"]), expected_scrapes.sort(keys[:2] + ["bucket"]))
    counters = expected.filter(pl.col("metric") == "ecc_sbe_volatile_total")
    assert counters["inc"].sum() > 0
