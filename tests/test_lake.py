"""The lake never loses or duplicates a row, and writes are atomic and serialised."""

import multiprocessing as mp
import os
import signal
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from foreshock.lake import latest as lake_latest
from foreshock.lake.atomic import atomic_write_parquet, written_together
from foreshock.lake.changes import read_changes, record_split, record_stored_rows
from foreshock.lake.columns import stable_order
from foreshock.lake.layout import partition_files, shard_of
from foreshock.lake.merge import merge_into_lake, merge_split
from foreshock.lake.read import lake_summary, read_table
from foreshock.lake.split import _sort_order, _split_sorted, sort_rows, split_by_partition, split_for_merge

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _samples(units, hours, metric="gpu_temp_c", offset=0.0):
    rows = [
        {"unit_id": u, "ts": T0 + timedelta(hours=h), "metric": metric, "value": float(h) + offset}
        for u in units
        for h in range(hours)
    ]
    return pl.DataFrame(rows)


def test_partitions_by_date_and_shard(tmp_path):
    result = merge_into_lake(tmp_path, "samples", _samples(["a", "b", "c"], 48), shards=4)
    assert result.rows_stored == 3 * 48 and result.duplicates_dropped == 0
    files = partition_files(tmp_path, "samples")
    assert {f.parent.parent.name for f in files} == {"date=2026-11-01", "date=2026-11-02"}
    for f in files:
        shard = int(f.parent.name.split("=")[1])
        units = pl.read_parquet(f)["unit_id"].unique().to_list()
        assert all(shard_of(u, 4) == shard for u in units)


def test_rerun_is_a_noop_and_existing_rows_win(tmp_path):
    merge_into_lake(tmp_path, "samples", _samples(["a"], 10))
    before = read_table(tmp_path, "samples")
    again = merge_into_lake(tmp_path, "samples", _samples(["a"], 12, offset=100.0))
    assert again.rows_in == 12 and again.rows_stored == 2 and again.duplicates_dropped == 10
    after = read_table(tmp_path, "samples").sort("ts")
    assert after.head(10)["value"].to_list() == before.sort("ts")["value"].to_list()


def test_shard_count_is_fixed_for_the_life_of_the_lake(tmp_path):
    merge_into_lake(tmp_path, "samples", _samples(["a", "b"], 2), shards=2)
    merge_into_lake(tmp_path, "samples", _samples(["c", "d"], 2), shards=16)
    shards = {int(f.parent.name.split("=")[1]) for f in partition_files(tmp_path, "samples")}
    assert shards <= {0, 1}


def _writer(args):
    lake, units = args
    merge_into_lake(lake, "samples", _samples(units, 24))


def test_concurrent_writers_lose_nothing(tmp_path):
    jobs = [(tmp_path, [f"u{i}", "shared"]) for i in range(4)]
    with mp.get_context("spawn").Pool(4) as pool:
        pool.map(_writer, jobs)
    table = read_table(tmp_path, "samples")
    assert table.height == 5 * 24  # four own units + one shared unit, each 24 hourly rows
    assert table.select(pl.struct("unit_id", "ts", "metric").is_unique().all()).item()


def test_no_partial_files_are_visible(tmp_path):
    merge_into_lake(tmp_path, "samples", _samples(["a", "b"], 30))
    leftovers = [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]
    assert leftovers == []


def test_files_written_together_are_in_place_and_known_only_when_the_block_ends(tmp_path):
    """Inside ``written_together`` a written file waits at its temp name (the fsyncs go side
    by side at the end); the latest rows remembered for it hold once it is in place, and a
    block that raises leaves neither the file nor its temp file."""
    rows = _samples(["a"], 3)
    latest = lake_latest.Latest(rows.tail(1), T0 + timedelta(hours=2))
    first, second = tmp_path / "d=1" / "part.parquet", tmp_path / "d=2" / "part.parquet"
    with written_together():
        atomic_write_parquet(rows, first)
        atomic_write_parquet(rows.head(1), second)
        lake_latest.remember(first, latest)
        assert not first.exists() and not second.exists()
    assert pl.read_parquet(first).equals(rows) and pl.read_parquet(second).equals(rows.head(1))
    assert lake_latest.known(first) == latest
    with pytest.raises(RuntimeError), written_together():
        atomic_write_parquet(rows, tmp_path / "d=3" / "part.parquet")
        raise RuntimeError("a failed merge")
    assert [p.name for p in (tmp_path / "d=3").iterdir()] == []


