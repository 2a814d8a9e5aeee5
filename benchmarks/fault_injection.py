"""Fault injection: SIGKILL every stage at random points, rerun it, compare with a clean run.

    uv run python benchmarks/fault_injection.py                  # 5 kills per stage
    uv run python benchmarks/fault_injection.py --kills 2 --units 16 --days 14

A simulated fleet goes through ``ingest``, ``features``, ``backtest``, ``train``, ``score``
and ``publish`` once, cleanly, with the data directory copied after each stage.  Then, for
each kill, the copy made *before* a stage is restored, the stage's CLI is started and sent
SIGKILL after a random share of its clean duration, and the harness checks

* no stale lock: the lake lock can be taken at once (it is an ``flock``, gone with its holder);
* no partial file visible: every visible Parquet and JSON file under the data directory reads;

then reruns the stage to completion and compares what it produced with the clean run's
(lake tables, feature snapshots, backtest scores, the challenger's logged metrics, live
scores, the newest published risk list and its diff).  It prints kills per stage,
mismatches and stale locks.  Every process it starts (one Prefect server, the stage CLIs)
is stopped by its PID.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("ingest", "features", "backtest", "train", "score", "publish")


def stage_argv(stage: str, work: Path, data: Path) -> list[str]:
    raw = work / "raw"
    truth = str(raw / "ground_truth.parquet")
    extra = {
        "ingest": ["--path", str(raw), "--timezone", "UTC"],
        "features": [],
        "backtest": ["--ground-truth", truth],
        "train": ["--ground-truth", truth, "--backtest", str(data / "backtest")],
        "score": [],
        "publish": ["--allow-stale"],  # the simulated fleet ended in the past
    }[stage]
    return [sys.executable, "-m", "foreshock.pipelines.cli", "--data-dir", str(data), stage, *extra]


@dataclass
class Harness:
    work: Path
    env: dict[str, str]
    clean_seconds: dict[str, float] = field(default_factory=dict)

    def data(self, name: str) -> Path:
        return self.work / name

    def run(self, stage: str, data: Path, kill_after: float | None = None) -> tuple[int, bool]:
        """Run a stage's CLI; with ``kill_after`` (s) SIGKILL it then.  Returns (code, killed)."""
        log = open(self.work / f"{stage}.log", "ab")  # noqa: SIM115 - closed below
        process = subprocess.Popen(
            stage_argv(stage, self.work, data), env=self.env, cwd=ROOT, stdout=log, stderr=log, start_new_session=True
        )
        killed = False
        try:
            if kill_after is None:
                return process.wait(timeout=1800), False
            try:
                return process.wait(timeout=kill_after), False
            except subprocess.TimeoutExpired:
                # The whole session: the CLI and its own children (an ephemeral server if any).
                os.killpg(process.pid, signal.SIGKILL)
                killed = True
                return process.wait(timeout=60), killed
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.close()

    def clean_run(self, until: str = STAGES[-1]) -> None:
        """Run the stages up to ``until`` cleanly, copying the data directory after each."""
        clean = self.data("clean")
        shutil.copytree(self.data("empty"), clean)
        for stage in STAGES[: STAGES.index(until) + 1]:
            started = time.monotonic()
            code, _ = self.run(stage, clean)
            self.clean_seconds[stage] = time.monotonic() - started
            if code != 0:
                raise SystemExit(f"clean {stage} failed ({code}); see {self.work / (stage + '.log')}")
            shutil.copytree(clean, self.data(f"after-{stage}"), symlinks=True)

    def before(self, stage: str) -> Path:
        index = STAGES.index(stage)
        return self.data("empty" if index == 0 else f"after-{STAGES[index - 1]}")


def stale_lock(data: Path) -> bool:
    lock = data / "lake" / ".lock"
    if not lock.exists():
        return False
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def partial_files(data: Path) -> list[str]:
    """Visible files a reader would take for complete but that do not read."""
    bad = []
    for path in data.rglob("*"):
        if not path.is_file() or any(part.startswith(".") for part in path.relative_to(data).parts):
            continue
        if "mlflow" in path.relative_to(data).parts:
            continue  # MLflow's own store
        try:
            if path.suffix == ".parquet":
                pl.read_parquet(path)
            elif path.suffix == ".json":
                json.loads(path.read_text())
        except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
            bad.append(f"{path.relative_to(data)}: {type(exc).__name__}")
    return bad


