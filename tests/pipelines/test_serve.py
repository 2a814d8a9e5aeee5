"""``foreshock serve`` against a real Prefect server: the scheduled deployments exist with
their cron schedules, a triggered ``foreshock-cycle`` completes with a new outbox and a
risk-list artifact, and a second trigger waits for the first (concurrency limit 1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.pipelines.services import running, wait_http

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
# the soak's Prefect API call: retried on the answers a busy server gives (a SQLite write
# lock held by the served process is a 503), as Prefect's own client does
from soak_parts import api as api_call  # noqa: E402

pytestmark = pytest.mark.slow
FORESHOCK = [sys.executable, "-m", "foreshock.pipelines.cli"]
DEPLOYMENT_NAMES = ("foreshock-ingest", "foreshock-cycle", "foreshock-retrain")


def _env(tmp: Path, api: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING_URI"))}
    env.update(
        PREFECT_HOME=str(tmp / "prefect-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_UI_ENABLED="false",
        MLFLOW_DISABLE_TELEMETRY="true",
        # The runner looks for new runs every second (default 10 s): the second cycle run
        # must be picked up while the first still runs, or it never has to wait for the slot.
        PREFECT_RUNNER_POLL_FREQUENCY="1",
    )
    if api:
        env["PREFECT_API_URL"] = api
    return env


@pytest.fixture(scope="module")
def prefect_api(prefect_server, tmp_path_factory):
    """The session's Prefect API server (a real server subprocess on 127.0.0.1, started once
    for every flow test: another one would take 40-70 s to answer on two busy cores)."""
    if shutil.which("prefect") is None and not (Path(sys.executable).parent / "prefect").exists():
        pytest.skip("the prefect command is not installed")
    from prefect.settings import PREFECT_API_URL

    api = PREFECT_API_URL.value()
    assert api and api.startswith("http://127.0.0.1:"), api
    wait_http(f"{api}/health", 240)
    yield api, tmp_path_factory.mktemp("prefect-client")


def _wait_state(api: str, run_id: str, states: set[str], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = api_call(api, f"/flow_runs/{run_id}")
        if run["state_type"] in states:
            return run
        time.sleep(2)
    raise TimeoutError(f"flow run {run_id} still {run['state_type']} ({run['state_name']}) after {timeout:.0f} s")


def test_serve_runs_the_cycle_with_concurrency_limit_1(prefect_api, demo_data_dir, mlflow_uri, tmp_path):
    from demo_fleet import DEMO_CONFIG

    api, server_tmp = prefect_api
    # the champion the cycles score with is the session demo's, in the session's store
    env = {**_env(server_tmp, api), "MLFLOW_TRACKING_URI": mlflow_uri}
    data = tmp_path / "data"
    # a copy of the session's demo data (a whole pipeline run: a champion, scores, an outbox)
    shutil.copytree(demo_data_dir, data)
    site = tmp_path / "site.toml"
    # the cycle's schedule is kept far away so only the test's triggers run it
    # the simulated fleet ended days ago: its scores are older than a live fleet's may be
    site.write_text(DEMO_CONFIG + '[schedule]\ningest = ""\ncycle = "0 0 1 1 *"\n[policy]\nmax_score_age = "3650d"\n')
    base = [*FORESHOCK, "--config", str(site), "--data-dir", str(data)]
    outboxes = sorted(p.name for p in (data / "outbox").iterdir() if p.is_dir())

    with running([*base, "serve"], tmp_path / "serve.log", env=env) as serve:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            # the session's server also holds other tests' flow runs: only foreshock's deployments
            # count, and only once serve has written its own (``prefect deploy`` in another test
            # may have made the same three, for the production data directory)
            found = api_call(api, "/deployments/filter", {"deployments": {"name": {"any_": list(DEPLOYMENT_NAMES)}}})
            if len(found) == 3 and all(d["parameters"].get("data_dir") == str(data) for d in found):
                break
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(2)
        by_name = {d["name"]: d for d in found}
        assert set(by_name) == set(DEPLOYMENT_NAMES)
        cycle = by_name["foreshock-cycle"]
        assert cycle["parameters"] == {"data_dir": str(data), "config_path": str(site)}
        limit = cycle.get("global_concurrency_limit") or {}
        assert limit.get("limit") == 1 or cycle.get("concurrency_limit") == 1, cycle
        assert (cycle.get("concurrency_options") or {}).get("collision_strategy") == "ENQUEUE", cycle
        assert [s["schedule"]["cron"] for s in cycle["schedules"]] == ["0 0 1 1 *"]
        assert [s["schedule"]["cron"] for s in by_name["foreshock-retrain"]["schedules"]] == ["0 3 * * 0"]
        assert by_name["foreshock-ingest"]["schedules"] == []

        first = api_call(api, f"/deployments/{cycle['id']}/create_flow_run", {})
        first_seen = _wait_state(api, first["id"], {"RUNNING", "COMPLETED", "FAILED", "CRASHED"}, 300)
        assert first_seen["state_type"] == "RUNNING", "the cycle ended before a second run could be sent"
        second = api_call(api, f"/deployments/{cycle['id']}/create_flow_run", {})
        done = _wait_state(api, first["id"], {"COMPLETED", "FAILED", "CRASHED"}, 600)
        assert done["state_type"] == "COMPLETED", (tmp_path / "serve.log").read_text()[-4000:]
        later = _wait_state(api, second["id"], {"COMPLETED", "FAILED", "CRASHED"}, 600)
        assert later["state_type"] == "COMPLETED", (tmp_path / "serve.log").read_text()[-4000:]
        # the second run started only after the first had finished, having waited for the slot
        assert datetime.fromisoformat(later["start_time"]) >= datetime.fromisoformat(done["end_time"])
        waited = {state["name"] for state in api_call(api, f"/flow_run_states/?flow_run_id={second['id']}")}
        assert "AwaitingConcurrencySlot" in waited, waited

    new = sorted(p.name for p in (data / "outbox").iterdir() if p.is_dir() and p.name not in outboxes)
    assert len(new) == 2 and all((data / "outbox" / name / "risk_list.parquet").is_file() for name in new)
    artifacts = api_call(api, "/artifacts/filter", {"artifacts": {"key": {"any_": ["foreshock-risk-list"]}}})
    assert all(a["type"] == "markdown" for a in artifacts)
    assert all(any(name in a["data"] for a in artifacts) for name in new)  # each cycle's list

    listed = subprocess.run(
        [str(Path(sys.executable).parent / "prefect"), "deployment", "ls"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(listed.stdout)
    assert "cycle/foreshock-cycle" in listed.stdout and "retrain/foreshock-retrain" in listed.stdout
    status = subprocess.run([*base, "status"], env=env, capture_output=True, text=True, timeout=300)
    print(status.stdout)
    assert "scores" in status.stdout and "champion" in status.stdout
