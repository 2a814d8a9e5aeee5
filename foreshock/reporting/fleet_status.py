"""The fleet at a glance: what the risk page (``foreshock report``) shows, gathered from a
data directory the pipeline has filled.

Everything here reads what earlier stages wrote — the lake, the feature store, the
backtest, the live scores, the outbox, the replay and the MLflow registry — and returns
plain frames and dicts; :mod:`foreshock.reporting.fleet_status_report` renders them.  A part
whose inputs are missing is ``None`` and the page says which command makes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import polars as pl

from foreshock.config import Config
from foreshock.contract import label_column
from foreshock.drain.outbox_files import latest_list_dir, read_published_list
from foreshock.drain.replay_report import read_summary, replay_dir
from foreshock.drain.settings import PolicySettings
from foreshock.lake.read import lake_summary, read_table
from foreshock.models.estimators.training import labelled_until
from foreshock.models.evaluation.backtest_report import read_report, scores_path
from foreshock.models.registry.review_report import latest_review
from foreshock.models.registry.score_files import latest_path, run_files
from foreshock.reporting.freshness import PartStatus, pipeline_status
from foreshock.reporting.health_section import health_view
from foreshock.reporting.lemon_section import lemon_view


@dataclass
class FleetStatus:
    """Everything the fleet risk page shows (see module docstring)."""

    generated_at: datetime
    summary: dict[str, Any]
    top_units: pl.DataFrame | None
    risk_history: pl.DataFrame | None
    top_failures: pl.DataFrame | None
    enter_risk: float  # the decision horizon's risk that enters drain (the primary model's entry)
    exit_risk: float  # ... and the one it leaves below, on the same scale
    horizon: str
    backtest: dict | None
    calibration: pl.DataFrame | None  # model, risk, label of the backtest
    replay: dict | None
    champion: dict | None
    freshness: list[PartStatus] = field(default_factory=list)  # foreshock status's parts
    health: dict | None = None  # telemetry health and watch list of the newest publish (health_section)
    lemons: dict | None = None  # repeat offenders in the [lemon] window (lemon_section)
    entry: str = ""  # how a unit enters drain, each way in with its hold (Entry.describe)


def _signals_text(signals: list[dict] | None, top: int = 3) -> str:
    if not signals:
        return ""
    return "; ".join(f"{s['signal']}={s['value']:.3g}" for s in signals[:top] if s.get("signal"))


def top_units(risk_list: pl.DataFrame, top: int) -> pl.DataFrame:
    """The ``top`` units of a risk list, most severe action then highest risk first."""
    ranked = risk_list.sort(["severity", "risk", "unit_id"], descending=[True, True, False]).head(top)
    signals = [_signals_text(s) for s in ranked["top_signals"].to_list()] if "top_signals" in ranked.columns else None
    out = ranked.select(
        [
            c
            for c in ("unit_id", "node", "rack", "action", "risk", "expected_lead_time_h", "reason")
            if c in ranked.columns
        ]
    )
    return out.with_columns(pl.Series("signals", signals or [""] * out.height, dtype=pl.String))


def risk_history(config: Config, units: list[str], model: str | None, horizon: str) -> pl.DataFrame | None:
    """Risk over time of ``units``: the backtest's out-of-sample series of the live model
    (``source = backtest``) followed by every live scoring run (``source = live``)."""
    parts = []
    backtest = scores_path(config.backtest_dir)
    if backtest.is_file():
        scores = pl.scan_parquet(backtest).filter(pl.col("unit_id").is_in(units) & (pl.col("horizon") == horizon))
        if model is not None:
            scores = scores.filter(pl.col("model") == model)
        parts.append(scores.select("unit_id", "ts", "risk", pl.lit("backtest").alias("source")).collect())
    live = run_files(config.scores_dir)
    if live:
        frame = pl.concat([pl.read_parquet(p, columns=["unit_id", "ts", "horizon", "risk"]) for p in live])
        parts.append(
            frame.filter(pl.col("unit_id").is_in(units) & (pl.col("horizon") == horizon)).select(
                "unit_id", "ts", "risk", pl.lit("live").alias("source")
            )
        )
    if not parts:
        return None
    history = pl.concat(parts).with_columns(pl.col("ts").cast(pl.Datetime("us", "UTC")))
    return history.unique(["unit_id", "ts", "source"]).sort("unit_id", "ts")


def backtest_outcomes(config: Config, horizon: str) -> pl.DataFrame | None:
    """``model, risk, label`` of every backtest snapshot at ``horizon`` whose outcome is
    known at the end of the backtest (for the calibration plot)."""
    path = scores_path(config.backtest_dir)
    if not path.is_file():
        return None
    scores = pl.read_parquet(path).filter(pl.col("horizon") == horizon)
    failures = read_table(config.lake_dir, "failures")
    if scores.height == 0:
        return None
    labelled = labelled_until(
        scores.select("unit_id", "ts").unique(), failures, [horizon], until=scores["ts"].max()
    ).select("unit_id", "ts", pl.col(label_column(horizon)).alias("label"))
    scored = scores.join(labelled, on=["unit_id", "ts"], how="inner").drop_nulls("label")
    return scored.select("model", "risk", "label") if scored.height else None


def champion_summary(config: Config) -> dict | None:
    """The registered champion, its review verdict and the newest review report's decision.

    MLflow must already point at the store (``MLFLOW_TRACKING_URI``)."""
    try:
        from foreshock.models.registry import registry

        version = registry.find_alias(config.model_name, "champion")  # no MLflow import where the store allows
    except Exception:  # no store, no registered model
        return None
    if version is None:
        return None
    challenger = registry.find_alias(config.model_name, "challenger")
    review_name, decision = latest_review(config.reports_dir) or (None, None)
    return {
        "name": config.model_name,
        "version": str(version.version),
        "run_id": version.run_id,
        "registered_at": datetime.fromtimestamp(version.creation_timestamp / 1000, UTC),
        "review": (version.tags or {}).get("foreshock.review", "not reviewed"),
        "challenger": str(challenger.version) if challenger is not None else None,
        "latest_review": review_name,
        "latest_decision": decision,
    }


def fleet_status(config: Config, *, top: int = 8, now: datetime | None = None) -> FleetStatus:
    """Gather the fleet risk page's content from ``config.data_dir``."""
    now = now or datetime.now(UTC)
    # the primary model's entry: the decision risk's own threshold beside a second way in,
    # its exit on the same scale (the exit keeps exit_risk / enter_risk of the threshold)
    policy = PolicySettings.from_config(config)
    enter = policy.entry.decision_threshold
    horizon = str(config.settings["models"]["horizon"])
    inventory = read_table(config.lake_dir, "inventory")
    failures = read_table(config.lake_dir, "failures")
    lake = lake_summary(config.lake_dir)
    telemetry_until = lake["samples"].get("last")
    summary: dict[str, Any] = {
        "units": inventory.height,
        "nodes": inventory["node"].n_unique() if inventory.height else 0,
        "racks": inventory["rack"].n_unique() if inventory.height else 0,
        "telemetry_from": lake["samples"].get("first"),
        "telemetry_until": telemetry_until,
        "failures": failures.height,
        "failures_by_mode": (
            dict(failures.group_by("mode").len().sort("mode", nulls_last=True).iter_rows()) if failures.height else {}
        ),
    }
    if telemetry_until is not None and failures.height:
        recent = failures.filter(pl.col("failed_at") > pl.lit(telemetry_until) - pl.duration(days=7))
        summary["failures_last_7d"] = recent.height
    outbox = latest_list_dir(config.outbox_dir)
    units = history = top_failures = None
    live_model = None
    if outbox is not None:
        risk_list = read_published_list(outbox)
        summary["actions"] = dict(risk_list.group_by("action").len().iter_rows())
        summary["risk_list"] = outbox.name
        units = top_units(risk_list, top)
    latest = latest_path(config.scores_dir)
    if latest.is_file():
        live_model = pl.read_parquet(latest, columns=["model"])["model"].first()
        if units is None:
            scores = pl.read_parquet(latest).filter(pl.col("horizon") == horizon)
            units = top_units(scores.with_columns(pl.lit(0).alias("severity")), top)
    if units is not None and units.height:
        ids = units["unit_id"].to_list()
        history = risk_history(config, ids, live_model, horizon)
        top_failures = failures.filter(pl.col("unit_id").is_in(ids)).select("unit_id", "failed_at", "mode")
    backtest = read_report(config.backtest_dir)
    champion = champion_summary(config)
    return FleetStatus(
        generated_at=now,
        summary=summary,
        top_units=units,
        risk_history=history,
        top_failures=top_failures,
        enter_risk=enter,
        exit_risk=policy.hysteresis_ratio * enter,
        horizon=horizon,
        backtest=backtest,
        calibration=backtest_outcomes(config, horizon),
        replay=read_summary(replay_dir(config.reports_dir)),
        champion=champion,
        freshness=pipeline_status(config, now),
        health=health_view(outbox),
        lemons=lemon_view(config, telemetry_until),
        entry=policy.entry.describe(policy.enter_for),
    )
