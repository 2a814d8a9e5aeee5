"""Inventory is an upsert: a changed export replaces its units' rows, telemetry never changes."""

from __future__ import annotations

import json

import polars as pl
from landing_files import uuid_of

from foreshock.ingest import ingest_path
from foreshock.lake.read import read_table

NEW_UUID = "GPU-beefbeef-5f1c-4e2b-9a1d-0123456789ab"


def _replace_gpu(path, old_uuid: str) -> None:
    """The export after a GPU swap: same slot, new uuid, lot and install time."""
    lines = path.read_text().splitlines()
    swapped = [
        line.replace(old_uuid, NEW_UUID).replace(
            "LOT-2025-07A,2026-01-15T00:00:00Z", "LOT-2026-11B,2026-11-02T09:00:00Z"
        )
        if old_uuid in line
        else line
        for line in lines
    ]
    path.write_text("\n".join(swapped) + "\n")


def test_a_replaced_gpu_updates_exactly_its_row_and_is_counted(landing, config):
    ingest_path(landing.root, config)
    before = read_table(config.lake_dir, "inventory").sort("unit_id")
    _replace_gpu(landing.root / "inventory.csv", uuid_of(0, 1))

    report = ingest_path(landing.root, config)

    (read,) = report.by_status("ingested")
    assert read.path == str(landing.root / "inventory.csv")
    assert (read.rows_read, read.rows_stored, read.rows_updated, read.rows_quarantined, read.duplicates_dropped) == (
        landing.units,
        0,
        1,
        0,
        landing.units - 1,
    )
    assert report.adds_up
    record = json.loads((config.data_dir / "ingest_runs" / f"{report.run_id}.json").read_text())
    assert record["totals"]["rows_updated"] == 1 and record["adds_up"]
    assert "+ updated 1 +" in report.render()

    after = read_table(config.lake_dir, "inventory").sort("unit_id")
    assert after.height == before.height and after.columns == before.columns
    swapped = after.filter(pl.col("unit_id") == "gpu-node001-gpu1").row(0, named=True)
    assert (swapped["uuid"], swapped["lot"], swapped["installed_at"].isoformat()) == (
        NEW_UUID,
        "LOT-2026-11B",
        "2026-11-02T09:00:00+00:00",
    )
    assert swapped["pci_bus_id"] == "00000000:5E:00.0" and swapped["gpu_index"] == "1"
    others = pl.col("unit_id") != "gpu-node001-gpu1"
    assert after.filter(others).equals(before.filter(others))


def test_the_same_inventory_twice_changes_nothing(landing, config):
    inventory = landing.root / "inventory.csv"
    ingest_path(inventory, config)
    part = config.lake_dir / "inventory" / "part.parquet"
    stored, mtime = pl.read_parquet(part), part.stat().st_mtime_ns

    again = ingest_path(inventory, config, force=True)

    assert again.totals["rows_read"] == again.totals["duplicates_dropped"] == landing.units
    assert again.totals["rows_updated"] == again.totals["rows_stored"] == 0
    assert part.stat().st_mtime_ns == mtime and pl.read_parquet(part).equals(stored)


def test_a_later_export_adds_columns_and_keeps_the_ones_it_lacks(tmp_path, config):
    first = tmp_path / "a" / "inventory.csv"
    first.parent.mkdir()
    first.write_text(
        "unit_id,node,rack,model,lot,installed_at,uuid,pci_bus_id\n"
        "n1-gpu0,n1,r1,H100,L1,2026-01-01T00:00:00Z,GPU-1,00000000:3B:00.0\n"
        "n1-gpu1,n1,r1,H100,L1,2026-01-01T00:00:00Z,GPU-2,00000000:5E:00.0\n"
    )
    later = tmp_path / "b" / "inventory.csv"
    later.parent.mkdir()
    later.write_text(
        "unit_id,node,rack,model,lot,installed_at,uuid,cage\nn1-gpu0,n1,r1,H100,L1,2026-01-01T00:00:00Z,GPU-1,cage-7\n"
    )
    ingest_path(first, config)
    report = ingest_path(later, config)

    assert (report.totals["rows_updated"], report.totals["duplicates_dropped"]) == (1, 0)  # cage is new information
    table = read_table(config.lake_dir, "inventory").sort("unit_id")
    assert table["pci_bus_id"].to_list() == ["00000000:3B:00.0", "00000000:5E:00.0"]
    assert table["cage"].to_list() == ["cage-7", None]
    assert table["uuid"].to_list() == ["GPU-1", "GPU-2"]


def test_telemetry_with_a_changed_value_is_still_quarantined(tmp_path, config):
    first, second = tmp_path / "one" / "samples.csv", tmp_path / "two" / "samples.csv"
    for path, value in ((first, 41), (second, 99)):
        path.parent.mkdir()
        path.write_text(f"unit_id,ts,metric,value\nn1-gpu0,2026-11-01T00:00:00Z,gpu_temp_c,{value}\n")
    ingest_path(first, config)

    report = ingest_path(second, config)

    assert (report.totals["rows_quarantined"], report.totals["rows_updated"], report.totals["rows_stored"]) == (1, 0, 0)
    quarantine = pl.read_parquet(report.quarantine_files[0])
    assert "already stored in the lake with a different value" in quarantine["reason"][0]
    assert read_table(config.lake_dir, "samples")["value"].to_list() == [41.0]
