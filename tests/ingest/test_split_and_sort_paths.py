"""The cheaper splits and sorts of a batch give exactly what the plain operations give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

import foreshock.ingest.store as run
from foreshock.config import load_config
from foreshock.ingest.counter_steps import _sort_by_series_time
from foreshock.lake.columns import long_runs
from foreshock.lake.layout import shard_of, with_shard

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _readings(rows: int, seed: int, *, stored: bool) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "_sid": pl.Series(rng.integers(0, 7, rows), dtype=pl.UInt64),
            "_max_rate": pl.Series(rng.uniform(0, 1, rows)),
            "ts": pl.Series(T0.timestamp() * 1e6 + rng.integers(0, 20, rows) * 60e6)
            .cast(pl.Int64)
            .cast(pl.Datetime("us", "UTC")),
            "value": pl.Series(rng.uniform(0, 1, rows)),
            "_row": pl.Series([None] * rows if stored else list(range(rows)), dtype=pl.UInt32),
        }
    )


def test_series_sort_merges_sorted_parts_in_the_order_of_one_stable_sort():
    """Ties within and across parts (same series and time), unsorted and sorted parts, an
    empty part: stored rows stay before new ones, each part's rows in their order."""
    stored, new = _readings(300, 1, stored=True), _readings(900, 2, stored=False)
    in_order = new.sort("_sid", "ts", maintain_order=True).with_columns(_row=pl.int_range(pl.len(), dtype=pl.UInt32))
    for parts in ([stored, new], [stored, in_order], [stored.head(0), new], [in_order], [stored, stored, new]):
        expected = pl.concat(parts).sort("_sid", "ts", maintain_order=True)
        assert _sort_by_series_time(parts, 7).equals(expected)


def test_with_shard_is_the_crc32_shard_of_each_unit_and_null_without_one():
    units = pl.Series(["node1-gpu0", None, "a", "node1-gpu0", "B", None, "zz"], dtype=pl.String)
    frame = pl.DataFrame({"unit_id": units, "x": range(units.len())})
    expected = [None if u is None else shard_of(u, 5) for u in units.to_list()]
    shard = with_shard(frame, 5).get_column("shard")
    assert shard.dtype == pl.Int32 and shard.to_list() == expected


def test_shard_numbers_per_run_of_a_unit_are_those_of_the_per_row_lookup():
    """Long runs of one unit (looked up once per run), runs with nulls, shuffled rows, and
    rows in runs at first and shuffled after: the shards of the per-row lookup."""
    from foreshock.lake.columns import RUN_LOOKUP_MIN_ROWS
    from foreshock.lake.layout import _shard_numbers, shard_numbers

    units = pl.Series([f"node{n}-gpu{g}" for n in range(30) for g in range(8)], dtype=pl.String)
    runs = units.gather(np.repeat(np.arange(units.len()), 300))
    with_nulls = pl.concat([pl.Series([None] * 700, dtype=pl.String), runs, pl.Series([None] * 5, dtype=pl.String)])
    shuffled = runs.sample(fraction=1.0, shuffle=True, seed=7)
    mixed = pl.concat([runs.head(RUN_LOOKUP_MIN_ROWS * 2), shuffled])
    for series in (runs, with_nulls, shuffled, mixed, runs.head(100)):
        expected = _shard_numbers(series, 8)
        got = shard_numbers(series, 8)
        assert got.dtype == pl.Int32 and got.name == "shard" and got.equals(expected)
    assert shard_numbers(with_nulls, 8).null_count() == 705


def test_distinct_values_from_runs_are_those_of_unique():
    """Long runs (with nulls), shuffled values, runs at first and shuffled after, a short
    column: the values of ``unique``, in order of first appearance when asked."""
    from foreshock.lake.columns import RUN_LOOKUP_MIN_ROWS, distinct_values

    units = pl.Series([f"node{n}-gpu{g}" for n in range(30) for g in range(8)], dtype=pl.String)
    runs = units.gather(np.repeat(np.arange(units.len())[::-1], 300))
    with_nulls = pl.concat([runs.head(9000), pl.Series([None] * 700, dtype=pl.String), runs.slice(9000)])
    shuffled = runs.sample(fraction=1.0, shuffle=True, seed=7)
    mixed = pl.concat([runs.head(RUN_LOOKUP_MIN_ROWS * 2), shuffled])
    assert long_runs(runs) is not None and long_runs(shuffled) is None and long_runs(mixed) is None
    for series in (runs, with_nulls, shuffled, mixed, runs.head(100)):
        assert distinct_values(series, maintain_order=True).to_list() == series.unique(maintain_order=True).to_list()
        assert distinct_values(series).sort(nulls_last=True).equals(series.unique().sort(nulls_last=True))


