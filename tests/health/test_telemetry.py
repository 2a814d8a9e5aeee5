"""Telemetry health on a 12-GPU fleet with one planted problem per unit: each is found,
on the right unit and metric, and nothing is found on the healthy peers."""

from __future__ import annotations

import dataclasses

import polars as pl
from health_fleet import END, EXPECTED, GAP, STUCK, UNRESET, drains, inventory, raw_samples

from foreshock.health.telemetry import scrape_gaps, telemetry_findings


def _found(findings: pl.DataFrame) -> set[tuple]:
    return set(findings.select("kind", "unit_id", "metric").iter_rows())


def test_each_planted_problem_is_found_and_nothing_else(health_config, settings):
    findings = telemetry_findings(raw_samples(), inventory(), health_config.catalog, END, settings, drains=drains())
    assert _found(findings) == EXPECTED
    assert findings.get_column("check").null_count() == 0
    assert findings.filter(pl.col("unit_id") == STUCK)["node"].item() == "gpu-node001"
    gap = findings.filter(pl.col("kind") == "scrape_gap").row(0, named=True)
    assert gap["since"].hour == 19 and "3.2 h" in gap["detail"]  # the last sample before the gap, 19:50
    assert "gpu-node002" in gap["check"]


def test_the_drain_explains_its_own_silence_but_a_gap_without_one_is_reported(settings):
    samples = raw_samples()
    assert set(scrape_gaps(samples, END, settings, drains=drains())["unit_id"]) == {GAP}
    assert set(scrape_gaps(samples, END, settings)["unit_id"]) == {GAP, UNRESET}


def test_a_counter_still_while_only_some_peers_move_is_not_stuck(health_config, settings):
    """A counter that moves only under load stays still on idle nodes: below
    ``peer_share`` of moving peers nothing is reported."""
    samples = raw_samples()
    idle = ["gpu-node003-gpu0", "gpu-node003-gpu1"]
    still = samples.with_columns(
        pl.when(pl.col("unit_id").is_in(idle) & (pl.col("metric") == "pcie_replay_total"))
        .then(pl.lit(0.0))
        .otherwise(pl.col("value"))
        .alias("value")
    )
    found = _found(telemetry_findings(still, inventory(), health_config.catalog, END, settings, drains=drains()))
    assert not {f for f in found if f[0] == "stuck_counter"}
    loose = dataclasses.replace(settings, peer_share=0.6)
    found = _found(telemetry_findings(still, inventory(), health_config.catalog, END, loose, drains=drains()))
    assert {f[1] for f in found if f[0] == "stuck_counter"} == {STUCK, *idle}
