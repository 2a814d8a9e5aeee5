"""`foreshock --runner dask --dask-address ... ingest` parses each batch's telemetry files and
checks and merges its shard groups as tasks on a real Dask cluster (a scheduler and two
worker processes on 127.0.0.1) and stores, quarantines, rejects and counts exactly what the
local runner does, leaving no staging file behind."""

from __future__ import annotations

import io
import json
from pathlib import Path

import polars as pl
import pytest
from landing_files import SMI_FIELDS, assert_same_lake, node_name, write_messy_landing

import foreshock.ingest.parsing as parsing
import foreshock.ingest.tasks as run
from foreshock.lake.changes import read_changes
from foreshock.pipelines.cli import main

pytest.importorskip("prefect_dask", reason="the dask extra is not installed (make setup installs it)")


def _quarantine(data_dir: Path) -> pl.DataFrame:
    files = sorted((data_dir / "quarantine").rglob("*.parquet"))
    return pl.concat([pl.read_parquet(f) for f in files]).drop("run_id").sort(pl.all())


def _per_file(data_dir: Path) -> list[tuple]:
    (record,) = (data_dir / "ingest_runs").glob("*.json")
    files = json.loads(record.read_text())["files"]
    keys = (
        "path",
        "status",
        "rows_read",
        "rows_stored",
        "rows_quarantined",
        "duplicates_dropped",
        "rows_updated",
        "reason",
    )
    return sorted(tuple(f[k] for k in keys) for f in files)


def _lake_files(lake_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(lake_dir)): p.read_bytes() for p in sorted(lake_dir.rglob("part.parquet"))}


def _write_unparseable(root: Path) -> list[str]:
    """Files recognised when planned but rejected by their parser (on a worker, on Dask): a
    truncated Parquet, and an nvidia-smi file of a day batch (parsed together with the day's
    other nvidia-smi files) whose header names no metric."""
    buffer = io.BytesIO()
    pl.DataFrame({"unit_id": ["gpu-node001-gpu0"] * 100, "metric": ["gpu_temp_c"] * 100}).write_parquet(buffer)
    broken = root / "canonical" / "samples-broken.parquet"
    broken.parent.mkdir()
    broken.write_bytes(buffer.getvalue()[:200])
    header_only = root / "nvidia-smi" / node_name(8) / "2026-11-02.csv"
    header_only.parent.mkdir()
    fields = ", ".join(SMI_FIELDS.split(", ")[:4])  # timestamp, index, pci.bus_id, uuid
    header_only.write_text(f"{fields}\n2026/11/02 00:00:00.000, 0, 00000000:3B:00.0, GPU-0\n")
    return [str(broken), str(header_only)]


def _computed(address: str) -> dict[str, float]:
    """Seconds the cluster's workers spent computing, per task prefix."""
    from distributed import Client

    with Client(address) as client:
        return client.run_on_scheduler(
            lambda dask_scheduler: {
                name: prefix.all_durations.get("compute", 0) for name, prefix in dask_scheduler.task_prefixes.items()
            }
        )


def test_dask_runner_ingest_equals_the_local_runner(prefect_server, dask_cluster, tmp_path, monkeypatch, capsys):
    landing = write_messy_landing(tmp_path / "raw")
    unparseable = _write_unparseable(landing.root)
    toml = tmp_path / "foreshock.toml"
    toml.write_text('[ingest]\ntimezone = "UTC"\n[lake]\nshards = 4\n')
    local_dir, dask_dir = tmp_path / "local", tmp_path / "dask"
    common = ["--config", str(toml)]
    command = ["ingest", "--path", str(landing.root)]

    assert main([*common, "--data-dir", str(local_dir), *command]) == 3  # files were rejected
    monkeypatch.setattr(run, "TASK_GROUP_MIN_ROWS", 1)  # a task per lake shard, however small the batch
    monkeypatch.setattr(run, "TASK_PARSE_FILES", 2)  # several parse tasks per batch, a group's rows from each
    on_driver: list[str] = []  # files this process parsed itself (parse tasks run on the workers)
    real_parse_batch = parsing.parse_batch

    def recorded(files, *args):
        on_driver.extend(f.path for f in files)
        return real_parse_batch(files, *args)

    monkeypatch.setattr(parsing, "parse_batch", recorded)
    before = _computed(dask_cluster)  # the session's cluster: other tests' work counts too
    assert (
        main([*common, "--data-dir", str(dask_dir), "--runner", "dask", "--dask-address", dask_cluster, *command]) == 3
    )
    out = capsys.readouterr().out
    assert out.count("total: read") == 2 and "DOES NOT ADD UP" not in out

    assert _per_file(dask_dir) == _per_file(local_dir)  # with each file's status and reason
    assert sum(f[4] for f in _per_file(local_dir)) >= 4  # the input is messy: rows were quarantined
    rejected = {f[0]: f[7] for f in _per_file(dask_dir) if f[1] == "rejected"}
    assert sorted(rejected) == sorted(unparseable), rejected
    assert "cannot read Parquet" in rejected[unparseable[0]] and "no metric fields" in rejected[unparseable[1]]
    # This process parsed only the inventory, then again the files with quarantined rows
    # (for the quarantine's raw text); every other file was parsed on a worker.
    quarantined = {f[0] for f in _per_file(local_dir) if f[4]}
    assert quarantined and set(on_driver) == {str(landing.root / "inventory.csv")} | quarantined
    assert_same_lake(dask_dir / "lake", local_dir / "lake")
    assert _lake_files(dask_dir / "lake") == _lake_files(local_dir / "lake")  # byte for byte
    assert _quarantine(dask_dir).equals(_quarantine(local_dir))
    assert read_changes(dask_dir / "lake") == read_changes(local_dir / "lake")
    staging = dask_dir / "staging" / "ingest"
    assert staging.is_dir() and not any(staging.iterdir())  # staged, then removed after each batch

    # The groups really ran on the cluster's workers: the scheduler knows their task prefix
    # and the time its workers spent computing them.
    computed = _computed(dask_cluster)
    assert computed.get("shard_group_task", 0) > before.get("shard_group_task", 0), computed
    assert computed.get("parse_run_task", 0) > before.get("parse_run_task", 0), computed  # the parses too
