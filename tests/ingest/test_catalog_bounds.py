"""Bounds that survive a user's catalog: an entry for a known metric keeps the keys it does
not set, and no catalog widens what a unit allows (absolute zero, negative power, 101 %)."""

from __future__ import annotations

import json
import logging

import polars as pl
import pytest
from landing_files import SMI_FIELDS, START, node_name, smi_line, uuid_of, write_canonical_inventory

from foreshock.catalog import load_catalog
from foreshock.config import load_config
from foreshock.ingest import ingest_path
from foreshock.lake.read import read_table

# The catalog an operator writes: kind, family and unit, no bounds, and one bound wider than physics.
USER_CATALOG = """metrics:
  gpu_temp_c: {kind: gauge, family: thermal, unit: celsius}
  power_w: {kind: gauge, family: power, unit: watt, min: -100}
  gpu_util_pct: {kind: gauge, family: other, unit: percent, max: 150}
"""
BAD = {"gpu_temp_c": (-300.0, 1e12), "power_w": (-5.0,), "gpu_util_pct": (101.0,)}
GOOD = {"gpu_temp_c": 55.0, "power_w": 300.0, "gpu_util_pct": 99.0}
PROM = {
    "gpu_temp_c": "DCGM_FI_DEV_GPU_TEMP",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "gpu_util_pct": "DCGM_FI_DEV_GPU_UTIL",
}


def test_a_user_entry_keeps_the_built_in_bounds_and_aliases(tmp_path, caplog):
    path = tmp_path / "catalog.yaml"
    path.write_text(USER_CATALOG)
    with caplog.at_level(logging.INFO, logger="foreshock.catalog"):
        catalog = load_catalog(path)
    temp = catalog["gpu_temp_c"]
    assert (temp.min, temp.max) == (-20.0, 130.0) and "DCGM_FI_DEV_GPU_TEMP" in temp.aliases
    assert catalog["power_w"].min == 0.0  # -100 asked: a watt is never negative
    assert catalog["gpu_util_pct"].max == 100.0
    notes = caplog.text
    assert "'gpu_temp_c' keeps aliases, min, max of dcgm_catalog.yaml (built-in)" in notes
    assert "min -100 is below what watt can be: 0 applies" in notes


def test_physical_bounds_hold_for_a_metric_the_built_in_catalog_does_not_know(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text("metrics:\n  drive_temp_c: {kind: gauge, family: thermal, unit: celsius, min: -500}\n")
    assert load_catalog(path)["drive_temp_c"].min == -273.15


def _landing(root):
    """The bad and good readings in every text format that carries readings."""
    unit, ts = f"{node_name(0)}-gpu0", START
    root.mkdir(parents=True)
    write_canonical_inventory(root, [unit])
    rows = ["unit_id,ts,metric,value"]
    for k, (metric, values) in enumerate(BAD.items()):
        for j, value in enumerate((*values, GOOD[metric])):
            rows.append(f"{unit},2026-11-01T00:{k:02d}:{j:02d}Z,{metric},{value}")
    (root / "samples.csv").write_text("\n".join(rows) + "\n")
    labels = {"gpu": "0", "UUID": uuid_of(0, 0), "Hostname": node_name(0)}
    result, lines = [], []
    for metric, values in BAD.items():
        points = [[ts.timestamp() + 3600 + 60 * j, str(v)] for j, v in enumerate((*values, GOOD[metric]))]
        result.append({"metric": {"__name__": PROM[metric], **labels}, "values": points})
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines += [
            f"{PROM[metric]}{{{text}}} {v} {int((ts.timestamp() + 7200 + 60 * j) * 1000)}"
            for j, v in enumerate((*values, GOOD[metric]))
        ]
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    (root / "export.json").write_text(json.dumps(doc))
    (root / "scrape.prom").write_text("\n".join(lines) + "\n")
    smi = root / "nvidia-smi" / node_name(0) / "2026-11-01.csv"
    smi.parent.mkdir(parents=True)
    out = [SMI_FIELDS]
    for j, (temp, power, util) in enumerate([("-300", "-5.00 W", "101 %"), ("1000000000000", "300.00 W", "99 %")]):
        fields = smi_line(ts.replace(hour=3, minute=j), 0, 0, 1).split(", ")
        fields[4], fields[6], fields[7] = temp, power, util
        out.append(", ".join(fields))
    smi.write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("catalog_named", [True, False])
def test_out_of_bound_readings_are_quarantined_in_every_format(tmp_path, catalog_named):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(USER_CATALOG)
    config = load_config(data_dir=tmp_path / "data", catalog=catalog).with_overrides({"ingest": {"timezone": "UTC"}})
    if not catalog_named:  # a lake that recorded the user's catalog, read back without --catalog
        ingest_path(_empty_landing(tmp_path), config)
        config = load_config(data_dir=tmp_path / "data").with_overrides({"ingest": {"timezone": "UTC"}})
    _landing(tmp_path / "raw")
    report = ingest_path(tmp_path / "raw", config)
    assert report.adds_up
    quarantine = pl.concat([pl.read_parquet(q) for q in report.quarantine_files])
    samples = read_table(config.lake_dir, "samples").filter(pl.col("metric").is_in(list(BAD)) & (pl.col("ts") >= START))
    bad = [v for values in BAD.values() for v in values]
    assert samples.filter(pl.col("value").is_in(bad)).height == 0  # none stored, in any format
    formats = {"samples.csv", "export.json", "scrape.prom", "2026-11-01.csv"}
    for name in formats:
        rows = quarantine.filter(pl.col("source_file").str.ends_with(name))
        assert rows.height >= 3, (name, rows.to_dicts())
        assert rows.filter(pl.col("reason").str.contains("bound|range|outside|absurd|min|max")).height >= 3
    kept = samples.group_by("metric").len()
    # a good reading per format (nvidia-smi's two temperatures are both absurd)
    assert dict(kept.iter_rows()) == {"gpu_temp_c": 3, "power_w": 4, "gpu_util_pct": 4}


def _empty_landing(tmp_path):
    root = tmp_path / "first"
    root.mkdir()
    (root / "samples.csv").write_text(
        f"unit_id,ts,metric,value\n{node_name(0)}-gpu0,2026-10-31T00:00:00Z,gpu_temp_c,40\n"
    )
    return root
