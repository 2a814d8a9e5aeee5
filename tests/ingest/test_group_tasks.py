"""A batch's telemetry parsed, and its shard groups checked and merged, as tasks
(``GroupTasks``: staged Parquet files in, paths and counts out, under the driver's lake lock
through its token) give the lake files, quarantine, change log and per-file accounting of
the in-process threads, and leave no staging file behind, also when a task fails.  Here the
tasks run on threads of this process; test_ingest_dask.py runs them on a real Dask cluster."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import polars as pl
import pytest
from landing_files import assert_same_lake, write_messy_landing

import foreshock.ingest.tasks as run
from foreshock.config import load_config
from foreshock.ingest.planning import plan_ingest
from foreshock.ingest.run import finish_report, ingest_batch
from foreshock.ingest.staging import staging_root
from foreshock.ingest.tasks import GroupTasks
from foreshock.lake.changes import read_changes
from foreshock.lake.locks import lake_lock, lock_held_by_token, lock_token


def _in_process(step: str, jobs: list[dict]) -> list[dict]:
    """``GroupTasks.run`` on two threads: every job ends before the results (or first error)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(run.GROUP_STEPS[step], job) for job in jobs]
        wait(futures)
        return [future.result() for future in futures]


def _staging_directory(job: dict) -> Path:
    """The batch's staging directory a ``parse``, ``check`` or ``merge`` job writes to or reads."""
    return Path(job["directory"]) if "directory" in job else Path(job.get("rows") or job["out"]).parent


def _config(data_dir: Path):
    return load_config(data_dir=data_dir).with_overrides(
        {"ingest": {"timezone": "UTC"}, "runner": {"local_workers": 2}, "lake": {"shards": 4}}
    )


def _ingest(landing_root: Path, data_dir: Path, tasks_run=None, *, force: bool = False):
    """``ingest_path`` with the batches' shard groups as tasks when ``tasks_run`` is given."""
    config = _config(data_dir)
    plan = plan_ingest(landing_root, config, force=force)
    reports, quarantine_files = [], []
    tasks = GroupTasks(run=tasks_run, settings=config.to_settings()) if tasks_run else None
    for number, batch in enumerate(plan.batches):
        done, quarantine = ingest_batch(batch, config, run_id=plan.run_id, batch_number=number, tasks=tasks)
        reports += done
        quarantine_files += [quarantine] if quarantine else []
    return config, finish_report(plan, reports, quarantine_files, 0.0, config)


def _quarantine(config) -> pl.DataFrame:
    files = sorted(config.quarantine_dir.rglob("*.parquet"))
    return pl.concat([pl.read_parquet(f) for f in files]).drop("run_id").sort(pl.all())


def _per_file(report) -> list[tuple]:
    return sorted(
        (f.path, f.status, f.rows_read, f.rows_stored, f.rows_quarantined, f.duplicates_dropped, f.rows_updated)
        for f in report.files
    )


def _lake_files(lake_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(lake_dir)): p.read_bytes() for p in sorted(lake_dir.rglob("part.parquet"))}


def test_group_tasks_store_and_quarantine_what_the_threads_do(tmp_path, monkeypatch):
    landing = write_messy_landing(tmp_path / "raw")
    local_config, local = _ingest(landing.root, tmp_path / "local")
    monkeypatch.setattr(run, "TASK_GROUP_MIN_ROWS", 1)  # a group per lake shard, however small the batch
    monkeypatch.setattr(run, "TASK_PARSE_FILES", 2)  # a group's rows come from several parse tasks
    calls = []

    def counted(step, jobs):
        calls.append((step, len(jobs)))
        return _in_process(step, jobs)

    tasks_config, tasks = _ingest(landing.root, tmp_path / "tasks", counted)

    assert ("check", 4) in calls and ("merge", 4) in calls  # the groups really were tasks
    assert any(step == "parse" for step, _ in calls)  # and the parses
    assert local.totals["rows_quarantined"] >= 4 and local.totals["duplicates_dropped"] >= 2  # messy input
    assert tasks.adds_up and tasks.totals == local.totals
    assert _per_file(tasks) == _per_file(local)
    assert_same_lake(tasks_config.lake_dir, local_config.lake_dir)
    assert _lake_files(tasks_config.lake_dir) == _lake_files(local_config.lake_dir)  # byte for byte
    assert _quarantine(tasks_config).equals(_quarantine(local_config))
    assert read_changes(tasks_config.lake_dir) == read_changes(local_config.lake_dir)
    assert not any(staging_root(tasks_config).iterdir())  # every batch removed its staging files

    # A rerun of every file as tasks stores nothing and changes nothing.
    _, again = _ingest(landing.root, tmp_path / "tasks", counted, force=True)
    assert again.totals["rows_stored"] == 0 and again.adds_up
    assert _lake_files(tasks_config.lake_dir) == _lake_files(local_config.lake_dir)


