"""A shard group whose checked rows meet no stored key skips the search for repeated keys
(``run.check_and_split``): its split finds them (and keeps each key's first row) when some
repeat: the same new rows, quarantine, counts and partitions as the general path, which
the groups that meet stored keys still take."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

import foreshock.ingest.checks as run
from foreshock.config import load_config
from foreshock.ingest.context import IngestContext
from foreshock.ingest.staged import conform_staged
from foreshock.lake.merge import merge_into_lake
from foreshock.lake.split import split_for_merge

T0 = datetime(2026, 11, 1, tzinfo=UTC)
UNITS = [f"node{n:02d}-gpu{g}" for n in range(6) for g in range(4)]
METRICS = ["gpu_temp_c", "ecc_sbe_volatile_total"]


def _staged(minutes: range, seed: int) -> pl.DataFrame:
    """Shuffled samples of every unit and metric at these minutes, as a parser stages them."""
    rows = [(u, T0 + timedelta(minutes=m), metric) for u in UNITS for m in minutes for metric in METRICS]
    rng = np.random.default_rng(seed)
    frame = pl.DataFrame(rows, schema=["unit_id", "ts", "metric"], orient="row").with_columns(
        pl.col("ts").dt.cast_time_unit("us"),
        value=pl.when(pl.col("metric") == "gpu_temp_c")
        .then(pl.Series(rng.uniform(30, 80, len(rows)).round(1)))
        .otherwise(pl.col("ts").dt.minute().cast(pl.Float64)),  # a counter growing slowly
    )
    frame = frame.sample(fraction=1.0, shuffle=True, seed=seed)
    return conform_staged(frame.with_columns(_line=pl.int_range(1, pl.len() + 1, dtype=pl.Int64)), "samples")


def _general(table: str, staged: pl.DataFrame, ctx: IngestContext, config):
    unique, bad, duplicates, conflicts = run.check_shard(table, staged, ctx)
    lake_rows = unique.select(run.lake_columns(table, unique))
    return (unique, bad, duplicates, conflicts), split_for_merge(config.lake_dir, table, lake_rows, config.shards)


def _assert_same(got, want) -> None:
    (frames, split), (want_frames, want_split) = got, want
    assert frames[0] == want_frames[0].height  # the new rows: the split's
    for frame, expected in zip(frames[1:], want_frames[1:]):
        assert frame.equals(expected)
    assert [(d, s) for d, s, _ in split.pieces] == [(d, s) for d, s, _ in want_split.pieces]
    for (_, _, part), (_, _, expected) in zip(split.pieces, want_split.pieces):
        assert part.equals(expected)
    assert split.presorted == want_split.presorted and split.rows_in == want_split.rows_in


def test_fast_path_only_where_no_key_repeats_or_is_stored_and_the_same_outcome_everywhere(tmp_path, monkeypatch):
    config = load_config(data_dir=tmp_path).with_overrides({"ingest": {"timezone": "UTC"}})
    merge_into_lake(config.lake_dir, "samples", _staged(range(0, 30), 1).select("unit_id", "ts", "metric", "value"))
    ctx = IngestContext.from_config(config, now=T0 + timedelta(days=1))
    fresh = _staged(range(30, 70), 2).with_columns(_file=pl.lit(0, dtype=pl.Int32))  # later rows: appended
    repeated = pl.concat(
        [
            fresh,
            fresh.head(40).with_columns(_line=pl.col("_line") + 10_000),  # the same rows again: duplicates
            fresh.slice(50, 20).with_columns(value=pl.col("value") + 3.0),  # other values: conflicts
        ]
    )
    overlapping = _staged(range(20, 40), 3).with_columns(
        value=pl.when(pl.int_range(pl.len()) % 7 == 0).then(pl.col("value") + 1.0).otherwise(pl.col("value")),
        _file=pl.lit(1, dtype=pl.Int32),
    )  # stored keys, most with the stored values (duplicates), some not (conflicts)
    jumps = fresh.with_columns(
        value=pl.when((pl.col("metric") == "ecc_sbe_volatile_total") & (pl.col("_line") % 97 == 0))
        .then(1e9)
        .otherwise(pl.col("value"))
    )  # counter steps that fail their check: quarantined, the rest new
    general_calls = []
    real = run._deduplicate

    def counting(*args, **kwargs):
        general_calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "_deduplicate", counting)
    both = pl.concat([overlapping, overlapping.slice(10, 30).with_columns(_line=pl.col("_line") + 10_000)])
    for staged, fast in ((fresh, True), (jumps, True), (repeated, True), (overlapping, False), (both, False)):
        want = _general("samples", staged, ctx, config)
        general_calls.clear()
        got = run.check_and_split("samples", staged, ctx, config)
        assert (not general_calls) == fast
        _assert_same(got, want)
    (_, bad, duplicates, conflicts), _ = run.check_and_split("samples", repeated, ctx, config)
    assert duplicates.height == 40 and conflicts.height == 20 and bad.height == 0
    (_, bad, duplicates, conflicts), _ = run.check_and_split("samples", overlapping, ctx, config)
    assert duplicates.height and conflicts.height and bad.height == 0
    (_, bad, _, _), _ = run.check_and_split("samples", jumps, ctx, config)
    assert bad.height
