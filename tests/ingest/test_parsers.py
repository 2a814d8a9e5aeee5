"""Each source parser on realistic sample files, through the public ``ingest_path``."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

import polars as pl
import pytest
from landing_files import SMI_FIELDS, START, smi_line, uuid_of, write_landing

from foreshock.ingest import detect_format, ingest_path
from foreshock.lake.read import read_table


def samples_of(config) -> pl.DataFrame:
    return read_table(config.lake_dir, "samples").sort("unit_id", "ts", "metric")


class TestNvidiaSmi:
    def test_units_flags_and_not_supported_fields(self, tmp_path, config):
        path = tmp_path / "nvidia-smi" / "gpu-node007" / "2026-11-01.csv"
        path.parent.mkdir(parents=True)
        path.write_text(SMI_FIELDS + "\n" + smi_line(START, 3, 0, 97) + "\n")
        report = ingest_path(path, config)
        assert detect_format(path) == "nvidia-smi"
        samples = samples_of(config)
        values = dict(zip(samples["metric"], samples["value"]))
        assert set(samples["unit_id"]) == {"gpu-node007-gpu3"}
        assert samples["ts"][0] == datetime(2026, 11, 1, tzinfo=UTC)
        assert values["power_w"] == pytest.approx(297.0)  # "297.00 W"
        assert values["gpu_util_pct"] == 97  # "97 %"
        assert values["sm_clock_mhz"] == 1410  # "1410 MHz"
        assert values["remapped_rows_pending"] == 1.0  # "Yes" (k % 97 == 0)
        assert values["hw_thermal_slowdown"] == 0.0  # "Not Active"
        assert "retired_pages_sbe" not in values  # [N/A] on H100: no sample
        assert report.totals["rows_read"] == 13 == report.totals["rows_stored"]

    def test_noheader_output_is_rejected_with_the_fix(self, tmp_path, config):
        path = tmp_path / "gpu-node001" / "smi.csv"
        path.parent.mkdir()
        path.write_text(smi_line(START, 0, 0, 1) + "\n")
        report = ingest_path(path, config)
        assert report.files[0].status == "rejected"
        assert "--format=csv" in report.files[0].reason and "noheader" in report.files[0].reason

    def test_naive_timestamps_need_a_timezone(self, tmp_path):
        from foreshock.config import load_config

        config = load_config(data_dir=tmp_path / "data")
        path = tmp_path / "gpu-node001" / "2026-11-01.csv"
        path.parent.mkdir()
        path.write_text(SMI_FIELDS + "\n" + smi_line(START, 0, 0, 1) + "\n")
        report = ingest_path(path, config)
        assert report.files[0].status == "rejected" and "--timezone" in report.files[0].reason
        # The rejected file is not in the manifest: with a timezone it is read.
        report = ingest_path(path, config, timezone="Europe/Berlin")
        assert report.totals["rows_stored"] == 13
        assert samples_of(config)["ts"][0] == datetime(2026, 10, 31, 23, tzinfo=UTC)


class TestPrometheusJson:
    def test_matrix_to_samples_and_xid_gauge_to_events(self, tmp_path, config):
        landing = write_landing(tmp_path / "raw", nodes=1, gpus=2, days=2)
        ingest_path(landing.root / "inventory.csv", config)
        report = ingest_path(landing.root / "dcgm", config)
        samples = samples_of(config)
        assert set(samples["metric"]) == {
            "pcie_replay_total",
            "thermal_violation_us",
            "power_violation_us",
            "nvlink_crc_flit_errors_total",
        }
        assert samples.height == landing.dcgm_samples
        replay = samples.filter((pl.col("unit_id") == "gpu-node001-gpu1") & (pl.col("metric") == "pcie_replay_total"))
        assert replay["value"].to_list()[:3] == [1.0, 11.0, 21.0]
        events = read_table(config.lake_dir, "events")
        # The gauge turns 79 at the third sample and holds it through day 2: one event.
        assert events.select("unit_id", "source", "code").rows() == [("gpu-node001-gpu0", "dcgm-xid", 79)]
        assert events["ts"][0] == START + 2 * landing.step
        assert report.adds_up

    def test_vector_response_and_failed_query(self, tmp_path, config):
        vector = {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {
                        "metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "2", "Hostname": "gpu-node004"},
                        "value": [1793491800.5, "61"],
                    }
                ],
            },
        }
        (tmp_path / "now.json").write_text(json.dumps(vector))
        (tmp_path / "bad.json").write_text(
            json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 7"})
        )
        report = ingest_path(tmp_path, config, source="prometheus-json")
        samples = samples_of(config)
        assert samples.rows() == [
            ("gpu-node004-gpu2", datetime(2026, 11, 1, 0, 10, 0, 500000, tzinfo=UTC), "gpu_temp_c", 61.0)
        ]
        bad = next(f for f in report.files if f.path.endswith("bad.json"))
        assert bad.status == "rejected" and "parse error at char 7" in bad.reason


class TestPrometheusText:
    SCRAPE = (
        "# HELP DCGM_FI_DEV_THERMAL_VIOLATION Throttling duration due to thermal constraints (in ns).\n"
        "# TYPE DCGM_FI_DEV_THERMAL_VIOLATION counter\n"
        'DCGM_FI_DEV_THERMAL_VIOLATION{gpu="0",UUID="GPU-x",Hostname="gpu-node001"} 5000000{ts}\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-x",Hostname="gpu-node001"} 47{ts}\n'
    )

    def test_millisecond_timestamps_and_ns_violation_counter(self, tmp_path, config):
        path = tmp_path / "gpu-node001.prom"
        path.write_text(self.SCRAPE.replace("{ts}", " 1793491800123"))
        ingest_path(path, config)
        samples = samples_of(config)
        assert dict(zip(samples["metric"], samples["value"])) == {"gpu_temp_c": 47.0, "thermal_violation_us": 5000.0}
        assert samples["ts"][0] == datetime(2026, 11, 1, 0, 10, 0, 123000, tzinfo=UTC)

    def test_openmetrics_timestamps_are_seconds(self, tmp_path, config):
        path = tmp_path / "backfill.om"
        path.write_text(self.SCRAPE.replace("{ts}", " 1793491800.5") + "# EOF\n")
        ingest_path(path, config, source="prometheus-text")
        assert set(samples_of(config)["ts"]) == {datetime(2026, 11, 1, 0, 10, 0, 500000, tzinfo=UTC)}

    def test_scrape_without_timestamps_needs_scrape_time(self, tmp_path, config):
        path = tmp_path / "metrics.txt"
        path.write_text(self.SCRAPE.replace("{ts}", ""))
        report = ingest_path(path, config)
        assert report.files[0].status == "rejected" and "--scrape-time" in report.files[0].reason
        report = ingest_path(path, config, scrape_time="2026-11-01T06:00:00Z")
        assert report.totals["rows_stored"] == 2
        assert set(samples_of(config)["ts"]) == {datetime(2026, 11, 1, 6, tzinfo=UTC)}


class TestXidLog:
    def test_syslog_and_journalctl_lines_resolve_through_the_inventory(self, tmp_path, config):
        landing = write_landing(tmp_path / "raw", nodes=2, gpus=2, days=1)
        ingest_path(landing.root / "inventory.csv", config)
        log = tmp_path / "kern.log"
        log.write_text(
            "2026-11-01T12:00:03.123456+00:00 gpu-node002 kernel: [123456.789012] NVRM: Xid (PCI:0000:5e:00): 48, pid=1, name=python3, An uncorrectable double bit error\n"
            "2026-11-01T12:05:00+0000 gpu-node001 kernel: NVRM: Xid (PCI:00000000:3B:00.0): 63, pid='<unknown>', name=<unknown>, Row Remapper\n"
            "2026-11-01T12:06:00+0000 gpu-node001 kernel: usb 1-1: new high-speed USB device number 2\n"
        )
        report = ingest_path(log, config)
        events = read_table(config.lake_dir, "events").sort("ts")
        assert events.select("unit_id", "source", "code", "count").rows() == [
            ("gpu-node002-gpu1", "xid", 48, 1),
            ("gpu-node001-gpu0", "xid", 63, 1),
        ]
        assert events["ts"][1] == datetime(2026, 11, 1, 12, 5, tzinfo=UTC)
        assert report.totals["rows_read"] == 2  # noise lines are not rows


class TestRasdaemon:
    def _inventory(self, tmp_path, config):
        landing = write_landing(tmp_path / "raw", nodes=2, gpus=1, days=1)
        ingest_path(landing.root / "inventory.csv", config)

    def test_sqlite_mc_event_table(self, tmp_path, config):
        self._inventory(tmp_path, config)
        db = tmp_path / "ras" / "gpu-node002" / "ras-mc_event.db"
        db.parent.mkdir(parents=True)
        with sqlite3.connect(db) as con:
            con.execute(
                "CREATE TABLE mc_event (id INTEGER PRIMARY KEY, timestamp TEXT, err_count INTEGER, err_type TEXT, err_msg TEXT, "
                "label TEXT, mc INTEGER, top_layer INTEGER, middle_layer INTEGER, lower_layer INTEGER, address INTEGER, "
                "grain INTEGER, syndrome INTEGER, driver_detail TEXT)"
            )
            con.execute(
                "INSERT INTO mc_event (timestamp, err_count, err_type, err_msg, label, mc, top_layer, middle_layer, lower_layer) "
                "VALUES ('2026-11-01 10:00:00 +0100', 3, 'Corrected', 'read error', 'CPU_SrcID#0_Ha#0_Chan#1_DIMM#0', 0, 0, 1, 0)"
            )
            con.execute(
                "INSERT INTO mc_event (timestamp, err_count, err_type, label, mc, top_layer, middle_layer, lower_layer) "
                "VALUES ('2026-11-01 11:00:00 +0000', 1, 'Uncorrected', '', 1, 0, 2, 1)"
            )
        assert detect_format(db) == "rasdaemon"
        ingest_path(db, config)
        events = read_table(config.lake_dir, "events").sort("ts")
        assert events.rows() == [
            ("gpu-node002-dimmCPU_SrcID_0_Ha_0_Chan_1_DIMM_0", datetime(2026, 11, 1, 9, tzinfo=UTC), "edac", 0, 3),
            ("gpu-node002-dimmmc1.0.2.1", datetime(2026, 11, 1, 11, tzinfo=UTC), "edac", 1, 1),
        ]

    def test_csv_form_checks_the_host(self, tmp_path, config):
        self._inventory(tmp_path, config)
        path = tmp_path / "ras-mc_event.csv"
        path.write_text(
            "host,id,timestamp,err_count,err_type,err_msg,label,mc,top_layer,middle_layer,lower_layer\n"
            "gpu-node001,1,2026-11-01 10:00:00 +0000,2,Corrected,,DIMM_A1,0,0,0,0\n"
            "gpu-node999,2,2026-11-01 10:00:00 +0000,2,Corrected,,DIMM_A1,0,0,0,0\n"
        )
        report = ingest_path(path, config)
        assert read_table(config.lake_dir, "events")["unit_id"].to_list() == ["gpu-node001-dimmDIMM_A1"]
        quarantine = pl.read_parquet(report.quarantine_files[0])
        assert quarantine.rows()[0][1:5] == (
            3,
            "events",
            "unit_id",
            "unknown unit 'gpu-node999-dimmDIMM_A1' (not in the inventory)",
        )


class TestTicketsAndCanonical:
    def test_tickets_become_failures(self, tmp_path, config):
        landing = write_landing(tmp_path / "raw", nodes=1, gpus=2, days=1)
        ingest_path(landing.root / "inventory.csv", config)
        path = tmp_path / "tickets.csv"
        path.write_text(
            "ticket_id,opened_at,node,gpu_index,gpu_uuid,category,summary\n"
            'RMA-1,2026-11-02T06:00:00Z,gpu-node001,1,,HBM/ECC,"DBE, XID 48; GPU replaced"\n'
            f"RMA-2,2026-11-03T07:30:00+02:00,,,{uuid_of(0, 0)},thermal,hot\n"
        )
        ingest_path(path, config)
        failures = read_table(config.lake_dir, "failures").sort("failed_at").select("unit_id", "failed_at", "mode")
        assert failures.rows() == [
            ("gpu-node001-gpu1", datetime(2026, 11, 2, 6, tzinfo=UTC), "HBM/ECC"),
            ("gpu-node001-gpu0", datetime(2026, 11, 3, 5, 30, tzinfo=UTC), "thermal"),
        ]

    def test_canonical_directory_with_its_own_catalog(self, tmp_path, config):
        root = tmp_path / "byot"
        root.mkdir()
        (root / "inventory.csv").write_text(
            "unit_id,node,rack,model,lot,installed_at,pdu\nn1-dimm0,n1,r1,DDR5-64G,,2026-01-01T00:00:00Z,pdu-a\n"
        )
        pl.DataFrame(
            {
                "unit_id": ["n1-dimm0"] * 3,
                "ts": [datetime(2026, 11, 1, h, tzinfo=UTC) for h in range(3)],
                "metric": ["dimm_ce_total"] * 3,
                "value": [0.0, 2.0, 5.0],
            }
        ).write_parquet(root / "samples.parquet")
        (root / "failures.csv").write_text("unit_id,failed_at,mode\nn1-dimm0,2026-11-02T00:00:00Z,memory\n")
        (root / "catalog.yaml").write_text(
            "metrics:\n  dimm_ce_total: {kind: counter, family: error, unit: count, min: 0}\n"
        )
        report = ingest_path(root, config)
        assert report.totals == {
            "rows_read": 5,
            "rows_stored": 5,
            "rows_updated": 0,
            "rows_quarantined": 0,
            "duplicates_dropped": 0,
        }
        assert read_table(config.lake_dir, "samples")["value"].to_list() == [0.0, 2.0, 5.0]
        assert read_table(config.lake_dir, "inventory")["pdu"].to_list() == ["pdu-a"]
        assert any("catalog.yaml" in note for note in report.notes)


def test_prometheus_json_violation_counter_declared_in_ns_by_config(tmp_path, config):
    config = config.with_overrides({"ingest": {"violation_unit": "ns"}})
    doc = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"__name__": "DCGM_FI_DEV_POWER_VIOLATION", "gpu": "0", "Hostname": "gpu-node001"},
                    "values": [[1793491200, "2500000"], [1793491260, "0"]],
                },  # a reset to 0 is stored raw
            ],
        },
    }
    (tmp_path / "power.json").write_text(json.dumps(doc))
    ingest_path(tmp_path / "power.json", config)
    assert samples_of(config)["value"].to_list() == [2500.0, 0.0]  # stored in the catalog's µs