def _latest_plainly(lake_dir, units, metrics, first) -> pl.DataFrame:
    from foreshock.lake.read import read_table

    stored = read_table(lake_dir, "samples").filter(
        pl.col("metric").is_in(metrics) & pl.col("unit_id").is_in(units.implode()) & (pl.col("ts") < first)
    )
    return (
        stored.sort("ts").group_by("unit_id", "metric").agg(pl.all().last()).select("unit_id", "ts", "metric", "value")
    )


def test_stored_counters_take_each_series_latest_reading_from_runs_only_when_they_are_in_time_order(tmp_path):
    """The last stored reading of each series before a batch: from the ends of the series'
    runs when the lake lists them in time order (merged partitions), and from every row
    when a file does not (a partition written with times backwards); both as a plain group-by."""
    from datetime import timedelta

    from foreshock.ingest.context import IngestContext
    from foreshock.ingest.counter_steps import _stored_counters
    from foreshock.lake.layout import partition_path
    from foreshock.lake.merge import merge_into_lake

    units = pl.Series([f"node{n}-gpu{g}" for n in range(6) for g in range(4)], dtype=pl.String)
    metrics = ["ecc_dbe_volatile_total", "ecc_sbe_volatile_total"]
    rng = np.random.default_rng(5)
    rows = pl.DataFrame(
        {
            "unit_id": np.repeat(units.to_numpy(), 300),
            "ts": [T0 + timedelta(minutes=m) for _ in range(units.len()) for m in range(300)],
            "metric": "ecc_sbe_volatile_total",
            "value": rng.uniform(0, 100, units.len() * 300),
        }
    )
    first = T0 + timedelta(days=1)
    for name, shuffle in (("ordered", False), ("backwards", True)):
        config = load_config(data_dir=tmp_path / name)
        merge_into_lake(config.lake_dir, "samples", rows, shards=config.shards)
        if shuffle:  # rewrite one partition with each unit's times backwards (no merge writes one so)
            path = partition_path(config.lake_dir, "samples", T0.date(), 0)
            pl.read_parquet(path).sort("unit_id", "ts", descending=[False, True]).write_parquet(path)
        ctx = IngestContext.from_config(config)
        got = _stored_counters(ctx, units, metrics, first, first + timedelta(hours=1))
        want = _latest_plainly(config.lake_dir, units, metrics, first)
        assert got.sort("unit_id", "metric").equals(want.sort("unit_id", "metric")), name
        assert got.height == units.len()


def _shard_groups(staged: pl.DataFrame, config, workers: int) -> list[pl.DataFrame]:
    """The frames the threads of ``_check_and_merge`` filter with ``run._shard_masks``."""
    masks = run._shard_masks(staged, config, workers)
    return [staged] if masks is None else [staged.filter(mask) for mask in masks]


def test_shard_groups_are_those_of_partition_by(tmp_path, monkeypatch):
    config = load_config(data_dir=tmp_path)
    rng = np.random.default_rng(3)
    names = [f"node{n}-gpu{g}" for n in range(40) for g in range(8)] + [None]
    staged = pl.DataFrame({"unit_id": [names[i] for i in rng.integers(0, len(names), 5000)], "x": range(5000)})
    keyed = with_shard(staged, config.shards)
    expected = [
        g.drop("_group", "shard")
        for g in keyed.with_columns(_group=pl.col("shard") % 2).partition_by("_group", maintain_order=True)
    ]
    monkeypatch.setattr(run, "SPLIT_MIN_ROWS", 0)
    got = _shard_groups(staged, config, 2)
    assert len(got) == len(expected) == 3
    for a, b in zip(got, expected):
        assert a.equals(b)
    # Rows in long runs of one unit (grouped run by run), with and without a run of no unit.
    units = pl.Series([None, *names[:20]], dtype=pl.String)
    in_runs = pl.DataFrame({"unit_id": units.gather(np.repeat(rng.permutation(units.len()), 500)), "x": range(10_500)})
    assert long_runs(in_runs.get_column("unit_id")) is not None
    for frame, groups in ((in_runs, 3), (in_runs.drop_nulls("unit_id"), 2)):
        keyed = with_shard(frame, config.shards).with_columns(_group=pl.col("shard") % 3)
        expected = [g.drop("_group", "shard") for g in keyed.partition_by("_group", maintain_order=True)]
        got = _shard_groups(frame, config, 3)
        assert len(got) == len(expected) >= groups
        for a, b in zip(got, expected):
            assert a.equals(b)


