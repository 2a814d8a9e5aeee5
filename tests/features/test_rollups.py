"""Bucket rollups do not depend on the row order of a raw partition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest
from fleet_helpers import make_fleet
from polars.testing import assert_frame_equal

from foreshock.catalog import load_catalog
from foreshock.contract import UTC_TS
from foreshock.features import rollups
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


def _scrape_of_every_metric(units: int = 3, seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A partition as an exporter writes it: every sample time of every unit holds the same
    metrics (two counters with resets and one gauge), one unit silent for longer than the
    longest window, one unit failing mid-series; and its failures."""
    rng = np.random.default_rng(seed)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    rows = []
    for u in range(units):
        times = [start + timedelta(minutes=5 * i) for i in range(600)]
        if u == 0:  # a 30-hour silence: no step is taken across it
            times = times[:100] + [t + timedelta(hours=30) for t in times[100:]]
        sbe = np.cumsum(rng.poisson(0.3, len(times))).astype(float)
        sbe[300:] -= sbe[300]  # a driver reload resets the counter
        replay = np.cumsum(rng.poisson(0.05, len(times))).astype(float)
        temp = 40 + 10 * rng.random(len(times))
        for i, t in enumerate(times):
            for metric, value in (
                ("ecc_sbe_volatile_total", sbe[i]),
                ("gpu_temp_c", temp[i]),
                ("pcie_replay_total", replay[i]),
            ):
                rows.append((f"gpu-{u}", t, metric, float(value)))
    samples = pl.DataFrame(rows, schema=["unit_id", "ts", "metric", "value"], orient="row").with_columns(
        pl.col("ts").cast(UTC_TS)
    )
    failures = pl.DataFrame({"unit_id": ["gpu-1"], "failed_at": [start + timedelta(hours=20)]}).with_columns(
        pl.col("failed_at").cast(UTC_TS)
    )
    return samples, failures


def test_a_partition_of_whole_scrapes_rolls_up_like_each_metric_alone(monkeypatch):
    """Where every sample time holds the same metrics the rollup takes one row per time and
    one group-by for all metrics; it must give what each metric rolled up alone gives (the
    per-metric path), counter steps, resets, silences and lives included."""
    samples, failures = _scrape_of_every_metric()
    catalog = load_catalog()
    args = (failures, catalog, timedelta(hours=1), timedelta(days=1))
    keys = ["unit_id", "life", "metric", "bucket"]
    paths = []
    real = rollups.regular_pieces
    monkeypatch.setattr(rollups, "regular_pieces", lambda *a, **k: paths.append("one row per time") or real(*a, **k))
    whole, whole_scrapes = rollup_samples(samples, *args)
    assert paths == ["one row per time"]
    alone = [rollup_samples(samples.filter(pl.col("metric") == m), *args) for m in samples["metric"].unique()]
    assert paths == ["one row per time"]  # a single metric takes the per-metric path
    assert_frame_equal(whole.sort(keys), pl.concat([p for p, _ in alone]).sort(keys))
    for _, scrapes in alone:
        assert_frame_equal(whole_scrapes.sort(keys[:2] + ["bucket"]), scrapes.sort(keys[:2] + ["bucket"]))
    assert whole["life"].max() == 1 and whole.filter(pl.col("metric") == "ecc_sbe_volatile_total")["inc"].sum() > 0
    # A missing sample breaks the shape: the per-metric path, with the same pieces elsewhere.
    gap = samples.filter(
        ~((pl.col("unit_id") == "gpu-2") & (pl.col("metric") == "gpu_temp_c") & (pl.col("value") > 49))
    )
    paths.clear()
    broken, _ = rollup_samples(gap, *args)
    assert paths == []
    untouched = ~((pl.col("unit_id") == "gpu-2") & (pl.col("metric") == "gpu_temp_c"))
    assert_frame_equal(broken.filter(untouched).sort(keys), whole.filter(untouched).sort(keys))


def _off_by_seconds(samples: pl.DataFrame) -> pl.DataFrame:
    """One metric of the last scrape of a bucket sampled 7 s after the others (so in the
    next bucket)."""
    late = pl.int_range(pl.len()) == 3 * 12 + 1
    return samples.with_columns(pl.when(late).then(pl.col("ts") + pl.duration(seconds=7)).otherwise("ts").alias("ts"))


