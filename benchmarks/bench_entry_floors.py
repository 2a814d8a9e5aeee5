"""Entry floors at the budget, side by side, on existing out-of-sample scores (no refits).

The budget is a cap operations may spend, not a quota: a floor keeps a model from
draining a low-risk unit because budget is left.  This measures candidate floor rules on
a backtest's ``scores.parquet`` and says, per budget, what each does to the catches,
precision, flags a day and lead time of one model:

``fixed F``
    a calibrated risk set in advance (``[backtest] entry_floor``; the drain policy's
    break-even risk, ``[policy] watch_risk``, ...): prospective by construction.
``lift M``
    at least ``M`` times the mean risk of the fleet at the same snapshot (the model's own
    estimate of the base rate then): uses only that snapshot's scores, so prospective too,
    and it moves with a refit's scale.
``earlier folds 90 %``
    the floor that kept 90 % of the flags of the earlier folds' out-of-sample scores (the
    attempt dropped before): prospective; the first fold runs without a floor.
``upper bound``
    (disks) the floors above judged on the test period itself are all listed; the figures
    of a floor picked because it won here are an upper bound, not an operating result.

Two kinds of data:

``--disks WORK``
    a ``benchmarks/bench_real_disks.py`` work directory (its lake, converted data and, by
    default, its ``backtest/``), judged at the top of the list at each share of the drives
    reporting a day, beside the two SMART rules (:mod:`bench_real_disks`).  ``--since``
    judges only the days from a date on as well (e.g. a later year than the one a floor
    was chosen on).
``--backtest DIR --data-dir DATA [--config FILE] [--ground-truth FILE]``
    a backtest directory of a GPU fleet, judged by the backtest's alert replay at its
    budget point (``[backtest]`` of the configuration), beside the policy threshold.

Usage::

    uv run python benchmarks/bench_entry_floors.py --disks /tmp/bb/w2015 [--scores FILE] [--model gbm]
    uv run python benchmarks/bench_entry_floors.py --backtest DIR/backtest --data-dir DIR --config DIR/evaluate.toml
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_real_disks import GROWTH_DAYS, HORIZON, daily_levels, rule_scores  # noqa: E402

FIXED = (0.01, 0.02, 0.05, 0.1, 0.169, 0.25)  # the grids tried by default (--fixed, --lifts)
LIFTS = (20.0, 50.0, 100.0, 200.0)
KEEP_EARLIER = 0.9


def periods_of(report: dict) -> list[tuple[datetime, datetime]]:
    return [(datetime.fromisoformat(p["start"]), datetime.fromisoformat(p["end"])) for p in report["scored"]["periods"]]


def with_snapshot_mean(series: pl.DataFrame, weight: str | None) -> pl.DataFrame:
    """``mean_risk``: the (weighted) mean risk of the units scored at the same snapshot."""
    if weight is None:
        return series.with_columns(pl.col("risk").mean().over("ts").alias("mean_risk"))
    scored = pl.col("risk").is_not_null()
    return series.with_columns(
        ((pl.col("risk") * pl.col(weight)).sum().over("ts") / pl.col(weight).filter(scored).sum().over("ts")).alias(
            "mean_risk"
        )
    )


def _row(name: str, share: float, m, **extra) -> dict:
    lead = None if m.lead_time_p50_h is None else m.lead_time_p50_h / 24
    return {
        "ranking": name,
        "share": share,
        "caught": m.caught,
        "failures": m.failures,
        "precision": m.precision,
        "flags_per_day": m.flags_per_day,
        "budget_per_day": m.budget_per_day,
        "lead_p50_d": lead,
        **extra,
    }


def disk_grid(series, rules, failures, weights, periods, shares, min_lead, history, fixed, lifts) -> list[dict]:
    """Every floor rule and both rules at each share, on ``series`` (``unit_id, ts, risk,
    mean_risk``); the earlier folds' floors are chosen on ``history`` before each fold."""
    from foreshock.budget import DailyBudget
    from foreshock.models.evaluation.top_of_list import daily_flags, top_of_list

    def judge(frame: pl.DataFrame, share: float, floor: float | None = None):
        return top_of_list(frame, failures, DailyBudget(share=share), HORIZON, min_lead, weights=weights, floor=floor)

    plain = series.select("unit_id", "ts", pl.col("risk").alias("score"))
    out = []
    for share in shares:
        out.append(_row("model", share, judge(plain, share)))
        out += [_row(name, share, judge(frame, share)) for name, frame in rules.items()]
        out += [_row(f"fixed {f:g}", share, judge(plain, share, f)) for f in fixed]
        for m in lifts:
            lifted = series.select("unit_id", "ts", pl.when(pl.col("risk") >= m * pl.col("mean_risk")).then("risk"))
            out.append(_row(f"lift {m:g}", share, judge(lifted.rename({"risk": "score"}), share)))
        floors = []
        for start, _ in periods:
            earlier = history.filter(pl.col("ts") < start).select("unit_id", "ts", pl.col("risk").alias("score"))
            flags = daily_flags(earlier, DailyBudget(share=share), weights)[0] if earlier.height else None
            floors.append(
                float(np.quantile(flags.get_column("score").to_numpy(), 1 - KEEP_EARLIER))
                if flags is not None and flags.height
                else -np.inf
            )
        floor = pl.lit(-np.inf)
        for (start, end), f in zip(periods, floors):
            floor = pl.when((pl.col("ts") >= start) & (pl.col("ts") < end)).then(pl.lit(f)).otherwise(floor)
        chosen = series.select("unit_id", "ts", pl.when(pl.col("risk") >= floor).then("risk").alias("score"))
        out.append(_row(f"earlier folds {KEEP_EARLIER:.0%}", share, judge(chosen, share), floors=floors))
    return out