def _old_series_sort(parts: list[pl.DataFrame], series_count: int) -> pl.DataFrame:
    return pl.concat(parts, how="vertical_relaxed").sort("_sid", "ts", maintain_order=True)


def _old_shard_masks(
    staged: pl.DataFrame, config, workers: int, min_rows=None, distinct=None
) -> list[pl.Series] | None:
    """The rows of each group of the code before (``unit_id``'s shard by a Python call per
    row, groups in order of their first rows; the threads filter them)."""
    if workers < 2:
        return None
    group = staged.get_column("unit_id").map_elements(
        lambda u: shard_of(u, config.shards) % workers, return_dtype=pl.Int32
    )
    return [group == number for number in group.unique(maintain_order=True).to_list()]


def _canonical_landing(root, units: list[str], seed: int, day: int) -> None:
    """A day of unsorted canonical samples (a counter and a gauge, metric after metric) with
    rows repeated in the file, conflicting values, a counter jump, rows of the day before
    (stored already by the first ingest) and a row of the next day."""
    rng = np.random.default_rng(seed)
    start = T0.replace(day=day)
    times = pl.datetime_range(start, start.replace(hour=23), "1h", eager=True, time_zone="UTC")
    grid = pl.DataFrame({"unit_id": units}).join(pl.DataFrame({"ts": times}), how="cross")
    counter = grid.with_columns(
        metric=pl.lit("ecc_sbe_volatile_total"),
        value=pl.Series(np.cumsum(rng.poisson(0.3, (len(units), len(times))), axis=1).ravel().astype(float)),
    )
    gauge = grid.with_columns(metric=pl.lit("gpu_temp_c"), value=pl.Series(rng.uniform(30, 80, grid.height).round(1)))
    rows = pl.concat([counter, gauge])
    extra = [
        rows.slice(10, 25),  # repeated: duplicates
        rows.slice(40, 5).with_columns(value=pl.col("value") + 3),  # same keys, other values: conflicts
        counter.slice(60, 1).with_columns(value=pl.lit(1e9)),  # a counter jump (the key repeats too)
        gauge.head(3).with_columns(ts=pl.col("ts") + pl.duration(days=1)),  # the next day
    ]
    if day > 1:  # the day before, as the first ingest stored it (duplicates) and one changed
        before = pl.read_parquet(root.parent / "day1" / f"samples-2026-11-{day - 1:02d}.parquet").head(200)
        extra += [before, before.tail(2).with_columns(value=pl.col("value") + 7)]
    frame = pl.concat([rows, *extra]).sample(fraction=1.0, shuffle=True, seed=seed)
    root.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(root / f"samples-2026-11-{day:02d}.parquet")


def _ingest_twice(tmp_path, data_dir, monkeypatch):
    from foreshock.ingest import ingest_path

    config = load_config(data_dir=data_dir).with_overrides(
        {"ingest": {"timezone": "UTC"}, "runner": {"local_workers": 2}}
    )
    monkeypatch.setattr(run, "SPLIT_MIN_ROWS", 0)  # split every batch into shard groups
    reports = [ingest_path(tmp_path / name, config) for name in ("inventory", "day1", "day2")]
    lake = config.lake_dir
    files = {str(p.relative_to(lake)): pl.read_parquet(p) for p in sorted(lake.rglob("part.parquet"))}
    quarantine = [pl.read_parquet(p).drop("run_id") for p in sorted(config.quarantine_dir.rglob("*.parquet"))]
    accounting = [
        sorted(
            (f.path, f.status, f.rows_read, f.rows_stored, f.rows_quarantined, f.duplicates_dropped) for f in r.files
        )
        for r in reports
    ]
    changes = (lake / "_changes.jsonl").read_text()
    return files, quarantine, accounting, changes


