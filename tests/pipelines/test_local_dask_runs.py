"""A flow on a local Dask cluster without a configured Prefect API: its workers report to the
flow's temporary server instead of each starting one of their own.

The cluster's workers are new processes.  Told nothing, each started its own temporary
Prefect server (about 220 MB and tens of seconds on 2 cores, per worker) the first time a
task reported its state: on a 4,096-GPU backtest, three servers instead of one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from prefect import flow, task
    from foreshock.config import load_config
    from foreshock.pipelines.runtime import task_runner

    @task
    def servers_here():
        module = sys.modules.get("prefect.server.api.server")
        started = getattr(getattr(module, "SubprocessASGIServer", None), "_instances", {})
        return {"pid": os.getpid(), "servers": len(started)}

    if __name__ == "__main__":  # the workers are spawned: they import this file again
        config = load_config(sys.argv[1], data_dir=sys.argv[2])

        @flow(task_runner=task_runner(config))
        def on_local_dask():
            return [f.result() for f in [servers_here.submit(), servers_here.submit()]]

        print(json.dumps({"flow_pid": os.getpid(), "tasks": on_local_dask()}))
    """
)


@pytest.mark.slow
def test_a_local_dask_clusters_workers_start_no_prefect_server_of_their_own(tmp_path):
    pytest.importorskip("prefect_dask", reason="the dask extra is not installed (make setup installs it)")
    site = tmp_path / "site.toml"
    site.write_text('[runner]\nkind = "dask"\nlocal_workers = 1\n')
    script = tmp_path / "flow_on_dask.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PYTHONPATH=str(ROOT))
    from foreshock.pipelines.runtime import PREFECT_DEFAULTS

    env.update({k: v for k, v in PREFECT_DEFAULTS.items() if k not in env})
    done = subprocess.run(
        [sys.executable, str(script), str(site), str(tmp_path / "data")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(t["pid"] != result["flow_pid"] for t in result["tasks"])  # they ran on the worker
    assert [t["servers"] for t in result["tasks"]] == [0, 0], result
