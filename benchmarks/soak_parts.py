"""The soak's parts that do not run it: the time-compressed site configuration, the feed of
landed rows, the Prefect API calls, and what is read of a process (RSS, children).

See :mod:`soak`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

FIVE_MINUTES = 300  # simulated seconds between two ingests
CYCLE_EVERY = 12  # ingests per cycle (hourly)
FORESHOCK = [sys.executable, "-m", "foreshock.pipelines.cli"]
DEPLOYMENTS = ("foreshock-ingest", "foreshock-cycle", "foreshock-retrain")
# Not landed: the scrape is a snapshot at the simulation's end, the ground truth is the
# benchmark's own, and the DCGM exports of the days fed are left out (nvidia-smi rows only).
NOT_LANDED = ("scrape", "ground_truth.parquet", "simulation.json")


def site_config(ingest_every: float, extra: str = "", scheduled: bool = True, schedules: dict | None = None) -> str:
    """``[schedule]`` intervals: an ingest per 5 simulated minutes, a cycle per hour, the
    retrain by hand (``scheduled=False``: every run by hand, see :class:`Trigger`).
    ``schedules`` replaces entries (a cron that never fires in the run; ``None``: the
    built-in default).  The simulated fleet lies in the past: its scores are old."""
    ingest, cycle = (f"{ingest_every:g}s", f"{ingest_every * CYCLE_EVERY:g}s") if scheduled else ("", "")
    entries = {"ingest": ingest, "cycle": cycle, "retrain": "", **(schedules or {})}
    lines = "".join(f'{key} = "{value}"\n' for key, value in entries.items() if value is not None)
    return "[schedule]\n" + lines + '[ingest]\ntimezone = "UTC"\n[policy]\nmax_score_age = "3650d"\n' + extra


# ----------------------------------------------------------------------------- the feed


@dataclass
class Feed:
    """The rows to land, per 5-minute chunk from ``start``: (relative path, CSV text, rows)."""

    start: datetime
    chunks: list[list[tuple[str, str, int]]] = field(default_factory=list)

    def rows(self, upto: int) -> int:
        return sum(n for chunk in self.chunks[:upto] for _, _, n in chunk)


def split_days(sim: Path, landing: Path, first_fed: datetime, hours: int) -> Feed:
    """Move the simulation's history (days before ``first_fed``) into ``landing`` and cut the
    nvidia-smi files of the next ``hours`` into 5-minute chunks to land later."""
    landing.mkdir(parents=True, exist_ok=True)
    fed_days = {(first_fed + timedelta(days=d)).date().isoformat() for d in range((hours + 23) // 24)}
    for path in sorted(sim.rglob("*")):
        relative = path.relative_to(sim)
        if path.is_dir() or relative.parts[0] in NOT_LANDED:
            continue
        day = next((d for d in fed_days if d in str(relative)), None)
        later = any(part[:10] > max(fed_days) for part in relative.parts if part[:4].isdigit())
        if day is None and not later:
            (landing / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, landing / relative)
    feed = Feed(first_fed, [[] for _ in range(hours * 3600 // FIVE_MINUTES)])
    for path in sorted(sim.glob("nvidia-smi/*/*.csv")):
        if path.stem not in fed_days:
            continue
        header, *lines = path.read_text().splitlines()
        by_chunk: dict[int, list[str]] = {}
        for line in lines:
            stamp = datetime.strptime(line[:19], "%Y/%m/%d %H:%M:%S").replace(tzinfo=UTC)
            k = int((stamp - first_fed).total_seconds() // FIVE_MINUTES)
            if 0 <= k < len(feed.chunks):
                by_chunk.setdefault(k, []).append(line)
        for k, rows in by_chunk.items():
            when = first_fed + timedelta(seconds=k * FIVE_MINUTES)
            name = f"nvidia-smi/{path.parent.name}/{when:%Y-%m-%dT%H%M}.csv"
            feed.chunks[k].append((name, "\n".join([header, *rows]) + "\n", len(rows)))
    return feed


class Feeder(threading.Thread):
    """Lands chunk ``k`` at ``t0 + (k + 1) * every`` (when its 5 simulated minutes are over)."""

    def __init__(self, feed: Feed, landing: Path, every: float, t0: float, first: int = 0, last: int | None = None):
        super().__init__(daemon=True)
        self.feed, self.landing, self.every, self.t0 = feed, landing, every, t0
        self.next, self.last = first, len(feed.chunks) if last is None else last
        self.stopped = threading.Event()

    def run(self) -> None:
        while self.next < self.last and not self.stopped.is_set():
            due = self.t0 + (self.next + 1) * self.every
            if self.stopped.wait(max(0.0, due - time.monotonic())):
                return
            for name, text, _ in self.feed.chunks[self.next]:
                target = self.landing / name
                target.parent.mkdir(parents=True, exist_ok=True)
                hidden = target.with_name(f".{target.name}.part")
                hidden.write_text(text)
                os.replace(hidden, target)
            self.next += 1

    def sim_now(self) -> datetime:
        """The simulated time: the feed's start plus the 5-minute chunks due so far (it stops
        with the feed, so an idle wait at the end does not age the data)."""
        due = min((time.monotonic() - self.t0) / self.every, self.last)
        return self.feed.start + timedelta(seconds=due * FIVE_MINUTES)


# ----------------------------------------------------------------------------- the API


def api(base: str, path: str, body: dict | None = None, attempts: int = 8) -> object:
    """A call to the Prefect REST API, retried on the answers a busy server gives."""
    for attempt in range(attempts):
        request = urllib.request.Request(
            f"{base}{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="GET" if body is None else "POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code not in (429, 502, 503) or attempt == attempts - 1:
                raise
        except OSError:
            if attempt == attempts - 1:
                raise
        time.sleep(min(2**attempt, 10))
    raise AssertionError("unreachable")


def create_run(base: str, deployment_id: str) -> dict:
    """A flow run of a deployment, made once however often the call is retried.

    ``api`` retries a POST whose answer was lost (a timeout, or a 503 from a server whose
    SQLite write lock is held); without a key the server would make a second run each time,
    and an extra cycle run changes what a soak measures.  Prefect returns the run already
    made for the same idempotency key."""
    body = {"idempotency_key": uuid.uuid4().hex}
    return api(base, f"/deployments/{deployment_id}/create_flow_run", body)


def wait_deployments(base: str, data: Path, serve: subprocess.Popen, log: Path, timeout: float = 300) -> dict:
    """serve's three deployments (for this data directory), by name."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise SystemExit(f"serve exited {serve.returncode}: {log.read_text()[-3000:]}")
        found = api(base, "/deployments/filter", {"deployments": {"name": {"any_": list(DEPLOYMENTS)}}})
        mine = {d["name"]: d for d in found if d["parameters"].get("data_dir") == str(data)}
        if len(mine) == len(DEPLOYMENTS):
            return mine
        time.sleep(2)
    raise SystemExit("serve's deployments did not appear")


