from datetime import timedelta

import pytest

from foreshock.config import load_config
from foreshock.durations import format_duration, parse_duration


class TestDurations:
    @pytest.mark.parametrize(
        "text,seconds",
        [("90s", 90), ("5m", 300), ("1h", 3600), ("1d", 86400), ("14d", 14 * 86400), ("2w", 14 * 86400)],
    )
    def test_parses_operator_spelling(self, text, seconds):
        assert parse_duration(text) == timedelta(seconds=seconds)

    @pytest.mark.parametrize("text", ["", "1", "h", "-1h", "0m", "1 hour", "1y"])
    def test_rejects_with_example(self, text):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(text)

    @pytest.mark.parametrize("text", ["1h", "6h", "1d", "7d", "14d", "10m", "90s"])
    def test_format_round_trips(self, text):
        assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)
        assert format_duration(timedelta(days=7)) == "7d"


class TestConfig:
    def test_defaults_suit_a_gpu_fleet(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("FORESHOCK_DATA_DIR", raising=False)
        config = load_config()
        assert config.data_dir == tmp_path / "data"
        assert config.snapshot_every == timedelta(hours=1)
        assert "ecc_sbe_volatile_total" in config.catalog
        assert config.catalog.resolve("DCGM_FI_DEV_GPU_TEMP") == "gpu_temp_c"

    def test_user_file_overrides_key_by_key(self, tmp_path):
        path = tmp_path / "foreshock.toml"
        path.write_text('[features]\nsnapshot_every = "1d"\nwindows = ["1d", "7d"]\n[paths]\ndata_dir = "lake"\n')
        config = load_config(path)
        assert config.snapshot_every == timedelta(days=1)
        assert config.windows == [timedelta(days=1), timedelta(days=7)]
        assert config.horizons  # untouched sections keep their defaults
        assert config.data_dir == tmp_path / "lake"

    def test_env_and_flag_choose_the_lake(self, tmp_path, monkeypatch):
        monkeypatch.setenv("FORESHOCK_DATA_DIR", str(tmp_path / "env"))
        assert load_config().data_dir == tmp_path / "env"
        assert load_config(data_dir=tmp_path / "flag").data_dir == tmp_path / "flag"

    def test_bad_duration_names_file_and_key(self, tmp_path):
        path = tmp_path / "bad.toml"
        path.write_text('[labels]\nhorizons = ["3 days"]\n')
        with pytest.raises(ValueError, match=r"bad.toml: \[labels\] horizons"):
            load_config(path)

    def test_custom_catalog(self, tmp_path):
        catalog = tmp_path / "smart.yaml"
        catalog.write_text(
            "metrics:\n  reallocated_sectors: {kind: counter, family: error, unit: count, aliases: [smart_5_raw]}\n"
        )
        config = load_config(catalog=catalog)
        assert config.catalog.names() == ["reallocated_sectors"]
        assert config.catalog.resolve("smart_5_raw") == "reallocated_sectors"

    def test_catalog_errors_name_the_metric(self, tmp_path):
        catalog = tmp_path / "bad.yaml"
        catalog.write_text("metrics:\n  x: {kind: rate, family: error}\n")
        with pytest.raises(ValueError, match="metric 'x': kind must be"):
            load_config(catalog=catalog)
