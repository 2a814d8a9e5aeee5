"""Risk and freshness as a Prometheus textfile (node-exporter textfile collector format).

Every publish rewrites one file atomically (``[metrics] textfile``; by default
``data/outbox/foreshock.prom``).  Point node-exporter's
``--collector.textfile.directory`` at its folder (or set ``textfile`` inside that folder)
and Prometheus scrapes:

=======================================  ==========================================================
metric                                   meaning
=======================================  ==========================================================
``foreshock_unit_risk``                  P(fail within ``horizon``) per unit and scored horizon;
                                         labels ``unit_id, node, rack, horizon``
``foreshock_unit_action``                the unit's recommended action as its severity (0 none,
                                         1 watch, 2 run_diagnostics, 3 drain_at_checkpoint,
                                         4 drain_now, 5 replace); labels ``unit_id, node,
                                         rack, action``
``foreshock_units``                      units per action (label ``action``)
``foreshock_new_drains``                 drains granted by the last publish
``foreshock_scores_timestamp_seconds``   newest score snapshot behind the list (Unix time)
``foreshock_score_age_seconds``          its age when the list was published
``foreshock_publish_timestamp_seconds``  when the list was published
``foreshock_model_info``                 1, labels ``model_name, model_version, run_id``
``foreshock_telemetry_findings``         telemetry health findings per kind (label ``kind``)
``foreshock_telemetry_finding_since``    per finding: since when (Unix time; 0 unknown); labels
                                         ``unit_id, node, kind, metric``
``foreshock_watch_units``                units per degradation trend (label ``trend``)
``foreshock_unit_degradation_rate``      per watched unit and metric: rate per day over
                                         ``[health] trend_window``; labels ``unit_id, node,
                                         metric, trend``
``foreshock_unit_degradation_accel``     its change per day (acceleration, per day²)
=======================================  ==========================================================

Freshness at query time is ``time() - foreshock_scores_timestamp_seconds``
(``pipelines/grafana/foreshock.json`` shows it).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from foreshock.drain.actions import ACTIONS, SEVERITY
from foreshock.drain.lemons import offender_counts
from foreshock.drain.risk_table import horizon_columns
from foreshock.lake.atomic import atomic_write_text

TEXTFILE_NAME = "foreshock.prom"
UNIT_LABELS = ("unit_id", "node", "rack")


def textfile_path(config) -> Path:
    """``[metrics] textfile``, or ``<outbox>/foreshock.prom`` when it is empty."""
    chosen = str(config.section("metrics")["textfile"])
    return Path(chosen) if chosen else Path(config.outbox_dir) / TEXTFILE_NAME


def render(risk_list: pl.DataFrame, *, generated_at: datetime, scores_at: datetime | None, new_drains: int) -> str:
    """The exposition text for one risk list (schema v1 frame)."""
    registry = CollectorRegistry()
    risk = Gauge(
        "foreshock_unit_risk",
        "P(fail within horizon) of a unit",
        [*UNIT_LABELS, "horizon"],
        registry=registry,
    )
    action = Gauge(
        "foreshock_unit_action",
        "Recommended action as its severity: 0 none, 1 watch, 2 run_diagnostics, 3 drain_at_checkpoint, "
        "4 drain_now, 5 replace",
        [*UNIT_LABELS, "action"],
        registry=registry,
    )
    units = Gauge("foreshock_units", "Units per recommended action", ["action"], registry=registry)
    horizons = horizon_columns(risk_list.columns)
    for row in risk_list.iter_rows(named=True):
        where = [row[label] or "" for label in UNIT_LABELS]
        for horizon, column in horizons.items():
            if row[column] is not None:
                risk.labels(*where, horizon).set(row[column])
        action.labels(*where, row["action"]).set(SEVERITY[row["action"]])
    counts = dict(risk_list.group_by("action").len().iter_rows()) if risk_list.height else {}
    for name in ACTIONS:
        units.labels(name).set(counts.get(name, 0))
    Gauge("foreshock_new_drains", "Drains granted by the last publish", registry=registry).set(new_drains)
    Gauge("foreshock_publish_timestamp_seconds", "When the risk list was published (Unix time)", registry=registry).set(
        generated_at.timestamp()
    )
    if scores_at is not None:
        Gauge(
            "foreshock_scores_timestamp_seconds", "Newest score snapshot behind the list (Unix time)", registry=registry
        ).set(scores_at.timestamp())
        Gauge(
            "foreshock_score_age_seconds", "Age of the newest scores when the list was published", registry=registry
        ).set((generated_at - scores_at).total_seconds())
    info = Gauge(
        "foreshock_model_info",
        "Model behind the risk list",
        ["model_name", "model_version", "run_id"],
        registry=registry,
    )
    if risk_list.height:
        models = risk_list.select("model_name", "model_version", "run_id").unique().drop_nulls("model_name")
        for name, version, run_id in models.iter_rows():
            info.labels(name, version or "", run_id or "").set(1)
    return generate_latest(registry).decode()


def write_textfile(path: Path, text: str) -> Path:
    """Replace the textfile atomically (node-exporter never reads half a file)."""
    atomic_write_text(Path(path), text)
    return Path(path)


def render_health(findings: pl.DataFrame, counts: dict[str, int], watch: pl.DataFrame) -> str:
    """The telemetry health and watch list gauges (appended to :func:`render`'s text)."""
    registry = CollectorRegistry()
    per_kind = Gauge("foreshock_telemetry_findings", "Telemetry health findings per kind", ["kind"], registry=registry)
    for kind, n in counts.items():
        per_kind.labels(kind).set(n)
    since = Gauge(
        "foreshock_telemetry_finding_since",
        "Since when a telemetry health finding holds (Unix time; 0 unknown)",
        ["unit_id", "node", "kind", "metric"],
        registry=registry,
    )
    for row in findings.iter_rows(named=True):
        at = row["since"]
        since.labels(row["unit_id"] or "", row["node"] or "", row["kind"], row["metric"] or "").set(
            at.timestamp() if at is not None else 0
        )
    trends = Gauge(
        "foreshock_watch_units", "Units on the watch list per degradation trend", ["trend"], registry=registry
    )
    labels = ["unit_id", "node", "metric", "trend"]
    rate = Gauge(
        "foreshock_unit_degradation_rate", "Rate per day over [health] trend_window", labels, registry=registry
    )
    accel = Gauge(
        "foreshock_unit_degradation_accel", "Change of that rate per day (per day squared)", labels, registry=registry
    )
    for name in ("accelerating", "rising"):
        trends.labels(name).set(
            watch.filter(pl.col("trend") == name).get_column("unit_id").n_unique() if watch.height else 0
        )
    for row in watch.iter_rows(named=True):
        where = [row["unit_id"], row.get("node") or "", row["metric"], row["trend"]]
        if row.get("rate_per_day") is not None:
            rate.labels(*where).set(row["rate_per_day"])
        if row.get("accel_per_day2") is not None:
            accel.labels(*where).set(row["accel_per_day2"])
    return generate_latest(registry).decode()


def render_repeat_offenders(lemons: pl.DataFrame) -> str:
    """Repeat-offender gauges (``foreshock status --textfile``): how many units and nodes,
    and each flagged unit's incident counts (:func:`foreshock.drain.lemons.lemon_table`)."""
    registry = CollectorRegistry()
    flagged = lemons.filter(pl.col("lemon").is_not_null())
    count = Gauge(
        "foreshock_repeat_offenders",
        "Repeat offenders in the [lemon] window: units (level=unit) and nodes (level=node)",
        ["level"],
        registry=registry,
    )
    units, nodes = offender_counts(lemons)
    count.labels("unit").set(units)
    count.labels("node").set(nodes)
    per_unit = Gauge(
        "foreshock_unit_repeat_offender",
        "A repeat offender's incidents in the [lemon] window (scope=unit: its own, scope=node: its node's)",
        ["unit_id", "node", "lemon", "scope"],
        registry=registry,
    )
    for row in flagged.to_dicts():
        labels = (row["unit_id"], row["node"] or "", row["lemon"])
        per_unit.labels(*labels, "unit").set(row["repeat_offender"])
        per_unit.labels(*labels, "node").set(row["node_repeat_offender"])
    return generate_latest(registry).decode()
