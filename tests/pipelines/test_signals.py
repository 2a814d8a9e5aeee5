"""A CLI stopped by SIGTERM stops the temporary Prefect server it started, and a killed
run's temp files are gone at the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foreshock.lake.atomic import atomic_write_text
from foreshock.lake.locks import lake_lock

ROOT = Path(__file__).resolve().parents[2]


def children_of(pid: int) -> list[tuple[int, str]]:
    """``(pid, command line)`` of the processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid:
            found.append((int(entry.name), command))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_sigterm_stops_the_temporary_prefect_server(tmp_path):
    # The demo starts its temporary server at once, beside the simulation, for all its
    # stages (ingest and features without an API run without Prefect: no server to stop).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PYTHONPATH=str(ROOT))
    cli = subprocess.Popen(
        [sys.executable, "-m", "foreshock.pipelines.cli", "--data-dir", str(tmp_path / "data"), "demo"]
        + ["--units", "8", "--days", "3"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    server = None
    try:
        deadline = time.monotonic() + 120
        while server is None and time.monotonic() < deadline and cli.poll() is None:
            server = next((pid for pid, cmd in children_of(cli.pid) if "uvicorn" in cmd), None)
            time.sleep(0.05)
        assert server is not None, "the CLI did not start a temporary Prefect server"
        time.sleep(1.0)
        cli.send_signal(signal.SIGTERM)
        cli.wait(timeout=60)
        deadline = time.monotonic() + 10
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(server), "the temporary Prefect server outlived the CLI"
        assert cli.returncode == 128 + signal.SIGTERM
    finally:  # only processes this test started
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        if server is not None and alive(server):
            os.kill(server, signal.SIGKILL)


def test_temp_files_of_a_killed_writer_are_removed_at_the_next_run(tmp_path):
    lake = tmp_path / "lake"
    partition = lake / "samples" / "date=2026-11-01" / "shard=00"
    partition.mkdir(parents=True)
    left = partition / ".part.parquet.tmp-999999999-1"  # a writer that no longer exists
    left.write_bytes(b"half a file")
    with lake_lock(lake):
        pass
    assert not left.exists()

    # Outside the lake (no lock), only a dead writer's file goes: a live one's stays.
    features = tmp_path / "features"
    features.mkdir()
    dead = features / ".x.parquet.tmp-999999999-1"
    live = features / f".y.parquet.tmp-{os.getpid()}-1"
    dead.write_bytes(b"x")
    live.write_bytes(b"y")
    from foreshock.pipelines.cli import main

    main(["--data-dir", str(tmp_path), "lake"])
    assert not dead.exists() and live.exists()


def test_atomic_write_leaves_no_temp_file_and_is_durable(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    atomic_write_text(tmp_path / "a" / "report.json", "{}\n")
    assert (tmp_path / "a" / "report.json").read_text() == "{}\n"
    assert os.listdir(tmp_path / "a") == ["report.json"]
    assert synced[0].startswith(str(tmp_path / "a" / ".report.json.tmp-"))  # the file ...
    assert synced[1] == str(tmp_path / "a")  # ... and its directory
