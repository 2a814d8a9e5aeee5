"""Soak: ``foreshock serve`` for a day of cycles, compressed in time, then killed and restarted.

    nice uv run --frozen python benchmarks/soak.py                       # 24 simulated hours
    uv run --frozen python benchmarks/soak.py --hours 3 --ingest-every 8s --units 8

A Prefect server is started on 127.0.0.1 (free port, a temp home) and a simulated fleet's
history is ingested, featured and trained on (a champion to score with).  Then ``foreshock
serve`` runs with ``[schedule]`` intervals in place of its crons: an ingest every
``--ingest-every`` wall seconds (5 simulated minutes), a cycle every 12 of those (an hour),
and the retrain triggered once half-way.  A feeder lands the next day's nvidia-smi rows in
the landing directory, one file per node and 5 simulated minutes, as they fall due (written
under a hidden name and renamed, as a careful producer does).  After every cycle the serve
process's RSS, its child processes and ``foreshock status`` (judged at the simulated time)
are sampled.  At the end it checks

* every row landed is in the lake exactly once (the lake equals one ingest of everything
  landed, into a fresh data directory);
* every cycle completed and wrote an outbox;
* ``status`` was healthy after every cycle;
* the RSS series (printed, with its least-squares slope);
* no temp or staging file is left and no child process outlives serve.

Then the Prefect server and serve are SIGKILLed while a cycle runs, both restarted (the
server on the same port and database), and ``--after-restart`` more simulated hours fed:
nothing landed is lost and the cycles resume.  Every process it starts is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_checks import leftovers  # noqa: E402
from fault_injection import ROOT, start_prefect_server, stop_server  # noqa: E402
from soak_parts import (  # noqa: E402
    DEPLOYMENTS,
    FIVE_MINUTES,
    FORESHOCK,
    Feed,
    Feeder,
    children,
    create_run,
    descendants,
    flow_runs,
    group_alive,
    rss_kb,
    site_config,
    slope,
    split_days,
    still_running,
    wait_deployments,
)

# ----------------------------------------------------------------------------- the soak


@dataclass
class Sample:
    cycle: str
    sim_time: datetime
    rss_kb: int
    children: int
    status: str
    stale: list[str]


@dataclass
class Soak:
    """One soak: the work directory, the data directory served, the Prefect server and serve."""

    work: Path
    data: Path
    site: Path
    env: dict[str, str]
    api_url: str
    server: subprocess.Popen | None = None
    serve: subprocess.Popen | None = None
    samples: list[Sample] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # cycle runs sampled
    # runs of the same deployments made before this soak's first serve (a shared server keeps
    # them): never counted as this soak's
    earlier: set[str] = field(default_factory=set)

    def runs(self, deployments: dict) -> list[dict]:
        """This soak's runs of ``deployments`` (none made before its first serve)."""
        return [r for r in flow_runs(self.api_url, deployments) if r["id"] not in self.earlier]

    def cli(self, *argv: str, check: bool = True, timeout: float = 3600) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [*FORESHOCK, "--config", str(self.site), "--data-dir", str(self.data), *argv],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise SystemExit(f"foreshock {' '.join(argv)} exited {done.returncode}: {done.stderr[-3000:]}")
        return done

    def start_serve(self) -> dict:
        log = self.work / "serve.log"
        first, started = self.serve is None, datetime.now(UTC)
        with open(log, "ab") as out:
            self.serve = subprocess.Popen(
                [*FORESHOCK, "--config", str(self.site), "--data-dir", str(self.data), "serve"],
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        found = wait_deployments(self.api_url, self.data, self.serve, log)
        if first:
            self.earlier = {
                r["id"] for r in flow_runs(self.api_url, found) if datetime.fromisoformat(r["created"]) < started
            }
        return found

    def status(self, now: datetime) -> tuple[str, list[str]]:
        """``foreshock status`` judged at the simulated time ``now``: its state and the parts not ok."""
        from foreshock.config import load_config
        from foreshock.reporting.freshness import overall, pipeline_status

        store = f"sqlite:///{self.data / 'mlflow' / 'mlflow.db'}"
        os.environ["MLFLOW_TRACKING_URI"] = self.env.get("MLFLOW_TRACKING_URI") or store
        parts = pipeline_status(load_config(self.site, data_dir=self.data), now)
        return overall(parts), [f"{p.part} {p.state} ({p.detail})" for p in parts if p.state != "ok"]

    def sample(self, cycle: str, now: datetime) -> Sample:
        state, stale = self.status(now)
        pid = self.serve.pid if self.serve else 0
        sample = Sample(cycle, now, rss_kb(pid), len(children(pid)), state, stale)
        self.samples.append(sample)
        return sample

    def fed_rows_in_lake(self, feed: Feed, chunks: int) -> int:
        """Distinct (unit, time) samples of the lake in the first ``chunks`` of ``feed``: the
        nvidia-smi rows landed there."""
        import polars as pl

        from foreshock.lake.read import scan_table

        end = feed.start + timedelta(seconds=chunks * FIVE_MINUTES)
        try:
            rows = scan_table(self.data / "lake", "samples").filter(pl.col("ts").is_between(feed.start, end, "left"))
            return rows.select(pl.struct("unit_id", "ts").n_unique()).collect().item()
        except Exception:  # noqa: BLE001 - a lake being written or not there yet: not yet
            return 0

    def stop(self) -> None:
        if self.serve is not None:
            stop_server(self.serve)
        if self.server is not None:
            stop_server(self.server)


def bootstrap(soak: Soak, sim: Path) -> None:
    """The history ingested, featured and trained on: a champion for the cycles to score with."""
    landing = soak.data / "raw"
    soak.cli("ingest", "--path", str(landing))
    soak.cli("features")
    soak.cli("train", "--ground-truth", str(sim / "ground_truth.parquet"))


def follow(
    soak: Soak,
    deployments: dict,
    feeder: Feeder,
    until: int,
    retrain_at: int | None,
    timeout: float,
    min_cycles: int = 0,
) -> list[dict]:
    """Sample after every completed cycle until chunk ``until`` is landed and ingested and
    ``min_cycles`` cycles were sampled (or ``timeout`` seconds have passed); trigger the
    retrain once chunk ``retrain_at`` has landed.  Returns the flow runs."""
    seen, clock = soak.seen, feeder.sim_now
    retrained = retrain_at is None
    deadline = time.monotonic() + timeout
    while True:
        runs = soak.runs(deployments)
        for run in sorted(runs, key=lambda r: r.get("end_time") or ""):
            if run["deployment"] == "foreshock-cycle" and run["state_type"] == "COMPLETED" and run["id"] not in seen:
                seen.add(run["id"])
                s = soak.sample(run["id"], clock())
                print(
                    f"cycle {len(seen):>3} at {s.sim_time:%m-%d %H:%M}: rss {s.rss_kb / 1024:.0f} MB, "
                    f"children {s.children}, status {s.status} {'; '.join(s.stale)}",
                    flush=True,
                )
        if not retrained and feeder.next >= retrain_at:
            create_run(soak.api_url, deployments["foreshock-retrain"]["id"])
            retrained = True
            print(f"retrain triggered at {clock():%m-%d %H:%M}", flush=True)
        landed = feeder.next >= until and soak.fed_rows_in_lake(feeder.feed, until) >= feeder.feed.rows(until)
        enough = landed and len(soak.samples) >= min_cycles and not _running(runs, "foreshock-retrain")
        if enough or time.monotonic() > deadline:
            return runs
        if soak.serve.poll() is not None:
            raise SystemExit(f"serve exited {soak.serve.returncode}")
        time.sleep(2)


def _running(runs: list[dict], deployment: str) -> bool:
    return any(r["deployment"] == deployment and r["state_type"] in ("SCHEDULED", "PENDING", "RUNNING") for r in runs)


def kill_mid_cycle(soak: Soak, deployments: dict, timeout: float = 900) -> str:
    """SIGKILL the Prefect server and serve (their process groups) while a cycle runs;
    returns the killed cycle's id."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [r for r in soak.runs(deployments) if r["deployment"] == "foreshock-cycle"]
        running = [r for r in running if r["state_type"] == "RUNNING"]
        if running:
            time.sleep(2)  # into the cycle's stages
            for process in (soak.serve, soak.server):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            return running[0]["id"]
        time.sleep(1)
    raise SystemExit("no cycle ran within the timeout")


def restart_server(soak: Soak) -> None:
    """The Prefect server again, on the same port and database."""
    port = int(soak.api_url.rsplit(":", 1)[1].split("/")[0])
    soak.server, _ = start_prefect_server(soak.work, port)


def lake_equals_one_ingest(soak: Soak) -> list[str]:
    """Every row landed is in the lake once: the lake's samples equal one ingest of the whole
    landing directory into a fresh data directory, and no (unit, metric, time) repeats."""
    fresh = soak.work / "reference"
    shutil.rmtree(fresh, ignore_errors=True)
    done = subprocess.run(
        [*FORESHOCK, "--config", str(soak.site), "--data-dir", str(fresh), "ingest", "--path", str(soak.data / "raw")],
        env=soak.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return [f"reference ingest exited {done.returncode}: {done.stderr[-500:]}"]
    return lake_equals(soak.data, fresh)


def lake_equals(data: Path, reference: Path) -> list[str]:
    """What differs between the lake's samples in ``data`` and in ``reference`` (one ingest of
    the same landing directory), and whether a (unit, metric, time) repeats in ``data``."""
    import polars as pl

    from foreshock.lake.read import read_table

    key = ["unit_id", "metric", "ts"]
    served, reference = (read_table(root / "lake", "samples").sort(key) for root in (data, reference))
    problems = []
    repeated = served.group_by(key).len().filter(pl.col("len") > 1).height
    if repeated:
        problems.append(f"{repeated} samples stored more than once")
    if served.height != reference.height or not served.select(reference.columns).equals(reference):
        problems.append(f"lake {served.height:,} samples, one ingest of the landing {reference.height:,}")
    return problems


def report(soak: Soak, runs: list[dict], feed: Feed, chunks: int, since: int = 0) -> dict:
    """The figures so far (runs of both phases) and of the phase's samples (from ``since``):
    cycles and ingests, their lateness, RSS and status."""
    by = {name: [r for r in runs if r["deployment"] == name] for name in DEPLOYMENTS}
    states = {name: sorted({r["state_type"] for r in by[name] if r["state_type"] != "SCHEDULED"}) for name in by}

    def late(run: dict) -> float:
        start = run.get("start_time")
        if not start:
            return 0.0
        return (datetime.fromisoformat(start) - datetime.fromisoformat(run["expected_start_time"])).total_seconds()

    ran = {name: [r for r in by[name] if r["state_type"] not in ("SCHEDULED", "PENDING")] for name in by}
    samples = soak.samples[since:]
    rss = [s.rss_kb for s in samples]
    outboxes = [p for p in (soak.data / "outbox").iterdir() if p.is_dir() and not p.name.startswith(".")]
    figures = {
        "cycles": len(ran["foreshock-cycle"]),
        "cycles completed": sum(r["state_type"] == "COMPLETED" for r in by["foreshock-cycle"]),
        "ingests": len(ran["foreshock-ingest"]),
        "ingests completed": sum(r["state_type"] == "COMPLETED" for r in by["foreshock-ingest"]),
        "retrains completed": sum(r["state_type"] == "COMPLETED" for r in by["foreshock-retrain"]),
        "states": states,
        "outboxes": len(outboxes),
        "cycle seconds (median, max)": _median_max([r.get("total_run_time") or 0 for r in ran["foreshock-cycle"]]),
        "ingest seconds (median, max)": _median_max([r.get("total_run_time") or 0 for r in ran["foreshock-ingest"]]),
        "cycle start late s (median, max)": _median_max([late(r) for r in ran["foreshock-cycle"]]),
        "ingest start late s (median, max)": _median_max([late(r) for r in ran["foreshock-ingest"]]),
        "rows landed": feed.rows(chunks),
        "rss MB": [round(v / 1024, 1) for v in rss],
        "rss slope kB per cycle": round(slope(rss), 1),
        "status not ok": [f"{s.sim_time:%H:%M} {s.status}: {'; '.join(s.stale)}" for s in samples if s.status != "ok"],
        "children after a cycle (max)": max((s.children for s in samples), default=0),
    }
    return figures


def _median_max(values: list[float]) -> tuple[float, float]:
    if not values:
        return (0.0, 0.0)
    ordered = sorted(values)
    return (round(ordered[len(ordered) // 2], 1), round(ordered[-1], 1))


def run_soak(args: argparse.Namespace, work: Path) -> int:
    every = args.ingest_every
    data = work / "data"
    sim = work / "sim"
    history = args.history_days
    soak_days = (args.hours + args.after_restart + 23) // 24
    subprocess.run(
        [*FORESHOCK, "--data-dir", str(work / "unused"), "simulate", "--units", str(args.units)]
        + ["--days", str(history + soak_days), "--seed", str(args.seed), "--sample-every", args.sample_every]
        + ["--start", "2026-11-01", "--failure-rate", str(args.failure_rate), "--out", str(sim)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    first_fed = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(days=history)
    feed = split_days(sim, data / "raw", first_fed, args.hours + args.after_restart)
    site = work / "site.toml"
    site.write_text(site_config(every))
    soak = Soak(work, data, site, {}, "")
    soak.server, soak.api_url = start_prefect_server(work)
    soak.env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING"))}
    soak.env.update(
        PYTHONPATH=str(ROOT),
        PREFECT_API_URL=soak.api_url,
        PREFECT_HOME=str(work / "prefect-client"),
        PREFECT_RUNNER_POLL_FREQUENCY="1",  # picks a due run within a second (default 10 s)
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    started, cpu = time.monotonic(), os.times()
    try:
        bootstrap(soak, sim)
        print(f"history of {history} days ingested, featured and trained on in {time.monotonic() - started:.0f} s")
        deployments = soak.start_serve()
        t0 = time.monotonic()
        main_chunks = args.hours * 3600 // FIVE_MINUTES
        feeder = Feeder(feed, data / "raw", every, t0, last=main_chunks)
        feeder.start()
        patience = 600 + 2 * every * main_chunks
        runs = follow(soak, deployments, feeder, main_chunks, main_chunks // 2, patience)
        soak_wall = time.monotonic() - t0
        figures = report(soak, runs, feed, main_chunks)
        figures["wall s"] = round(soak_wall)
        problems = _phase_problems(figures, soak, feed, main_chunks)
        print(json.dumps(figures, indent=1, default=str), flush=True)

        if args.after_restart:
            killed = kill_mid_cycle(soak, deployments)
            # the rows keep landing, at the same cadence, while both are down
            feeder = Feeder(feed, data / "raw", every, time.monotonic() - main_chunks * every, first=main_chunks)
            feeder.start()
            print(f"killed the Prefect server and serve during cycle {killed} at {feeder.sim_now():%m-%d %H:%M}")
            restart_server(soak)
            before = len(soak.samples)
            deployments = soak.start_serve()
            print(f"restarted both at {feeder.sim_now():%m-%d %H:%M}", flush=True)
            patience = 600 + 2 * every * (len(feed.chunks) - main_chunks)
            runs = follow(soak, deployments, feeder, len(feed.chunks), None, patience, min_cycles=before + 1)
            after = report(soak, runs, feed, len(feed.chunks), since=before)
            resumed = soak.samples[before:]
            after["cycles completed after the restart"] = len(resumed)
            print(json.dumps(after, indent=1, default=str), flush=True)
            if not resumed:
                problems.append("no cycle completed after the restart")
            problems += _phase_problems(after, soak, feed, len(feed.chunks), after_kill=True)
        feeder.stopped.set()
        below = descendants(soak.serve.pid)  # the runs under way: serve's to end when it stops
        stop_server(soak.serve)
        if group_alive(soak.serve.pid) or still_running(below):
            problems.append(f"processes of serve's outlived it: {still_running(below, 0)}")
        left = leftovers(data)
        if left:
            problems.append(f"left over: {left[:5]}")
        problems += lake_equals_one_ingest(soak)
    finally:
        soak.stop()
    done = os.times()
    children_cpu = done.children_user - cpu.children_user + done.children_system - cpu.children_system
    print(f"wall {time.monotonic() - started:.0f} s, CPU {children_cpu:.0f} s (waited-for processes: serve, CLIs)")
    print("problems:", problems or "none")
    return 1 if problems else 0


def _phase_problems(figures: dict, soak: Soak, feed: Feed, chunks: int, after_kill: bool = False) -> list[str]:
    """What a phase got wrong: a cycle or ingest that did not complete, a cycle without its
    outbox, an unhealthy status, rows landed but not in the lake."""
    problems = []
    states = figures["states"]
    allowed = {"COMPLETED", "RUNNING", "PENDING"} | ({"CRASHED"} if after_kill else set())  # the killed cycle
    # an ingest due while one still runs is cancelled (serve's collision strategy for ingest:
    # the next one takes every file landed meanwhile, which the rows-in-lake check confirms)
    for name, also in (("foreshock-cycle", set()), ("foreshock-ingest", {"CANCELLED"})):
        if set(states[name]) - allowed - also:
            problems.append(f"{name} runs ended {states[name]}")
    completed, outboxes = figures["cycles completed"], figures["outboxes"]
    if not completed <= outboxes <= completed + after_kill:  # the killed cycle may have published
        problems.append(f"{completed} cycles completed, {outboxes} outboxes")
    # after the kill, the outage itself ages the lake (a minute down is half an hour simulated):
    # the status must be back to ok by the last cycle
    if after_kill and soak.samples and soak.samples[-1].status != "ok":
        problems.append(f"status not ok at the last cycle: {soak.samples[-1].stale}")
    elif not after_kill and figures["status not ok"]:
        problems.append(f"status not ok: {figures['status not ok']}")
    in_lake = soak.fed_rows_in_lake(feed, chunks)
    if in_lake != feed.rows(chunks):
        problems.append(f"{feed.rows(chunks):,} rows landed, {in_lake:,} in the lake")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=int, default=24, help="simulated hours served (default 24)")
    parser.add_argument("--after-restart", type=int, default=2, help="simulated hours after the kill (default 2)")
    parser.add_argument("--ingest-every", type=float, default=6.0, help="wall seconds per 5 simulated minutes")
    parser.add_argument("--units", type=int, default=16)
    parser.add_argument("--history-days", type=int, default=7)
    parser.add_argument("--sample-every", default="1m", help="nvidia-smi sample interval (default 1m)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument(
        "--failure-rate",
        type=float,
        default=20.0,
        help="per 1,000 GPU-days: a short history holds failures to train on",
    )
    parser.add_argument("--work", type=Path, help="working directory (default: a fresh temp dir, removed)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup
    work = args.work or Path(tempfile.mkdtemp(prefix="foreshock-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return run_soak(args, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
