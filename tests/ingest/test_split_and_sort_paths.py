"""The cheaper splits and sorts of a batch give exactly what the plain operations give."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import polars as pl

import foreshock.ingest.run as run
from foreshock.config import load_config
from foreshock.ingest.run import _shard_groups
from foreshock.ingest.validate import _sort_by_series_time
from foreshock.lake import shard_of, with_shard

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
