"""Reading the training sample from the Parquet feature store without holding the fleet.

What a user would notice if this broke: a backtest or ``train`` whose memory grows with
the whole fleet's history (it read everything, then kept a sample), or a training sample
that differs from the rows the store holds (wrong rows, wrong order, features cast wrong).
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl

from foreshock.models.estimators.dataset import FeatureSource, FrameSource, TrainingSample, training_frame
from tests.models.synthetic_fleet import synthetic_fleet

SHARDS = 3


def _store(fleet, tmp_path):
    """The fleet's features as a partitioned store (``date=.../shard=.../part.parquet``)."""
    from foreshock.features.store import write_features

    write_features(fleet.features, tmp_path / "features", SHARDS)
    return FeatureSource.from_dir(tmp_path / "features")


def test_training_sample_is_read_a_day_at_a_time_and_matches_the_store(rng, tmp_path, monkeypatch):
    fleet = synthetic_fleet(rng, units=40, days=8)
    source = _store(fleet, tmp_path)
    until = fleet.features.get_column("ts").max() - timedelta(hours=12)
    sample = TrainingSample(max_healthy_rows=2_000, adjacent=timedelta(hours=48))
    wanted = ["unit_id", "ts", "life_start", "ecc_sbe_volatile_total_increase_1d"]

    scanned: list[tuple] = []
    scan = FeatureSource.scan

    def recording_scan(self, start=None, end=None):
        scanned.append((start, end))
        return scan(self, start, end)

    monkeypatch.setattr(FeatureSource, "scan", recording_scan)
    frame = training_frame(source, fleet.failures, until, sample, columns=wanted)
    monkeypatch.undo()

    # The wide rows were read in windows of at most one day (the keys were read first,
    # through their own projection), never the whole history at once.
    row_reads = [(a, b) for a, b in scanned if a is not None and b is not None]
    assert len(row_reads) >= 7
    assert all(b - a <= timedelta(days=1) for a, b in row_reads)

    # Same rows, values and order as sampling the fleet in memory.
    expected = training_frame(FrameSource(fleet.features), fleet.failures, until, sample, columns=wanted)
    assert frame.columns == expected.columns == [*wanted, "sample_weight", "censored_at"]
    assert frame.height == expected.height > 0
    assert frame.get_column("ts").max() < until
    assert frame.select("unit_id", "ts").equals(frame.select("unit_id", "ts").sort("unit_id", "ts"))
    assert frame.equals(expected)
    # Only the columns asked for, the feature as Float32; the healthy rows' weights add up
    # to the fleet's unit-hours before the cutoff.
    assert frame.schema["ecc_sbe_volatile_total_increase_1d"] == pl.Float32
    total = fleet.features.filter(pl.col("ts") < until).height
    assert np.isclose(frame.get_column("sample_weight").sum(), total, rtol=0.02)
    assert frame.height < 0.5 * total


def test_a_view_of_the_past_reads_nothing_from_the_cut_on(rng, tmp_path):
    # A review refits the challenger on the store's snapshots before its window: whatever
    # range is asked for, the view must never hand back a later row, and its sample must
    # be the one drawn from the past held in memory.
    fleet = synthetic_fleet(rng, units=20, days=6)
    source = _store(fleet, tmp_path)
    cut = fleet.features.get_column("ts").min() + timedelta(days=3, hours=7)
    past = source.before(cut)
    in_memory = FrameSource(fleet.features.filter(pl.col("ts") < cut))

    assert past.span() == in_memory.span() and past.span()[1] < cut
    assert past.scan(None, cut + timedelta(days=2)).collect().get_column("ts").max() < cut
    assert past.keys().equals(in_memory.keys())
    assert past.before(cut + timedelta(days=1)).keys().equals(in_memory.keys())  # a view never widens
    sample = TrainingSample(max_healthy_rows=500, adjacent=timedelta(hours=48))
    wanted = ["unit_id", "ts", "ecc_sbe_volatile_total_increase_1d"]
    until = cut + timedelta(days=2)  # labels as known later (a review's window start), rows from before the cut
    expected = training_frame(in_memory, fleet.failures, until, sample, columns=wanted)
    assert training_frame(past, fleet.failures, until, sample, columns=wanted).equals(expected)


def test_healthy_rows_where_an_operator_rule_fires_are_kept_whole(rng, tmp_path):
    """``[models] sample_rule_firing``: a healthy GPU's burst of corrected errors (the
    negatives that look most like a precursor) is kept row for row at weight 1, where a
    uniform draw keeps a few of them at a large weight; the weights still add up to the
    fleet's healthy rows."""
    from foreshock.models.estimators.baseline import ThresholdBaseline

    fleet = synthetic_fleet(rng, units=40, days=8)
    failed = set(fleet.failures.get_column("unit_id").to_list())
    healthy_unit = next(u for u in sorted(set(fleet.features.get_column("unit_id"))) if u not in failed)
    burst = (pl.col("unit_id") == healthy_unit) & (pl.col("ts").dt.day() % 2 == 0)
    features = fleet.features.with_columns(
        pl.when(burst).then(500.0).otherwise(0.0).alias("ecc_sbe_volatile_total_increase_1d")
    )
    source = FrameSource(features)
    until = features.get_column("ts").max() - timedelta(hours=12)
    wanted = ["unit_id", "ts", "ecc_sbe_volatile_total_increase_1d"]
    uniform = TrainingSample(max_healthy_rows=300, adjacent=timedelta(hours=48))
    hard = TrainingSample(max_healthy_rows=300, adjacent=timedelta(hours=48), rules=ThresholdBaseline(["24h"]))

    bursting = features.filter(burst & (pl.col("ts") < until)).height
    kept_uniform = training_frame(source, fleet.failures, until, uniform, columns=wanted)
    kept_hard = training_frame(source, fleet.failures, until, hard, columns=wanted)
    in_burst = pl.col("ecc_sbe_volatile_total_increase_1d") > 0
    assert bursting > 50
    assert kept_uniform.filter(in_burst).height < bursting / 3
    assert kept_hard.filter(in_burst).height == bursting
    assert kept_hard.filter(in_burst).get_column("sample_weight").to_list() == [1.0] * bursting
    # Both samples stand for the same fleet: their weights add up to every row before the cut.
    fleet_rows = features.filter(pl.col("ts") < until).height
    for kept in (kept_uniform, kept_hard):
        assert abs(kept.get_column("sample_weight").sum() - fleet_rows) / fleet_rows < 0.1