def disks(args: argparse.Namespace) -> dict:
    """The top of the list on a real-disk work directory (see the module docstring)."""
    from foreshock.budget import WEIGHT_COLUMN, fleet_weights
    from foreshock.config import load_config
    from foreshock.lake.read import read_table

    work = args.disks
    config = load_config(work / "data/foreshock.toml", data_dir=work / "lake")
    scores_file = args.scores or work / "backtest/scores.parquet"
    report = json.loads((scores_file.parent / "report.json").read_text())
    risk = (
        pl.scan_parquet(scores_file)
        .filter((pl.col("model") == args.model) & (pl.col("horizon") == HORIZON))
        .select("unit_id", "ts", "risk")
        .collect()
    )
    first, last = risk.get_column("ts").min().date(), risk.get_column("ts").max().date()
    levels = daily_levels(config.lake_dir, first - timedelta(days=GROWTH_DAYS), last)
    reporting = levels.filter(pl.col("ts").dt.date() >= first).select("unit_id", "ts")
    rules = rule_scores(levels, reporting)
    del levels
    failures, weights = read_table(config.lake_dir, "failures"), fleet_weights(read_table(config.lake_dir, "inventory"))
    series = reporting.join(risk, on=["unit_id", "ts"], how="left")
    if weights is not None:
        series = series.join(weights, on="unit_id", how="left").with_columns(pl.col(WEIGHT_COLUMN).fill_null(1.0))
    series = with_snapshot_mean(series, WEIGHT_COLUMN if weights is not None else None)
    args_ = (failures, weights, periods_of(report), args.shares, config.duration("backtest", "min_lead_time"))
    tried = {"fixed": args.fixed, "lifts": args.lifts}
    out = {"data": str(work), "scores": str(scores_file), "model": args.model, "windows": {}}
    out["windows"]["all"] = disk_grid(series, rules, *args_, history=series, **tried)
    if args.since:
        since = args.since
        later = {k: v.filter(pl.col("ts") >= since) for k, v in rules.items()}
        out["windows"][f"since {args.since.date()}"] = disk_grid(
            series.filter(pl.col("ts") >= since), later, *args_, history=series, **tried
        )
    return out


