"""The canonical, nvidia-smi and Prometheus JSON parsers hand the distinct unit ids and metric
names they found to the checks and the split (``ParsedFile.distinct``), which then do not
search the rows for them again.
Given for a whole batch they are a superset of each shard group's values; with aliases they
are the catalog's names.  The lake, quarantine and counts are exactly those found without."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from landing_files import node_name, write_canonical_inventory, write_messy_landing

import foreshock.ingest.store as run
from foreshock.config import load_config
from foreshock.ingest import ingest_path
from foreshock.lake.changes import read_changes

START = datetime(2026, 11, 1, tzinfo=UTC)


def _landing(root: Path, rng: np.random.Generator) -> None:
    """An inventory of 24 GPUs and two days of canonical samples (Parquet), metric after
    metric, under aliases and canonical names, with an unknown metric, an unknown unit, a
    bad id, a negative counter, a counter jump, a repeated row and a conflicting one."""
    units = [f"node{n:02d}-gpu{g}" for n in range(6) for g in range(4)]
    root.mkdir(parents=True)
    write_canonical_inventory(root, units, rack="rack01")
    names = ["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gpu_temp_c", "DCGM_FI_DEV_GPU_TEMP", "power_w", "made_up_metric"]
    for day in range(2):
        frames = []
        for k, name in enumerate(names):
            times = [START + timedelta(days=day, minutes=10 * s + k) for s in range(36)]
            grid = pl.DataFrame({"unit_id": units}).join(pl.DataFrame({"ts": times}), how="cross")
            values = (
                np.cumsum(rng.poisson(0.3, grid.height)).astype(float)
                if k == 0
                else rng.uniform(30, 80, grid.height).round(1)
            )
            frames.append(grid.with_columns(metric=pl.lit(name), value=pl.Series(values)))
        frame = pl.concat(frames)
        odd = pl.DataFrame(
            {
                "unit_id": ["node99-gpu0", "node00-gpu0;rm", units[3], units[5], units[7], units[7]],
                "ts": [START + timedelta(days=day, hours=h) for h in (1, 2, 3, 4, 0, 0)],
                "metric": ["gpu_temp_c", "gpu_temp_c", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_sbe_volatile_total"]
                + ["power_w", "power_w"],
                "value": [50.0, 50.0, -3.0, 1e15, 300.0, 301.0],
            }
        )
        pl.concat([frame, frame.head(5), odd]).write_parquet(
            root / f"samples-{START + timedelta(days=day):%Y-%m-%d}.parquet"
        )


def _ingest(root: Path, data_dir: Path):
    config = load_config(data_dir=data_dir).with_overrides(
        {"ingest": {"timezone": "UTC"}, "runner": {"local_workers": 2}, "lake": {"shards": 4}}
    )
    report = ingest_path(root, config)
    lake = config.lake_dir
    files = {str(p.relative_to(lake)): p.read_bytes() for p in sorted(lake.rglob("part.parquet"))}
    quarantine = pl.concat([pl.read_parquet(p) for p in sorted(config.quarantine_dir.rglob("*.parquet"))])
    counts = sorted(
        (f.path, f.rows_read, f.rows_stored, f.rows_quarantined, f.duplicates_dropped) for f in report.files
    )
    return report, files, quarantine.drop("run_id").sort(pl.all()), counts, read_changes(lake)


def test_values_found_by_the_parser_give_exactly_the_lake_found_without_them(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    _landing(tmp_path / "raw", rng)
    monkeypatch.setattr(run, "SPLIT_MIN_ROWS", 0)  # two shard groups: each gets the batch's values

    given: list[dict] = []
    real = run._batch_distinct

    def recorded(*args):
        found = real(*args)
        given.append(found)
        return found

    monkeypatch.setattr(run, "_batch_distinct", recorded)
    report, files, quarantine, counts, changes = _ingest(tmp_path / "raw", tmp_path / "with")
    samples = [found for found in given if "metric" in found]
    assert len(samples) == 2  # one per day's batch
    # aliases are given under the catalog's names; the unknown metric as it came
    assert set(samples[0]["metric"].to_list()) == {"ecc_sbe_volatile_total", "gpu_temp_c", "power_w", "made_up_metric"}
    assert "node99-gpu0" in samples[0]["unit_id"].to_list()

    monkeypatch.setattr(run, "_batch_distinct", lambda *args: {})
    without = _ingest(tmp_path / "raw", tmp_path / "without")
    assert report.adds_up
    reasons = " | ".join(quarantine.get_column("reason").to_list())
    for reason in ("unknown metric 'made_up_metric'", "unknown unit", "not a valid id", "negative counter"):
        assert reason in reasons
    assert report.totals["duplicates_dropped"] > 0
    assert files == without[1]  # byte for byte
    assert quarantine.equals(without[2])
    assert counts == without[3]
    assert changes == without[4]


@pytest.mark.parametrize("mistake", ["missing unit", "missing metric"])
def test_values_that_miss_one_of_the_rows_fail_loudly(tmp_path, monkeypatch, seed, mistake):
    """A parser that left a value out would mis-rank rows: the split refuses instead."""
    rng = np.random.default_rng(seed)
    _landing(tmp_path / "raw", rng)
    real = run._batch_distinct

    def short(*args):
        found = real(*args)
        name = "unit_id" if mistake == "missing unit" else "metric"
        if name in found:
            found[name] = found[name].filter(found[name] != ("node03-gpu1" if name == "unit_id" else "power_w"))
        return found

    monkeypatch.setattr(run, "_batch_distinct", short)
    with pytest.raises(pl.exceptions.InvalidOperationError):
        _ingest(tmp_path / "raw", tmp_path / "data")


def test_nvidia_smi_and_json_batches_give_the_values_they_read_and_the_same_lake(tmp_path, monkeypatch):
    """The nvidia-smi batch parser (many files' rows in one frame) and the Prometheus JSON
    parser give the units and metric names they read: a day's batch of both is checked and
    split with them, and the lake, quarantine and counts are exactly those found without
    (repeated lines, a conflict, a broken number, a counter jump, an unknown GPU)."""
    write_messy_landing(tmp_path / "raw")
    monkeypatch.setattr(run, "SPLIT_MIN_ROWS", 0)  # two shard groups: each gets the batch's values
    given: list[tuple[str, dict]] = []
    real = run._batch_distinct

    def recorded(*args):
        found = real(*args)
        given.append((args[0], found))
        return found

    monkeypatch.setattr(run, "_batch_distinct", recorded)
    report, files, quarantine, counts, changes = _ingest(tmp_path / "raw", tmp_path / "with")
    days = [found for table, found in given if table == "samples" and found]
    assert len(days) == 2  # each day's nvidia-smi and DCGM JSON files
    assert {"gpu_temp_c", "pcie_replay_total"} <= set(days[0]["metric"].to_list())  # nvidia-smi's and JSON's
    assert f"{node_name(3)}-gpu1" in days[0]["unit_id"].to_list()

    monkeypatch.setattr(run, "_batch_distinct", lambda *args: {})
    without = _ingest(tmp_path / "raw", tmp_path / "without")
    assert report.adds_up and report.totals["rows_quarantined"] and report.totals["duplicates_dropped"]
    assert files == without[1]  # byte for byte
    assert quarantine.equals(without[2])
    assert counts == without[3]
    assert changes == without[4]
