"""scripts/backblaze_to_canonical.py on a tiny start-stop slice written here: the rows of
every drive-day, the failure day, the healthy drives' sampling and weights, and the
canonical ingest of the output accounting every row."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl
import pytest

from foreshock.config import load_config
from foreshock.ingest.run import ingest_path
from foreshock.lake.read import read_table

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("backblaze_to_canonical", ROOT / "scripts/backblaze_to_canonical.py")
converter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(converter)

SMART = [
    "smart_5",
    "smart_10",
    "smart_12",
    "smart_187",
    "smart_188",
    "smart_189",
    "smart_196",
    "smart_197",
    "smart_198",
]


def interval(serial, maker, model, start, stop, *, failed=False, **smart):
    values = {c: 0.0 for c in SMART} | {c: v for c, v in smart.items()}
    return {
        "serial_number": serial,
        "model": model,
        "manufacturer": maker,
        "installed_at": date(2014, 6, 1),
        "start_date": start,
        "stop_date": stop,
        "failed": failed,
        **values,
    }


def write_slice(path: Path) -> Path:
    """FAIL1 fails on 2015-01-05 (its last interval stops on the 6th) after its pending
    sectors fell from 4 to 1; OK1 (a Seagate without attribute 196) runs 2015-01-01..06
    in one interval; OK2 and OK3 are healthy drives that subsampling may drop."""
    rows = [
        interval("FAIL1", "HGST", "HGST H1", date(2015, 1, 1), date(2015, 1, 4), smart_5=2.0, smart_197=4.0),
        interval(
            "FAIL1", "HGST", "HGST H1", date(2015, 1, 4), date(2015, 1, 6), failed=True, smart_5=9.0, smart_197=1.0
        ),
        interval("OK1", "ST", "ST4000", date(2015, 1, 1), date(2015, 1, 7), smart_196=None, smart_12=5.0),
        interval("OK2", "WDC", "WDC W1", date(2015, 1, 2), date(2015, 1, 4)),
        interval("OK3", "WDC", "WDC W1", date(2015, 1, 1), date(2015, 1, 7), smart_198=3.0),
    ]
    frame = pl.DataFrame(rows).with_columns(pl.col(SMART).cast(pl.Float64))
    frame.write_parquet(path)
    return path


def day(d: int) -> datetime:
    return datetime(2015, 1, d, tzinfo=UTC)


def ingest(out: Path, lake: Path):
    config = load_config(out / "foreshock.toml", data_dir=lake)
    report = ingest_path(out / "tables", config, source="canonical")
    return config, report


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_every_drive_day_becomes_readings_and_the_lake_accounts_every_row(tmp_path, fmt):
    source = write_slice(tmp_path / "hds.parquet")
    out = tmp_path / "out"
    assert converter.main([str(source), str(out), "--format", fmt, "--chunk-days", "2"]) == 0

    sampling = json.loads((out / "sampling.json").read_text())
    # FAIL1 5 days x 9 attributes, OK1 6 x 8 (no 196), OK2 2 x 9, OK3 6 x 9
    assert sampling["sample_rows"] == 45 + 48 + 18 + 54
    assert sampling["drive_days"] == 5 + 6 + 2 + 6
    assert (sampling["failing_drives"], sampling["healthy_drives"], sampling["healthy_kept"]) == (1, 3, 3)
    assert sorted(p.name for p in (out / "tables/samples").iterdir()) == [
        f"samples-2015-01-0{d}.{fmt}" for d in (1, 3, 5)
    ]

    config, report = ingest(out, tmp_path / "lake")
    assert report.adds_up and report.totals["rows_quarantined"] == 0
    assert report.totals["rows_stored"] == 165 + 4 + 1  # samples, inventory, failures
    samples = read_table(config.lake_dir, "samples")
    assert samples.height == 165
    pending = samples.filter((pl.col("unit_id") == "FAIL1") & (pl.col("metric") == "pending_sectors")).sort("ts")
    assert pending.get_column("ts").to_list() == [day(d) for d in range(1, 6)]
    assert pending.get_column("value").to_list() == [4.0, 4.0, 4.0, 1.0, 1.0]  # a gauge that fell
    assert config.catalog["pending_sectors"].kind == "gauge"
    assert config.catalog["reallocated_sectors"].kind == "counter"
    ok1 = samples.filter(pl.col("unit_id") == "OK1")
    assert "reallocation_events" not in ok1.get_column("metric").to_list()
    assert ok1.get_column("ts").unique().sort().to_list() == [day(d) for d in range(1, 7)]

    failures = read_table(config.lake_dir, "failures")
    assert failures.select("unit_id", "failed_at").rows() == [("FAIL1", day(5))]  # the day before stop_date
    inventory = read_table(config.lake_dir, "inventory").sort("unit_id")
    assert inventory.get_column("maker").to_list() == ["HGST", "Seagate", "WDC", "WDC"]
    assert [float(w) for w in inventory.get_column("fleet_weight")] == [1.0, 1.0, 1.0, 1.0]
    # OK2 left the fleet on the 4th without failing; the others ran to the window's end or failed
    retired = [value or None for value in inventory.get_column("retired_at")]  # CSV: empty text
    assert retired == [None, None, "2015-01-04T00:00:00Z", None]
    assert inventory.get_column("node").to_list() == inventory.get_column("unit_id").to_list()


def test_healthy_drives_are_subsampled_and_weighted(tmp_path):
    source = write_slice(tmp_path / "hds.parquet")
    # a seed that keeps some but not all of the three healthy drives at one half
    for seed in range(50):
        kept = converter.convert(source, tmp_path / f"s{seed}", healthy_fraction=0.5, seed=seed)["healthy_kept"]
        if 0 < kept < 3:
            break
    else:
        pytest.fail("no seed kept some but not all healthy drives")
    out = tmp_path / f"s{seed}"
    inventory = pl.read_parquet(out / "tables/inventory.parquet")
    weights = dict(zip(inventory.get_column("unit_id"), inventory.get_column("fleet_weight")))
    assert weights.pop("FAIL1") == 1.0  # every failing drive kept, standing for itself
    assert len(weights) == kept and set(weights.values()) == {2.0}
    samples = pl.concat([pl.read_parquet(p) for p in (out / "tables/samples").iterdir()])
    assert set(samples.get_column("unit_id")) == {"FAIL1", *weights}
    sampling = json.loads((out / "sampling.json").read_text())
    assert (sampling["healthy_fraction"], sampling["seed"], sampling["healthy_weight"]) == (0.5, seed, 2.0)
    assert sampling["healthy_drives"] == 3 and sampling["healthy_kept"] == kept
    # the same seed draws the same drives, whatever the window
    again = converter.convert(source, tmp_path / "again", healthy_fraction=0.5, seed=seed, end=date(2015, 1, 5))
    assert set(pl.read_parquet(tmp_path / "again/tables/inventory.parquet").get_column("unit_id")) == {
        "FAIL1",
        *weights,
    }
    assert again["healthy_kept"] == kept


def test_a_failure_after_the_window_is_not_one(tmp_path):
    source = write_slice(tmp_path / "hds.parquet")
    out = tmp_path / "out"
    sampling = converter.convert(source, out, start=date(2015, 1, 2), end=date(2015, 1, 4))
    assert sampling["failing_drives"] == 0 and sampling["healthy_drives"] == 4
    assert pl.read_parquet(out / "tables/failures.parquet").height == 0
    samples = pl.read_parquet(list((out / "tables/samples").iterdir()))
    assert samples.get_column("ts").min() == day(2) and samples.get_column("ts").max() == day(4)
    assert sampling["drive_days"] == 3 + 3 + 2 + 3
    with pytest.raises(ValueError, match="healthy-fraction"):
        converter.convert(source, tmp_path / "bad", healthy_fraction=0.0)
