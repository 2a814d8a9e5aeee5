"""Why a model's alerts on a simulated fleet were false: each alert against what the simulator did.

A backtest on ``foreshock simulate``'s fleet says how many alerts were false; the simulator
knows why.  This takes the alerts the backtest's judge counted at the policy point of one
model (:func:`foreshock.models.evaluation.judging.policy_point_alerts`: the same entry, hold,
second horizon and judged periods, each with the judge's ``outcome``: true, false, late or
unresolved), re-draws the fleet's schedule from its parameters (the same seed gives the same
lives, :func:`foreshock.simulate.fleet.schedule_lives`) and classifies each alert by the GPU
life it fell on:

* ``true``: the life failed within the horizon of the alert's start;
* ``early``: it failed, but later than the horizon (the alert also catches the failure
  when within ``[backtest] alert_window``);
* ``healthy, benign burst``: the life never failed, and a benign burst of corrected ECC
  errors (``SimulationParams.benign_burst_share``) started within a week before the
  alert or during it;
* ``healthy, other``: the life never failed, no burst near the alert (its planted
  nuisances are named: a marginal PCIe link, a noisy NVLink).

The simulator also knows failures after the data end (a GPU degrading at the end of the
simulation fails in its look-ahead): such an alert is ``true`` or ``early`` here while the
judge, which sees only the data, counts it ``false`` or ``unresolved``.

Usage (the work directory of ``benchmarks/evaluate_models.py --only gpu-real-rate``)::

    uv run python benchmarks/why_false_alerts.py --work /tmp/rr/gpu-real-rate --units 4096 \\
        [--backtest DIR] [--data-dir DIR] [--config FILE] [--model gbm] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
from rejudge_policy import stored

from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.durations import parse_duration
from foreshock.models.estimators.base import decision_horizon
from foreshock.models.evaluation.judging import policy_point_alerts
from foreshock.simulate.fleet import build_fleet, schedule_lives
from foreshock.simulate.params import SimulationParams

WEEK_S = 7 * 86_400


def classify(alert_s: float, life, horizon_s: float) -> str:
    """What the simulator did to the GPU life an alert fell on (see the module docstring)."""
    if life.failed_at_s is not None:
        return "true" if life.failed_at_s - alert_s <= horizon_s else "early"
    near = [b for b in life.sbe_bursts if b[0] - WEEK_S <= alert_s <= b[0] + b[1] * 3600 + WEEK_S]
    if near:
        return "healthy, benign burst"
    return "healthy, other"


def explain(args: argparse.Namespace) -> tuple[pl.DataFrame, str]:
    """Each alert of the policy point with the judge's outcome (``judged``) and the
    simulator's cause (``kind``), and the judged span in words."""
    backtest = args.backtest or args.work / "backtest-evaluate"
    config_file, data_dir = args.config or args.work / "evaluate.toml", args.data_dir or args.work
    config = load_config(config_file, data_dir=data_dir)
    horizon = parse_duration(decision_horizon(config))
    periods, failures, _ = stored(backtest, config_file, data_dir, None)  # the judge's own inputs
    scores = pl.scan_parquet(backtest / "scores.parquet").filter(pl.col("model") == args.model)
    alerts = policy_point_alerts(scores, failures, config, args.model, periods)

    params = SimulationParams.build(
        units=args.units, days=args.days, failure_rate=args.failure_rate, seed=args.seed, sample_every="10m"
    )
    fleet = build_fleet(params)
    lives: dict[str, list] = {}
    for life in schedule_lives(fleet, params):
        lives.setdefault(fleet.unit_id[life.slot], []).append(life)
    rows = []
    for alert in alerts.iter_rows(named=True):
        at = alert["alert_start"].timestamp()
        life = next(
            x for x in lives[alert["unit_id"]] if x.start_s <= at and (x.failed_at_s is None or at < x.failed_at_s)
        )
        rows.append(
            {
                "unit_id": alert["unit_id"],
                "alert_start": alert["alert_start"],
                "risk": round(alert["risk"], 3),
                "judged": alert["outcome"],
                "kind": classify(at, life, horizon.total_seconds()),
                "mode": life.mode,
                "days_to_failure": None if life.failed_at_s is None else round((life.failed_at_s - at) / 86_400, 1),
                "marginal_pcie": life.pcie_replay_per_h > 0.5,
                "noisy_nvlink": life.nvlink_crc_per_h > 0.5,
            }
        )
    schema = {"unit_id": pl.String, "alert_start": UTC_TS, "risk": pl.Float64, "judged": pl.String, "kind": pl.String}
    table = pl.DataFrame(rows, schema_overrides=schema) if rows else pl.DataFrame(schema=schema)
    return table.sort("judged", "kind", "alert_start"), f"{periods[0].start:%Y-%m-%d} to {periods[-1].end:%Y-%m-%d}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="the data set's work directory")
    parser.add_argument("--backtest", type=Path, help="backtest output (default WORK/backtest-evaluate)")
    parser.add_argument("--data-dir", type=Path, help="the data directory whose lake it judged (default WORK)")
    parser.add_argument("--config", type=Path, help="the backtest's configuration (default WORK/evaluate.toml)")
    parser.add_argument("--units", type=int, required=True)
    parser.add_argument("--days", type=float, default=60.0)
    parser.add_argument("--failure-rate", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="gbm")
    args = parser.parse_args(argv)

    table, period = explain(args)
    print(f"{args.model}: {table.height} alerts at the policy point over {period} (UTC)")
    with pl.Config(tbl_rows=500, tbl_width_chars=200, fmt_str_lengths=40):
        print(
            table.group_by("judged", "kind")
            .agg(pl.len().alias("alerts"), pl.col("unit_id").n_unique().alias("gpus"))
            .sort("judged", "kind")
        )
        print(table.filter(pl.col("kind") != "true"))
    print(f"(generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
