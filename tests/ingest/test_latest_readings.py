"""A partition file this process wrote is not read again for the counter-step check: the
latest reading of each series kept when it was written (``foreshock.lake.latest``) gives
the same steps, the same quarantine and the same lake as reading it; a file another writer
replaced since is read, never answered from what was kept."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from landing_files import write_canonical_inventory

from foreshock.config import load_config
from foreshock.ingest import ingest_path
from foreshock.lake import latest as lake_latest
from foreshock.lake.layout import partition_files
from foreshock.lake.read import read_table

START = datetime(2026, 11, 2, tzinfo=UTC)
UNITS = [f"node{n:02d}-gpu{g}" for n in range(8) for g in range(4)]
STEP = timedelta(minutes=10)


def _scrapes(root: Path, seed: int) -> list[Path]:
    """Three landing directories, each one scrape's canonical Parquet file (the morning of
    the first day, its afternoon, the next day), readings unit by unit, a counter and a
    gauge.  Some units' counters jump at a scrape's first reading: a step only the series'
    last stored reading (the scrape before's, or the one before it for the units silent in
    the afternoon) shows."""
    rng = np.random.default_rng(seed)
    spans = [(START, 72), (START + 72 * STEP, 72), (START + 144 * STEP, 144)]
    totals = {u: float(rng.integers(0, 100)) for u in UNITS}
    directories = []
    for k, (start, steps) in enumerate(spans):
        frames = []
        for number, unit in enumerate(UNITS):
            if k == 1 and number % 7 == 3:  # silent that afternoon: its last reading is the morning's
                continue
            times = [start + i * STEP for i in range(steps)]
            counts = totals[unit] + np.cumsum(rng.poisson(2.0, steps)).astype(float)
            # a jump from the stored reading to this scrape's first (always for a unit silent
            # the afternoon before: its previous reading is two scrapes back)
            if k and (rng.random() < 0.3 or (k == 2 and number % 7 == 3)):
                counts += 1e11  # faster than max_rate (1e6/s) even over half a day
            totals[unit] = counts[-1]
            for metric, values in (("ecc_sbe_volatile_total", counts), ("gpu_temp_c", rng.uniform(30, 80, steps))):
                frames.append(pl.DataFrame({"unit_id": unit, "ts": times, "metric": metric, "value": values}))
        directory = root / f"scrape-{k}"
        directory.mkdir(parents=True)
        if k == 0:
            write_canonical_inventory(directory, UNITS)
        pl.concat(frames).with_columns(pl.col("ts").dt.cast_time_unit("us")).write_parquet(
            directory / "samples.parquet"
        )
        directories.append(directory)
    return directories


def _config(data_dir: Path):
    return load_config(data_dir=data_dir).with_overrides(
        {"ingest": {"timezone": "UTC"}, "runner": {"local_workers": 2}, "lake": {"shards": 4}}
    )


def _quarantine(data_dir: Path) -> pl.DataFrame:
    files = sorted((data_dir / "quarantine").rglob("*.parquet"))
    if not files:
        return pl.DataFrame()
    return pl.concat([pl.read_parquet(f) for f in files]).select("source_file", "line", "reason").sort("reason", "line")


def _ingest_each(scrapes: list[Path], data_dir: Path) -> list[dict]:
    config = _config(data_dir)
    return [ingest_path(directory, config).totals for directory in scrapes]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_latest_readings_give_the_steps_of_reading_the_files(tmp_path, seed, monkeypatch):
    scrapes = _scrapes(tmp_path / "landing", seed)
    read_files: list[list[Path]] = []
    real = pl.scan_parquet

    def recording(source, *args, **kwargs):
        read_files.append([Path(p) for p in (source if isinstance(source, list) else [source])])
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pl, "scan_parquet", recording)
    kept = _ingest_each(scrapes, tmp_path / "kept")
    seen = {p for paths in read_files for p in paths}
    monkeypatch.setattr(lake_latest, "MAX_FILES", 0)  # nothing kept: every file is read
    lake_latest.forget_all()
    read = _ingest_each(scrapes, tmp_path / "read")

    assert kept == read
    steps = _quarantine(tmp_path / "kept")
    assert steps.height > 0 and steps.get_column("reason").str.starts_with("implausible counter step").all()
    assert steps.equals(_quarantine(tmp_path / "read"))
    for table in ("samples", "inventory"):
        assert read_table(tmp_path / "kept" / "lake", table).equals(read_table(tmp_path / "read" / "lake", table))
    # the kept run's checks read none of the partitions it had written
    written = set(partition_files(tmp_path / "kept" / "lake", "samples"))
    assert written and not seen & written


def test_a_file_replaced_by_another_writer_is_read(tmp_path):
    """The first day's partitions rewritten by someone else (a counter's last reading made
    smaller): the next day's first reading is now a step too fast, which only reading the
    rewritten file shows."""
    scrapes = _scrapes(tmp_path / "landing", 5)
    config = _config(tmp_path / "data")
    for directory in scrapes[:2]:
        ingest_path(directory, config)
    for path in partition_files(config.lake_dir, "samples"):
        frame = pl.read_parquet(path)
        last = (pl.col("metric") == "ecc_sbe_volatile_total") & (pl.col("ts") == pl.col("ts").max().over("unit_id"))
        lowered = frame.with_columns(value=pl.when(last).then(pl.col("value") - 1e12).otherwise(pl.col("value")))
        replacement = path.with_name("replacement.parquet")
        lowered.write_parquet(replacement)
        os.replace(replacement, path)  # as any careful writer does: a new file
    assert all(lake_latest.known(p) is None for p in partition_files(config.lake_dir, "samples"))

    ingest_path(scrapes[2], config)
    reasons = _quarantine(tmp_path / "data").filter(pl.col("source_file").str.contains("scrape-2"))
    # every unit's first reading of the day is now a step of about 1e12 in ten minutes
    assert reasons.height == len(UNITS)
    assert reasons.get_column("reason").str.starts_with("implausible counter step").all()
