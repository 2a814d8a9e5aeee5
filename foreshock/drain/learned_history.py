"""The learned chooser at publish time: recorded decisions from the outbox's earlier risk
lists, their outcomes from the lake, and whether the learned chooser may decide.

Each earlier publish directory's risk list is a record of decisions (risk, action,
propensity); the lake's ``drains`` table says when a drained unit came back and its
``failures`` table what followed.  :func:`learned_chooser` fits on them
(:mod:`foreshock.drain.learned`) and returns a chooser only when ``[policy] chooser =
"learned"`` and the learned chooser beat the fixed policy by its interval on the later
half of those records; otherwise the fixed policy decides and the manifest's notes say why.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from foreshock.contract import UTC_TS
from foreshock.drain.learned import Comparison, LearnedChoice, choose, compare, decision_records, fit, fixed_band
from foreshock.drain.outbox_files import complete_list_dirs, published_at
from foreshock.drain.risk_list import list_paths
from foreshock.drain.settings import PolicySettings
from foreshock.durations import parse_duration

# Reasons of decisions not taken on the unit's risk: they teach nothing about a band.
NOT_ON_RISK = ("left alone", "hardware admission", "continuing drain", "no risk score")
DECISIONS_SCHEMA = {"unit_id": pl.String, "ts": UTC_TS, "risk": pl.Float64, "action": pl.String}


def taken_on_risk() -> pl.Expr:
    """Rows of a recommendation table whose action was decided on the unit's risk."""
    on_risk = ~pl.any_horizontal(pl.col("reason").fill_null("").str.starts_with(p) for p in NOT_ON_RISK)
    return on_risk & pl.col("risk").is_not_null()


def published_decisions(outbox_dir: Path, since: datetime) -> pl.DataFrame:
    """Decisions taken on risk in the complete publish directories since ``since``
    (``unit_id, ts, risk, action, propensity``)."""
    frames = []
    for directory in complete_list_dirs(outbox_dir):
        stamp = published_at(directory.name)
        if stamp is None or stamp < since:
            continue
        frame = pl.scan_parquet(list_paths(directory)["parquet"])
        names = frame.collect_schema().names()
        columns = [c for c in ("unit_id", "score_ts", "risk", "action", "reason", "propensity") if c in names]
        frames.append(frame.select(columns).collect())
    if not frames:
        return pl.DataFrame(schema=DECISIONS_SCHEMA)
    decisions = pl.concat(frames, how="diagonal_relaxed").rename({"score_ts": "ts"})
    return decisions.filter(taken_on_risk()).drop("reason").unique(["unit_id", "ts"])


def with_returns(decisions: pl.DataFrame, drains: pl.DataFrame | None, within: timedelta) -> pl.DataFrame:
    """``returned_at`` of the recorded drain that followed each decision within ``within``."""
    if drains is None or drains.height == 0 or "returned_at" not in drains.columns:
        return decisions
    spans = drains.select(
        pl.col("unit_id").cast(pl.String), pl.col("drained_at").cast(UTC_TS), pl.col("returned_at").cast(UTC_TS)
    ).sort("drained_at")
    return (
        decisions.with_columns(pl.col("ts").cast(UTC_TS))
        .sort("ts")
        .join_asof(spans, left_on="ts", right_on="drained_at", by="unit_id", strategy="forward", tolerance=within)
        .drop("drained_at")
    )


def judge_learned(
    decisions: pl.DataFrame,
    failures: pl.DataFrame,
    settings: PolicySettings,
    *,
    min_lead_time: timedelta,
    until: datetime,
) -> tuple[pl.DataFrame, Comparison | None]:
    """The decisions' outcomes priced by the policy's costs (:func:`decision_records`) and the
    learned chooser against the fixed policy on them (:func:`compare`; None: too few)."""
    learned = settings.learned
    records = decision_records(
        decisions,
        failures,
        settings.costs,
        learned,
        horizon=parse_duration(settings.horizon),
        min_lead_time=min_lead_time,
        until=until,
        replace_turnaround=settings.lemons.replace_turnaround,
    )
    return records, compare(records, settings.costs, learned, fixed=fixed_band(learned, settings.enter_risk))


def learned_chooser(
    config, settings: PolicySettings, now: datetime, failures: pl.DataFrame | None, drains: pl.DataFrame | None
) -> tuple[LearnedChoice | None, list[str]]:
    """The learned chooser for this publish, or None (the fixed policy), with a note."""
    learned = settings.learned
    if learned.chooser != "learned":
        return None, []
    decisions = published_decisions(config.outbox_dir, now - learned.history)
    decisions = with_returns(decisions, drains, timedelta(days=1))
    fails = failures if failures is not None else pl.DataFrame(schema={"unit_id": pl.String, "failed_at": UTC_TS})
    min_lead_time = config.duration("backtest", "min_lead_time")
    records, result = judge_learned(decisions, fails, settings, min_lead_time=min_lead_time, until=now)
    if result is None:
        return None, [f"learned chooser: too few recorded decisions ({records.height}); the fixed policy decides"]
    span = f"{result.difference_gpu_h:+,.0f} GPU-h ({result.interval[0]:+,.0f} to {result.interval[1]:+,.0f})"
    if not result.better:
        return None, [f"learned chooser not better than the fixed policy by its interval: {span}; fixed decides"]
    choice = choose(fit(records, settings.costs, learned), learned, fixed_band(learned, settings.enter_risk))
    threshold = choice.threshold()
    where = f"drains from risk {threshold:g}" if threshold is not None else "no band worth a drain"
    return choice, [f"learned chooser decides ({where}): {span} against the fixed policy on later records"]