def test_summary_counts_rows_and_units(tmp_path):
    merge_into_lake(tmp_path, "samples", _samples(["a", "b"], 5))
    summary = lake_summary(tmp_path)
    assert summary["samples"]["rows"] == 10 and summary["samples"]["units"] == 2
    assert summary["failures"]["rows"] == 0


def _inventory(uuids: dict[str, str], **extra: str) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "unit_id": u,
                "node": "n1",
                "rack": "r1",
                "model": "H100",
                "lot": "L1",
                "installed_at": T0,
                "uuid": g,
                **extra,
            }
            for u, g in uuids.items()
        ]
    )


def test_inventory_is_an_upsert_where_the_last_row_wins(tmp_path):
    first = merge_into_lake(tmp_path, "inventory", _inventory({"a": "GPU-1", "b": "GPU-2"}, pdu="pdu-a"))
    assert (first.rows_stored, first.rows_updated) == (2, 0)
    part = partition_files(tmp_path, "inventory")[0]
    mtime = part.stat().st_mtime_ns

    same = merge_into_lake(tmp_path, "inventory", _inventory({"a": "GPU-1", "b": "GPU-2"}, pdu="pdu-a"))
    assert (same.rows_stored, same.rows_updated, same.duplicates_dropped) == (0, 0, 2)
    assert part.stat().st_mtime_ns == mtime  # nothing changed, nothing written

    # b's GPU was swapped twice within one export (rows apply in order); c is new; the
    # export has no pdu and no lot column, so b keeps its stored ones.
    swap = pl.concat([_inventory({"b": "GPU-8"}), _inventory({"b": "GPU-9", "c": "GPU-3"})]).drop("lot")
    result = merge_into_lake(tmp_path, "inventory", swap)
    assert (result.rows_in, result.rows_stored, result.rows_updated, result.duplicates_dropped) == (3, 1, 2, 0)
    table = read_table(tmp_path, "inventory").sort("unit_id")
    assert table.select("unit_id", "uuid", "pdu", "lot").rows() == [
        ("a", "GPU-1", "pdu-a", "L1"),
        ("b", "GPU-9", "pdu-a", "L1"),
        ("c", "GPU-3", None, None),
    ]


def _partitions(lake) -> dict[str, pl.DataFrame]:
    return {str(f.relative_to(lake)): pl.read_parquet(f) for f in partition_files(lake, "samples")}


def test_append_fast_path_stores_exactly_what_the_full_merge_stores(tmp_path):
    """In-order appends, a rerun, an overlapping batch, late older rows and a batch with a
    repeated key: the fast path and the exact merge leave identical files (rows and order)
    and count the same rows."""
    units = ["a", "b", "c", "d"]
    day1 = _samples(units, 12)
    later = _samples(units, 24).filter(pl.col("ts") >= T0 + timedelta(hours=12))
    other_metric = _samples(units[:2], 24, metric="gpu_power_w")
    overlapping = _samples(units, 30, offset=0.0).filter(pl.col("ts") >= T0 + timedelta(hours=20))
    late_older = _samples(["e", "a"], 6, metric="gpu_util_pct")
    repeated = pl.concat([_samples(["f"], 40), _samples(["f"], 40).tail(3)])
    batches = [day1, later, day1, other_metric, overlapping, late_older, repeated]
    results = {}
    for fast in (True, False):
        lake = tmp_path / ("fast" if fast else "exact")
        results[fast] = [
            merge_into_lake(lake, "samples", batch, shards=2, fast_path=fast).__dict__ for batch in batches
        ]
    assert results[True] == results[False]
    fast_parts, exact_parts = _partitions(tmp_path / "fast"), _partitions(tmp_path / "exact")
    assert fast_parts.keys() == exact_parts.keys()
    for name, frame in fast_parts.items():
        assert frame.equals(exact_parts[name]), name
    stored = sum(r["rows_stored"] for r in results[True])
    assert stored == read_table(tmp_path / "fast", "samples").height
    assert all(r["rows_in"] == r["rows_stored"] + r["duplicates_dropped"] for r in results[True])


