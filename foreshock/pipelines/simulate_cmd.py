"""``foreshock simulate``: write a simulated GPU fleet's raw telemetry to a landing directory."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path

from foreshock.config import Config
from foreshock.durations import format_duration, parse_duration
from foreshock.simulate import simulate_fleet
from foreshock.simulate.params import DEFAULT_START


def _format_summary(summary: dict, out: Path) -> str:
    fleet, failures = summary["fleet"], summary["failures"]
    params = summary["parameters"]
    by_mode = ", ".join(f"{mode} {n}" for mode, n in failures["by_mode"].items())
    files = sum(summary["files"].values())
    every = format_duration(timedelta(seconds=params["sample_every_s"]))
    lines = [
        (
            f"simulated {fleet['units']} GPUs on {fleet['nodes']} nodes in {len(fleet['racks'])} racks "
            f"for {params['days']:g} days (seed {params['seed']}, a sample every {every})"
        ),
        (
            f"failures: {failures['total']} ({by_mode}); with precursor {failures['with_precursor']}, "
            f"bad lot {fleet['bad_lot']} {failures['bad_lot']}, hot rack {fleet['hot_rack']} {failures['hot_rack']}"
        ),
        (
            f"wrote {files} files, {summary['total_bytes'] / 1e6:.1f} MB, "
            f"{summary['rows']['nvidia-smi']:,} nvidia-smi rows to {out}"
        ),
        f"took {summary['seconds']:.1f} s",
    ]
    rate = summary["failure_rate"]
    requested = rate["requested_per_1000_unit_days"]
    lines.insert(
        2,
        f"failure rate: {rate['observed_per_1000_unit_days']:.2f} per 1,000 GPU-days in service observed"
        + (f" (requested {requested:g})" if requested is not None else "")
        + f" over {rate['unit_days_in_service']:,.0f} GPU-days",
    )
    return "\n".join(lines)


def _parse_start(text: str) -> datetime:
    try:
        start = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--start {text!r}: not an ISO 8601 date or time (e.g. 2026-11-01)") from None
    return start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)


def run(args: argparse.Namespace, config: Config) -> int:
    out = Path(args.out) if args.out else config.simulated_dir
    parse_duration(args.sample_every)
    start = _parse_start(args.start)
    summary = simulate_fleet(
        out,
        units=args.units,
        days=args.days,
        seed=args.seed,
        sample_every=args.sample_every,
        sudden_share=args.sudden_share,
        failure_rate=args.failure_rate,
        start=start,
    )
    print(_format_summary(summary, out))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "simulate",
        help="simulate a GPU fleet (raw telemetry in real formats, tickets, ground truth)",
        description="Write a simulated fleet's nvidia-smi CSVs, DCGM Prometheus exports, kernel "
        "Xid logs, tickets and ground_truth.parquet into --out.",
    )
    parser.add_argument("--units", type=int, default=256, help="GPUs in the fleet (default 256)")
    parser.add_argument("--days", type=float, default=30, help="days simulated (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", help="output directory (default <data-dir>/raw/sim)")
    parser.add_argument("--sample-every", default="10m", help="nvidia-smi sample interval (default 10m)")
    parser.add_argument(
        "--start", default=DEFAULT_START.strftime("%Y-%m-%d"), help="first day simulated, UTC (default %(default)s)"
    )
    parser.add_argument(
        "--sudden-share", type=float, default=1 / 3, help="share of failures without precursor (default 1/3)"
    )
    parser.add_argument(
        "--failure-rate",
        type=float,
        metavar="R",
        help="failures per 1,000 GPU-days in service to observe, same modes and precursors "
        "(default: the demo's, about 7; a real fleet fails about 0.5)",
    )
    parser.set_defaults(func=run)
