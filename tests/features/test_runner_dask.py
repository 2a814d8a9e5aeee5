"""`foreshock --runner dask --dask-address ...` runs the features flow on a real Dask cluster
(a scheduler and two single-threaded worker processes on 127.0.0.1: the ``dask_cluster``
fixture of tests/conftest.py) and stores exactly what the local thread-pool runner stores."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fleet_helpers import make_fleet
from polars.testing import assert_frame_equal

from foreshock.config import load_config
from foreshock.features.store import scan_features
from foreshock.pipelines.cli import main

pytest.importorskip("prefect_dask", reason="the dask extra is not installed (make setup installs it)")


def _config(data_dir: Path):
    return load_config(None, data_dir=data_dir).with_overrides(
        {
            "features": {"windows": ["1h", "6h", "1d"], "baseline_window": "1d", "expected_sample_every": "10m"},
            "lake": {"shards": 4},
        }
    )


def _write_toml(path: Path) -> Path:
    path.write_text(
        '[features]\nwindows = ["1h", "6h", "1d"]\nbaseline_window = "1d"\nexpected_sample_every = "10m"\n'
        "[lake]\nshards = 4\n"
    )
    return path


def test_dask_cluster_features_equal_the_local_runner(prefect_server, dask_cluster, tmp_path, capsys):
    fleet = make_fleet(5, units=12, days=2, failures=1)
    local_dir, dask_dir = tmp_path / "local", tmp_path / "dask"
    fleet.write(_config(local_dir).lake_dir, shards=4)
    shutil.copytree(local_dir / "lake", dask_dir / "lake")
    toml = str(_write_toml(tmp_path / "foreshock.toml"))

    assert main(["--config", toml, "--data-dir", str(local_dir), "features"]) == 0
    from distributed import Client

    def transitions() -> int:  # the session's cluster: other tests' work counts too
        with Client(dask_cluster) as client:
            return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)

    before = transitions()
    assert (
        main(
            [
                "--config",
                toml,
                "--data-dir",
                str(dask_dir),
                "--runner",
                "dask",
                "--dask-address",
                dask_cluster,
                "features",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("unit snapshots") == 2

    local = scan_features(_config(local_dir)).collect().sort("unit_id", "ts")
    distributed = scan_features(_config(dask_dir)).collect().sort("unit_id", "ts")
    assert local.height > 0
    assert_frame_equal(distributed, local)
    # The work really ran on the cluster: its scheduler moved tasks to the workers.
    assert transitions() > before


def test_an_unknown_runner_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--data-dir", str(tmp_path), "--runner", "spark", "features"])
    assert "invalid choice" in capsys.readouterr().err