def flow_runs(base: str, deployments: dict) -> list[dict]:
    ids = [d["id"] for d in deployments.values()]
    names = {d["id"]: d["name"] for d in deployments.values()}
    runs = api(base, "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": ids}}, "limit": 200})
    offset = 200
    while len(runs) == offset:  # the API pages at 200
        runs += api(base, "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": ids}}, "offset": offset})
        offset += 200
    for run in runs:
        run["deployment"] = names[run["deployment_id"]]
    return runs


# ----------------------------------------------------------------------------- processes


def rss_kb(pid: int) -> int:
    """Resident set size of ``pid`` (kB), 0 when it is gone."""
    try:
        return psutil.Process(pid).memory_info().rss // 1024
    except psutil.Error:
        return 0


def children(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def run_processes(pid: int, run_ids: set[str]) -> list[int]:
    """The processes below ``pid`` that execute one of the flow runs ``run_ids`` (the
    runner starts each run as a child with ``PREFECT__FLOW_RUN_ID`` in its environment)."""

    def runs_one(child: int) -> bool:
        try:
            process = psutil.Process(child)
            return process.status() != psutil.STATUS_ZOMBIE and process.environ().get("PREFECT__FLOW_RUN_ID") in run_ids
        except psutil.Error:  # gone meanwhile
            return False

    return [child for child in descendants(pid) if runs_one(child)]


def wait_runs_exited(pid: int, run_ids: set[str], timeout: float = 120.0) -> list[int]:
    """Wait until no process below ``pid`` executes one of ``run_ids``; those still there
    at ``timeout``.  A run reports its final state before its process exits, and a runner
    that shuts down forces every run whose process it still tracks to Cancelled, a
    completed one included: stop serve only once its runs' processes are gone."""
    deadline = time.monotonic() + timeout
    while (left := run_processes(pid, run_ids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def still_running(pids: list[int], wait: float = 15.0) -> list[int]:
    """Those of ``pids`` that still run (not zombies) after ``wait`` seconds."""

    def runs(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.monotonic() + wait
    while True:
        running = [pid for pid in pids if runs(pid)]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.5)


def group_alive(pgid: int, wait: float = 15.0) -> bool:
    """Whether any process of the process group ``pgid`` is still there after ``wait``
    seconds (a child that just died is a zombie until init reaps it)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        if time.monotonic() > deadline:
            return True
        time.sleep(0.5)


def slope(values: list[float]) -> float:
    """Least-squares slope of ``values`` over their index (units per sample)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    return num / sum((i - mean_x) ** 2 for i in range(n))


class Trigger(threading.Thread):
    """Creates the runs a schedule would: an ingest run every ``every`` seconds and a cycle
    run every ``CYCLE_EVERY`` of those, at most ``cycles`` of them (default: no limit; a
    caller that sends its own cycles gives 0), through the API (for a Prefect server without
    its scheduler service, such as the test harness's ephemeral one)."""

    def __init__(self, base: str, deployments: dict, every: float, cycles: int | None = None):
        super().__init__(daemon=True)
        self.base, self.deployments, self.every, self.cycles = base, deployments, every, cycles
        self.stopped = threading.Event()

    def run(self) -> None:
        tick = made = 0
        while not self.stopped.wait(self.every):
            tick += 1
            cycle = tick % CYCLE_EVERY == 0 and (self.cycles is None or made < self.cycles)
            made += cycle
            due = ["foreshock-ingest"] + (["foreshock-cycle"] if cycle else [])
            for name in due:
                create_run(self.base, self.deployments[name]["id"])