def test_appended_partition_stays_sorted_and_a_rerun_still_dedupes(tmp_path):
    merge_into_lake(tmp_path, "samples", _samples(["b", "a", "c"], 6), shards=1)
    newer = _samples(["c", "a", "z"], 12).filter(pl.col("ts") >= T0 + timedelta(hours=6))
    appended = merge_into_lake(tmp_path, "samples", newer, shards=1)
    assert appended.rows_stored == newer.height and appended.duplicates_dropped == 0
    (path,) = partition_files(tmp_path, "samples")
    table = pl.read_parquet(path)
    assert table.equals(table.sort("unit_id", "ts", "metric"))
    again = merge_into_lake(tmp_path, "samples", newer, shards=1)
    assert again.rows_stored == 0 and again.duplicates_dropped == newer.height
    late = _samples(["a"], 3, offset=50.0)  # older keys: already stored, the stored rows win
    assert merge_into_lake(tmp_path, "samples", late, shards=1).duplicates_dropped == 3
    assert pl.read_parquet(path).equals(table)


@pytest.mark.parametrize("small_rows", [0, None], ids=["packed-key", "small-frames-plainly"])
def test_partition_order_is_the_order_of_a_plain_sort(monkeypatch, small_rows):
    """Rows are sorted by a packed integer key when the key ranges fit, else plainly (and
    small frames always plainly): either way the order is unit, time, then the rest of the
    key, exactly as ``DataFrame.sort``."""
    if small_rows is not None:
        monkeypatch.setattr("foreshock.lake.split.SMALL_SORT_ROWS", small_rows)
    shuffled = pl.concat(
        [_samples(["node10-gpu1", "node2-gpu0", "a", "B"], 30, metric=m) for m in ("zeta", "gpu_temp_c", "Alpha")]
    ).sample(fraction=1.0, shuffle=True, seed=3)
    decades = shuffled.with_columns(
        ts=pl.col("ts") + pl.duration(days=pl.int_range(pl.len()) * 73_000)
    )  # too wide to pack
    events = pl.DataFrame(
        {
            "unit_id": ["b", "a", "b", "a", "a"],
            "ts": [T0, T0, T0 - timedelta(days=400), T0, T0],
            "source": ["xid", "xid", "dmesg", "dmesg", "xid"],
            "code": [79, 48, 13, 79, -2],
            "count": [1, 1, 1, 1, 1],
        }
    )
    for table, frame in [("samples", shuffled), ("samples", decades), ("events", events)]:
        expected = frame.sort(_sort_order(table))
        assert sort_rows(frame, table).equals(expected)
        assert not frame.equals(expected)  # the input was not already in order


def _split_by_partition_by(frame: pl.DataFrame, table: str, shards: int) -> list:
    """The split ``merge_into_lake`` made before ``_split_sorted`` (and still makes when the
    key does not pack): partition_by, then a sort each."""
    return [(day, shard, sort_rows(part, table)) for day, shard, part in split_by_partition(frame, table, shards)]


