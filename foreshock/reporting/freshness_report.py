"""The freshness check as people and monitors read it: a terminal table and Prometheus
gauges (``foreshock_status.prom``, beside the publish's ``foreshock.prom``).

The check itself is :mod:`foreshock.reporting.freshness`; the fleet page renders the same
parts as HTML (:mod:`foreshock.reporting.fleet_status_report`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from foreshock.durations import parse_duration
from foreshock.reporting.freshness import OK, PartStatus, overall

STATUS_TEXTFILE = "foreshock_status.prom"


def status_textfile_path(config) -> Path:
    """``foreshock_status.prom`` beside the ``[metrics] textfile`` the publish writes."""
    from foreshock.drain.textfile import textfile_path  # prometheus_client only when gauges are asked for

    return textfile_path(config).with_name(STATUS_TEXTFILE)


def format_status(parts: list[PartStatus], now: datetime) -> str:
    """One line per part (state, newest, age, limit, rows, detail) and the pipeline's state."""
    lines = [f"{'part':<9} {'state':<7} {'newest (UTC)':<17} {'age':>6} {'limit':>6} {'rows':>12}  detail"]
    for p in parts:
        d = p.to_dict()
        newest = f"{p.newest:%Y-%m-%d %H:%M}" if p.newest else "-"
        rows = f"{p.rows:,}" if p.rows is not None else "-"
        lines.append(
            f"{p.part:<9} {p.state:<7} {newest:<17} {d['age'] or '-':>6} {p.max_age or '-':>6} {rows:>12}  {p.detail}"
        )
    lines.append(f"pipeline: {overall(parts)} at {now:%Y-%m-%d %H:%M:%S} UTC")
    return "\n".join(lines)


def render_textfile(parts: list[PartStatus], now: datetime) -> str:
    """The parts' freshness as Prometheus gauges for node-exporter's textfile collector:
    ``foreshock_part_newest_timestamp_seconds``, ``foreshock_part_age_seconds``,
    ``foreshock_part_max_age_seconds`` and ``foreshock_part_ok`` (1 fresh, 0 stale or
    broken) per ``part``, so Grafana and Alertmanager see a stalled lake, features or
    champion as well as stale scores."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    label = ["part"]
    newest = Gauge("foreshock_part_newest_timestamp_seconds", "Newest timestamp of the part", label, registry=registry)
    age = Gauge("foreshock_part_age_seconds", "Age of the part's newest timestamp", label, registry=registry)
    limit = Gauge("foreshock_part_max_age_seconds", "[status] <part>_max_age", label, registry=registry)
    fresh = Gauge("foreshock_part_ok", "1 when the part is within its max age, else 0", label, registry=registry)
    for p in parts:
        if p.newest is not None:
            newest.labels(p.part).set(p.newest.timestamp())
            age.labels(p.part).set(p.age_seconds or 0.0)
        if p.max_age:
            limit.labels(p.part).set(parse_duration(p.max_age).total_seconds())
        fresh.labels(p.part).set(1 if p.state == OK else 0)
    Gauge("foreshock_status_timestamp_seconds", "When status was checked", registry=registry).set(now.timestamp())
    return generate_latest(registry).decode()