def test_an_unsorted_messy_ingest_gives_what_the_plain_splits_and_sorts_give(tmp_path, monkeypatch):
    """Unsorted rows over two days and several shards, duplicates and conflicts within a
    file and against the lake, a counter jump: the lake files (rows and their order), the
    quarantine, the per-file accounting and the change log are those of the plain
    operations (partition_by and a sort per partition, one stable sort of the counter
    readings, partition_by into shard groups)."""
    import foreshock.ingest.counter_steps as validate
    import foreshock.lake.split as lake

    units = [f"node{n:02d}-gpu{g}" for n in range(9) for g in range(4)]
    inventory = pl.DataFrame(
        {
            "unit_id": units,
            "node": [u.split("-")[0] for u in units],
            "rack": "rack01",
            "model": "NVIDIA H100 80GB HBM3",
            "installed_at": "2026-01-01T00:00:00Z",
        }
    )
    (tmp_path / "inventory").mkdir()
    inventory.write_csv(tmp_path / "inventory" / "inventory.csv")
    _canonical_landing(tmp_path / "day1", units, 1, 1)
    _canonical_landing(tmp_path / "day2", units, 2, 2)

    new = _ingest_twice(tmp_path, tmp_path / "new", monkeypatch)
    monkeypatch.setattr(lake, "_split_sorted", lambda *args, **kwargs: None)
    monkeypatch.setattr(validate, "_sort_by_series_time", _old_series_sort)
    monkeypatch.setattr(run, "_shard_masks", _old_shard_masks)
    old = _ingest_twice(tmp_path, tmp_path / "old", monkeypatch)

    files, quarantine, accounting, changes = new
    assert sum(row[4] for report in accounting for row in report) >= 8  # conflicts, the jump: quarantined
    assert sum(row[5] for report in accounting for row in report) >= 200  # duplicates
    assert files.keys() == old[0].keys() and len(files) > 4
    for name, frame in files.items():
        assert frame.equals(old[0][name]), name
    assert len(quarantine) == len(old[1]) and all(a.equals(b) for a, b in zip(quarantine, old[1]))
    assert accounting == old[2]
    assert changes == old[3]


def test_rows_in_long_runs_of_a_metric_or_unit_split_and_sort_as_the_plain_operations_do():
    """Samples listed metric after metric (nvidia-smi's frames), unit after unit, and
    shuffled, over two days: the split (strings ranked once per run when they come in runs)
    gives the partitions and row order of ``partition_by`` and a sort, and ``sort_rows``
    the order of a sort."""
    from foreshock.lake.split import sort_rows, split_conformed

    rng = np.random.default_rng(5)
    units = pl.DataFrame({"unit_id": [f"node{n:02d}-gpu{g}" for n in range(10) for g in range(4)]})
    times = pl.DataFrame({"ts": [T0 + timedelta(hours=20, minutes=14 * k) for k in range(30)]})  # two days
    grid = units.join(times, how="cross")
    metric_major = pl.concat(
        grid.with_columns(metric=pl.lit(f"m{k:02d}"), value=pl.Series(rng.uniform(0, 9, grid.height)))
        for k in (3, 0, 12, 7, 1)
    ).filter(pl.Series(rng.uniform(0, 1, 5 * grid.height) < 0.9))  # runs of unequal lengths
    unit_major = metric_major.sort("unit_id", maintain_order=True)
    shuffled = metric_major.sample(fraction=1.0, shuffle=True, seed=3)
    order = ["unit_id", "ts", "metric"]
    assert long_runs(metric_major.get_column("metric")) is not None
    assert long_runs(unit_major.get_column("unit_id")) is not None
    for frame in (metric_major, unit_major, shuffled):
        split = split_conformed(frame, "samples", 4, in_frame_order=False)
        assert split.presorted
        keyed = with_shard(frame, 4).with_columns(day=pl.col("ts").dt.date())
        expected = {
            (day, shard): part.drop("day", "shard").sort(order, maintain_order=True)
            for (day, shard), part in keyed.partition_by("day", "shard", as_dict=True).items()
        }
        assert len(expected) == len(split.pieces) > 4  # both days, every shard
        for day, shard, rows in split.pieces:
            assert rows.equals(expected[day, shard])
        assert sort_rows(frame, "samples").equals(frame.sort(order, maintain_order=True))
