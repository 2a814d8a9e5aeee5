"""``foreshock demo``: the whole pipeline on a simulated fleet.

simulate -> ingest -> features -> backtest -> train (MLflow) -> review -> score -> publish -> replay

Each step is the same command a user would run; the demo only strings them together.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time

from foreshock.config import Config
from foreshock.pipelines.runtime import flow_api_url, needs_temporary_server

log = logging.getLogger("foreshock.demo")

# The demo fleet: small enough for the whole run in about two minutes on 2 cores, with
# failures of every mode (memory, thermal, power, sudden) for the models to catch.
UNITS = 256
DAYS = 30
SEED = 7
SAMPLE_EVERY = "10m"
# The models' training sample in the demo: every failure-adjacent snapshot and this many
# healthy ones, weighted by the inverse sampling rate ([models] max_healthy_rows; the
# default, sized for real fleets, would keep all ~160k).  Hourly snapshots of a healthy GPU
# barely differ, and the walk-forward fits 4 folds x 3 models: the sample makes backtest,
# train and review about 3x cheaper with the same failures caught at the budget.
HEALTHY_ROWS = 40_000


def _steps(args: argparse.Namespace, config: Config) -> list[tuple[str, list[str]]]:
    sim_dir = config.simulated_dir
    truth = str(sim_dir / "ground_truth.parquet")
    return [
        (
            "simulate",
            [
                "simulate",
                "--units",
                str(args.units),
                "--days",
                str(args.days),
                "--seed",
                str(args.seed),
                "--sample-every",
                args.sample_every,
                "--out",
                str(sim_dir),
                *(["--failure-rate", str(args.failure_rate)] if args.failure_rate is not None else []),
            ],
        ),
        ("ingest", ["ingest", "--path", str(sim_dir), "--timezone", "UTC"]),
        ("lake", ["lake"]),
        ("features", ["features"]),
        ("backtest", ["backtest", "--ground-truth", truth]),
        # train logs the walk-forward just run instead of repeating it
        ("train", ["train", "--ground-truth", truth, "--backtest", str(config.backtest_dir)]),
        ("review", ["review"]),
        ("score", ["score"]),
        # the simulated fleet ends at a fixed date, so its scores are always older than max_score_age
        ("publish", ["publish", "--allow-stale"]),
        ("replay", ["replay", "--ground-truth", truth]),
    ]


def _start_prefect_server() -> threading.Thread | None:
    """Start the temporary Prefect server now, beside the simulation, when no Prefect API
    is configured: the first flow would otherwise wait for it (tens of seconds on 2 cores).
    Prefect keeps one such server per process, so every stage of the demo shares it."""
    if not needs_temporary_server():
        return None

    def start() -> None:
        try:
            flow_api_url()  # the temporary server, started here
        except Exception as exc:  # noqa: BLE001 - the first flow starts it again and reports
            log.warning("could not start the Prefect server ahead of the flows: %s", exc)

    thread = threading.Thread(target=start, name="prefect-server", daemon=True)
    thread.start()
    return thread


def run_demo(args: argparse.Namespace, config: Config) -> int:
    from foreshock.pipelines.cli import build_parser

    parser = build_parser()
    config = config.with_overrides({"models": {"max_healthy_rows": args.max_healthy_rows}})
    base = ["--data-dir", str(config.data_dir)]
    if args.config:
        base = ["--config", args.config, *base]
    started = time.perf_counter()
    took: list[tuple[str, float]] = []
    server = _start_prefect_server()
    for name, argv in _steps(args, config):
        if name != "simulate" and server is not None:
            waited = time.perf_counter()
            server.join()  # the flows of the later stages need it up
            server = None
            took.append(("prefect server (wait)", time.perf_counter() - waited))
            log.info("the Prefect server was up %.1f s after the simulation", took[-1][1])
        log.info("== %s: foreshock %s", name, " ".join(argv))
        step_start = time.perf_counter()
        sub_args = parser.parse_args([*base, *argv])
        rc = int(sub_args.func(sub_args, config) or 0)
        took.append((name, time.perf_counter() - step_start))
        log.info("%s took %.1f s", name, took[-1][1])
        if rc != 0:
            log.error("demo stopped: %s exited with %d", name, rc)
            return rc
    total = time.perf_counter() - started
    log.info("stage times: %s", ", ".join(f"{name} {seconds:.1f} s" for name, seconds in took))
    log.info("demo finished in %.0f s; data under %s", total, config.data_dir)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="run the whole pipeline on a simulated fleet")
    demo.add_argument("--units", type=int, default=UNITS, help=f"GPUs simulated (default {UNITS})")
    demo.add_argument("--days", type=int, default=DAYS, help=f"days simulated (default {DAYS})")
    demo.add_argument("--seed", type=int, default=SEED, help=f"random seed (default {SEED})")
    demo.add_argument(
        "--sample-every", default=SAMPLE_EVERY, help=f"nvidia-smi sample interval (default {SAMPLE_EVERY})"
    )
    demo.add_argument(
        "--failure-rate",
        type=float,
        metavar="R",
        help="failures per 1,000 GPU-days in service, as `foreshock simulate --failure-rate` (default: the simulator's)",
    )
    demo.add_argument(
        "--max-healthy-rows",
        type=int,
        default=HEALTHY_ROWS,
        help=f"healthy snapshots the models train on, weighted ([models] max_healthy_rows; default {HEALTHY_ROWS:,})",
    )
    demo.set_defaults(func=run_demo)
