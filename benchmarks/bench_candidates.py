"""Model candidates side by side: one walk-forward backtest, every candidate on the same folds.

Each candidate is the gradient-boosted model's recipe (``models/lightgbm.toml``) with a few
keys changed (:data:`CANDIDATES`); all of them are trained on the same training sample of
each fold (read once) and score the same test days, so their differences are the
candidates' alone.  Everything judged is out of sample: walk-forward, each fold trained on
its past only; nothing a candidate fixes (rounds, calibration) sees its test period.

Two kinds of data set:

* a prepared real-disk work directory of ``benchmarks/bench_real_disks.py`` (``--disks
  WORK``): the candidates' rankings, the two SMART rules and each candidate's rank
  average with the growth rule (a blend with fixed, equal weights: nothing fitted) judged
  at the top 0.1 % and 0.5 % of the drives reporting each day, reweighted by the
  inventory's ``fleet_weight``;
* any prepared foreshock data directory (``--config FILE --data-dir DIR [--ground-truth
  FILE]``, e.g. a data set of ``benchmarks/evaluate_models.py`` or the demo's): the
  backtest's own operating points per candidate (the drain budget, the target precision
  with its threshold from earlier folds) and the snapshot metrics.

Usage::

    uv run python benchmarks/bench_candidates.py --disks /tmp/bb-2015 --out /tmp/cand-2015 \\
        [--candidates gbm fleet rank ...]
    uv run python benchmarks/bench_candidates.py --config data/evaluate.toml --data-dir DIR \\
        --ground-truth DIR/raw/sim/ground_truth.parquet --out /tmp/cand-demo

``--set SECTION.KEY=VALUE`` changes a setting of the data set's configuration for every
candidate (the training sample's ``[models] max_healthy_rows``, say); ``--until DATE`` runs
the backtest as of that day (the snapshots before it, the failures known before it: an
earlier history of the same data, judged on its own last days); ``--set-aside`` (disks)
judges each candidate's list a second time with flags that expire.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_real_disks import (  # noqa: E402
    GROWTH_DAYS,
    HORIZON,
    daily_levels,
    judge_shares,
    rule_scores,
    set_aside,
    set_aside_name,
)

from foreshock.models.estimators.recipes import builtin_recipe  # noqa: E402

# today's recipe's exclude list without the stored power jitter (a candidate that reads it)
READ_JITTER = [p for p in builtin_recipe("gbm")["exclude"] if "_jitter_max_" not in p]

# name -> keys of models/lightgbm.toml changed (a table key by key); "gbm" is today's recipe
# (fleet_weighted since it won; "unweighted" is the recipe before).
CANDIDATES: dict[str, dict] = {
    "gbm": {},
    "unweighted": {"fleet_weighted": False},
    "fleet": {"fleet_weighted": True},
    "rank": {"rank_by_snapshot": True, "lightgbm": {"objective": "lambdarank"}},
    "rank_fleet": {"fleet_weighted": True, "rank_by_snapshot": True, "lightgbm": {"objective": "lambdarank"}},
    "drop_constant": {"drop_constant": True},
    "fleet_drop": {"fleet_weighted": True, "drop_constant": True},
    "tuned": {"tune_num_leaves": [7, 15, 31]},
    "fleet_tuned": {"fleet_weighted": True, "tune_num_leaves": [7, 15, 31]},
    "fleet_no_monotone": {"fleet_weighted": True, "monotone_increasing": []},
    "no_monotone": {"monotone_increasing": []},
    "no_rules": {"rules": False},
    "leaves31": {"lightgbm": {"num_leaves": 31, "min_data_in_leaf": 50}},
    # rare failures (a GPU fleet at a real rate): random split thresholds, or shallower trees
    "extra_trees": {"lightgbm": {"extra_trees": True}},
    "leaves7": {"lightgbm": {"num_leaves": 7}},
    # the hardest negatives (rows of units failing 1 to 6 horizons later) weigh 1x / 3x the positives;
    # _near: only those failing 1 to 2 horizons later (on daily disks, all kept in the sample at weight 1)
    "hard_neg": {"hard_negative_weight": 1.0},
    "hard_neg3": {"hard_negative_weight": 3.0},
    "hard_neg_near": {"hard_negative_weight": 1.0, "hard_negative_window": 2.0},
    # a counter's 6-hour increase over its 1-day one (and each consecutive pair): a burst from a trend
    "shares": {"window_shares": True},
    # both: a burst told from a trend, and the rows days ahead of a failure told from those within the horizon
    "shares_hard3": {"window_shares": True, "hard_negative_weight": 3.0},
    # the power's spread over the utilization's (power_w_spread_<w>): a failing power supply from a changing load;
    # today's recipe since 2026-12-07 ("gbm"), "no_power" is the recipe before
    "power": {"power_spread": True},
    "no_power": {"power_spread": False},
    # the stored power jitter (power_w_jitter_max_<w>: the largest hourly power spread in a window), which
    # today's recipe leaves out (tried 2026-12-07, not kept), read
    "jitter": {"exclude": READ_JITTER},
    # the same, the risk never falling as the jitter grows (a failing supply only spreads its power more)
    "jitter_mono": {
        "exclude": READ_JITTER,
        "monotone_increasing": [*builtin_recipe("gbm")["monotone_increasing"], "*_jitter_max_*"],
    },
    # today's recipe without the spike guard on the 1-day power jitter (the recipe before 2026-12-07 night)
    "no_guard": {"spike_guard": []},
    # the temperature residual's slope (temp_residual_c_rise_6h_1d): a short thermal drift from a long one
    "rise": {"temperature_rise": True},
    # five boosters a horizon, each from its own bagging and feature-sampling seed, margins averaged
    "bag5": {"members": 5},
}


def factories(config, names: list[str]) -> dict:
    """Constructors of the candidates ``names``: the configuration's gbm factory with each
    candidate's keys as ``[models] gbm = {...}`` over the recipe (a table key by key)."""
    from foreshock.models.estimators.bundle import model_factories

    return {
        name: model_factories(config.with_overrides({"models": {"gbm": CANDIDATES[name]}}))["gbm"] for name in names
    }


