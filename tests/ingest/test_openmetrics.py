"""OpenMetrics details (exemplars, ``# EOF``, timestamp units, ``_total``/``_created``) and
the counter plausibility check, through the public ``ingest_path``."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl

from foreshock.ingest import ingest_path
from foreshock.lake.read import read_table

T = 1793491800  # 2026-11-01 00:10:00 UTC
WHEN = datetime(2026, 11, 1, 0, 10, tzinfo=UTC)
LABELS = 'gpu="0",UUID="GPU-x",Hostname="gpu-node001"'


def ingest_text(tmp_path, config, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return ingest_path(path, config, source="prometheus-text")


def samples(config) -> dict[str, float]:
    frame = read_table(config.lake_dir, "samples")
    return dict(zip(frame["metric"], frame["value"]))


def quarantine(report) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(q) for q in report.quarantine_files])


def test_an_exemplar_is_not_the_sample_value(tmp_path, config):
    report = ingest_text(
        tmp_path,
        config,
        "scrape.om",
        f'DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 33 {T} # {{trace_id="x"}} 99.5\n'
        f'DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 250 # {{trace_id="y"}} 7 {T}.5\n'
        "# EOF\n",
        # the second sample has no timestamp of its own: the exemplar's is not the sample's
    )
    assert samples(config) == {"gpu_temp_c": 33.0}
    assert report.totals["rows_quarantined"] == 1
    assert "no timestamp" in quarantine(report)["reason"][0]


def test_label_values_may_hold_braces_and_quotes(tmp_path, config):
    ingest_text(
        tmp_path,
        config,
        "scrape.om",
        f'DCGM_FI_DEV_GPU_TEMP{{note="a}} b \\"c\\"",{LABELS}}} 41 {T}\n# EOF\n',
    )
    assert samples(config) == {"gpu_temp_c": 41.0}


def test_openmetrics_with_millisecond_timestamps_is_read_as_milliseconds(tmp_path, config):
    report = ingest_text(tmp_path, config, "backfill.om", f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 47 {T}000\n# EOF\n")
    frame = read_table(config.lake_dir, "samples")
    assert frame["ts"].to_list() == [WHEN]
    assert "1 timestamps in milliseconds (the OpenMetrics says seconds)" in report.files[0].reason


def test_prometheus_text_timestamps_are_milliseconds_and_seconds_are_recognised(tmp_path, config):
    ingest_text(tmp_path, config, "a.prom", f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 47 {T}250\n")
    report = ingest_text(tmp_path, config, "b.prom", f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 300 {T}\n")
    frame = read_table(config.lake_dir, "samples").sort("metric")
    assert frame["ts"].to_list() == [WHEN.replace(microsecond=250000), WHEN]
    assert "in seconds (the Prometheus text format says milliseconds)" in report.files[0].reason


def test_a_sample_after_eof_is_quarantined(tmp_path, config):
    report = ingest_text(
        tmp_path,
        config,
        "x.om",
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 47 {T}\n# EOF\nDCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 300 {T}\n",
    )
    assert samples(config) == {"gpu_temp_c": 47.0}
    row = quarantine(report).row(0, named=True)
    assert row["line"] == 3 and "after '# EOF'" in row["reason"]


def test_total_suffix_resolves_and_created_is_skipped(tmp_path, config):
    report = ingest_text(
        tmp_path,
        config,
        "c.om",
        "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter\n"
        f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total{{{LABELS}}} 12 {T}\n"
        f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER_created{{{LABELS}}} 1793400000 {T}\n"
        "# EOF\n",
    )
    assert samples(config) == {"pcie_replay_total": 12.0}
    assert report.totals == {
        "rows_read": 1,
        "rows_stored": 1,
        "rows_updated": 0,
        "rows_quarantined": 0,
        "duplicates_dropped": 0,
    }
    assert "1 '_created' samples skipped" in report.files[0].reason


def test_counter_step_faster_than_max_rate_is_quarantined(tmp_path, config):
    path = tmp_path / "samples.csv"
    path.write_text(
        "unit_id,ts,metric,value\n"
        "u1,2026-11-01T00:00:00Z,ecc_sbe_volatile_total,10\n"
        "u1,2026-11-01T00:20:00Z,ecc_sbe_volatile_total,500000000000\n"  # 10 -> 5e11 in 20 min
        "u1,2026-11-01T00:40:00Z,ecc_sbe_volatile_total,3\n"  # a reset, stored
        "u1,2026-11-01T01:00:00Z,ecc_sbe_volatile_total,900\n"  # fast but plausible
    )
    report = ingest_path(path, config)
    stored = read_table(config.lake_dir, "samples").sort("ts")["value"].to_list()
    assert stored == [10.0, 3.0, 900.0]
    (reason,) = quarantine(report)["reason"].to_list()
    assert "implausible counter step for ecc_sbe_volatile_total: 10.0 -> 500000000000.0 in 1200.0 s" in reason


def test_counter_step_is_checked_against_the_stored_reading(tmp_path, config):
    first = tmp_path / "day1" / "samples.csv"
    first.parent.mkdir()
    first.write_text("unit_id,ts,metric,value\nu1,2026-11-01T23:50:00Z,pcie_replay_total,10\n")
    ingest_path(first, config)
    second = tmp_path / "day2" / "samples.csv"
    second.parent.mkdir()
    second.write_text("unit_id,ts,metric,value\nu1,2026-11-02T00:10:00Z,pcie_replay_total,900000000000\n")
    report = ingest_path(second, config)
    assert report.totals["rows_quarantined"] == 1
    assert "10.0 -> " in quarantine(report)["reason"][0]


def test_counter_step_follows_the_latest_stored_reading_before_and_the_stored_readings_among_the_new(tmp_path, config):
    def ingest(name, rows):
        path = tmp_path / name / "samples.csv"
        path.parent.mkdir()
        path.write_text("unit_id,ts,metric,value\n" + "".join(f"u1,{t},pcie_replay_total,{v}\n" for t, v in rows))
        return ingest_path(path, config)

    # Stored: a high reading, then a reset to 10 (a counter going down is not an error).
    stored = ingest("a", [("2026-11-01T00:00:00Z", 5e10), ("2026-11-01T12:00:00Z", 10), ("2026-11-01T14:00:00Z", 20)])
    assert stored.totals["rows_stored"] == 3
    # New readings between stored ones: 13:00 follows the stored 12:00 (10 -> 1e9 in an
    # hour is 2.8e5/s, under max_rate 1e6/s), 15:00 the stored 14:00.
    interleaved = ingest("b", [("2026-11-01T13:00:00Z", 1e9), ("2026-11-01T15:00:00Z", 3e9)])
    assert interleaved.totals["rows_quarantined"] == 0
    # 14:30 follows the stored 14:00 (20 -> 2e9 in 1800 s: a storm), not this batch's
    # 13:30 (1.1e9 -> 2e9 in an hour would pass).
    storm = ingest("c", [("2026-11-01T13:30:00Z", 1.1e9), ("2026-11-01T14:30:00Z", 2e9)])
    assert storm.totals["rows_quarantined"] == 1
    assert "20.0 -> 2000000000.0 in 1800.0 s" in quarantine(storm)["reason"][0]
    # After everything stored: the previous reading is the latest stored one (3e9 at 15:00,
    # a step of 1e8 in 600 s), not an earlier one such as the 10 at 12:00.
    after = ingest("d", [("2026-11-01T15:10:00Z", 3.1e9)])
    assert after.totals["rows_quarantined"] == 0
    reset_then_storm = ingest("e", [("2026-11-01T15:20:00Z", 5), ("2026-11-01T15:30:00Z", 1e9)])
    assert reset_then_storm.totals["rows_quarantined"] == 1
    assert "5.0 -> 1000000000.0 in 600.0 s" in quarantine(reset_then_storm)["reason"][0]
