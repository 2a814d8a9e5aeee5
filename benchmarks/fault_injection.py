"""Fault injection: SIGKILL every stage that writes at random points, rerun it, compare with
an unkilled run.

    nice uv run --frozen python benchmarks/fault_injection.py                     # 10 kills per stage
    uv run --frozen python benchmarks/fault_injection.py --kills 1 --units 16 --days 7 --sample-every 10m

A simulated fleet goes through ``ingest`` (its landing files, the DCGM exports excepted),
``pull`` (those DCGM series from a real Prometheus they were backfilled into:
:mod:`fault_prometheus`), ``features``, ``backtest``, ``train``, ``review``, ``score``,
``publish``, ``replay`` and ``report`` once, cleanly, with the data directory copied after
each stage.  Then, for each kill, the copy made *before* a stage is restored, the stage's CLI
is started and sent SIGKILL (its whole process group) after a random share of its clean
duration, and the harness checks (:mod:`fault_checks`)

* no stale lock: every writer lock (an ``flock``) under the data directory can be taken;
* no partial file visible: every visible Parquet and JSON file under it reads;

then reruns the stage to completion and checks that nothing is left over (temp files,
staging directories) and that what the stage produced equals the clean run's (lake tables,
feature snapshots, backtest and live scores, the registry's challenger and champion with
their runs' metrics and the review's decision, the newest outbox's risk list and diff, the
replay's summary and drains, the fleet page).  Every run happens at the same path, so the
MLflow store's absolute artifact locations point into the copy under test.  It prints kills
per stage, mismatches, stale locks, partial and left-over files, and wall and CPU time.
Every process it starts (one Prefect server, Prometheus, the stage CLIs) is stopped by its PID.

A run may come in batches: with ``--work DIR`` the unkilled run's copies and stage times
stay in ``DIR`` (``clean.json``), and a later run with the same ``--work`` reuses them (give
it another ``--seed`` for other kill points: the seed draws the kill times; the fleet is not
simulated again).  ``--until HH:MM`` (UTC) starts no round that would end after that time,
judged by the longest round so far.

The default fleet (128 GPUs x 21 days, an nvidia-smi sample every 2 minutes: 345 MB of
landing files, two ingest batches) makes most stages run for tens of seconds on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_checks import compare, latest_outbox, leftovers, partial_files, stale_locks  # noqa: E402
from fault_prometheus import prometheus_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("ingest", "pull", "features", "backtest", "train", "review", "score", "publish", "replay", "report")
START = "2026-11-01"  # the simulated fleet's first day
# The benchmark's site configuration: the DCGM series are hourly (pulled at their own step,
# a day per request); the simulated fleet ended weeks ago, so its scores are old.
CLEAN_FILE = "clean.json"  # the unkilled run's stage times, beside its copies
SITE = '[pull]\nstep = "1h"\nchunk = "1d"\n[policy]\nmax_score_age = "3650d"\n'


def run_cli(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    kill_after: float | None = None,
    kill_when: Callable[[], bool] | None = None,
) -> tuple[int, bool]:
    """Run a command in its own session; SIGKILL the session ``kill_after`` seconds in, or as
    soon as ``kill_when()`` says so (polled every 20 ms).  Returns (exit code, killed)."""
    log = open(log_path, "ab")  # noqa: SIM115 - closed below
    process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + (3600 if kill_after is None else kill_after)
        while process.poll() is None:
            if (kill_when is not None and kill_when()) or (kill_after is not None and time.monotonic() > deadline):
                # The whole session: the CLI and its own children (backtest's fold processes).
                os.killpg(process.pid, signal.SIGKILL)
                return process.wait(timeout=60), True
            time.sleep(0.02)
        return process.returncode, False
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@dataclass
class Harness:
    work: Path
    env: dict[str, str]
    pull_url: str = ""
    days: int = 21
    clean_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        """Where every run happens (restored from a copy before each)."""
        return self.work / "data"

    def snapshot(self, name: str) -> Path:
        return self.work / name

    def argv(self, stage: str) -> list[str]:
        raw = self.work / "raw"
        truth = str(raw / "ground_truth.parquet")
        start = datetime.fromisoformat(START).replace(tzinfo=UTC)
        extra = {
            "ingest": ["--path", str(raw), "--timezone", "UTC"],
            "pull": ["--url", self.pull_url, "--start", start.isoformat()]
            + ["--end", (start + timedelta(days=self.days)).isoformat()],
            "features": [],
            "backtest": ["--ground-truth", truth],
            "train": ["--ground-truth", truth, "--backtest", str(self.data / "backtest")],
            "review": [],
            "score": [],
            "publish": ["--allow-stale"],
            "replay": ["--ground-truth", truth],
            "report": [],
        }[stage]
        site = ["--config", str(self.work / "site.toml")]
        return [sys.executable, "-m", "foreshock.pipelines.cli", *site, "--data-dir", str(self.data), stage, *extra]

    def run(self, stage: str, kill_after: float | None = None) -> tuple[int, bool]:
        """Run a stage's CLI; with ``kill_after`` (s) SIGKILL it then.  Returns (code, killed)."""
        return run_cli(self.argv(stage), self.env, self.work / f"{stage}.log", kill_after=kill_after)

    def restore(self, snapshot: Path) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        shutil.copytree(snapshot, self.data, symlinks=True)

    def clean_run(self, until: str = STAGES[-1]) -> None:
        """Run the stages up to ``until`` cleanly, copying the data directory after each;
        their times go to ``work/clean.json``.  When an earlier batch in the same work
        directory got that far, its copies and times are reused (same fleet, same code)."""
        recorded = self.work / CLEAN_FILE
        if recorded.is_file():
            times = json.loads(recorded.read_text())
            if all(stage in times for stage in STAGES[: STAGES.index(until) + 1]):
                self.clean_seconds.update(times)
                print(f"clean run of an earlier batch reused: {times}", flush=True)
                return
        self.restore(self.snapshot("empty"))
        for stage in STAGES[: STAGES.index(until) + 1]:
            started = time.monotonic()
            code, _ = self.run(stage)
            self.clean_seconds[stage] = time.monotonic() - started
            print(f"clean {stage}: {self.clean_seconds[stage]:.1f} s", flush=True)
            if code != 0:
                raise SystemExit(f"clean {stage} failed ({code}); see {self.work / (stage + '.log')}")
            shutil.rmtree(self.snapshot(f"after-{stage}"), ignore_errors=True)
            shutil.copytree(self.data, self.snapshot(f"after-{stage}"), symlinks=True)
        recorded.write_text(json.dumps(self.clean_seconds))

    def before(self, stage: str) -> Path:
        index = STAGES.index(stage)
        return self.snapshot("empty" if index == 0 else f"after-{STAGES[index - 1]}")