def test_one_sort_split_gives_the_partitions_of_partition_by_and_a_sort_each():
    """Unsorted rows over several days and shards, repeated keys, rows already in order,
    events (an integer in the key), and keys too wide to pack (the caller falls back)."""
    units = [f"node{n}-gpu{g}" for n in range(7) for g in range(3)] + ["a", "B"]
    mixed = pl.concat([_samples(units, 60, metric=m, offset=k) for k, m in enumerate(("zeta", "gpu_temp_c", "Alpha"))])
    shuffled = mixed.sample(fraction=1.0, shuffle=True, seed=5)
    repeated = pl.concat([shuffled, shuffled.head(50).with_columns(value=pl.col("value") + 1), shuffled.tail(9)])
    in_order = pl.concat([part for _, _, part in _split_by_partition_by(mixed, "samples", 4)])
    events = pl.DataFrame(
        {
            "unit_id": ["b", "a", "b", "a", "a", "c"],
            "ts": [T0, T0, T0 - timedelta(days=3), T0 + timedelta(hours=30), T0, T0],
            "source": ["xid", "xid", "dmesg", "dmesg", "xid", "xid"],
            "code": [79, 48, 13, 79, -2, 79],
            "count": [1, 1, 1, 1, 1, 2],
        }
    )
    # Rows on a few days over a long span: more (day, shard) pairs than are worth a search each.
    spread = shuffled.with_columns(ts=pl.col("ts") + pl.duration(days=(pl.int_range(pl.len()) % 5) * 150))
    cases = [
        ("samples", spread, 8),
        ("samples", shuffled, 4),
        ("samples", repeated, 8),
        ("samples", in_order, 4),
        ("samples", mixed, 1),
        ("samples", mixed.head(1), 3),
        ("events", events, 2),
    ]
    for table, frame, shards in cases:
        expected = _split_by_partition_by(frame, table, shards)
        for in_frame_order in (True, False):
            got = _split_sorted(frame, table, shards, in_frame_order=in_frame_order)
            assert got is not None
            if not in_frame_order:
                expected_here = sorted(expected, key=lambda piece: (piece[0], piece[1]))
            else:
                expected_here = expected
            assert [(d, s) for d, s, _ in got] == [(d, s) for d, s, _ in expected_here]
            for (_, _, part), (_, _, want) in zip(got, expected_here):
                assert part.equals(want)
    decades = shuffled.with_columns(ts=pl.col("ts") + pl.duration(days=pl.int_range(pl.len()) * 73_000))
    assert _split_sorted(decades, "samples", 4) is None  # too wide to pack
    assert _split_sorted(events.with_columns(source=pl.lit(None, dtype=pl.String)), "events", 2) is None


def test_merges_of_unsorted_mixed_batches_keep_the_lake_and_change_log_of_the_old_split(tmp_path, monkeypatch):
    """Mixed dates and shards, unsorted rows, duplicates within a batch and against the lake:
    the same files, accounting and change log with the one-sort split and without it."""
    import foreshock.lake.split as lake_module

    units = [f"node{n}-gpu{g}" for n in range(5) for g in range(4)]
    day = pl.concat([_samples(units, 40, metric=m) for m in ("ecc_sbe_volatile_total", "gpu_temp_c")])
    batches = [
        day.sample(fraction=0.6, shuffle=True, seed=1),
        day.sample(fraction=0.7, shuffle=True, seed=2),  # overlaps the first: duplicates against the lake
        pl.concat([day.tail(30), day.tail(30)]),  # repeated within the batch
        _samples(units[:3], 60, offset=1.0).sample(fraction=1.0, shuffle=True, seed=4),  # late and later rows
    ]
    outcomes = {}
    for split in (True, False):
        lake = tmp_path / str(split)
        if not split:
            monkeypatch.setattr(lake_module, "_split_sorted", lambda *args, **kwargs: None)
        for fast in (True, False):
            results = [
                merge_into_lake(lake / str(fast), "samples", b, shards=3, fast_path=fast).__dict__ for b in batches
            ]
            outcomes[split, fast] = (results, _partitions(lake / str(fast)), read_changes(lake / str(fast)))
        monkeypatch.undo()
    for fast in (True, False):
        (results, parts, changes), (old_results, old_parts, old_changes) = outcomes[True, fast], outcomes[False, fast]
        assert results == old_results and changes == old_changes
        assert parts.keys() == old_parts.keys() and len(parts) > 3
        for name, frame in parts.items():
            assert frame.equals(old_parts[name]), name
    assert outcomes[True, True][1].keys() == outcomes[True, False][1].keys()


