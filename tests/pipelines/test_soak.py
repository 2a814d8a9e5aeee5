"""``foreshock serve`` against a real Prefect server (the session's), and the soak's checks on
a short run.

One serve of a copy of the session's demo data: its three deployments with their schedules
and concurrency limit 1; an hour of 5-minute ingests in half a minute, a landing directory
fed as the rows fall due, and two cycles, the second sent while the first runs (it waits for
the slot).  At the end every row landed is in the lake once, each cycle wrote an outbox and
a risk-list artifact, ``status`` was healthy after every cycle, serve's memory was sampled
and nothing is left behind.  benchmarks/soak.py runs 24 simulated hours, then kills and
restarts the server and serve."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from foreshock.config import load_config
from foreshock.pipelines.serve_cmd import deployments, describe_schedules

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
# the soak's Prefect API call: retried on the answers a busy server gives (a SQLite write
# lock held by the served process is a 503), as Prefect's own client does
from soak_parts import api as api_call  # noqa: E402
from soak_parts import create_run  # noqa: E402


def test_a_duration_in_the_schedule_is_an_interval(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[schedule]\ningest = "30s"\ncycle = "5m"\n')
    served = {d.name: d for d in deployments(load_config(site, data_dir=tmp_path / "data"), str(site))}
    assert [s.schedule.interval for s in served["foreshock-ingest"].schedules] == [timedelta(seconds=30)]
    assert [s.schedule.interval for s in served["foreshock-cycle"].schedules] == [timedelta(minutes=5)]
    assert [s.schedule.cron for s in served["foreshock-retrain"].schedules] == ["0 3 * * 0"]  # a cron stays one
    assert describe_schedules(served["foreshock-ingest"]) == "every 30 s"
    with pytest.raises(ValueError):  # neither a duration nor a cron expression
        site.write_text('[schedule]\ncycle = "hourly"\n')
        deployments(load_config(site, data_dir=tmp_path / "data"), str(site))


def _soak_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module("soak")


def _next_day(demo: Path, landing: Path, day: str) -> Path:
    """The demo's last day of nvidia-smi rows again, one day later: new rows for its units."""
    source = sorted((demo / "raw" / "sim" / "nvidia-smi").glob("*/*.csv"))
    last = max(p.stem for p in source)
    sim = landing.parent / "next-day"
    for path in (p for p in source if p.stem == last):
        target = sim / "nvidia-smi" / path.parent.name / f"{day}.csv"
        target.parent.mkdir(parents=True, exist_ok=True)
        old, new = last.replace("-", "/"), day.replace("-", "/")
        target.write_text(path.read_text().replace(old, new))
    return sim