def _scrapes_across_units(samples: pl.DataFrame) -> pl.DataFrame:
    """gpu-1 stops after the first two metrics of its 401st scrape and gpu-2 starts with
    the third metric of the same time: every three rows still share a time and follow the
    metric pattern, but one scrape holds two units."""
    at = samples.filter(pl.col("unit_id") == "gpu-1").get_column("ts").unique().sort()[400]
    row = pl.int_range(pl.len()).over("unit_id", "ts")
    gpu1 = (pl.col("unit_id") == "gpu-1") & ((pl.col("ts") < at) | ((pl.col("ts") == at) & (row < 2)))
    gpu2 = (pl.col("unit_id") == "gpu-2") & ((pl.col("ts") > at) | ((pl.col("ts") == at) & (row == 2)))
    return samples.filter((pl.col("unit_id") == "gpu-0") | gpu1 | gpu2)


PERTURBED = {
    "a scrape across two units": _scrapes_across_units,
    "a metric of one scrape 7 s late": _off_by_seconds,
    "units out of order": lambda s: pl.concat(
        [s.filter(pl.col("unit_id") == "gpu-2"), s.filter(pl.col("unit_id") != "gpu-2")]
    ),
    "a unit's rows in two runs": lambda s: pl.concat(
        [s.slice(0, 300), s.filter(pl.col("unit_id") == "gpu-1"), s.slice(300)]
    ).unique(maintain_order=True),
    "a NaN value": lambda s: s.with_columns(
        pl.when(pl.int_range(pl.len()) == 901).then(float("nan")).otherwise("value").alias("value")
    ),
    "a metric outside the catalog in every scrape": lambda s: pl.concat(
        [s, s.filter(pl.col("metric") == "gpu_temp_c").with_columns(pl.lit("vendor_special").alias("metric"))]
    ).sort("unit_id", "ts", "metric"),
    "two metrics swapped in one scrape": lambda s: pl.concat(
        [s.slice(0, 150), s.slice(151, 1), s.slice(150, 1), s.slice(152)]
    ),
    "a scrape stored twice": lambda s: pl.concat([s.slice(0, 600), s.slice(597, 3), s.slice(600)]),
    "a time going back": lambda s: pl.concat([s.slice(0, 600), s.slice(0, 3), s.slice(600)]),
}


@pytest.mark.parametrize("change", sorted(PERTURBED))
def test_a_partition_that_is_nearly_whole_scrapes_rolls_up_like_each_metric_alone(change):
    """A partition of the lake's usual shape but for one flaw (a late sample, units out of
    order or split, a NaN, a foreign metric, a repeated or earlier scrape) must not be
    rolled up by the one-row-per-time path as if it were whole: the pieces equal those of
    each metric rolled up alone."""
    samples, failures = _scrape_of_every_metric()
    samples = PERTURBED[change](samples)
    catalog = load_catalog()
    args = (failures, catalog, timedelta(hours=1), timedelta(days=1))
    keys = ["unit_id", "life", "metric", "bucket"]
    whole, whole_scrapes = rollup_samples(samples, *args)
    alone = [rollup_samples(samples.filter(pl.col("metric") == m), *args) for m in samples["metric"].unique()]
    assert_frame_equal(whole.sort(keys), pl.concat([p for p, _ in alone]).sort(keys))
    assert whole.height > 0


def test_pieces_of_two_files_combine_to_the_pieces_of_one():
    """A day boundary cuts buckets (and counter steps) in two files: rolled up file by file
    and combined, the pieces equal those of the rows rolled up at once, the bucket that
    spans the cut included (its counts, sums, last value and the step across the cut)."""
    samples, failures = _scrape_of_every_metric()
    catalog = load_catalog()
    every, max_gap = timedelta(hours=1), timedelta(days=1)
    cut = datetime(2026, 11, 1, 17, 22, tzinfo=UTC)  # inside a bucket, between two samples
    keys = ["unit_id", "life", "metric", "bucket"]
    parts = [
        rollup_samples(samples.filter(part), failures, catalog, every, max_gap)[0]
        for part in (pl.col("ts") <= cut, pl.col("ts") > cut)
    ]
    combined = rollups.combine_pieces(pl.concat(parts), max_gap).sort(keys)
    once = rollups.combine_pieces(rollup_samples(samples, failures, catalog, every, max_gap)[0], max_gap).sort(keys)
    assert_frame_equal(combined, once)
    spanning = combined.filter(pl.col("bucket") == datetime(2026, 11, 1, 18, tzinfo=UTC))
    assert spanning.height > 0 and (spanning["n"] == 12).all()
    assert combined.filter(pl.col("metric") == "ecc_sbe_volatile_total")["inc"].sum() > 0


