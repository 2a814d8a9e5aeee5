"""The fleet simulator writes real formats, consistent failures and the nuisances of real data."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foreshock.pipelines.cli import main as cli_main
from foreshock.simulate import SimulationParams, simulate_fleet
from foreshock.simulate.fleet import build_fleet, schedule_lives

HEADER = (
    "timestamp, index, pci.bus_id, uuid, temperature.gpu, temperature.memory, power.draw [W], "
    "utilization.gpu [%], clocks.sm [MHz], ecc.errors.corrected.volatile.total, "
    "ecc.errors.uncorrected.volatile.total, ecc.errors.corrected.aggregate.total, "
    "ecc.errors.uncorrected.aggregate.total, retired_pages.sbe, retired_pages.dbe, "
    "retired_pages.pending, remapped_rows.correctable, remapped_rows.uncorrectable, "
    "remapped_rows.pending, clocks_event_reasons.hw_thermal_slowdown"
)
ROW = re.compile(
    r"^(?P<ts>\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}), (?P<index>\d+), (?P<bus>[0-9A-F]{8}:[0-9A-F]{2}:00\.0), "
    r"(?P<uuid>GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}), (?P<temp>\d+), (?P<mem_temp>\d+), "
    r"(?P<power>\d+\.\d{2}) W, (?P<util>\d+) %, (?P<clock>\d+) MHz, (?P<sbe_vol>\d+), (?P<dbe_vol>\d+), "
    r"(?P<sbe_agg>\d+), (?P<dbe_agg>\d+), (?P<rp_sbe>\d+|\[N/A\]), (?P<rp_dbe>\d+|\[N/A\]), (?P<rp_pending>Yes|No|\[N/A\]), "
    r"(?P<rr_c>\d+|\[N/A\]), (?P<rr_u>\d+|\[N/A\]), (?P<rr_pending>Yes|No|\[N/A\]), (?P<slowdown>Active|Not Active)$"
)
XID_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00) (?P<host>gpu-node\d{3}) kernel: \[\s*\d+\.\d{6}\] "
    r"NVRM: Xid \(PCI:(?P<pci>0000:[0-9a-f]{2}:[0-9a-f]{2})\): (?P<code>\d+), pid=\d+, name=\S+, .+$"
)
INT_FIELDS = ("index", "temp", "sbe_vol", "dbe_vol", "sbe_agg", "dbe_agg", "util", "clock")


def read_nvidia_smi(out: Path) -> pl.DataFrame:
    """Parse every nvidia-smi CSV with the strict row pattern (fails on any other line)."""
    records = []
    for path in sorted(out.glob("nvidia-smi/*/*.csv")):
        lines = path.read_text().splitlines()
        assert lines[0] == HEADER, path
        for number, line in enumerate(lines[1:], start=2):
            match = ROW.match(line)
            assert match, f"{path}:{number}: {line!r}"
            record = match.groupdict()
            record["node"] = path.parent.name
            record["file"] = str(path)
            record["line"] = number
            records.append(record)
    frame = pl.DataFrame(records)
    return frame.with_columns(
        [pl.col(c).cast(pl.Int64) for c in INT_FIELDS]
        + [
            pl.col("power").cast(pl.Float64),
            pl.col("ts").str.to_datetime("%Y/%m/%d %H:%M:%S%.3f", time_unit="us").dt.replace_time_zone("UTC"),
            pl.format("{}-gpu{}", "node", "index").alias("unit_id"),
        ]
    )


def read_xids(out: Path) -> pl.DataFrame:
    inventory = pl.read_csv(out / "inventory.csv")
    by_pci = {
        (r["node"], "0000:" + r["pci_bus_id"].split(":", 1)[1][:5].lower()): r["unit_id"]
        for r in inventory.iter_rows(named=True)
    }
    rows = []
    for path in sorted(out.glob("kernel/*.log")):
        for line in path.read_text().splitlines():
            if "NVRM: Xid" in line:
                m = XID_LINE.match(line)
                assert m, line
                rows.append(
                    {
                        "unit_id": by_pci[(m["host"], m["pci"])],
                        "ts": datetime.fromisoformat(m["ts"]),
                        "code": int(m["code"]),
                    }
                )
    return pl.DataFrame(rows, schema={"unit_id": pl.String, "ts": pl.Datetime("us", "UTC"), "code": pl.Int64})


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory) -> tuple[Path, dict]:
    """16 GPUs for 3 days with failures made frequent enough to appear."""
    out = tmp_path_factory.mktemp("sim")
    summary = simulate_fleet(
        out, units=16, days=3, seed=3, failures_per_1000_unit_days=150.0, reboots_per_node_day=1.0, messy_file_share=0.5
    )
    return out, summary


@pytest.fixture(scope="module")
def week_fleet(tmp_path_factory) -> tuple[Path, dict]:
    """32 GPUs (one pre-Ampere node) for 8 days, many failures: precursors need days."""
    out = tmp_path_factory.mktemp("week")
    summary = simulate_fleet(out, units=32, days=8, seed=11, failures_per_1000_unit_days=60.0)
    return out, summary


class TestDeterminism:
    def test_same_seed_gives_byte_identical_files(self, tmp_path):
        a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
        for out, seed in ((a, 5), (b, 5), (c, 6)):
            simulate_fleet(out, units=16, days=2, seed=seed)
        files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
        assert files_a == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
        assert len(files_a) > 20
        for rel in files_a:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
        assert (a / "inventory.csv").read_bytes() != (c / "inventory.csv").read_bytes()

    def test_a_rerun_into_the_same_directory_leaves_no_stale_files(self, tmp_path):
        simulate_fleet(tmp_path, units=16, days=3, seed=1)
        simulate_fleet(tmp_path, units=8, days=1, seed=1)
        assert {p.name for p in tmp_path.glob("nvidia-smi/*")} == {"gpu-node001"}
        assert [p.name for p in tmp_path.glob("nvidia-smi/*/*")] == ["2026-11-01.csv"]


class TestFormats:
    def test_nvidia_smi_csv_parses_with_units_and_na_fields(self, small_fleet):
        out, summary = small_fleet
        smi = read_nvidia_smi(out)
        assert smi.height == summary["rows"]["nvidia-smi"]
        # H100 remaps rows and does not report retired pages.
        assert set(smi["rp_sbe"].unique()) == {"[N/A]"}
        assert smi["rr_c"].str.contains(r"^\d+$").all()
        assert smi["power"].is_between(0, 810).all() and smi["temp"].is_between(15, 110).all()
        assert smi["util"].is_between(0, 100).all()
        inventory = pl.read_csv(out / "inventory.csv")
        assert set(smi["unit_id"].unique()) <= set(inventory["unit_id"])
        # Rows are named by the file's day.
        assert (smi["ts"].dt.strftime("%Y-%m-%d") + ".csv" == smi["file"].str.split("/").list.last()).all()

    def test_pre_ampere_gpus_retire_pages_instead_of_remapping_rows(self, week_fleet):
        out, _ = week_fleet
        inventory = pl.read_csv(out / "inventory.csv")
        legacy = inventory.filter(pl.col("model").str.contains("V100"))["node"].unique().to_list()
        assert legacy == ["gpu-node004"]
        smi = read_nvidia_smi(out).filter(pl.col("node") == "gpu-node004")
        assert set(smi["rr_c"].unique()) == {"[N/A]"} and smi["rp_sbe"].str.contains(r"^\d+$").all()

    def test_inventory_columns_and_ids(self, small_fleet):
        out, _ = small_fleet
        inventory = pl.read_csv(out / "inventory.csv", infer_schema=False)
        assert inventory.columns == [
            "unit_id",
            "node",
            "rack",
            "model",
            "lot",
            "installed_at",
            "uuid",
            "pci_bus_id",
            "gpu_index",
        ]
        assert inventory["unit_id"].to_list() == [f"gpu-node00{n}-gpu{g}" for n in (1, 2) for g in range(8)]
        assert inventory["installed_at"].str.contains(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$").all()
        assert inventory["lot"].str.contains(r"^LOT-\d{4}-\d{2}[A-Z]$").all()
        assert inventory["pci_bus_id"].n_unique() == 8  # stable per slot index

    def test_prometheus_json_is_a_query_range_matrix(self, small_fleet):
        out, summary = small_fleet
        step = summary["parameters"]["dcgm_step_s"]
        inventory = pl.read_csv(out / "inventory.csv")
        files = sorted(out.glob("dcgm/*/*.json"))
        assert {p.stem for p in files} == {
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "DCGM_FI_DEV_THERMAL_VIOLATION",
            "DCGM_FI_DEV_POWER_VIOLATION",
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_XID_ERRORS",
        }
        for path in files:
            doc = json.loads(path.read_text())
            assert doc["status"] == "success" and doc["data"]["resultType"] == "matrix"
            assert doc["data"]["result"], path
            for series in doc["data"]["result"]:
                labels = series["metric"]
                assert labels["__name__"] == path.stem
                assert f"{labels['Hostname']}-gpu{labels['gpu']}" in inventory["unit_id"].to_list()
                assert labels["device"] == f"nvidia{labels['gpu']}" and labels["UUID"].startswith("GPU-")
                stamps = [ts for ts, _ in series["values"]]
                assert stamps == sorted(stamps) and all(ts % step == 0 for ts in stamps)
                day = datetime.fromtimestamp(stamps[0], UTC).strftime("%Y-%m-%d")
                assert path.parent.name == day
                assert all(isinstance(v, str) and int(v) >= 0 for _, v in series["values"])

    def test_scrape_overlaps_the_nvidia_smi_samples(self, small_fleet):
        out, _ = small_fleet
        smi = read_nvidia_smi(out)
        pattern = re.compile(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="(\d+)",UUID="([^"]+)",.*Hostname="([^"]+)".*\} (\d+) (\d+)$')
        seen: set[str] = set()
        for path in sorted(out.glob("scrape/*.prom")):
            text = path.read_text()
            assert "# TYPE DCGM_FI_DEV_GPU_TEMP gauge" in text and "# HELP DCGM_FI_DEV_XID_ERRORS" in text
            for line in text.splitlines():
                m = pattern.match(line)
                if not m:
                    continue
                gpu, uuid, host, value, ms = m.groups()
                ts = datetime.fromtimestamp(int(ms) / 1000, UTC)
                row = smi.filter((pl.col("unit_id") == f"{host}-gpu{gpu}") & (pl.col("ts") == ts))
                assert row.height >= 1 and row["temp"][0] == int(value) and row["uuid"][0] == uuid
                seen.add(f"{host}-gpu{gpu}")
        # Every GPU answers the final scrape except a failed one whose slot awaits repair.
        truth = pl.read_parquet(out / "ground_truth.parquet")
        for unit in set(smi["unit_id"]) - seen:
            last_row = smi.filter(pl.col("unit_id") == unit)["ts"].max()
            # (a double-bit error is still reported by the sample right after it)
            assert last_row <= truth.filter(pl.col("unit_id") == unit)["failed_at"].max() + timedelta(minutes=10)
        assert len(seen) >= 8

    def test_kernel_log_is_rfc3339_syslog_with_resolvable_xid_lines(self, small_fleet):
        out, _ = small_fleet
        for path in sorted(out.glob("kernel/*.log")):
            stamps = [line.split(" ", 1)[0] for line in path.read_text().splitlines()]
            parsed = [datetime.fromisoformat(s) for s in stamps]
            assert parsed == sorted(parsed) and all(p.utcoffset().total_seconds() == 0 for p in parsed)
        xids = read_xids(out)  # raises if a line does not match or its PCI id is unknown
        assert xids.height > 0


class TestFailures:
    def test_ground_truth_matches_tickets(self, small_fleet):
        out, summary = small_fleet
        truth = pl.read_parquet(out / "ground_truth.parquet")
        tickets = pl.read_csv(out / "tickets.csv")
        assert tickets.columns == ["ticket_id", "opened_at", "node", "gpu_index", "gpu_uuid", "category", "summary"]
        assert truth.schema["failed_at"] == pl.Datetime("us", "UTC")
        assert truth.height == tickets.height == summary["failures"]["total"] >= 1
        from_tickets = tickets.select(
            unit_id=pl.format("{}-gpu{}", "node", "gpu_index"),
            failed_at=pl.col("opened_at").str.to_datetime(time_zone="UTC", time_unit="us"),
            category="category",
        )
        joined = truth.join(from_tickets, on=["unit_id", "failed_at"], how="full", coalesce=True)
        assert joined.height == truth.height and joined["mode"].null_count() == 0
        expected = {
            "memory": {"HBM/ECC"},
            "thermal": {"thermal"},
            "power": {"fell off bus"},
            "sudden": {"fell off bus", "unknown"},
        }
        for mode, category in joined.select("mode", "category").iter_rows():
            assert category in expected[mode]
        assert (truth["has_precursor"] == (truth["mode"] != "sudden")).all()
        counts = dict(truth.group_by("mode").len().iter_rows())
        assert {m: n for m, n in summary["failures"]["by_mode"].items() if n} == counts
        assert json.loads((out / "simulation.json").read_text())["failures"] == summary["failures"]
        with_onset = truth.filter(pl.col("has_precursor"))
        assert (with_onset["precursor_onset"] < with_onset["failed_at"]).all()
        assert (
            truth.filter(~pl.col("has_precursor"))["precursor_onset"].null_count()
            == truth.filter(~pl.col("has_precursor")).height
        )

    def test_failure_xids_are_logged_at_the_failure(self, week_fleet):
        out, _ = week_fleet
        truth = pl.read_parquet(out / "ground_truth.parquet")
        xids = read_xids(out)
        at_failure = truth.join(xids, left_on=["unit_id", "failed_at"], right_on=["unit_id", "ts"], how="left")
        for mode, code in at_failure.select("mode", "code").iter_rows():
            if mode == "memory":
                assert code == 48
            elif mode == "power":
                assert code == 79
            elif mode == "thermal":
                assert code is None
        memory_units = truth.filter(pl.col("mode") == "memory")["unit_id"]
        assert xids.filter(pl.col("unit_id").is_in(memory_units.implode()) & (pl.col("code") == 63)).height > 0

    def test_a_replaced_gpu_starts_a_new_life_in_the_same_slot(self, week_fleet):
        out, _ = week_fleet
        smi = read_nvidia_smi(out)
        tickets = pl.read_csv(out / "tickets.csv").with_columns(
            unit_id=pl.format("{}-gpu{}", "node", "gpu_index"),
            failed_at=pl.col("opened_at").str.to_datetime(time_zone="UTC", time_unit="us"),
        )
        checked = 0
        for unit, failed_at, uuid, category in tickets.select(
            "unit_id", "failed_at", "gpu_uuid", "category"
        ).iter_rows():
            rows = smi.filter(pl.col("unit_id") == unit).sort("ts")
            failed_gpu = rows.filter(pl.col("uuid") == uuid)
            replacement = rows.filter((pl.col("ts") > failed_at) & (pl.col("uuid") != uuid))
            if failed_gpu.is_empty():
                continue
            # The failed GPU reports nothing after the failure, except the sample that
            # shows the double-bit error of an HBM failure.
            assert failed_gpu["ts"].max() <= failed_at + timedelta(minutes=10)
            if category == "HBM/ECC" and failed_gpu["ts"].max() > failed_at:
                last = failed_gpu.row(-1, named=True)
                assert last["dbe_agg"] == last["dbe_vol"] == 1 and "1" in (last["rr_u"], last["rp_dbe"])
            if replacement.is_empty():
                continue
            # Offline for the 1-3 day repair, then a new GPU with counters from zero.
            gap = (replacement["ts"][0] - failed_at).total_seconds() / 86400
            assert 0.9 <= gap <= 3.1
            assert replacement["sbe_agg"][0] <= 5 and replacement["dbe_agg"][0] == 0
            checked += 1
        assert checked >= 1

    def test_memory_failures_show_rising_correctable_errors_and_healthy_units_mostly_do_not(self, week_fleet):
        out, summary = week_fleet
        smi = read_nvidia_smi(out)
        truth = pl.read_parquet(out / "ground_truth.parquet")
        day = pl.duration(days=1)

        def increase(rows: pl.DataFrame) -> int:
            return 0 if rows.height < 2 else int(rows["sbe_agg"].max() - rows["sbe_agg"].min())

        start = smi["ts"].min()
        memory = truth.filter(
            (pl.col("mode") == "memory")
            & (pl.col("precursor_onset") < pl.col("failed_at") - 2 * day)
            & (pl.col("failed_at") > start + 3 * day)
        )
        assert memory.height >= 1
        for unit, failed_at in memory.select("unit_id", "failed_at").iter_rows():
            rows = smi.filter((pl.col("unit_id") == unit) & (pl.col("ts") <= failed_at))
            last = increase(rows.filter(pl.col("ts") > failed_at - day))
            earlier = increase(
                rows.filter((pl.col("ts") > failed_at - 3 * day) & (pl.col("ts") <= failed_at - 2 * day))
            )
            assert last > 100 and last > 2 * earlier, (unit, last, earlier)
        # Healthy GPUs have bursts (at most two, hours long) but never days of growth,
        # except the ones degrading towards a failure after the end of the simulation.
        failed_units = truth["unit_id"].implode()
        healthy = smi.filter(~pl.col("unit_id").is_in(failed_units))
        daily = healthy.group_by("unit_id", pl.col("ts").dt.date().alias("date")).agg(
            (pl.col("sbe_agg").max() - pl.col("sbe_agg").min()).alias("increase")
        )
        assert (daily["increase"] > 100).mean() < 0.08
        streaks = (
            daily.sort("unit_id", "date")
            .with_columns(high=(pl.col("increase") > 100).cast(pl.Int32))
            .with_columns(run=pl.col("high").rolling_sum(3).over("unit_id"))
            .filter(pl.col("run") == 3)["unit_id"]
            .n_unique()
        )
        assert streaks <= summary["failures"]["censored_degrading"]

    def test_thermal_failures_run_hot_for_their_power(self, week_fleet):
        out, _ = week_fleet
        smi = read_nvidia_smi(out).filter(pl.col("util") > 50)
        truth = pl.read_parquet(out / "ground_truth.parquet").filter(
            (pl.col("mode") == "thermal") & (pl.col("precursor_onset") < pl.col("failed_at") - pl.duration(days=2))
        )
        for unit, failed_at in truth.select("unit_id", "failed_at").iter_rows():
            rows = smi.filter(pl.col("unit_id") == unit)
            last = rows.filter(pl.col("ts").is_between(failed_at - pl.duration(hours=12), failed_at))
            if last.is_empty():
                continue
            peers = smi.filter(
                pl.col("ts").is_between(failed_at - pl.duration(hours=12), failed_at) & (pl.col("unit_id") != unit)
            )
            assert last["temp"].mean() > peers["temp"].mean() + 8


class TestNuisances:
    def test_volatile_counters_reset_at_reboots_and_aggregates_do_not(self, small_fleet):
        out, _ = small_fleet
        smi = read_nvidia_smi(out).sort("uuid", "ts")
        steps = smi.with_columns(
            vol_drop=pl.col("sbe_vol").diff().over("uuid") < 0,
            agg_drop=pl.col("sbe_agg").diff().over("uuid") < 0,
            prev_ts=pl.col("ts").shift().over("uuid"),
        )
        assert steps["agg_drop"].sum() == 0
        resets = steps.filter("vol_drop")
        assert resets.height >= 1
        boots = {
            path.stem: [
                datetime.fromisoformat(line.split(" ", 1)[0])
                for line in path.read_text().splitlines()
                if "Linux version" in line
            ]
            for path in out.glob("kernel/*.log")
        }
        for node, prev_ts, ts in resets.select("node", "prev_ts", "ts").iter_rows():
            assert any(prev_ts < boot <= ts for boot in boots[node]), (node, prev_ts, ts)

    def test_some_files_have_duplicate_and_out_of_order_rows(self, small_fleet):
        out, _ = small_fleet
        smi = read_nvidia_smi(out)
        per_file = smi.group_by("file").agg(
            duplicates=pl.len() - pl.struct("unit_id", "ts").n_unique(),
            out_of_order=(pl.col("ts").diff() < pl.duration(seconds=-1)).sum(),
        )
        assert (per_file["duplicates"] > 0).any() or (per_file["out_of_order"] > 0).any()
        assert (per_file["duplicates"] == 0).sum() >= 1  # most files are clean

    def test_nodes_go_silent_for_hours(self, tmp_path):
        simulate_fleet(tmp_path, units=32, days=4, seed=2, scrape_gaps_per_node_day=0.5)
        smi = read_nvidia_smi(tmp_path)
        ticks = smi.group_by("node", pl.col("ts").dt.truncate("10m")).len().sort("node", "ts")
        gaps = ticks.with_columns(gap=pl.col("ts").diff().over("node")).filter(pl.col("gap") >= pl.duration(hours=2))
        assert gaps.height >= 1

    def test_temperature_and_power_follow_the_workload(self, small_fleet):
        out, _ = small_fleet
        smi = read_nvidia_smi(out)
        assert np.corrcoef(smi["util"], smi["power"])[0, 1] > 0.9
        assert np.corrcoef(smi["power"], smi["temp"])[0, 1] > 0.6


class TestSchedule:
    """Failure rates and shares, drawn on a large fleet without writing telemetry."""

    def _failures(self, seed: int, **kwargs) -> tuple[list, object, SimulationParams]:
        params = SimulationParams(units=4096, days=30, seed=seed, **kwargs)
        fleet = build_fleet(params)
        lives = schedule_lives(fleet, params)
        failed = [x for x in lives if x.failed_at_s is not None and x.failed_at_s < params.end_s]
        return failed, fleet, params

    @pytest.mark.parametrize("share", [1 / 3, 0.6])
    def test_sudden_share_is_respected(self, seed, share):
        failed, _, _ = self._failures(seed, sudden_share=share)
        observed = sum(x.mode == "sudden" for x in failed) / len(failed)
        assert abs(observed - share) < 0.08, observed

    def test_bad_lot_and_hot_rack_fail_more(self, seed):
        failed, fleet, _ = self._failures(seed)
        lots = np.array(fleet.lot)
        bad = lots == fleet.bad_lot
        bad_rate = sum(fleet.lot[x.slot] == fleet.bad_lot for x in failed) / bad.sum()
        other_rate = sum(fleet.lot[x.slot] != fleet.bad_lot for x in failed) / (~bad).sum()
        assert bad_rate > 2.5 * other_rate
        racks = np.array([fleet.slot_rack(s) for s in range(fleet.units)])
        hot = racks == fleet.hot_rack
        hot_thermal = sum(x.mode == "thermal" and hot[x.slot] for x in failed) / hot.sum()
        cool_thermal = sum(x.mode == "thermal" and not hot[x.slot] for x in failed) / (~hot).sum()
        assert hot_thermal > 2 * cool_thermal

    def test_demo_fleet_has_enough_failures_for_a_backtest(self):
        for seed in (0, 7):
            params = SimulationParams(seed=seed)
            lives = schedule_lives(build_fleet(params), params)
            failed = [x for x in lives if x.failed_at_s is not None and x.failed_at_s < params.end_s]
            assert 40 <= len(failed) <= 70, (seed, len(failed))


class TestCommandLine:
    def test_simulate_writes_under_the_data_dir_and_prints_a_summary(self, tmp_path, capsys):
        rc = cli_main(
            [
                "--data-dir",
                str(tmp_path),
                "simulate",
                "--units",
                "16",
                "--days",
                "1",
                "--seed",
                "4",
                "--start",
                "2026-10-01",
            ]
        )
        assert rc == 0
        printed = capsys.readouterr().out
        assert "simulated 16 GPUs on 2 nodes" in printed and "failures:" in printed and "took" in printed
        sim = tmp_path / "raw" / "sim"
        assert json.loads((sim / "simulation.json").read_text())["parameters"]["seed"] == 4
        assert sorted(p.name for p in sim.glob("nvidia-smi/*/*.csv")) == ["2026-10-01.csv"] * 2

    @pytest.mark.parametrize(
        "argv, message",
        [
            (["--units", "0"], "units must be at least 1"),
            (["--sample-every", "7m"], "must divide a day"),
            (["--sample-every", "soon"], "invalid duration"),
            (["--start", "yesterday"], "not an ISO 8601"),
            (["--seed", "-1"], "seed must be a non-negative integer"),
            (["--days", "0"], "days must be positive"),
        ],
    )
    def test_bad_arguments_are_rejected_clearly(self, tmp_path, capsys, argv, message):
        rc = cli_main(["--data-dir", str(tmp_path), "simulate", "--out", str(tmp_path / "x"), *argv])
        assert rc == 2 and message in capsys.readouterr().err