def _wait_state(api: str, run_id: str, states: set[str], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = api_call(api, f"/flow_runs/{run_id}")
        if run["state_type"] in states:
            return run
        time.sleep(2)
    raise TimeoutError(f"flow run {run_id} still {run['state_type']} ({run['state_name']}) after {timeout:.0f} s")


@pytest.mark.slow
def test_serve_cycles_one_at_a_time_lands_every_row_once_and_publishes_every_cycle(
    demo_data_dir, tmp_path, prefect_server, use_registry
):
    """serve's deployments on the session's server, with their schedules and limits; two cycles
    of a short soak, the second sent while the first runs (it waits for the slot); every row
    landed in the lake once, an outbox and a risk-list artifact per cycle, status healthy."""
    from demo_fleet import DEMO_CONFIG, demo_tracking_uri
    from prefect.settings import PREFECT_API_URL

    prefect = Path(sys.executable).parent / "prefect"
    if shutil.which("prefect") is None and not prefect.exists():
        pytest.skip("the prefect command is not installed")
    soak = _soak_module()
    soak_parts = sys.modules["soak_parts"]
    every = 2.5  # wall seconds per 5 simulated minutes: an hour in 30 s
    data = tmp_path / "data"
    shutil.copytree(demo_data_dir, data, ignore=shutil.ignore_patterns("outbox"))
    first_fed = datetime(2026, 11, 15, tzinfo=UTC)  # the day after the demo's
    feed = soak.split_days(_next_day(demo_data_dir, tmp_path / "landing", "2026-11-15"), data / "raw", first_fed, 1)
    site = tmp_path / "site.toml"
    # the compressed clock turns a run's seconds into simulated minutes: ages judged an hour
    # wider; the session's server is Prefect's ephemeral one, without the scheduler service:
    # the test makes the runs the intervals would (benchmarks/soak.py serves the schedules).
    # The cycle's cron is kept far away and the retrain's is the default: serve registers both
    ages = '[status]\nlake_max_age = "90m"\nfeatures_max_age = "3h"\n'
    far_off = "0 0 1 1 *"
    schedules = {"cycle": far_off, "retrain": None}
    site.write_text(soak.site_config(every, DEMO_CONFIG + ages, scheduled=False, schedules=schedules))
    api = PREFECT_API_URL.value()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(ROOT), PREFECT_API_URL=api, PREFECT_RUNNER_POLL_FREQUENCY="1")
    # the copy's own registry (the demo's champion): serve's runs and the status checks here
    registry = use_registry(demo_tracking_uri(data))
    env.update(PREFECT_HOME=str(tmp_path / "prefect-client"), MLFLOW_TRACKING_URI=registry)
    run = soak.Soak(tmp_path, data, site, env, api)
    try:
        found = run.start_serve()
        t0 = time.monotonic()
        feeder = soak.Feeder(feed, data / "raw", every, t0)
        feeder.start()
        # the ingests every 5 simulated minutes; the two cycles are sent here: the second
        # while the first runs (the runner looks for runs every second: it is picked up)
        trigger = soak_parts.Trigger(api, found, every, cycles=0)
        trigger.start()
        cycle = found["foreshock-cycle"]
        first = create_run(api, cycle["id"])
        first_seen = _wait_state(api, first["id"], {"RUNNING", "COMPLETED", "FAILED", "CRASHED"}, 300)
        assert first_seen["state_type"] == "RUNNING", "the cycle ended before a second run could be sent"
        second = create_run(api, cycle["id"])
        runs = soak.follow(run, found, feeder, len(feed.chunks), None, timeout=600, min_cycles=2)
        trigger.stopped.set()
        # an outbox is written before its run reports its end: serve is stopped only once both
        # cycles have a final state (else stopping it may cancel the second)
        for sent in (first, second):
            _wait_state(api, sent["id"], {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}, 120)
        # ... and once their processes have exited: serve's runner forces every run whose
        # process it still tracks to Cancelled when it stops, a completed one included
        assert soak_parts.wait_runs_exited(run.serve.pid, {first["id"], second["id"]}) == []
        figures = soak.report(run, runs, feed, len(feed.chunks))
        print(figures)
        problems = soak._phase_problems(figures, run, feed, len(feed.chunks))
        assert figures["cycles completed"] == 2 and not problems, (
            problems,
            (tmp_path / "serve.log").read_text()[-3000:],
        )
        assert all(s.rss_kb > 0 for s in run.samples)
        below = soak.descendants(run.serve.pid)
    finally:
        run.stop()
    assert not soak.group_alive(run.serve.pid) and not soak.still_running(below), "a process of serve's outlived it"
    assert soak.leftovers(data) == []
    # every row landed is in the lake once: it equals one ingest of the whole landing
    # directory into a fresh data directory (the same command, in this process)
    from foreshock.pipelines.cli import main

    reference = tmp_path / "reference"
    assert main(["--config", str(site), "--data-dir", str(reference), "ingest", "--path", str(data / "raw")]) == 0
    assert soak.lake_equals(data, reference) == []

    # the deployments serve made: parameters, one run at a time, the cron schedules
    assert cycle["parameters"] == {"data_dir": str(data), "config_path": str(site)}
    limit = cycle.get("global_concurrency_limit") or {}
    assert limit.get("limit") == 1 or cycle.get("concurrency_limit") == 1, cycle
    assert (cycle.get("concurrency_options") or {}).get("collision_strategy") == "ENQUEUE", cycle
    assert [s["schedule"]["cron"] for s in cycle["schedules"]] == [far_off]
    assert [s["schedule"]["cron"] for s in found["foreshock-retrain"]["schedules"]] == ["0 3 * * 0"]
    assert found["foreshock-ingest"]["schedules"] == []
    # the second cycle started only after the first had finished, having waited for the slot
    done, later = (api_call(api, f"/flow_runs/{r['id']}") for r in (first, second))
    history = {
        r["id"]: [(s["name"], s["message"]) for s in api_call(api, f"/flow_run_states/?flow_run_id={r['id']}")]
        for r in soak_parts.flow_runs(api, found)
        if r["deployment"] == "foreshock-cycle"
    }
    assert done["state_type"] == later["state_type"] == "COMPLETED", (
        history.get(second["id"]),  # the second's states first: a long message is cut in the middle
        history.get(first["id"]),
        history,
    )
    assert len(history) == 2, history  # the two sent, each made once
    assert datetime.fromisoformat(later["start_time"]) >= datetime.fromisoformat(done["end_time"])
    waited = {state["name"] for state in api_call(api, f"/flow_run_states/?flow_run_id={second['id']}")}
    assert "AwaitingConcurrencySlot" in waited, waited
    # each cycle's outbox, with its risk list, and the risk-list artifact naming it
    new = sorted(p.name for p in (data / "outbox").iterdir() if p.is_dir() and not p.name.startswith("."))
    assert len(new) == 2 and all((data / "outbox" / name / "risk_list.parquet").is_file() for name in new)
    artifacts = api_call(api, "/artifacts/filter", {"artifacts": {"key": {"any_": ["foreshock-risk-list"]}}})
    assert all(a["type"] == "markdown" for a in artifacts)
    assert all(any(name in a["data"] for a in artifacts) for name in new)

    listed = subprocess.run([str(prefect), "deployment", "ls"], env=env, capture_output=True, text=True, timeout=120)
    print(listed.stdout)
    assert "cycle/foreshock-cycle" in listed.stdout and "retrain/foreshock-retrain" in listed.stdout
    status = run.cli("status", check=False, timeout=300)
    print(status.stdout)
    assert "scores" in status.stdout and "champion" in status.stdout