def test_a_failed_group_task_leaves_no_staging_file_and_the_retry_completes_the_lake(tmp_path, monkeypatch):
    landing = write_messy_landing(tmp_path / "raw")
    clean_config, clean = _ingest(landing.root, tmp_path / "clean")
    monkeypatch.setattr(run, "TASK_GROUP_MIN_ROWS", 1)
    seen = []
    merges = []

    def failing(step, jobs):
        seen.extend(_staging_directory(job) for job in jobs)
        merges.extend(job["table"] for job in jobs if step == "merge")
        if step == "merge" and merges.count("samples") > 4:  # the second batch of samples
            jobs[1]["token"] = "not-the-holder"  # the second group's merge is refused
        return _in_process(step, jobs)

    with pytest.raises(RuntimeError, match="not held under this token"):
        _ingest(landing.root, tmp_path / "data", failing)
    assert seen and not any(directory.exists() for directory in seen)
    assert not any(staging_root(_config(tmp_path / "data")).iterdir())

    config, retry = _ingest(landing.root, tmp_path / "data", _in_process)
    assert retry.adds_up and retry.totals["rows_quarantined"] == clean.totals["rows_quarantined"]
    assert_same_lake(config.lake_dir, clean_config.lake_dir)


def test_a_lock_token_lets_in_only_while_its_hold_lasts(tmp_path):
    lake = tmp_path / "lake"
    with lake_lock(lake):
        token = lock_token(lake)
        with lock_held_by_token(lake, token), lake_lock(lake):  # re-entered, not waited for
            pass
        with pytest.raises(RuntimeError), lock_held_by_token(lake, "another"):
            pass
    with pytest.raises(RuntimeError), lock_held_by_token(lake, token):  # the hold has ended
        pass
    with lake_lock(lake):
        assert lock_token(lake) != token  # every hold has its own
    with pytest.raises(RuntimeError):
        lock_token(lake)


@pytest.mark.parametrize("runner", ["local threads", "tasks"])
def test_shard_groups_a_killed_driver_left_staged_are_removed_by_the_next_ingest(tmp_path, runner):
    """A Dask driver killed mid-batch leaves its staged shard groups behind; the next ingest
    removes them under the lake lock, whichever runner it uses, and stores its rows."""
    landing = write_messy_landing(tmp_path / "landing")
    data_dir = tmp_path / "data"
    leftover = staging_root(_config(data_dir)) / "killed-b0000-samples"
    leftover.mkdir(parents=True)
    (leftover / "group-00.parquet").write_bytes(b"staged by a driver that was killed")
    config, report = _ingest(landing.root, data_dir, _in_process if runner == "tasks" else None)
    assert not leftover.exists()
    assert report.totals["rows_stored"] > 0


def test_make_clean_leaves_nothing_of_an_ingest_whose_groups_ran_as_tasks(tmp_path):
    """``make clean`` removes ``Config.generated_dirs()``: after an ingest that staged its
    shard groups for tasks (under ``<data>/staging/ingest/``), nothing is left of the data
    directory."""
    landing = write_messy_landing(tmp_path / "landing")
    config, report = _ingest(landing.root, tmp_path / "data", _in_process)
    assert report.adds_up and report.totals["rows_stored"] > 0
    assert staging_root(config).is_dir()  # emptied by each batch, kept for the next
    for path in config.generated_dirs():
        shutil.rmtree(path, ignore_errors=True)
    assert sorted(p.name for p in config.data_dir.iterdir()) == []
