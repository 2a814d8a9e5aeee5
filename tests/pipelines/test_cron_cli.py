"""The command line as cron and scripts use it: version, log lines, JSON, exit codes, config errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from foreshock.errors import EXIT_FAILURE, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE
from foreshock.pipelines.cli import main


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("foreshock ") and out.split()[1][0].isdigit()


def test_lake_json_is_parsable_and_matches_the_lake(tmp_path, capsys):
    from datetime import UTC, datetime

    import polars as pl

    from foreshock.contract import conform
    from foreshock.lake.merge import merge_into_lake

    lake = tmp_path / "data" / "lake"
    samples = pl.DataFrame(
        {
            "unit_id": ["n1-gpu0", "n1-gpu0", "n2-gpu1"],
            "ts": [datetime(2026, 11, 1, h, tzinfo=UTC) for h in (1, 2, 3)],
            "metric": ["gpu_temp_c"] * 3,
            "value": [60.0, 61.0, 59.0],
        }
    )
    merge_into_lake(lake, "samples", conform(samples, "samples"))
    assert main(["--data-dir", str(tmp_path / "data"), "lake", "--json"]) == EXIT_OK
    result = json.loads(capsys.readouterr().out)
    assert set(result["tables"]) >= {"inventory", "samples", "events", "failures"}
    assert result["tables"]["samples"]["rows"] == 3 and result["tables"]["samples"]["units"] == 2
    assert datetime.fromisoformat(result["tables"]["samples"]["last"]) == datetime(2026, 11, 1, 3, tzinfo=UTC)
    assert result["tables"]["failures"]["rows"] == 0


class TestConfigErrors:
    """A typo in the configuration is an error naming the key and the file, not a silent default."""

    def test_unknown_key_and_section(self, tmp_path, capsys):
        bad = tmp_path / "site.toml"
        bad.write_text("[policy]\nenter_rsk = 0.6\n[modles]\nname = 'x'\n")
        assert main(["--config", str(bad), "--data-dir", str(tmp_path), "lake"]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert f"{bad}: [policy] enter_rsk: unknown key (did you mean enter_risk?)" in err
        assert "unknown section [modles] (did you mean models?)" in err

    def test_wrong_type(self, tmp_path, capsys):
        bad = tmp_path / "site.toml"
        bad.write_text("[lake]\nshards = '8'\n[policy]\nenter_risk = 'high'\n")
        assert main(["--config", str(bad), "--data-dir", str(tmp_path), "lake"]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert f"{bad}: [lake] shards: Input should be a valid integer" in err
        assert "[policy] enter_risk: Input should be a valid number" in err

    def test_environment_overrides_a_key_and_is_checked(self, tmp_path, monkeypatch):
        from foreshock.config import load_config

        site = tmp_path / "site.toml"
        site.write_text("[policy]\nenter_risk = 0.6\n")
        assert load_config(site).settings["policy"]["enter_risk"] == 0.6
        monkeypatch.setenv("FORESHOCK_POLICY_ENTER_RISK", "0.8")
        monkeypatch.setenv("FORESHOCK_LABELS_HORIZONS", '["12h", "48h"]')
        config = load_config(site)
        assert config.settings["policy"]["enter_risk"] == 0.8
        assert [h.total_seconds() / 3600 for h in config.horizons] == [12, 48]
        monkeypatch.setenv("FORESHOCK_POLICY_ENTER_RISK", "high")
        with pytest.raises(ValueError, match=r"FORESHOCK_POLICY_ENTER_RISK: \[policy\] enter_risk"):
            load_config(site)
        monkeypatch.setenv("FORESHOCK_POLICY_ENTER_RISK", "0.8")
        monkeypatch.setenv("FORESHOCK_POLICY_ENTER_RSK", "0.8")
        with pytest.raises(ValueError, match=r"FORESHOCK_POLICY_ENTER_RSK: \[policy\] enter_rsk: unknown key"):
            load_config(site)

    def test_settings_round_trip_for_flows(self, tmp_path, monkeypatch):
        from foreshock.config import Config, load_config

        site = tmp_path / "site.toml"
        site.write_text("[models]\nname = 'site-risk'\n")
        config = load_config(site, data_dir=tmp_path / "data").with_overrides({"policy": {"enter_risk": 0.7}})
        again = Config.from_settings(json.loads(json.dumps(config.to_settings(str(site)))))
        assert again.model_name == "site-risk" and again.settings["policy"]["enter_risk"] == 0.7
        assert again.data_dir == config.data_dir


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "foreshock.pipelines.cli", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_logs_go_to_stderr_as_json_lines_and_quiet_silences_them(tmp_path):
    """Results on stdout, diagnostics on stderr: JSON lines with -v --log-format json; none with -q."""
    data = str(tmp_path / "data")
    loud = _run("-v", "--log-format", "json", "--data-dir", data, "lake", "--json")
    assert loud.returncode == EXIT_OK
    json.loads(loud.stdout)  # stdout holds only the result
    lines = [json.loads(line) for line in loud.stderr.splitlines() if line.startswith("{")]
    assert lines and {"ts", "level", "logger", "message"} <= set(lines[0])
    assert any(line["level"] == "DEBUG" and data in line["message"] for line in lines)
    quiet = _run("-q", "--data-dir", data, "lake")
    assert quiet.returncode == EXIT_OK and quiet.stderr == ""


def test_ingest_that_rejects_a_file_exits_3_and_strict_exits_1(tmp_path, prefect_server):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "inventory.csv").write_text(
        "unit_id,node,rack,model,lot,installed_at\nn1-gpu0,n1,r1,H100,L1,2026-01-01T00:00:00Z\n"
    )
    (landing / "garbage.bin").write_bytes(b"\x00\x01 not telemetry")
    data = str(tmp_path / "data")
    assert main(["--data-dir", data, "ingest", "--path", str(landing), "--timezone", "UTC"]) == EXIT_PARTIAL
    assert (
        main(["--data-dir", data, "ingest", "--path", str(landing), "--timezone", "UTC", "--force", "--strict"])
        == EXIT_FAILURE
    )
