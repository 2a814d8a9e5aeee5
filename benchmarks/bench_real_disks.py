"""Real disks: the walk-forward backtest on Backblaze's SMART telemetry, judged at budgets
that are a share of the drives reporting each day, next to two SMART rules.

One command runs every stage as its own process (what a user runs), timed: wall time,
CPU time and peak RSS of each.

``convert``
    ``scripts/backblaze_to_canonical.py``: the start-stop file to canonical tables, healthy
    drives kept with ``--healthy-fraction`` (each then standing for ``1 / F`` drives, the
    inventory's ``fleet_weight``).
``ingest``, ``features``
    ``foreshock ingest --source canonical``, ``foreshock features`` with the converter's
    ``foreshock.toml`` (daily snapshots, 14-day horizon, lead of at least a day).
``backtest``
    The walk-forward backtest (``foreshock backtest``'s library call, as
    ``benchmarks/evaluate_models.py`` runs it): every model's out-of-sample scores.
``judge``
    The drives reporting each day (a reading that day) and two SMART rules on the same
    drive-days: *level* = raw SMART 5 + 187 + 197 + 198, *growth* = that sum's increase
    over 7 days.  Every model and both rules are judged by the package at each share of
    the fleet (default the top 0.1 % and 0.5 % of the drives reporting that day), over the
    backtest's out-of-sample days, the whole fleet and each maker.  With an entry floor
    (``--entry-floor F`` or ``[backtest] entry_floor``), each model is judged a second
    time flagging only drives at risk >= F (rows ``<model>, floor F``: the budget as a
    cap, not a quota); every ranking is said to beat both rules or not, per share.
    The models named by ``--rule-first`` (default ``gbm``) are also judged growth rule
    first (:func:`rule_first`: the drives whose sum grew, by the model's risk, then the
    others by risk; rows ``<model>>growth``), with no floor and with each floor of
    ``RULE_FIRST_FLOORS`` on the others (the median risk of the rule's flagged drives that
    day or over the trailing 7 days).  The models named by ``--model-then-rule`` (default
    none) are also judged model top, then rule (:func:`model_then_rule`: the model's own
    flags at the top 0.1 % of the day, then the drives the growth rule flags by the
    model's risk, nothing else; rows ``<model>+growth@0.1%``).  ``--since DATE`` judges
    every ranking again on the days from ``DATE`` on (``judged.json``'s ``since``).

Usage::

    uv run python benchmarks/bench_real_disks.py [--data PATH] [--healthy-fraction F]
        [--work DIR] [--half first|all] [--start DATE --end DATE] [--entry-floor F]
        [--rule-first [MODEL ...]] [--model-then-rule [MODEL ...]] [--since DATE]

``--half first`` takes the first half of the data's days, ``all`` (the default) every day;
``--start``/``--end`` pick any window.  A stage whose output is in ``--work`` is not run
again (``--redo`` removes the converted data, lake and backtest and runs them all).  An
interrupted ``features`` stage resumes: the snapshot dates it stored are kept and the stage
runs again from the first date it had not finished (:func:`features_resume_day`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from evaluate_models import FORESHOCK, run  # noqa: E402  (the harness: its process runner)

DATA = ROOT.parent / "shared/data/backblaze_hds/backblaze_2014_2016_startstop.parquet"
CONVERTER = ROOT / "scripts/backblaze_to_canonical.py"
HORIZON = "14d"
SHARES = (0.001, 0.005)
# The rules' attributes (the converter's names): SMART 5, 187, 197, 198.
LEVEL_METRICS = ("reallocated_sectors", "reported_uncorrectable", "pending_sectors", "offline_uncorrectable")
GROWTH_DAYS = 7
RULES_AS_RUN = "rules"  # the baseline's binary rules as run today: not a ranking
RULES = ("smart_level", "smart_growth")  # the rankings every model is judged against
# The "rule first" orderings' floors (pre-registered before any figure of them): the
# fleet-weighted median risk of the drives the growth rule flags over the trailing N days.
RULE_FIRST_FLOORS = {"day median": 1, "7-day median": 7}
# The "model top, then rule" ordering (pre-registered before any figure of it): the model's
# own flags at this share of the drives reporting (the other budget) come first.
MODEL_THEN_RULE_SHARE = 0.001
# Flags that expire (pre-registered before any figure of them): a drive the list flagged on
# this many consecutive days (the horizon) is set aside until its SMART sum rises.
SET_ASIDE_DAYS = 14


def window(data: Path, half: str, start: date | None, end: date | None) -> tuple[date | None, date | None]:
    """The days to convert: ``--start``/``--end`` when given, else the first half of the
    data's days or all of them."""
    if start or end or half == "all":
        return start, end
    span = pl.scan_parquet(data).select(pl.col("start_date").min(), pl.col("stop_date").max()).collect()
    first, stop = span.row(0)
    return first, first + timedelta(days=(stop - first).days // 2 - 1)


def stages(args: argparse.Namespace, work: Path) -> list[tuple[str, list[str], Path]]:
    """``(name, argv, output that shows it ran)`` of every stage, in order."""
    start, end = window(args.data, args.half, args.start, args.end)
    convert = [sys.executable, str(CONVERTER), str(args.data), str(work / "data")]
    convert += ["--healthy-fraction", str(args.healthy_fraction), "--seed", str(args.seed)]
    convert += [*(["--start", start.isoformat()] if start else []), *(["--end", end.isoformat()] if end else [])]
    config = work / "data/foreshock.toml"
    base = [*FORESHOCK, "--config", str(config), "--data-dir", str(work / "lake")]
    backtest = [sys.executable, __file__, "--backtest-child", str(work)]
    judge = [sys.executable, __file__, "--judge-child", str(work), *(str(s) for s in args.shares)]
    judge += [] if args.entry_floor is None else [f"--floor={args.entry_floor}"]
    judge += [f"--rule-first={','.join(args.rule_first)}"]
    judge += [] if args.since is None else [f"--since={args.since.isoformat()}"]
    judge += [f"--model-then-rule={','.join(args.model_then_rule)}"] if args.model_then_rule else []
    return [
        ("convert", convert, work / "data/sampling.json"),
        ("ingest", [*base, "ingest", "--source", "canonical", "--path", str(work / "data/tables")], work / "ingested"),
        ("features", [*base, "features"], work / "featured"),
        ("backtest", backtest, work / "backtest/report.json"),
        ("judge", judge, work / "judged.json"),
    ]


def features_resume_day(work: Path) -> date | None:
    """The first snapshot date an interrupted ``features`` stage of ``work`` left undone, or
    None when it stored nothing.

    The stage writes the store in time order, chunk after chunk, and a date's staged
    first-pass files are removed once the date is written: every date before the last one
    all shards stored (:func:`foreshock.features.store.last_snapshot`) and before the first
    date still staged is complete.  The lake has not changed since (the ingest stage ran
    once, before), so those dates need no recomputing; ``foreshock features --start DAY``
    computes the rest.  The lake's change log is then left as it is (a run with ``--start``
    does not consume it): a later ``foreshock features`` without ``--start`` would
    recompute every snapshot once, which the benchmark never runs.
    """
    from foreshock.config import load_config
    from foreshock.features import store

    features_dir = load_config(work / "data/foreshock.toml", data_dir=work / "lake").features_dir
    last = store.last_snapshot(features_dir)
    if last is None:
        return None
    staged = [date.fromisoformat(p.name.split("=", 1)[1]) for p in (features_dir / store.STAGING).glob("date=*")]
    return min([last.date() + timedelta(days=1), *staged])


def backtest_child(work: Path) -> None:
    """``foreshock backtest``'s task body (as ``benchmarks/evaluate_models.py`` runs it,
    without a Prefect server) with the inventory, whose ``fleet_weight`` reweights the
    report's budget point, as the backtest flow passes it."""
    import logging

    from foreshock.config import load_config
    from foreshock.lake.read import read_table
    from foreshock.models.evaluation.backtest import walk_forward
    from foreshock.models.evaluation.backtest_report import write_result
    from foreshock.pipelines import inputs

    # the folds' progress (training rows, fold done in N s) in backtest.log
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = load_config(work / "data/foreshock.toml", data_dir=work / "lake")
    inventory = read_table(config.lake_dir, "inventory")
    # The feature store read fold by fold, as the flow does (a frame of every snapshot
    # would hold the whole history in memory: 9.9 GB on 1.74 M drive-days)
    source = inputs.feature_source(config)
    with walk_forward(source, inputs.failures(config), config, inventory=inventory) as result:
        write_result(result, work / "backtest")


# -- the judge stage ------------------------------------------------------------------------


def daily_levels(lake_dir: Path, first: date, last: date, chunk_days: int = 28) -> pl.DataFrame:
    """``unit_id, ts, level`` of every drive with a reading on a day ``first..last``: the
    sum of its raw SMART 5, 187, 197 and 198 that day (an attribute it does not report
    counts 0).  Read a few weeks of partitions at a time (memory: one chunk of samples)."""
    from foreshock.lake.read import scan_table

    parts, lo = [], first
    while lo <= last:
        hi = min(lo + timedelta(days=chunk_days - 1), last)
        parts.append(
            scan_table(lake_dir, "samples", start=lo, end=hi)
            .group_by("unit_id", "ts")
            .agg(pl.col("value").filter(pl.col("metric").is_in(LEVEL_METRICS)).sum().alias("level"))
            .collect()
        )
        lo = hi + timedelta(days=1)
    return pl.concat(parts).sort("unit_id", "ts")


def rule_scores(levels: pl.DataFrame, keys: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The two SMART rules as rankings ``unit_id, ts, score`` on the drive-days ``keys``:
    *smart_level* the day's level, *smart_growth* the level minus the drive's level 7 days
    before (its latest reading at or before then; a drive seen for less than 7 days: its
    first reading).  A rule flags only where its value is above 0 (null elsewhere: the
    drive counts among those reporting but is not flagged), as an operator runs it: a
    drive with nothing reallocated, pending or uncorrectable is never picked at random."""
    back = levels.select(
        "unit_id", (pl.col("ts") + timedelta(days=GROWTH_DAYS)).alias("ts"), pl.col("level").alias("before")
    )
    first = levels.group_by("unit_id").agg(pl.col("level").first().alias("first_level"))
    frame = (
        keys.sort("unit_id", "ts")
        .join(levels, on=["unit_id", "ts"], how="inner")
        # both sides sorted by drive, then time: the order an as-of join by drive needs
        .join_asof(back.sort("unit_id", "ts"), on="ts", by="unit_id", strategy="backward", check_sortedness=False)
        .join(first, on="unit_id", how="left")
        .with_columns((pl.col("level") - pl.coalesce("before", "first_level")).alias("growth"))
    )
    return {
        name: frame.select("unit_id", "ts", pl.when(pl.col(col) > 0).then(pl.col(col)).alias("score"))
        for name, col in (("smart_level", "level"), ("smart_growth", "growth"))
    }


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The lower weighted median: the smallest value whose cumulative weight (values in
    ascending order) reaches half the total weight."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, cumulative[-1] / 2, side="left")])


def ruled(risk: pl.DataFrame, growth: pl.DataFrame) -> pl.DataFrame:
    """``unit_id, ts, risk, ruled, day``: the model's ``risk`` (NaN as null) of each
    drive-day, whether the growth rule flags it (``growth``'s score not null) and its UTC day."""
    return (
        risk.select("unit_id", "ts", pl.col("risk").cast(pl.Float64).fill_nan(None))
        .join(
            growth.select("unit_id", "ts", pl.col("score").is_not_null().alias("ruled")),
            on=["unit_id", "ts"],
            how="left",
        )
        .with_columns(pl.col("ruled").fill_null(False), pl.col("ts").dt.truncate("1d").alias("day"))
    )


def tiers(frame: pl.DataFrame, *conditions: pl.Expr) -> pl.Expr:
    """A score putting the drives of ``conditions[0]`` above those of ``conditions[1]``,
    and so on, above every risk; each tier by ``frame``'s risk (a drive the model did not
    score: last of its tier).  Null elsewhere: chain ``.otherwise``/``.when`` for the rest."""
    low, top = frame.get_column("risk").min(), frame.get_column("risk").max()
    low, top = (0.0, 0.0) if low is None else (float(low), float(top))
    # the last tier sits above every risk (its lowest score is top + 1), each tier above the next
    lift = top - low + 1.0
    score = None
    for level, condition in zip(range(len(conditions), 0, -1), conditions, strict=True):
        value = pl.col("risk").fill_null(low) + level * lift
        score = pl.when(condition).then(value) if score is None else score.when(condition).then(value)
    return score


def rule_first(
    risk: pl.DataFrame, growth: pl.DataFrame, weights: pl.DataFrame | None = None, floor_days: int | None = None
) -> pl.DataFrame:
    """``unit_id, ts, score``: the growth rule's flags first, then the model's list.

    Each day the drives the growth rule flags (``growth``'s score not null: the sum grew)
    rank above every other drive, ordered among themselves by the model's ``risk`` (one it
    did not score: last of them); the other drives follow by their risk.  With
    ``floor_days``, another drive is ranked only when its risk is at least the day's
    floor, the fleet-weighted median (:func:`weighted_median`) of the risks of the drives
    the rule flagged (and the model scored) that day and the ``floor_days - 1`` days
    before; with none flagged, none is added.  Below the floor a drive counts among those
    reporting but is never flagged.  Nothing here reads a failure: the floor of a day uses
    the model's scores and the rule's values of that day and earlier ones.
    """
    from foreshock.budget import WEIGHT_COLUMN

    frame = ruled(risk, growth)
    first = tiers(frame, pl.col("ruled"))
    if floor_days is None:
        return frame.select("unit_id", "ts", first.otherwise(pl.col("risk")).alias("score"))
    if weights is None:
        frame = frame.with_columns(pl.lit(1.0).alias(WEIGHT_COLUMN))
    else:
        frame = frame.join(weights.select("unit_id", WEIGHT_COLUMN), on="unit_id", how="left").with_columns(
            pl.col(WEIGHT_COLUMN).fill_null(1.0)
        )
    flagged = frame.filter(pl.col("ruled") & pl.col("risk").is_not_null())
    by_day = {
        d: (part.get_column("risk").to_numpy(), part.get_column(WEIGHT_COLUMN).to_numpy())
        for (d,), part in flagged.group_by(["day"])
    }
    days = frame.get_column("day").unique().sort()
    floors = []
    for d in days:
        trail = [by_day[t] for t in (d - timedelta(days=k) for k in range(floor_days)) if t in by_day]
        floors.append(
            weighted_median(np.concatenate([v for v, _ in trail]), np.concatenate([w for _, w in trail]))
            if trail
            else None
        )
    floor = pl.DataFrame({"day": days, "floor": pl.Series(floors, dtype=pl.Float64)})
    return frame.join(floor, on="day", how="left").select(
        "unit_id", "ts", first.when(pl.col("risk") >= pl.col("floor")).then(pl.col("risk")).alias("score")
    )


def rule_first_series(model: str, risk: pl.DataFrame, growth: pl.DataFrame, weights) -> dict[str, pl.DataFrame]:
    """The rule-first orderings of one model: no floor, and each of ``RULE_FIRST_FLOORS``."""
    name = f"{model}>growth"
    out = {name: rule_first(risk, growth)}
    for floor, days in RULE_FIRST_FLOORS.items():
        out[f"{name}, floor {floor}"] = rule_first(risk, growth, weights, days)
    return out


def model_then_rule(frame: pl.DataFrame, weights: pl.DataFrame | None = None) -> pl.DataFrame:
    """``unit_id, ts, score``: the model's own top of the day, then the growth rule's flags.

    ``frame`` is :func:`ruled`'s (the drives reporting, their risk, the rule's flag).  Each
    day, tier 1 is the drives the model flags at the top ``MODEL_THEN_RULE_SHARE`` of the
    drives reporting (its own list at that budget: :func:`daily_flags` on its risk, the
    carry rule and ``weights`` as the judge's); tier 2 the other drives the rule flags;
    each tier by the model's risk (:func:`tiers`).  A drive in neither counts among those
    reporting and is never flagged.  Nothing is fitted: the share is the issue's other
    budget, the rule the issue's rule.  Built on the drives judged together (a maker's
    drives: the maker's own top of the list), so at that share the ordering's flags are
    the model's.
    """
    from foreshock.budget import DailyBudget
    from foreshock.models.evaluation.top_of_list import daily_flags

    flags, _ = daily_flags(frame.select("unit_id", "ts", "risk"), DailyBudget(share=MODEL_THEN_RULE_SHARE), weights)
    top = flags.select(
        pl.col("unit_id").cast(frame.schema["unit_id"]),
        pl.col("alert_start").dt.truncate("1d").cast(frame.schema["day"]).alias("day"),
        pl.lit(True).alias("top"),
    )
    frame = frame.join(top, on=["unit_id", "day"], how="left").with_columns(pl.col("top").fill_null(False))
    return frame.select("unit_id", "ts", tiers(frame, pl.col("top"), pl.col("ruled")).alias("score"))


def set_aside(
    frame: pl.DataFrame, share: float, weights: pl.DataFrame | None = None, days: int = SET_ASIDE_DAYS
) -> pl.DataFrame:
    """``unit_id, ts, score``: a ranking whose flags expire after a horizon without a failure.

    ``frame``: the drives reporting, ``unit_id, ts``, the ranking's ``risk`` (or ``score``)
    and the day's SMART ``level`` (:func:`daily_levels`).  The ranking's own list at
    ``share`` is replayed day by day as the judge spends the budget
    (:meth:`~foreshock.models.evaluation.top_of_list.DailyLists.flagged`: the carry rule, the
    ``weights``).  A drive flagged on ``days`` consecutive days (a whole horizon; it is
    still reporting, so none of those flags has come true yet) is **set aside** from the
    next day on: its score is null (it counts among the drives reporting and is never
    flagged) until its level rises above the level it had on its last flagged day; then
    it is ranked by its risk again, and may be set aside again after another ``days``
    flagged days.  Only the drive's own past flags and readings are used, never a failure.
    """
    from foreshock.budget import DailyBudget
    from foreshock.contract import UTC_TS
    from foreshock.models.evaluation.top_of_list import daily_lists

    column = "score" if "score" in frame.columns else "risk"
    frame = frame.with_columns(pl.col("unit_id").cast(pl.String), pl.col("level").cast(pl.Float64).fill_null(0.0))
    lists = daily_lists(frame, DailyBudget(share=share), weights, columns=("level",), whole=True)
    aside: dict[str, float] = {}  # drive -> its level on the last flagged day before it was set aside
    streak: dict[str, tuple[object, int]] = {}  # drive -> (last flagged day, consecutive flagged days)
    hidden: list[tuple[str, object]] = []

    def passing(day, part: pl.DataFrame) -> pl.DataFrame:
        """The day's list without the drives set aside (those whose sum rose come back)."""
        for unit, level in zip(part.get_column("unit_id"), part.get_column("level"), strict=True):
            if unit in aside and level > aside[unit]:
                del aside[unit]  # its sum rose: ranked again
        out = part.get_column("unit_id").is_in(list(aside))
        hidden.extend((unit, day) for unit in part.filter(out).get_column("unit_id"))
        return part.filter(~out)

    for day, flags in lists.flagged(passing):
        previous = day - timedelta(days=1)
        for unit, level in zip(flags.get_column("unit_id"), flags.get_column("level"), strict=True):
            last, count = streak.pop(unit, (None, 0))
            count = count + 1 if last == previous else 1
            if count >= days:
                aside[unit] = level
            else:
                streak[unit] = (day, count)
    off = pl.DataFrame(
        {"unit_id": [u for u, _ in hidden], "day": [d for _, d in hidden], "off": [True] * len(hidden)},
        schema={"unit_id": pl.String, "day": lists.days.schema["day"], "off": pl.Boolean},
    )
    return (
        frame.with_columns(pl.col("ts").cast(UTC_TS).dt.truncate("1d").alias("day"))
        .join(off, on=["unit_id", "day"], how="left")
        .select("unit_id", "ts", pl.when(pl.col("off")).then(None).otherwise(pl.col(column)).alias("score"))
    )


def set_aside_name(model: str) -> str:
    """The row of a model's list with expiring flags, e.g. ``gbm, set aside after 14 d``."""
    return f"{model}, set aside after {SET_ASIDE_DAYS} d"


def model_then_rule_name(model: str) -> str:
    """The row of a model's "model top, then rule" ordering, e.g. ``gbm+growth@0.1%``."""
    return f"{model}+growth@{MODEL_THEN_RULE_SHARE * 100:g}%"


def judge_child(
    work: Path,
    shares: list[float],
    floor: float | None = None,
    rule_first_models: tuple[str, ...] = ("gbm",),
    since: date | None = None,
    model_then_rule_models: tuple[str, ...] = (),
) -> None:
    """Out-of-sample model scores and the rules on the drive-days with a reading, judged at
    each share (see the module docstring); ``judged.json`` and the tables printed.  The
    scores are read one model at a time (all of them at once: about 50 M rows on the whole
    data set), so memory holds one model's scores, the drives' levels and the two rules.
    ``rule_first_models``: the models also judged in the rule-first orderings
    (:func:`rule_first`); ``model_then_rule_models``: those also judged model top, then
    rule (:func:`model_then_rule`, built on each maker's and each window's drives);
    ``since``: every ranking judged again on the days from then on (``judged["since"]``;
    the rules and floors still use the days before as history)."""
    from foreshock.budget import fleet_weights
    from foreshock.config import load_config
    from foreshock.lake.read import read_table
    from foreshock.models.evaluation.backtest_report import read_report, scores_path

    config = load_config(work / "data/foreshock.toml", data_dir=work / "lake")
    floor = float(config.section("backtest")["entry_floor"] if floor is None else floor)
    report = read_report(work / "backtest")
    scores = pl.scan_parquet(scores_path(work / "backtest")).filter(
        (pl.col("horizon") == HORIZON) & (pl.col("model") != RULES_AS_RUN)
    )
    first, last, models = (
        scores.select(
            pl.col("ts").min().alias("first"),
            pl.col("ts").max().alias("last"),
            pl.col("model").unique(maintain_order=True).implode(),
        )
        .collect()
        .row(0)
    )
    levels = daily_levels(config.lake_dir, first.date() - timedelta(days=GROWTH_DAYS), last.date())
    # The drives reporting a day are those with a reading that day: a silent drive's
    # snapshot (features carry one for up to the longest window) is neither ranked nor
    # counted, and a reporting drive a model did not score counts, unflagged (null).
    reporting = levels.filter(pl.col("ts").dt.date() >= first.date()).select("unit_id", "ts")
    failures, inventory = read_table(config.lake_dir, "failures"), read_table(config.lake_dir, "inventory")
    weights = fleet_weights(inventory)
    later = None if since is None else datetime.combine(since, time(), tzinfo=UTC)
    judged: dict = {"results": []}
    window: dict = {"from": str(since), "results": []}

    def judge(series: dict[str, pl.DataFrame], floor: float | None = None, order=None) -> list[dict]:
        out = judge_shares(series, failures, inventory, config, shares, floor, order)
        if later is not None:
            part = {name: frame.filter(pl.col("ts") >= later) for name, frame in series.items()}
            window["results"] += judge_shares(part, failures, inventory, config, shares, floor, order)["results"]
        judged.update({k: v for k, v in out.items() if k != "results"})
        return out["results"]

    rules = rule_scores(levels, reporting)
    del levels
    rule_rows = judge(rules)
    growth = rules["smart_growth"]
    for model in models:
        risk = scores.filter(pl.col("model") == model).select("unit_id", "ts", "risk").collect()
        series = {model: reporting.join(risk, on=["unit_id", "ts"], how="left")}
        del risk
        judged["results"] += judge(series)
        if floor > 0:  # the same scores with the configured entry floor (the budget is a cap)
            judged["results"] += judge(series, floor)
        if model in rule_first_models:
            judged["results"] += judge(rule_first_series(model, series[model], growth, weights))
        if model in model_then_rule_models:
            tiered = {model_then_rule_name(model): ruled(series[model], growth)}
            judged["results"] += judge(tiered, order=lambda part: model_then_rule(part, weights))
    judged["results"] += rule_rows
    if later is not None:  # the rules' rows last, as in the whole period's
        rule_names = set(RULES)
        window["results"] = [r for r in window["results"] if r["model"] not in rule_names] + [
            r for r in window["results"] if r["model"] in rule_names
        ]
        window["against_rules"] = against_rules(window)
        judged["since"] = window
    judged["entry_floor"] = floor
    judged["rule_first_floors"] = RULE_FIRST_FLOORS
    judged["model_then_rule_share"] = MODEL_THEN_RULE_SHARE
    judged["against_rules"] = against_rules(judged)
    judged["models"] = {m: report["models"][m][HORIZON]["snapshot"] for m in report["models"]}
    judged["backtest_period"] = report["scored"]
    judged["reporting_drive_days"] = reporting.height
    judged["sampling"] = json.loads((work / "data/sampling.json").read_text())
    (work / "judged.json").write_text(json.dumps(judged, indent=2, default=str) + "\n")
    print(render(judged))


def judge_shares(
    series: dict[str, pl.DataFrame],
    failures: pl.DataFrame,
    inventory: pl.DataFrame,
    config,
    shares: list[float],
    floor: float | None = None,
    order=None,
) -> dict:
    """Each ranking (``unit_id, ts, risk``) judged by the package's top-of-the-list metrics
    at each share of the drives reporting that day, for the fleet and for each maker
    (the maker's drives ranked among themselves, its own share).  ``floor``: an entry
    floor on the risk (``[backtest] entry_floor``; the ranking's name then says it).
    ``order``: a function making the ranking's score from the drives judged together
    (the fleet's, or a maker's), as :func:`model_then_rule`; None: the frames are scores."""
    from foreshock.budget import DailyBudget, fleet_weights
    from foreshock.models.evaluation.top_of_list import top_of_list

    weights = fleet_weights(inventory)
    min_lead = config.duration("backtest", "min_lead_time")
    makers = inventory.select("unit_id", pl.col("maker").fill_null("unknown"))
    groups = {"all": None, **{m: makers.filter(pl.col("maker") == m) for m in sorted(set(makers["maker"]))}}
    out: dict = {"shares": shares, "min_lead_time": str(min_lead), "horizon": HORIZON, "results": []}
    for model, frame in series.items():
        name = model if floor is None else floored(model, floor)
        for group, units in groups.items():
            part = frame if units is None else frame.join(units, on="unit_id", how="semi")
            part = part if order is None else order(part)
            for share in shares:
                budget = DailyBudget(share=share)
                metrics = top_of_list(part, failures, budget, HORIZON, min_lead, weights=weights, floor=floor)
                row = {"model": name, "maker": group, "share": share, **metrics.to_dict()}
                if units is None:
                    row["false_flags_by_cause"] = false_flag_causes(part, failures, share, min_lead, weights, floor)
                out["results"].append(row)
    return out


def floored(model: str, floor: float) -> str:
    """The name of a model's ranking with an entry floor (a row of its own in the tables)."""
    return f"{model}, floor {floor:g}"


def against_rules(judged: dict) -> list[dict]:
    """Per share, each model's ranking (with and without the floor) against both SMART
    rules on the whole fleet: it beats a rule when it catches at least as many failures at
    a precision at least as high, and does better on one of the two (the rule's flags are
    not dominated).  ``beats_both``: it beats the level and the growth rule."""
    rows = {(r["model"], r["share"]): r for r in judged["results"] if r["maker"] == "all"}
    out = []
    for (model, share), r in rows.items():
        if model in RULES:
            continue
        entry = {"model": model, "share": share}
        for rule in RULES:
            other = rows.get((rule, share))
            entry[f"beats_{rule}"] = other is not None and dominates(r, other)
        entry["beats_both"] = all(entry[f"beats_{rule}"] for rule in RULES)
        out.append(entry)
    return out


def dominates(a: dict, b: dict) -> bool:
    """``a`` catches at least as many failures as ``b`` at a precision at least as high,
    and is strictly better on one of them."""
    pa, pb = a["precision"] or 0.0, b["precision"] or 0.0
    return a["caught"] >= b["caught"] and pa >= pb and (a["caught"] > b["caught"] or pa > pb)


def false_flag_causes(
    frame: pl.DataFrame,
    failures: pl.DataFrame,
    share: float,
    min_lead,
    weights: pl.DataFrame,
    floor: float | None = None,
) -> dict:
    """Where a ranking's false flags at ``share`` are (a diagnostic of what precision can
    reach): on drives that fail later than the horizon (how many within 30 days of the
    flag) or on drives with no failure known; each as flags of kept drives and as fleet
    drives (reweighted).  ``precision_30d`` is the precision the same flags would have if a
    failure up to 30 days later counted: a diagnostic only, the models are trained and
    judged for the 14-day horizon."""
    from foreshock.budget import WEIGHT_COLUMN, DailyBudget
    from foreshock.contract import UTC_TS
    from foreshock.models.estimators.base import horizon_hours
    from foreshock.models.evaluation.alerts import AlertWindow
    from foreshock.models.evaluation.metrics import classify_alerts
    from foreshock.models.evaluation.top_of_list import daily_flags

    flags, _ = daily_flags(frame, DailyBudget(share=share), weights, floor)
    until = frame.get_column("ts").cast(UTC_TS).max() + timedelta(days=1)  # as top_of_list: last snapshot + a step
    fails = failures.select(pl.col("unit_id").cast(pl.String), pl.col("failed_at").cast(UTC_TS))
    out = {}
    for horizon in (HORIZON, "30d"):
        window = AlertWindow(timedelta(hours=horizon_hours(horizon)), min_lead)
        classified = classify_alerts(flags, fails, horizon, window, until)
        if horizon == HORIZON:
            false = classified.filter(pl.col("outcome") == "false")
            later = pl.col("failed_at").is_not_null()
            month = later & (pl.col("failed_at") - pl.col("alert_start") <= timedelta(days=30))
            for name, which in (("fails_later", later), ("fails_within_30d", month), ("no_failure", ~later)):
                part = false.filter(which)
                out[name] = {"flags": part.height, "weighted": float(part.get_column(WEIGHT_COLUMN).sum())}
        else:
            w = {k: float(g.get_column(WEIGHT_COLUMN).sum()) for (k,), g in classified.group_by(["outcome"])}
            resolved = w.get("true", 0.0) + w.get("false", 0.0) + w.get("late", 0.0)
            out["precision_30d"] = w.get("true", 0.0) / resolved if resolved else None
    return out


def _cell(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render(judged: dict) -> str:
    """Markdown tables: per share, every ranking's precision, recall and median lead, for
    the fleet and per maker.  ``flags/day`` and ``precision`` are reweighted when the
    fleet is subsampled; the flag counts beside them are drives as kept (sample sizes)."""
    s = judged["sampling"]
    floor = judged.get("entry_floor") or 0.0
    lines = [
        f"Out-of-sample days {judged['backtest_period']['start'][:10]} to {judged['backtest_period']['end'][:10]}, "
        f"{judged['reporting_drive_days']:,} drive-days reporting; {s['failing_drives']} failing drives and "
        f"{s['healthy_kept']} of {s['healthy_drives']} healthy drives kept (fraction {s['healthy_fraction']:g}, "
        f"seed {s['seed']}: a kept healthy drive counts {s['healthy_weight']:g} in the reweighted figures).",
        "",
        *(
            [
                f"Rows named `<model>, floor {floor:g}`: the same scores with the entry floor fixed in advance "
                f"([backtest] entry_floor): a drive is flagged only at risk >= {floor:g}, so the budget is a cap, "
                "not a quota. Nothing about the test period chose the floor.",
                "",
            ]
            if floor
            else []
        ),
        "Backtest snapshot metrics (kept drives, not reweighted):",
        "",
        "| model | PR-AUC | C-index | calibration error |",
        "|---|---|---|---|",
    ]
    for model, m in judged["models"].items():
        lines.append(
            f"| {model} | {_cell(m['pr_auc'], 3)} | {_cell(m['c_index'], 3)} | {_cell(m['calibration_error'], 4)} |"
        )
    lines += share_tables(judged, judged["shares"])
    if "since" in judged:
        lines += [f"\n## From {judged['since']['from']} on (the days before only as the rules' and floors' history)"]
        lines += share_tables(judged["since"], judged["shares"])
    return "\n".join(lines)


def share_tables(judged: dict, shares: list[float]) -> list[str]:
    """Per share, a table of every ranking (the fleet, then each maker) and the verdicts."""
    lines: list[str] = []
    for share in shares:
        lines += [
            f"\n### Top {share * 100:g} % of the drives reporting each day\n",
            "| maker | ranking | flags/day | flags (true / false / late) | precision | caught / failures | recall "
            "| median lead (d) | reweighted |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        rows = sorted(
            (r for r in judged["results"] if r["share"] == share), key=lambda r: (r["maker"] != "all", r["maker"])
        )
        for r in rows:
            lead = None if r["lead_time_p50_h"] is None else r["lead_time_p50_h"] / 24
            lines.append(
                f"| {r['maker']} | {r['model']} | {_cell(r['flags_per_day'], 1)} "
                f"| {r['true_flags']} / {r['false_flags']} / {r['late_flags']} | {_cell(r['precision'])} "
                f"| {r['caught']} / {r['failures']} | {_cell(r['recall'])} | {_cell(lead, 1)} "
                f"| {'yes' if r['reweighted'] else 'no'} |"
            )
        verdicts = [v for v in judged.get("against_rules", []) if v["share"] == share]
        if verdicts:
            lines += ["", "Beats both SMART rules (at least as many caught at a precision at least as high):"]
            lines += [
                f"- {v['model']}: {'**yes**' if v['beats_both'] else 'no'} (level "
                f"{'yes' if v['beats_smart_level'] else 'no'}, growth {'yes' if v['beats_smart_growth'] else 'no'})"
                for v in verdicts
            ]
    return lines


# -- the command ----------------------------------------------------------------------------


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--backtest-child":
        backtest_child(Path(sys.argv[2]))
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "--judge-child":
        options = dict(a[2:].split("=", 1) for a in sys.argv[3:] if a.startswith("--"))
        shares = [float(a) for a in sys.argv[3:] if not a.startswith("--")] or list(SHARES)
        judge_child(
            Path(sys.argv[2]),
            shares,
            float(options["floor"]) if "floor" in options else None,
            tuple(m for m in options.get("rule-first", "gbm").split(",") if m),
            date.fromisoformat(options["since"]) if "since" in options else None,
            tuple(m for m in options.get("model-then-rule", "").split(",") if m),
        )
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the start-stop Parquet file")
    parser.add_argument("--healthy-fraction", type=float, default=1.0, help="share of healthy drives kept")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/foreshock-real-disks"))
    parser.add_argument("--half", choices=("first", "all"), default="all")
    parser.add_argument("--start", type=date.fromisoformat)
    parser.add_argument("--end", type=date.fromisoformat)
    parser.add_argument("--shares", type=float, nargs="+", default=list(SHARES))
    parser.add_argument(
        "--entry-floor",
        type=float,
        help="judge each model also with this entry floor on its risk (default: [backtest] entry_floor; 0: none)",
    )
    parser.add_argument(
        "--rule-first",
        nargs="*",
        default=["gbm"],
        metavar="MODEL",
        help="models also judged growth rule first, then by their risk (rows '<model>>growth'; none: no names)",
    )
    parser.add_argument(
        "--model-then-rule",
        nargs="*",
        default=[],
        metavar="MODEL",
        help="models also judged their own top 0.1 %% first, then the growth rule's flags by risk, nothing else "
        "(rows '<model>+growth@0.1%%')",
    )
    parser.add_argument(
        "--since", type=date.fromisoformat, help="judge every ranking again on the days from this date on"
    )
    parser.add_argument("--redo", action="store_true", help="start again: remove the work directory's data first")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    timings_file = work / "timings.json"
    if args.redo:  # a fresh lake: an ingest into the old one would find its files ingested already
        for old in ("data", "lake", "backtest"):
            shutil.rmtree(work / old, ignore_errors=True)
    timings = json.loads(timings_file.read_text()) if timings_file.exists() and not args.redo else {}
    for name, argv, done in stages(args, work):
        if done.exists() and not args.redo and name in timings:
            print(f"{name}: done before ({done})", flush=True)
            continue
        resumed = features_resume_day(work) if name == "features" and not args.redo else None
        if resumed is not None:
            argv = [*argv, "--start", resumed.isoformat()]
        print(f"{name}: {' '.join(argv)}", flush=True)
        log = work / (f"{name}-from-{resumed}.log" if resumed else f"{name}.log")
        timings[name] = run(argv, log) | ({"resumed_from": resumed.isoformat()} if resumed else {})
        if name in ("ingest", "features"):
            done.write_text("done\n")
        timings_file.write_text(json.dumps(timings, indent=2) + "\n")
        t = timings[name]
        print(
            f"{name}: wall {t['wall_s']:.1f} s, CPU {t['cpu_s']:.1f} s, peak RSS {t['peak_rss_mb']:.0f} MB", flush=True
        )
    print((work / "judge.log").read_text())
    print("| stage | wall (s) | CPU (s) | peak RSS (MB) |\n|---|---|---|---|")
    for name, t in timings.items():
        print(f"| {name} | {t['wall_s']:.1f} | {t['cpu_s']:.1f} | {t['peak_rss_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
