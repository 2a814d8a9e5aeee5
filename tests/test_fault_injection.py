"""SIGKILL a stage mid-run, rerun it, compare with an unkilled run.

The lake's writers (ingest, features) are killed at a random point of their run on a tiny
fleet; ``pull``, ``replay`` and ``report`` are killed at the point where they have begun to
write (a fetched chunk, a figure, the first of the page's two files), on copies of the
session's demo data.  benchmarks/fault_injection.py kills every stage that writes, a
hundred times and more; a round of all ten takes tens of minutes on 2 shared cores."""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PULL_DAYS = 4  # the days of DCGM series the pull kill test fetches


def load_harness():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its sibling modules (fault_checks, fault_prometheus)
    spec = importlib.util.spec_from_file_location("fault_injection", ROOT / "benchmarks" / "fault_injection.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_killed_lake_writer_reruns_to_the_clean_result(tmp_path, prefect_server, seed):
    """ingest, then features on its lake, each SIGKILLed at a random share of its clean run's
    time.  The clean and the killed runs are processes of their own (the share means the same
    for both); the reruns run in this process.  (The benchmark's pull, between the two, only
    adds the DCGM series: features read the ingested lake here.)"""
    from prefect.settings import PREFECT_API_URL

    from foreshock.pipelines.cli import main

    faults = load_harness()
    checks = sys.modules["fault_checks"]
    harness = faults.prepare(tmp_path / "work", 16, 7, 11, PREFECT_API_URL.value(), sample_every="10m")

    def run(data: Path, *argv: str) -> int:
        return main(["--config", str(harness.work / "site.toml"), "--data-dir", str(data), *argv])

    rng = random.Random(seed)
    found: dict[str, list[str]] = {}
    before = harness.snapshot("empty")
    for stage in ("ingest", "features"):
        harness.restore(before)
        started = time.monotonic()
        assert harness.run(stage) == (0, False), (harness.work / f"{stage}.log").read_text()[-2000:]
        clean_seconds = time.monotonic() - started
        clean = harness.snapshot(f"after-{stage}")
        shutil.copytree(harness.data, clean, symlinks=True)
        harness.restore(before)
        # killed in the first half of the clean run time, so the kill lands before the stage ends
        delay = rng.uniform(0.1, 0.5) * clean_seconds
        assert harness.run(stage, kill_after=delay)[1], f"{stage} finished before its kill at {delay:.1f} s"
        argv = harness.argv(stage)
        found[stage] = _after_kill(checks, harness.data) + _rerun(run, checks, harness.data, argv[argv.index(stage) :])
        found[stage] += checks.compare(stage, clean, harness.data)
        before = clean
    assert found == {"ingest": [], "features": []}


def _written_since(directory: Path, since: float):
    """Whether a file (a temp file included) under ``directory`` was written after ``since``."""

    def check() -> bool:
        return directory.is_dir() and any(p.stat().st_mtime > since for p in directory.rglob("*") if p.is_file())

    return check


@pytest.mark.slow
def test_pull_replay_and_report_killed_while_writing_rerun_to_the_unkilled_result(
    demo_data_dir, tmp_path, prefect_server, use_registry
):
    from demo_fleet import DEMO_CONFIG, demo_tracking_uri
    from prefect.settings import PREFECT_API_URL

    from foreshock.pipelines.cli import main

    faults = load_harness()
    checks = sys.modules["fault_checks"]
    from fault_prometheus import query_range_server

    site = tmp_path / "site.toml"
    site.write_text(DEMO_CONFIG + '[pull]\nstep = "1h"\nchunk = "1d"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": PREFECT_API_URL.value()}
    # replay and report run on a copy of the demo data: its registry holds the demo's
    # champion (read by the fleet page), for the killed runs and those in this process
    copy = tmp_path / "trial"
    env["MLFLOW_TRACKING_URI"] = use_registry(demo_tracking_uri(copy))

    def killed(data: Path, *argv: str, when) -> bool:
        """The run to kill: a process of its own, SIGKILLed once ``when()`` holds."""
        command = [sys.executable, "-m", "foreshock.pipelines.cli", "--config", str(site), "--data-dir", str(data)]
        return faults.run_cli([*command, *argv], env, tmp_path / "cli.log", kill_when=when)[1]

    def run(data: Path, *argv: str) -> int:
        """The unkilled runs and the reruns: the same command in this process (the same
        Prefect server and MLflow store), without a new interpreter's imports each time."""
        return main(["--config", str(site), "--data-dir", str(data), *argv])

    found: dict[str, list[str]] = {}
    start = datetime(2026, 11, 1, tzinfo=UTC)
    with query_range_server(demo_data_dir / "raw" / "sim" / "dcgm") as url:
        # the demo's first four days, a chunk (request) a day: the kill lands after the first
        # chunk is written, with three still to fetch (the whole 14 days took 7x as long)
        end = start + timedelta(days=PULL_DAYS)
        pull = ["pull", "--url", url, "--start", start.isoformat(), "--end", end.isoformat()]
        assert run(tmp_path / "pulled", *pull) == 0
        trial = tmp_path / "pull-trial"
        assert killed(trial, *pull, when=_written_since(trial / "pull", 0)), "pull finished before its first chunk"
        found["pull"] = _after_kill(checks, trial) + _rerun(run, checks, trial, pull)
        found["pull"] += checks.compare("pull", tmp_path / "pulled", trial)

    # replay, then report, on one copy of the demo data: the replay's reference is the demo's
    trial = copy
    shutil.copytree(demo_data_dir, trial)
    truth = ["--ground-truth", str(trial / "raw" / "sim" / "ground_truth.parquet")]
    assert killed(trial, "replay", *truth, when=_written_since(trial / "reports" / "replay", time.time())), (
        "replay finished before it was seen writing"
    )
    found["replay"] = _after_kill(checks, trial) + _rerun(run, checks, trial, ["replay", *truth])
    found["replay"] += checks.compare("replay", demo_data_dir, trial)
    # the demo does not write the page: an unkilled run first, the files it wrote moved
    # aside (the reference), so the killed run writes its page where none is
    reference = tmp_path / "report-reference"
    before = _mtimes(trial / "reports")
    assert run(trial, "report") == 0
    for page, written in _mtimes(trial / "reports").items():
        if before.get(page) != written:
            (reference / page.relative_to(trial)).parent.mkdir(parents=True, exist_ok=True)
            page.rename(reference / page.relative_to(trial))
    assert (reference / "reports" / "fleet.html").is_file()
    assert killed(trial, "report", when=_written_since(trial / "reports", time.time())), (
        "report finished before it was seen writing"
    )
    found["report"] = _after_kill(checks, trial) + _rerun(run, checks, trial, ["report"])
    found["report"] += checks.compare("report", reference, trial)
    assert found == {"pull": [], "replay": [], "report": []}


def _mtimes(directory: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in directory.rglob("*") if p.is_file()}


def _after_kill(checks, data: Path) -> list[str]:
    return [f"stale lock {x}" for x in checks.stale_locks(data)] + checks.partial_files(data)


def _rerun(run, checks, data: Path, argv: list[str]) -> list[str]:
    code = run(data, *argv)
    return [f"rerun exit {code}"] if code else [f"left over {x}" for x in checks.leftovers(data)]


@pytest.mark.slow
def test_a_process_killed_while_mlflow_creates_its_store_leaves_no_half_store(tmp_path, use_registry):
    """MLflow builds a new SQLite store by running its migrations one by one (seconds to
    tens of seconds): a train killed meanwhile once left a half-migrated store that every
    later train refused.  The store now appears whole or not at all."""
    faults = load_harness()
    store = tmp_path / "mlflow"
    code = (
        "import sys; from pathlib import Path; from foreshock.models.registry.tracking import experiment_id; "
        "print(experiment_id('soak', store=Path(sys.argv[1])))"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(PYTHONPATH=str(ROOT), MLFLOW_DISABLE_TELEMETRY="true")

    def migrating() -> bool:  # the temp store has tables: the migrations are under way
        for temp in store.glob(".mlflow.db.tmp-*"):
            if temp.name.endswith(("-journal", "-wal", "-shm")):
                continue  # SQLite's own side files come and go between the listing and the stat
            try:
                if temp.stat().st_size > 0:
                    return True
            except FileNotFoundError:
                continue
        return False

    log = tmp_path / "store.log"
    assert faults.run_cli([sys.executable, "-c", code, str(store)], env, log, kill_when=migrating) == (-9, True)
    assert not (store / "mlflow.db").exists(), "a killed creation left a store in place"
    # the next run, in this process (one interpreter start less): it creates the store whole
    from foreshock.models.registry.tracking import experiment_id

    use_registry(f"sqlite:///{store.resolve() / 'mlflow.db'}")
    assert experiment_id("soak", store=store)
    assert (store / "mlflow.db").is_file() and not list(store.glob(".mlflow.db.tmp-*"))


def test_a_pull_removes_only_the_fetched_directories_of_killed_pulls(tmp_path):
    from foreshock.pipelines.pull_cmd import remove_killed_pulls

    ended = subprocess.Popen(["true"])
    ended.wait()
    gone = ended.pid  # a process that has ended
    killed = tmp_path / f"pull-20261205T000000Z-{gone}"
    running = tmp_path / f"pull-20261205T000500Z-{os.getpid()}"  # a pull under way
    older = tmp_path / "pull-20261101T000000Z"  # kept by [pull] keep_files before pids were named
    for directory in (killed, running, older):
        directory.mkdir()
        (directory / "chunk-0001.json").write_text("{}")
    assert remove_killed_pulls(tmp_path) == [killed]
    assert not killed.exists() and running.is_dir() and older.is_dir()


def test_the_registry_is_read_afresh_after_the_data_directory_is_restored(tmp_path, mlflow_uri):
    """Every trial runs at one path, restored from a copy; MLflow keeps a store per URI for
    the life of a process, whose SQLite connection went on reading the deleted file: a
    registry read after a restore saw the one read before it ("challenger differs" after
    every train once a review had been checked, and nothing checked after the first read)."""
    import mlflow

    load_harness()
    checks = sys.modules["fault_checks"]
    trial, clean, other = tmp_path / "data", tmp_path / "clean", tmp_path / "other"
    mlflow.MlflowClient(mlflow_uri).search_experiments()  # the session's store, migrated once
    (trial / "mlflow").mkdir(parents=True)
    shutil.copy2(mlflow_uri.removeprefix("sqlite:///"), trial / "mlflow" / "mlflow.db")

    def register(root: Path, recall: float) -> None:
        client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow' / 'mlflow.db'}")
        run = client.create_run("0")
        client.log_metric(run.info.run_id, "recall", recall)
        client.set_terminated(run.info.run_id)
        try:
            client.create_registered_model("foreshock-risk")
        except mlflow.exceptions.MlflowException:
            pass  # the session's store may hold it already
        version = client.create_model_version("foreshock-risk", f"runs:/{run.info.run_id}/m", run.info.run_id)
        client.set_registered_model_alias("foreshock-risk", "challenger", version.version)

    register(trial, 1.0)
    shutil.copytree(trial, clean)
    shutil.copytree(trial, other)
    register(other, 2.0)  # the same store with another challenger
    assert checks.compare_registry("train", clean, trial) == []
    shutil.rmtree(trial)
    shutil.copytree(other, trial)  # restored at the same path: read afresh
    assert checks.compare_registry("train", clean, trial) == ["train: challenger differs: 1 metrics, e.g. ['recall']"]
    shutil.rmtree(trial)
    shutil.copytree(clean, trial)
    assert checks.compare_registry("train", clean, trial) == []