def _table(paths: list[Path], sort: list[str] | None = None) -> pl.DataFrame:
    if not paths:
        return pl.DataFrame()
    frame = pl.concat([pl.read_parquet(p) for p in paths], how="diagonal_relaxed")
    return frame.sort(sort or frame.columns)


def _same(label: str, clean: pl.DataFrame, trial: pl.DataFrame, drop: tuple[str, ...] = ()) -> list[str]:
    clean = clean.drop([c for c in drop if c in clean.columns])
    trial = trial.drop([c for c in drop if c in trial.columns])
    try:
        assert_frame_equal(clean, trial, check_exact=False, rel_tol=1e-6, abs_tol=1e-9, check_column_order=False)
    except AssertionError as exc:
        return [f"{label}: {str(exc).splitlines()[0][:200]}"]
    return []


def _sortable(frame: pl.DataFrame) -> list[str]:
    return [c for c, t in frame.schema.items() if t.is_numeric() or t in (pl.String, pl.Datetime, pl.Date, pl.Boolean)]


def compare(stage: str, clean: Path, trial: Path, published_before: bool = False) -> list[str]:
    """What differs between the clean run's output of ``stage`` and the trial's.

    ``published_before``: the killed publish got as far as a complete outbox, so the
    rerun's diff is rightly against it; only the risk list is compared then."""
    found: list[str] = []
    if stage == "ingest":
        for table in ("inventory", "samples", "events", "failures"):
            c, t = (_table(sorted((root / "lake" / table).rglob("part.parquet"))) for root in (clean, trial))
            found += _same(f"lake {table}", c, t)
        manifest = lambda root: set(  # noqa: E731
            pl.read_parquet(root / "lake" / "_manifest.parquet").select("sha256", "context").iter_rows()
        )
        if manifest(clean) != manifest(trial):
            found.append("ingest manifest lists other files")
    elif stage == "features":
        paths = lambda root: sorted(p for p in (root / "features").rglob("part.parquet") if "staging" not in str(p))  # noqa: E731
        c = _table(paths(clean))
        found += _same("features", c, _table(paths(trial)).select(c.columns) if c.width else _table(paths(trial)))
    elif stage == "backtest":
        c = pl.read_parquet(clean / "backtest" / "scores.parquet")
        t = pl.read_parquet(trial / "backtest" / "scores.parquet")
        found += _same("backtest scores", c.sort(_sortable(c)), t.sort(_sortable(t)))
    elif stage == "train":
        found += _compare_challenger(clean, trial)
    elif stage == "score":
        c = pl.read_parquet(clean / "scores" / "latest.parquet")
        t = pl.read_parquet(trial / "scores" / "latest.parquet")
        found += _same("scores", c.sort(_sortable(c)), t.sort(_sortable(t)), drop=("scored_at",))
    elif stage == "publish":
        for name in ("risk_list.parquet",) if published_before else ("risk_list.parquet", "diff.csv"):
            c, t = (_latest_outbox(root) / name for root in (clean, trial))
            if not t.exists():
                found.append(f"publish: newest outbox has no {name}")
                continue
            read = pl.read_parquet if name.endswith(".parquet") else pl.read_csv
            cf, tf = read(c), read(t)
            volatile = tuple(x for x in cf.columns if x.endswith("_at") or x in ("published", "generated"))
            found += _same(f"outbox {name}", cf.sort(_sortable(cf)), tf.sort(_sortable(tf)), drop=volatile)
    return found


def _latest_outbox(root: Path) -> Path:
    outbox = root / "outbox"
    latest = outbox / "LATEST"
    if latest.exists():
        return outbox / latest.read_text().strip()
    return outbox / "missing"


def _compare_challenger(clean: Path, trial: Path) -> list[str]:
    from mlflow.tracking import MlflowClient

    def metrics(root: Path) -> dict[str, float] | None:
        client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow' / 'mlflow.db'}")
        try:
            version = client.get_model_version_by_alias("foreshock-risk", "challenger")
        except Exception:  # noqa: BLE001 - no challenger: the mismatch is reported
            return None
        run = client.get_run(version.run_id)
        if run.info.status != "FINISHED":
            return None
        return run.data.metrics

    c, t = metrics(clean), metrics(trial)
    if t is None:
        return ["train: no challenger from a finished run after the rerun"]
    differ = [k for k in c if k not in t or abs(c[k] - t[k]) > 1e-6 * max(1.0, abs(c[k]))]
    return [f"train: challenger metrics differ: {differ[:5]}"] if differ else []


