"""``[lake] compression_level``: the zstd level of the lake files ingest writes."""

from __future__ import annotations

from landing_files import lake_snapshot, write_landing

from foreshock.config import load_config
from foreshock.ingest import ingest_path


def _parquet_files(data_dir) -> dict[str, bytes]:
    return {str(p.relative_to(data_dir)): p.read_bytes() for p in sorted(data_dir.rglob("*.parquet"))}


def test_the_compression_level_changes_the_lake_files_and_not_their_rows(tmp_path):
    landing = write_landing(tmp_path / "raw", nodes=2, gpus=4, days=2, steps_per_day=48)
    lakes = {}
    for level in (1, 19):
        config = load_config(data_dir=tmp_path / f"data-{level}").with_overrides(
            {"ingest": {"timezone": "UTC"}, "lake": {"compression_level": level}}
        )
        ingest_path(landing.root, config)
        lakes[level] = config
    fast, small = (_parquet_files(lakes[level].lake_dir) for level in (1, 19))
    parts = [name for name in fast if name.endswith("part.parquet")]
    assert fast.keys() == small.keys() and parts
    # The partitions are written at the level asked for: the stronger level gives other
    # bytes (a tiny file may compress the same at both), fewer of them in all, same rows.
    assert sum(fast[name] != small[name] for name in parts) > len(parts) // 2
    assert sum(len(small[name]) for name in parts) < sum(len(fast[name]) for name in parts)
    one, other = (lake_snapshot(lakes[level].lake_dir) for level in (1, 19))
    assert one.pop("partitions") == other.pop("partitions")
    assert one["samples"].height > 0
    assert all(frame.equals(other[table]) for table, frame in one.items())