def test_a_split_made_apart_logs_and_writes_what_merge_into_lake_does(tmp_path, monkeypatch):
    """Deduplicated rows split apart (``split_for_merge``), logged from their partitions
    (``record_split``) and written (``merge_split``), in one or two groups of whole shards or
    two halves of the rows:
    the change log of ``record_stored_rows`` and the files and counts of ``merge_into_lake``,
    for unsorted rows over three days (one unit's rows crossing midnight), rows already in
    order, appends to stored partitions, and rows whose key does not pack."""
    import foreshock.lake.split as lake_module

    units = [f"node{n}-gpu{g}" for n in range(5) for g in range(4)]
    day = pl.concat([_samples(units, 40, metric=m) for m in ("ecc_sbe_volatile_total", "gpu_temp_c")])
    later = _samples(units[:7], 30, offset=1.0).with_columns(pl.col("ts") + timedelta(hours=41))
    in_order = pl.concat([part for _, _, part in _split_by_partition_by(day, "samples", 3)])
    shuffled = [day.sample(fraction=1.0, shuffle=True, seed=1), later.sample(fraction=1.0, shuffle=True, seed=2)]
    for packs in (True, False):
        for groups in (1, 2, 3):
            old, new = tmp_path / f"old-{packs}-{groups}", tmp_path / f"new-{packs}-{groups}"
            old.mkdir(), new.mkdir()
            if not packs:
                monkeypatch.setattr(lake_module, "_split_sorted", lambda *args, **kwargs: None)
            for batch in [in_order, shuffled[1], in_order.head(0)] if groups == 1 else shuffled:
                group = pl.Series(
                    [shard_of(u, 3) % groups for u in batch.get_column("unit_id").to_list()], dtype=pl.Int64
                )
                parts = [batch.filter(group == g) for g in range(groups)]
                if groups == 3:  # not whole shards: a partition's span is taken over both halves
                    parts = [batch.head(batch.height // 2), batch.slice(batch.height // 2)]
                record_stored_rows(old, "samples", parts, 3)
                old_results = [
                    merge_into_lake(old, "samples", part, shards=3, deduplicated=True, record_changes=False)
                    for part in parts
                ]
                splits = [split_for_merge(new, "samples", part, 3) for part in parts]
                assert all(split.presorted == packs for split in splits if split.rows_in)
                record_split(new, splits)
                assert [merge_split(new, split) for split in splits] == old_results
                assert read_changes(new) == read_changes(old)
            monkeypatch.undo()
            assert _partitions(new).keys() == _partitions(old).keys() and len(_partitions(new)) > 3
            for name, frame in _partitions(new).items():
                assert frame.equals(_partitions(old)[name]), name
                assert (new / name).read_bytes() == (old / name).read_bytes(), name


def _hold_lock_and_die(lake: str) -> None:
    from pathlib import Path

    from foreshock.lake.locks import lake_lock

    with lake_lock(Path(lake)):
        (Path(lake) / "samples").mkdir(parents=True, exist_ok=True)
        (Path(lake) / "samples" / f".part.parquet.tmp-{os.getpid()}-1").write_bytes(b"half")
        os.kill(os.getpid(), signal.SIGKILL)  # killed mid-write, holding the lock


def test_a_killed_holders_temp_file_goes_at_the_next_lock_and_a_clean_release_skips_the_search(tmp_path):
    from foreshock.lake.locks import lake_lock

    merge_into_lake(tmp_path, "samples", _samples(["a"], 2))
    child = mp.get_context("spawn").Process(target=_hold_lock_and_die, args=(str(tmp_path),))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL
    assert list(tmp_path.rglob("*.tmp-*"))
    with lake_lock(tmp_path):
        pass
    assert not list(tmp_path.rglob("*.tmp-*"))  # the killed holder's half file is gone
    # After a normal release nothing is searched: a stray file (no writer of this lake
    # leaves one behind when it lets go normally) stays until a holder is killed.
    stray = tmp_path / "samples" / ".part.parquet.tmp-999999999-1"
    stray.write_bytes(b"x")
    with lake_lock(tmp_path):
        pass
    assert stray.exists()
    merge_into_lake(tmp_path, "samples", _samples(["a"], 3))
    assert read_table(tmp_path, "samples").height == 3


def test_the_top_bits_first_order_is_the_stable_order_of_the_whole_key():
    """``stable_order(key, top_first=True)`` (a radix pass over the top bits, then the
    whole key) gives numpy's stable order of the key, ties in their order: on random keys
    with many ties, on keys of a few top values over runs, and on keys of one bit."""
    rng = np.random.default_rng(7)
    units, times = rng.integers(0, 300, 50_000), rng.integers(0, 1 << 30, 50_000)
    keys = [
        rng.integers(0, 1 << 40, 20_000, dtype=np.uint64) // np.uint64(1 << 30),  # many ties
        (units.astype(np.uint64) << np.uint64(30)) + times.astype(np.uint64),  # units interleaved
        np.tile(np.arange(2, dtype=np.uint64), 1_000)[::-1].copy(),
    ]
    for key in keys:
        assert np.array_equal(stable_order(key, top_first=True), np.argsort(key, kind="stable"))
    assert stable_order(np.arange(10, dtype=np.uint64), top_first=True) is None  # in order already