def start_prefect_server(work: Path, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """A Prefect server on 127.0.0.1 (``port``, else a free one; ``work/prefect`` as its home,
    so a restart on the same port finds the same database) in its own session; returns the
    process and its API URL."""
    if port is None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = open(work / "prefect-server.log", "ab")  # noqa: SIM115 - lives as long as the server
    server = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/api"
    import urllib.request

    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        return server, url
            except OSError:
                time.sleep(1)
        raise SystemExit("the Prefect server did not start")
    except BaseException:
        stop_server(server)
        raise


def stop_server(server: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Stop the server's whole session (the CLI and the uvicorn child it starts)."""
    try:
        os.killpg(server.pid, sig)
    except ProcessLookupError:
        return
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def prepare(work: Path, units: int, days: int, seed: int, api_url: str, sample_every: str = "2m") -> Harness:
    """Simulate the fleet into ``work/raw`` (its DCGM exports moved to ``work/dcgm``, where
    :func:`fault_prometheus.prometheus_for` serves them) and write the site configuration."""
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_TRACKING"))}
    env.update(
        PYTHONPATH=str(ROOT),
        PREFECT_API_URL=api_url,
        PREFECT_LOGGING_LEVEL="ERROR",
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    (work / "site.toml").write_text(SITE)
    if (work / CLEAN_FILE).is_file():  # a finished clean run of an earlier batch: its fleet is reused
        return Harness(work=work, env=env, days=days)
    subprocess.run(
        [sys.executable, "-m", "foreshock.pipelines.cli", "--data-dir", str(work / "empty"), "simulate"]
        + ["--units", str(units), "--days", str(days), "--seed", str(seed), "--start", START]
        + ["--sample-every", sample_every, "--out", str(work / "raw")],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    shutil.rmtree(work / "dcgm", ignore_errors=True)
    (work / "raw" / "dcgm").rename(work / "dcgm")
    shutil.rmtree(work / "empty", ignore_errors=True)  # what simulate may have made there
    (work / "empty").mkdir()
    return Harness(work=work, env=env, days=days)


@dataclass
class Trial:
    stage: str
    delay: float
    killed: bool
    stale_locks: list[str]
    partial: list[str]
    rerun_code: int
    leftovers: list[str]
    mismatches: list[str]

    @property
    def failed(self) -> bool:
        return bool(self.stale_locks or self.partial or self.leftovers or self.mismatches)


def inject(harness: Harness, stage: str, rng: random.Random, within: tuple[float, float] = (0.1, 0.9)) -> Trial:
    """Kill ``stage`` at a random share ``within`` of its clean run time, rerun, compare."""
    harness.restore(harness.before(stage))
    delay = rng.uniform(*within) * harness.clean_seconds[stage]
    _, killed = harness.run(stage, kill_after=delay)
    stale = stale_locks(harness.data)
    partial = partial_files(harness.data)
    published = stage == "publish" and (latest_outbox(harness.data) / "manifest.json").is_file()
    code, _ = harness.run(stage)
    clean = harness.snapshot(f"after-{stage}")
    if code == 0:
        left, mismatches = leftovers(harness.data), compare(stage, clean, harness.data, published)
    else:
        left, mismatches = [], [f"rerun exit {code}"]
    trial = Trial(stage, delay, killed, stale, partial, code, left, mismatches)
    if trial.failed:  # kept for a look (under --work; a temp work directory goes at the end)
        kept = harness.work / f"failed-{stage}-{delay:.1f}s"
        try:
            shutil.copytree(harness.data, kept, symlinks=True, dirs_exist_ok=True)
        except (OSError, shutil.Error) as exc:  # a full disk ends the look, not the run
            shutil.rmtree(kept, ignore_errors=True)
            print(f"could not keep {kept.name}: {str(exc)[:200]}", flush=True)
    return trial


def summarise(trials: list[Trial], clean_seconds: dict[str, float]) -> str:
    head = f"{'stage':<9} {'clean s':>8} {'kills':>6} {'finished':>9} {'mismatches':>11} {'stale locks':>12}"
    lines = [head + f" {'partial':>8} {'left over':>10}"]
    for stage in STAGES:
        mine = [t for t in trials if t.stage == stage]
        if not mine:
            continue
        lines.append(
            f"{stage:<9} {clean_seconds[stage]:>8.1f} {sum(t.killed for t in mine):>6} "
            f"{sum(not t.killed for t in mine):>9} {sum(bool(t.mismatches) for t in mine):>11} "
            f"{sum(bool(t.stale_locks) for t in mine):>12} {sum(bool(t.partial) for t in mine):>8} "
            f"{sum(bool(t.leftovers) for t in mine):>10}"
        )
    lines.append(
        f"{'all':<9} {sum(clean_seconds.values()):>8.1f} {sum(t.killed for t in trials):>6} "
        f"{sum(not t.killed for t in trials):>9} {sum(bool(t.mismatches) for t in trials):>11} "
        f"{sum(bool(t.stale_locks) for t in trials):>12} {sum(bool(t.partial) for t in trials):>8} "
        f"{sum(bool(t.leftovers) for t in trials):>10}"
    )
    for t in trials:
        for problem in t.mismatches + t.partial + t.stale_locks + t.leftovers:
            lines.append(f"  {t.stage} killed at {t.delay:.1f} s: {problem}")
    return "\n".join(lines)


def time_left(until: str, seconds: float) -> bool:
    """Whether ``seconds`` from now is still before ``until`` (UTC ``HH:MM``, today or, when
    that has passed by more than 12 hours, tomorrow)."""
    now = datetime.now(UTC)
    hour, minute = (int(part) for part in until.split(":"))
    end = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if end < now - timedelta(hours=12):
        end += timedelta(days=1)
    return now + timedelta(seconds=seconds) <= end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="kills per stage (default 10)")
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--days", type=int, default=21)
    parser.add_argument("--sample-every", default="2m", help="nvidia-smi sample interval (default 2m)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated stages to kill")
    parser.add_argument("--work", type=Path, help="working directory (default: a fresh temp dir, removed)")
    parser.add_argument(
        "--until",
        help="UTC time HH:MM: start no round that would end after it (judged by the longest round so far)",
    )
    args = parser.parse_args(argv)
    import tempfile

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below
    work = args.work or Path(tempfile.mkdtemp(prefix="foreshock-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    server, url = start_prefect_server(work)
    started, cpu = time.monotonic(), os.times()
    try:
        harness = prepare(work, args.units, args.days, args.seed, url, args.sample_every)
        shutil.rmtree(work / "prometheus", ignore_errors=True)  # backfilled afresh (an earlier batch's)
        with prometheus_for(work / "dcgm", work / "prometheus") as prometheus:
            harness.pull_url = prometheus
            stages = [s for s in args.stages.split(",") if s]
            harness.clean_run(until=max(stages, key=STAGES.index))
            rng = random.Random(args.seed)
            trials: list[Trial] = []
            longest = 1.6 * sum(harness.clean_seconds[s] for s in stages)  # a first guess: kill + rerun
            for round_number in range(args.kills):
                if args.until and not time_left(args.until, longest):
                    print(f"stopping before round {round_number + 1}: it would end after {args.until} UTC", flush=True)
                    break
                round_started = time.monotonic()
                for stage in stages:
                    trials.append(inject(harness, stage, rng))
                    print(f"round {round_number + 1} {stage}: {trials[-1]}", flush=True)
                longest = max(longest if round_number else 0.0, time.monotonic() - round_started)
                print(summarise(trials, harness.clean_seconds), flush=True)  # so far: a stopped run still says
        print(summarise(trials, harness.clean_seconds))
        done = os.times()
        children = done.children_user - cpu.children_user + done.children_system - cpu.children_system
        own = done.user - cpu.user + done.system - cpu.system
        print(
            f"wall {time.monotonic() - started:.0f} s, CPU {children:.0f} s (stage processes) + {own:.0f} s (harness)"
        )
        return 1 if any(t.failed for t in trials) else 0
    finally:
        stop_server(server)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