def start_prefect_server(work: Path) -> tuple[subprocess.Popen, str]:
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


def stop_server(server: subprocess.Popen) -> None:
    """Stop the server's whole session (the CLI and the uvicorn child it starts)."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def prepare(work: Path, units: int, days: int, seed: int, api_url: str) -> Harness:
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_TRACKING"))}
    env.update(
        PYTHONPATH=str(ROOT),
        PREFECT_API_URL=api_url,
        PREFECT_LOGGING_LEVEL="ERROR",
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    (work / "empty").mkdir(exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "foreshock.pipelines.cli", "--data-dir", str(work / "empty"), "simulate"]
        + ["--units", str(units), "--days", str(days), "--seed", str(seed), "--out", str(work / "raw")],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    shutil.rmtree(work / "empty")
    (work / "empty").mkdir()
    return Harness(work=work, env=env)


@dataclass
class Trial:
    stage: str
    delay: float
    killed: bool
    stale_lock: bool
    partial: list[str]
    rerun_code: int
    mismatches: list[str]


def inject(
    harness: Harness, stage: str, rng: random.Random, number: int, within: tuple[float, float] = (0.15, 1.0)
) -> Trial:
    """Kill ``stage`` at a random share ``within`` of its clean run time, rerun, compare."""
    trial_dir = harness.data(f"trial-{number:03d}-{stage}")
    shutil.copytree(harness.before(stage), trial_dir, symlinks=True)
    delay = rng.uniform(*within) * harness.clean_seconds[stage]
    _, killed = harness.run(stage, trial_dir, kill_after=delay)
    stale = stale_lock(trial_dir)
    partial = partial_files(trial_dir)
    published = stage == "publish" and (_latest_outbox(trial_dir) / "manifest.json").is_file()
    code, _ = harness.run(stage, trial_dir)
    clean = harness.data(f"after-{stage}")
    mismatches = compare(stage, clean, trial_dir, published) if code == 0 else [f"rerun exit {code}"]
    shutil.rmtree(trial_dir, ignore_errors=True)
    return Trial(stage, delay, killed, stale, partial, code, mismatches)


def summarise(trials: list[Trial], clean_seconds: dict[str, float]) -> str:
    lines = [
        f"{'stage':<10} {'clean s':>8} {'kills':>6} {'finished':>9} {'mismatches':>11} {'stale locks':>12} {'partial':>8}"
    ]
    for stage in STAGES:
        mine = [t for t in trials if t.stage == stage]
        if not mine:
            continue
        lines.append(
            f"{stage:<10} {clean_seconds[stage]:>8.1f} {sum(t.killed for t in mine):>6} "
            f"{sum(not t.killed for t in mine):>9} {sum(bool(t.mismatches) for t in mine):>11} "
            f"{sum(t.stale_lock for t in mine):>12} {sum(bool(t.partial) for t in mine):>8}"
        )
    for t in trials:
        for problem in t.mismatches + t.partial:
            lines.append(f"  {t.stage} killed at {t.delay:.1f} s: {problem}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5, help="kills per stage (default 5)")
    parser.add_argument("--units", type=int, default=24)
    parser.add_argument("--days", type=int, default=21)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated stages to kill")
    parser.add_argument("--work", type=Path, help="working directory (default: a fresh temp dir, removed)")
    args = parser.parse_args(argv)
    import tempfile

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below
    work = args.work or Path(tempfile.mkdtemp(prefix="foreshock-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    server, url = start_prefect_server(work)
    started, cpu = time.monotonic(), os.times()
    try:
        harness = prepare(work, args.units, args.days, args.seed, url)
        stages = [s for s in args.stages.split(",") if s]
        harness.clean_run(until=max(stages, key=STAGES.index))
        rng = random.Random(args.seed)
        trials = []
        for round_number in range(args.kills):
            for stage in stages:
                trials.append(inject(harness, stage, rng, len(trials)))
                print(f"round {round_number + 1} {stage}: {trials[-1]}", flush=True)
        print(summarise(trials, harness.clean_seconds))
        children = os.times()
        print(
            f"wall {time.monotonic() - started:.0f} s, CPU of the stage processes "
            f"{children.children_user - cpu.children_user + children.children_system - cpu.children_system:.0f} s"
        )
        failed = any(t.mismatches or t.stale_lock or t.partial for t in trials)
        return 1 if failed else 0
    finally:
        stop_server(server)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