@pytest.mark.slow
def test_serve_ends_the_runs_a_killed_serve_left_and_frees_their_slot(prefect_server, tmp_path):
    """A serve killed mid-run leaves the run Running, holding the deployment's only slot;
    the next serve marks it Crashed, which gives the slot back (the schedule resumes)."""
    from prefect.client.orchestration import get_client
    from prefect.states import Pending, Running

    from foreshock.pipelines.serve_cmd import crash_orphaned_runs

    site = tmp_path / "site.toml"
    site.write_text('[schedule]\ncycle = ""\n')
    [cycle] = deployments(load_config(site, data_dir=tmp_path / "data"), str(site), only=["cycle"])
    deployment_id = cycle.apply()
    with get_client(sync_client=True) as client:

        def active_slots() -> int:
            return client.read_deployment(deployment_id).global_concurrency_limit.active_slots

        run = client.create_flow_run_from_deployment(deployment_id)
        assert client.set_flow_run_state(run.id, Pending()).state.is_pending()  # takes the slot
        client.set_flow_run_state(run.id, Running())
        assert active_slots() == 1
        waiting = client.create_flow_run_from_deployment(deployment_id)
        assert not client.set_flow_run_state(waiting.id, Pending()).state.is_pending()  # no slot left

        assert run.name in crash_orphaned_runs(["foreshock-cycle"])
        assert client.read_flow_run(run.id).state.is_crashed()
        assert active_slots() == 0
        assert client.set_flow_run_state(waiting.id, Pending()).state.is_pending()  # the next one runs
        client.set_flow_run_state(waiting.id, Running())
        assert crash_orphaned_runs(["foreshock-cycle"]) == [waiting.name]  # leaves nothing held


def test_a_busy_or_unreachable_prefect_server_is_retried_a_bad_request_is_not():
    """A stage whose Prefect API call met a busy server (the soak's cycles failed on SQLite's
    503s under load) is retried like other I/O; a 4xx answer is not."""
    import httpx
    from prefect.exceptions import PrefectHTTPStatusError

    from foreshock.pipelines.runtime import is_io_error

    request = httpx.Request("POST", "http://127.0.0.1:4200/api/task_runs/")

    def answered(status: int) -> Exception:
        return PrefectHTTPStatusError(f"{status}", request=request, response=httpx.Response(status, request=request))

    assert is_io_error(answered(503)) and is_io_error(answered(429))
    assert is_io_error(httpx.ConnectError("connection refused", request=request))
    assert not is_io_error(answered(400)) and not is_io_error(answered(404))
