"""A publish writes the findings and the watch list beside the risk list, the gauges into
the textfile and the trend into the risk list; the fleet page shows them; ``[health]
enabled = false`` writes none of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from health_fleet import ACCEL, EXPECTED, FLAT, STUCK, UNITS, drains, inventory, raw_samples, trend_features

from foreshock.drain.health_files import health_paths, read_findings, read_watch, summary_line
from foreshock.drain.outbox import publish
from foreshock.drain.outbox_files import read_manifest, read_published_list
from foreshock.features.store import partition_path
from foreshock.health.telemetry import FINDING_SCHEMA
from foreshock.lake.merge import merge_into_lake
from foreshock.models.registry.score_files import latest_path
from foreshock.reporting.health_section import grouped_gaps, health_section, health_view


def _fill(config) -> None:
    """The planted-problem lake, the trend units' feature snapshots, and scores for all."""
    merge_into_lake(config.lake_dir, "inventory", inventory(), record_changes=False)
    merge_into_lake(config.lake_dir, "samples", raw_samples(), record_changes=False)
    merge_into_lake(config.lake_dir, "drains", drains(), record_changes=False)
    features = trend_features()
    for (day,), part in features.group_by(pl.col("ts").dt.date(), maintain_order=True):
        path = partition_path(config.features_dir, day, 0)
        path.parent.mkdir(parents=True, exist_ok=True)
        part.write_parquet(path)
    ts = features["ts"].max()
    units = [*UNITS, *features["unit_id"].unique().sort().to_list()]
    scores = pl.DataFrame(
        {
            "unit_id": [u for u in units for _ in range(2)],
            "ts": [ts] * (2 * len(units)),
            "node": [u.split("-gpu")[0] for u in units for _ in range(2)],
            "rack": ["r1"] * (2 * len(units)),
            "horizon": ["24h", "72h"] * len(units),
            "risk": [0.01, 0.02] * len(units),
            "model": ["gbm"] * (2 * len(units)),
        }
    ).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    latest_path(config.scores_dir).parent.mkdir(parents=True, exist_ok=True)
    scores.write_parquet(latest_path(config.scores_dir))


def test_publish_writes_findings_watch_list_gauges_and_trend(health_config):
    _fill(health_config)
    result = publish(health_config, allow_stale=True, generated_at=trend_features()["ts"].max() + timedelta(hours=1))
    directory = result.directory
    assert set(health_paths(directory)) <= set(read_manifest(directory)["files"])
    findings = read_findings(directory)
    assert set(findings.select("kind", "unit_id", "metric").iter_rows()) == EXPECTED
    assert findings["since"].dtype == pl.Datetime("us", "UTC")

    watch = read_watch(directory)
    assert watch["unit_id"].to_list()[0] == ACCEL and FLAT not in watch["unit_id"].to_list()
    assert watch.row(0, named=True)["risk"] == 0.02  # the unit's risk, though far below any drain threshold

    trend = dict(read_published_list(directory).select("unit_id", "degradation_trend").iter_rows())
    assert trend[ACCEL].startswith("accelerating: ecc_sbe_aggregate_total")

    text = result.textfile.read_text()
    assert 'foreshock_telemetry_findings{kind="sentinel"} 2.0' in text
    assert 'foreshock_telemetry_findings{kind="frozen_gauge"} 0.0' in text
    assert (
        f'foreshock_telemetry_finding_since{{kind="stuck_counter",metric="pcie_replay_total",node="gpu-node001",unit_id="{STUCK}"}}'
        in text
    )
    assert 'foreshock_watch_units{trend="accelerating"} 1.0' in text

    assert "2 sentinel" in summary_line(directory) and "1 accelerating, 1 rising" in summary_line(directory)
    section = health_section(health_view(directory))
    assert STUCK in section and section.count('<svg class="spark"') == watch.height


def test_health_off_publishes_none_of_it(health_config):
    _fill(health_config)
    config = health_config.with_overrides({"health": {"enabled": False}})
    result = publish(config, allow_stale=True)
    assert not any(p.exists() for p in health_paths(result.directory).values())
    assert read_published_list(result.directory)["degradation_trend"].null_count() == result.risk_list.height
    assert "foreshock_telemetry_findings" not in result.textfile.read_text()
    assert "run foreshock publish" in health_section(health_view(result.directory))


def test_the_page_shows_a_node_wide_gap_once():
    at = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [
        ("scrape_gap", "n1-gpu0", "n1", None, at, "no sample for 3.0 h", "check n1"),
        ("scrape_gap", "n1-gpu1", "n1", None, at, "no sample for 3.0 h", "check n1"),
        ("scrape_gap", "n2-gpu0", "n2", None, at, "no sample for 1.5 h", "check n2"),
        ("sentinel", "n1-gpu1", "n1", "gpu_temp_c", at, "pinned", "check n1"),
    ]
    shown = grouped_gaps(pl.DataFrame(rows, schema=FINDING_SCHEMA, orient="row"))
    assert shown.select("kind", "unit_id").rows() == [
        ("scrape_gap", "2 GPUs: n1-gpu0, n1-gpu1"),
        ("scrape_gap", "n2-gpu0"),
        ("sentinel", "n1-gpu1"),
    ]
