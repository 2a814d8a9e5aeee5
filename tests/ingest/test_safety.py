"""Crash safety and concurrency, with real processes: SIGKILL mid-run, two ingests at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from landing_files import assert_same_lake, write_landing

from foreshock.config import load_config
from foreshock.ingest import ingest_path
from foreshock.ingest.manifest import read_manifest

ROOT = Path(__file__).resolve().parents[2]

# Runs an ingest in a child process; with KILL_AFTER=N the process SIGKILLs itself right
# after the N-th partition file is in place (or the files written together that hold it,
# foreshock.lake.atomic.written_together): mid-merge, before its files reach the manifest.
CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    import foreshock.lake.atomic as atomic
    from foreshock.config import load_config
    from foreshock.ingest import ingest_path

    kill_after = int(os.environ.get("KILL_AFTER", "0"))
    if os.environ.get("SPLIT"):  # check and merge every batch shard by shard on two threads
        import foreshock.ingest.store as run
        run.SPLIT_MIN_ROWS = 0
    real_replace, real_in_place = atomic._replace_durably, atomic._put_in_place
    written = [0]

    def maybe_die(paths):
        written[0] += sum(path.name == "part.parquet" for path in paths)
        if kill_after and written[0] >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    def replace_then_maybe_die(tmp, path):
        real_replace(tmp, path)
        maybe_die([path])

    def in_place_then_maybe_die(files):
        real_in_place(files)
        maybe_die([path for _, path in files])

    atomic._replace_durably, atomic._put_in_place = replace_then_maybe_die, in_place_then_maybe_die
    barrier = os.environ.get("BARRIER")
    if barrier:  # start both ingests at the same moment, after their imports
        open(f"{barrier}.{os.getpid()}", "w").close()
        while not os.path.exists(barrier):
            time.sleep(0.005)
    config = load_config(data_dir=sys.argv[2]).with_overrides({"ingest": {"timezone": "UTC"}})
    report = ingest_path(sys.argv[1], config)
    assert report.adds_up
    print(report.totals["rows_stored"])
    """
)


def run_child(
    landing: Path, data_dir: Path, kill_after: int = 0, barrier: Path | None = None, split: bool = False
) -> subprocess.Popen:
    env = {**os.environ, "KILL_AFTER": str(kill_after), "PYTHONPATH": str(ROOT), "BARRIER": str(barrier or "")}
    env["SPLIT"] = "1" if split else ""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(landing), str(data_dir)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def clean_lake(tmp_path: Path, landing: Path) -> tuple[Path, int]:
    config = load_config(data_dir=tmp_path / "clean").with_overrides({"ingest": {"timezone": "UTC"}})
    report = ingest_path(landing, config)
    return config.lake_dir, report.totals["rows_stored"]


@pytest.mark.parametrize("split", [False, True], ids=["whole-batches", "shards-on-threads"])
def test_run_killed_mid_merge_then_rerun_gives_the_clean_lake(tmp_path, split):
    landing = write_landing(tmp_path / "raw", nodes=2, gpus=4, days=3)
    killed = run_child(landing.root, tmp_path / "data", kill_after=6, split=split)
    killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL
    lake_dir = tmp_path / "data" / "lake"
    written = list(lake_dir.rglob("part.parquet"))
    assert len(written) >= 6  # the crash left a partly merged lake behind ...
    recorded = set(read_manifest(lake_dir)["path"].to_list())
    assert not any("2026-11-01" in p for p in recorded)  # ... whose unfinished files are not recorded
    assert not list(lake_dir.rglob("*.tmp-*"))  # and no half-written file is visible

    rerun = run_child(landing.root, tmp_path / "data", split=split)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert_same_lake(lake_dir, clean_lake(tmp_path, landing.root)[0])

    # The manifest now lists every file exactly once: a third run reads nothing.
    config = load_config(data_dir=tmp_path / "data").with_overrides({"ingest": {"timezone": "UTC"}})
    assert ingest_path(landing.root, config).totals["rows_read"] == 0


def test_two_ingests_at_once_give_the_clean_lake(tmp_path):
    landing = write_landing(tmp_path / "raw", nodes=2, gpus=4, days=3)
    barrier = tmp_path / "go"
    first = run_child(landing.root, tmp_path / "data", barrier=barrier)
    second = run_child(landing.root, tmp_path / "data", barrier=barrier)
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("go.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    barrier.touch()
    outputs = [p.communicate(timeout=120) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, [o[1] for o in outputs]
    clean_dir, clean_stored = clean_lake(tmp_path, landing.root)
    assert_same_lake(tmp_path / "data" / "lake", clean_dir)
    # Each row was stored by exactly one of the two, and their reports say so.
    assert sum(int(out.strip()) for out, _ in outputs) == clean_stored
    manifest = read_manifest(tmp_path / "data" / "lake")
    assert manifest.height == manifest.select("sha256", "context").unique().height