def rank_average(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """``unit_id, ts, score``: the mean of each drive's percentile rank in ``a`` and in ``b``
    among the drives of its day (a drive a ranking leaves out: 0 in it; null in both: null)."""
    joined = a.select("unit_id", "ts", pl.col("score").alias("a")).join(
        b.select("unit_id", "ts", pl.col("score").alias("b")), on=["unit_id", "ts"], how="full", coalesce=True
    )
    day = pl.col("ts").dt.truncate("1d")

    def pct(col: str) -> pl.Expr:
        return (pl.col(col).rank("average").over(day) / pl.col(col).count().over(day)).fill_null(0.0)

    both_null = pl.col("a").is_null() & pl.col("b").is_null()
    return joined.select(
        "unit_id", "ts", pl.when(both_null).then(None).otherwise((pct("a") + pct("b")) / 2).alias("score")
    )


def judge_disks(scores: pl.DataFrame, config, shares: list[float], failures: pl.DataFrame, aside: bool = False) -> dict:
    """The candidates, the two SMART rules and each candidate blended with the growth rule,
    at each share of the drives reporting (as ``bench_real_disks.py``'s judge), against
    ``failures`` (those the backtest knew).  ``aside``: each candidate's list is judged a
    second time with flags that expire (``bench_real_disks.set_aside``, rows ``<candidate>,
    set aside after 14 d``)."""
    from foreshock.budget import fleet_weights
    from foreshock.lake.read import read_table

    scores = scores.filter(pl.col("horizon") == HORIZON)
    first, last = scores.get_column("ts").min().date(), scores.get_column("ts").max().date()
    levels = daily_levels(config.lake_dir, first - timedelta(days=GROWTH_DAYS), last)
    reporting = levels.filter(pl.col("ts").dt.date() >= first)
    series = {
        model: reporting.join(
            part.select("unit_id", "ts", pl.col("risk").alias("score")), on=["unit_id", "ts"], how="left"
        )
        for (model,), part in scores.group_by(["model"], maintain_order=True)
    }
    rules = rule_scores(levels, reporting.select("unit_id", "ts"))
    inventory = read_table(config.lake_dir, "inventory")
    judged = {"results": []}
    if aside:  # share by share: the list replayed at each share decides what expires
        weights = fleet_weights(inventory)
        expiring = {set_aside_name(model): frame for model, frame in series.items()}
        for share in shares:
            judged["results"] += judge_shares(
                expiring, failures, inventory, config, [share], order=lambda part, s=share: set_aside(part, s, weights)
            )["results"]
    series = {model: frame.drop("level") for model, frame in series.items()}
    for model in list(series):
        series[f"{model}+growth"] = rank_average(series[model], rules["smart_growth"])
    series.update(rules)
    plain = judge_shares(series, failures, inventory, config, shares)
    plain["results"] += judged["results"]
    return plain


def disk_table(judged: dict) -> str:
    lines = [
        "| ranking | " + " | ".join(f"P / R / lead at {s * 100:g} %" for s in judged["shares"]) + " |",
        "|---|" + "---|" * len(judged["shares"]),
    ]
    rows = [r for r in judged["results"] if r["maker"] == "all"]
    for model in dict.fromkeys(r["model"] for r in rows):
        cells = []
        for share in judged["shares"]:
            r = next(x for x in rows if x["model"] == model and x["share"] == share)
            lead = "–" if r["lead_time_p50_h"] is None else f"{r['lead_time_p50_h'] / 24:.1f} d"
            p = "–" if r["precision"] is None else f"{r['precision']:.3f}"
            cells.append(f"{p} / {r['caught']}/{r['failures']} / {lead}")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def backtest_table(report: dict) -> str:
    """Per candidate and horizon: the budget and target-precision operating points and PR-AUC."""
    lines = [
        "| candidate | horizon | budget: caught / failures, precision | target precision: caught, precision "
        "| precursor recall at target | PR-AUC |",
        "|---|---|---|---|---|---|",
    ]
    for model, per_h in report["models"].items():
        for h, m in per_h.items():
            ops = m["operating_points"]
            b, t = ops.get("budget") or {}, ops.get("target_precision") or {}
            lines.append(
                f"| {model} | {h} | {b.get('caught')} / {b.get('failures')}, {_f(b.get('precision'))} "
                f"| {t.get('caught')}, {_f(t.get('precision'))} | {_f(t.get('recall_with_precursor'))} "
                f"| {_f(m['snapshot'].get('pr_auc'), 3)} |"
            )
    return "\n".join(lines)


def settings_overrides(assignments: list[str]) -> dict:
    """``["models.max_healthy_rows=1600000", ...]`` as ``{"models": {"max_healthy_rows": 1600000}}``
    (each value read as TOML, so ``true``, numbers and ``"text"`` keep their types)."""
    import tomllib

    overrides: dict[str, dict] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        section, dot, name = key.strip().partition(".")
        if not (sep and dot and section and name):
            raise SystemExit(f"--set {assignment!r}: expected SECTION.KEY=VALUE")
        try:
            parsed = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError as err:
            raise SystemExit(f"--set {assignment!r}: the value is not TOML ({err})") from err
        overrides.setdefault(section, {})[name] = parsed
    return overrides


def _f(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--disks", type=Path, help="a bench_real_disks.py work directory (prepared)")
    parser.add_argument("--config", type=Path)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--ground-truth", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--shares", type=float, nargs="+", default=[0.001, 0.005])
    parser.add_argument(
        "--set-aside",
        action="store_true",
        help="on disks, judge each candidate's list also with flags that expire: a drive flagged 14 days "
        "in a row is set aside until its SMART sum rises (bench_real_disks.set_aside)",
    )
    parser.add_argument(
        "--until",
        type=date.fromisoformat,
        help="backtest as of this day: only the snapshots before it and the failures known before it "
        "(an earlier history of the same data set, judged on its own last days)",
    )
    parser.add_argument(
        "--set",
        dest="settings",
        metavar="SECTION.KEY=VALUE",
        action="append",
        default=[],
        help="a setting of the data set's configuration changed for every candidate (a TOML value, "
        "e.g. models.sample_rule_firing=true): the training sample is the configuration's, shared by all",
    )
    args = parser.parse_args()
    if args.set_aside and not args.disks:
        parser.error("--set-aside judges disk lists: it needs --disks")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    from foreshock.config import load_config
    from foreshock.lake.read import read_table
    from foreshock.models.evaluation.backtest import read_ground_truth, walk_forward
    from foreshock.models.evaluation.backtest_report import write_result
    from foreshock.pipelines import inputs

    if args.disks:
        config = load_config(args.disks / "data/foreshock.toml", data_dir=args.disks / "lake")
    else:
        config = load_config(args.config, data_dir=args.data_dir)
    if args.settings:
        overrides = settings_overrides(args.settings)
        unknown = [f"{s}.{k}" for s, keys in overrides.items() for k in keys if k not in config.settings.get(s, {})]
        if unknown:
            raise SystemExit(f"--set: no such setting {', '.join(unknown)}")
        config = config.with_overrides(overrides)
        print(f"settings changed for every candidate: {', '.join(args.settings)}", flush=True)
    try:
        inventory = read_table(config.lake_dir, "inventory")
    except Exception:  # a lake without an inventory: unweighted
        inventory = None
    source, failures = inputs.feature_source(config), inputs.failures(config)
    if args.until:
        cut = datetime.combine(args.until, datetime.min.time(), UTC)
        source = source.before(cut)
        failures = failures.filter(pl.col("failed_at") < cut)
        print(
            f"as of {args.until}: {len(source.files)} feature partitions, {failures.height} failures known", flush=True
        )
    started, cpu = time.perf_counter(), time.process_time()
    result = walk_forward(
        source,  # read fold by fold, as foreshock backtest reads it
        failures,
        config,
        factories=factories(config, args.candidates),
        ground_truth=read_ground_truth(args.ground_truth),
        inventory=inventory,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_result(result, args.out)
    print(
        f"backtest of {len(args.candidates)} candidates: wall {time.perf_counter() - started:.0f} s, "
        f"CPU {time.process_time() - cpu:.0f} s",
        flush=True,
    )
    print(backtest_table(result.report), flush=True)
    if args.disks:
        judged = judge_disks(result.scores, config, args.shares, failures, args.set_aside)
        (args.out / "judged.json").write_text(json.dumps(judged, indent=2, default=str) + "\n")
        print(disk_table(judged))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