def test_a_partition_from_another_writer_reads_and_rolls_up_the_same(tmp_path):
    """The rollup reads a partition's ids and metric names as codes from the Parquet
    dictionary pages the lake writes.  Files written otherwise (no dictionary, several row
    groups with different dictionaries, a day in two files, a null id) must give the same
    rows and the same rollup as reading their text."""
    import pyarrow.parquet as pq

    from foreshock.features.day_rollups import read_samples_coded

    samples, failures = _scrape_of_every_metric(units=4)
    samples = samples.with_columns(
        pl.when(pl.int_range(pl.len()) == 5).then(None).otherwise(pl.col("unit_id")).alias("unit_id")
    )
    lake_file, plain, groups, second = (tmp_path / f"{name}.parquet" for name in ("lake", "plain", "groups", "second"))
    samples.write_parquet(lake_file)
    pq.write_table(samples.to_arrow(), plain, use_dictionary=False)
    pq.write_table(samples.sort("metric").to_arrow(), groups, row_group_size=500)  # other dictionaries per group
    half = samples.height // 2
    samples.slice(0, half).write_parquet(second)
    samples.slice(half).write_parquet(lake_file.with_name("rest.parquet"))
    args = (failures, load_catalog(), timedelta(hours=1), timedelta(days=1))
    keys = ["unit_id", "life", "metric", "bucket"]
    expected, expected_scrapes = rollup_samples(samples, *args)
    assert expected.height > 0
    for files, rows in (
        ([lake_file], samples),
        ([plain], samples),
        ([groups], samples.sort("metric")),
        ([second, lake_file.with_name("rest.parquet")], samples),
    ):
        coded = read_samples_coded(files)
        assert coded.schema["unit_id"] == pl.Categorical and coded.schema["metric"] == pl.Categorical
        assert_frame_equal(coded.with_columns(pl.col("unit_id", "metric").cast(pl.String)), rows)
        got, got_scrapes = rollup_samples(coded, *args)
        assert_frame_equal(got.sort(keys), expected.sort(keys))
        assert_frame_equal(got_scrapes.sort(keys[:2] + ["bucket"]), expected_scrapes.sort(keys[:2] + ["bucket"]))


@pytest.mark.parametrize("every", [timedelta(hours=1), timedelta(hours=30)])
def test_pieces_of_many_files_combine_to_the_pieces_of_one(every):
    """Only a series' first and last piece in each file are merged across files: cut into
    six files, with a unit silent over two cuts (its step is taken from a piece in the
    middle of an earlier file) and, with 30-hour buckets, buckets spanning three files, the
    combined pieces still equal those of the rows rolled up at once."""
    samples, failures = _scrape_of_every_metric()
    start = datetime(2026, 11, 1, tzinfo=UTC)
    # gpu-2 silent from 9:00 to 25:00: over the cuts at 10:00 and 20:00, within max_gap
    samples = samples.filter(
        ~(
            (pl.col("unit_id") == "gpu-2")
            & pl.col("ts").is_between(start + timedelta(hours=9), start + timedelta(hours=25))
        )
    )
    catalog, max_gap = load_catalog(), timedelta(days=1)
    cuts = [start + timedelta(hours=h, minutes=2) for h in (5, 10, 20, 30, 40)]
    bounds = [start - timedelta(days=1), *cuts, start + timedelta(days=9)]
    keys = ["unit_id", "life", "metric", "bucket"]
    parts = [
        rollup_samples(samples.filter((pl.col("ts") > lo) & (pl.col("ts") <= hi)), failures, catalog, every, max_gap)[0]
        for lo, hi in zip(bounds, bounds[1:])
    ]
    assert 0 < pl.concat(parts)["edge"].sum() < pl.concat(parts).height  # only some pieces are merged
    combined = rollups.combine_pieces(pl.concat(parts), max_gap).sort(keys)
    once = rollups.combine_pieces(rollup_samples(samples, failures, catalog, every, max_gap)[0], max_gap).sort(keys)
    assert_frame_equal(combined, once)
    bridged = combined.filter((pl.col("unit_id") == "gpu-2") & (pl.col("metric") == "ecc_sbe_volatile_total"))
    assert bridged.filter(pl.col("bucket") > start + timedelta(hours=25))["inc"].sum() > 0
