"""`foreshock features` without a Prefect API: the plan runs here, without Prefect; and
one run at a time on a store."""

from __future__ import annotations

import subprocess
import sys
import time

from fleet_helpers import make_fleet
from polars.testing import assert_frame_equal
from prefect_free import prefect_free_environment, run_without_prefect_api

from foreshock.config import load_config
from foreshock.features.build import build_features
from foreshock.features.store import scan_features


def test_the_command_without_an_api_stores_the_features_without_prefect(tmp_path):
    """No temporary server (nor Prefect's import) for a command nobody records: the store
    it writes is the in-memory build's, and a second run finds nothing to do."""
    settings = tmp_path / "foreshock.toml"
    settings.write_text('[features]\nwindows = ["1h", "6h", "1d"]\nbaseline_window = "1d"\n')
    config = load_config(settings, data_dir=tmp_path / "data")
    make_fleet(5, units=6, days=2, failures=1).write(config.lake_dir)
    arguments = ["--config", str(settings), "--data-dir", str(config.data_dir), "features"]

    first = run_without_prefect_api(tmp_path, arguments)
    assert first.returncode == 0, first.stderr
    assert "prefect loaded: False" in first.stdout
    stored = scan_features(config).collect().sort("unit_id", "ts")
    assert f"features: {stored.height} unit snapshots" in first.stdout
    assert_frame_equal(stored, build_features(config.lake_dir, config))
    again = run_without_prefect_api(tmp_path, arguments)
    assert "up to date" in again.stdout and "prefect loaded: False" in again.stdout


# A features run that stalls in its first pass (after touching the file named first), as a
# long run would be busy there.
STALLED_RUN = """
import sys, time, pathlib
from foreshock.features import build
def stalled(*args):
    pathlib.Path(sys.argv[1]).touch()
    time.sleep(300)
build.stage_shard = stalled
from foreshock.pipelines.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_second_run_on_the_store_refuses_at_once_and_a_killed_one_blocks_nothing(tmp_path):
    config = load_config(None, data_dir=tmp_path / "data")
    make_fleet(6, units=4, days=1, failures=0).write(config.lake_dir)
    arguments = ["--data-dir", str(config.data_dir), "features"]
    started = tmp_path / "started"
    holder = subprocess.Popen(
        [sys.executable, "-c", STALLED_RUN, str(started), *arguments],
        env=prefect_free_environment(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), "the first run never reached its first pass"

        second = run_without_prefect_api(tmp_path, arguments)
        assert holder.poll() is None  # refused while the first still runs: it did not wait
        assert second.returncode == 2
        (line,) = [text for text in second.stderr.splitlines() if text.strip()]
        assert f"another features run, process {holder.pid} (" in line and str(config.features_dir) in line
    finally:
        holder.kill()  # SIGKILL: nothing released by the holder itself
        holder.wait()

    third = run_without_prefect_api(tmp_path, arguments)
    assert third.returncode == 0, third.stderr
    stored = scan_features(config).collect().sort("unit_id", "ts")
    assert stored.height > 0
    assert_frame_equal(stored, build_features(config.lake_dir, config))