def backtest(args: argparse.Namespace) -> dict:
    """The backtest's budget point with each floor rule on a GPU fleet's scores."""
    from foreshock.config import load_config
    from foreshock.costs import DrainCosts
    from foreshock.models.estimators.training import snapshot_step
    from foreshock.models.evaluation.alert_replay import Period, RiskReplay
    from foreshock.models.evaluation.alerts import AlertWindow
    from foreshock.models.evaluation.backtest import read_ground_truth
    from foreshock.models.evaluation.judging import judge_point
    from foreshock.models.evaluation.operating_points import NO_FLOOR, ChosenPoint, OperatingPoints, budget_threshold
    from foreshock.pipelines import inputs

    config = load_config(args.config, data_dir=args.data_dir)
    report = json.loads((args.backtest / "report.json").read_text())
    periods = [Period(a, b) for a, b in periods_of(report)]
    failures, settings = inputs.failures(config), OperatingPoints.from_config(config)
    context = {
        "window": AlertWindow.from_config(config),
        "ground_truth": read_ground_truth(str(args.ground_truth) if args.ground_truth else None),
        "costs": DrainCosts.from_policy(config.section("policy")),
        "drains": None,
    }
    scores = pl.scan_parquet(args.backtest / "scores.parquet")
    columns = ["unit_id", "ts", "risk", *(["margin"] if "margin" in scores.collect_schema().names() else [])]
    out = {"data": str(args.data_dir), "break_even_risk": context["costs"].break_even_risk, "results": []}
    for model in args.models:
        horizons = scores.filter(pl.col("model") == model).select("horizon").unique().collect().to_series()
        for horizon in sorted(horizons):
            series = (
                scores.filter((pl.col("model") == model) & (pl.col("horizon") == horizon)).select(columns).collect()
            )
            step = snapshot_step(series)
            lifted = with_snapshot_mean(series, None).with_columns((pl.col("risk") / pl.col("mean_risk")).alias("risk"))
            replay, lifted_replay = RiskReplay.of(series), RiskReplay.of(lifted.drop("mean_risk"))

            def run(
                name,
                chosen,
                frame=series,
                replay=replay,
                rule=settings.budget_rule,
                *,
                at=(model, horizon, step),
                **extra,
            ):
                model, horizon, step = at  # bound now: the loop moves on
                point = ChosenPoint(name, chosen, rule, name)
                r = judge_point(frame, point, failures, horizon, replay=replay, step=step, **context)
                keep = ("caught", "failures", "precision", "alerts_per_day", "recall_with_precursor", "lead_time_p50_h")
                out["results"].append({"model": model, "horizon": horizon, "point": name, **{k: r[k] for k in keep}})
                out["results"][-1].update(extra)

            run("budget", [(p, NO_FLOOR) for p in periods])
            run(
                f"policy {settings.enter_risk:g} (no cap)",
                [(p, settings.enter_risk) for p in periods],
                rule=settings.threshold_rule,
            )
            for f in args.fixed:
                run(f"fixed {f:g}", [(p, f) for p in periods])
            for m in args.lifts:
                run(f"lift {m:g}", [(p, m) for p in periods], lifted.drop("mean_risk"), lifted_replay)
            earlier = []
            for p in periods:
                before = series.filter(pl.col("ts") < p.start)
                floor = budget_threshold(before, settings.alerts_per_day, settings.budget_rule, step, KEEP_EARLIER)
                earlier.append((p, floor if before.height else NO_FLOOR))
            run(f"earlier folds {KEEP_EARLIER:.0%}", earlier, floors=[t for _, t in earlier])
    return out


def table(rows: list[dict], keys: tuple[str, ...]) -> str:
    def cell(v):
        return "–" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(r.get(k)) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--disks", type=Path, help="a bench_real_disks.py work directory")
    parser.add_argument("--scores", type=Path, help="scores.parquet to judge (default: WORK/backtest/)")
    parser.add_argument("--model", default="gbm")
    parser.add_argument("--shares", type=float, nargs="+", default=[0.001, 0.005])
    parser.add_argument("--since", type=lambda s: datetime.fromisoformat(s).replace(tzinfo=UTC))
    parser.add_argument("--backtest", type=Path, help="a backtest directory of a GPU fleet")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--ground-truth", type=Path)
    parser.add_argument("--models", nargs="+", default=["gbm", "cox", "baseline"])
    parser.add_argument("--fixed", type=float, nargs="*", default=list(FIXED), help="fixed floors to try")
    parser.add_argument("--lifts", type=float, nargs="*", default=list(LIFTS), help="lifts over the mean risk to try")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    if args.disks:
        result = disks(args)
        keys = ("ranking", "share", "caught", "failures", "precision", "flags_per_day", "budget_per_day", "lead_p50_d")
        for window, rows in result["windows"].items():
            print(f"\n### {window}\n\n{table(rows, keys)}")
    elif args.backtest:
        result = backtest(args)
        keys = (
            "model",
            "horizon",
            "point",
            "caught",
            "failures",
            "precision",
            "alerts_per_day",
            "recall_with_precursor",
        )
        print(
            f"break-even risk of [policy]: {result['break_even_risk']:.3f}\n\n{table(result['results'], keys + ('lead_time_p50_h',))}"
        )
    else:
        parser.error("give --disks or --backtest")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
