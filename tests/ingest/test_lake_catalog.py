"""The lake remembers the catalog it was ingested with; stages say which lake metrics
their catalog does not know; an empty lake is one line and exit 2."""

from __future__ import annotations

import pytest

from foreshock.config import load_config
from foreshock.errors import UserError
from foreshock.ingest import ingest_path
from foreshock.pipelines.cli import main
from foreshock.pipelines.inputs import lake_metrics_in_catalog

DIMM = "metrics:\n  dimm_ce_total: {kind: counter, family: error, unit: count}\n"
NIC = "metrics:\n  nic_crc_errors_total: {kind: counter, family: error, unit: count}\n"


def ingest_with_catalog(tmp_path, name: str, catalog_text: str, metric: str) -> None:
    catalog = tmp_path / f"{name}.yaml"
    catalog.write_text(catalog_text)
    landing = tmp_path / name
    landing.mkdir()
    (landing / "samples.csv").write_text(f"unit_id,ts,metric,value\nh1-dimm0,2026-11-01T00:00:00Z,{metric},3\n")
    config = load_config(data_dir=tmp_path / "data", catalog=catalog)
    report = ingest_path(landing, config)
    assert report.totals["rows_stored"] == 1


def test_later_stages_use_the_catalog_the_lake_was_ingested_with(tmp_path):
    ingest_with_catalog(tmp_path, "dimms", DIMM, "dimm_ce_total")
    ingest_with_catalog(tmp_path, "nics", NIC, "nic_crc_errors_total")

    config = load_config(data_dir=tmp_path / "data")  # names no catalog

    assert "dimm_ce_total" in config.catalog and "nic_crc_errors_total" in config.catalog  # merged across runs
    assert "gpu_temp_c" in config.catalog  # over the built-in one
    assert lake_metrics_in_catalog(config, "features") == ["dimm_ce_total", "nic_crc_errors_total"]
    # The settings a Prefect task rebuilds its config from find the same catalog.
    rebuilt = type(config).from_settings(config.to_settings())
    assert sorted(rebuilt.catalog.metrics) == sorted(config.catalog.metrics)


def test_a_catalog_named_in_the_config_wins_and_unknown_lake_metrics_are_named(tmp_path, caplog):
    ingest_with_catalog(tmp_path, "dimms", DIMM, "dimm_ce_total")
    ingest_with_catalog(tmp_path, "nics", NIC, "nic_crc_errors_total")

    config = load_config(data_dir=tmp_path / "data", catalog=tmp_path / "nics.yaml")
    assert lake_metrics_in_catalog(config, "features") == ["nic_crc_errors_total"]
    # a log line (stderr when the CLI has set up logging; read from the record here, whatever
    # handlers earlier tests left behind)
    err = caplog.text
    assert "1 of the lake's 2 metrics are not in the catalog" in err and "ignored: dimm_ce_total" in err

    only_dcgm = load_config(data_dir=tmp_path / "data").with_overrides({"paths": {"catalog": ""}})
    with pytest.raises(UserError, match="2 of the lake's 2 metrics .* dimm_ce_total, nic_crc_errors_total"):
        lake_metrics_in_catalog(only_dcgm, "features")


def test_features_on_an_empty_lake_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path / "data"), "features"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()  # one line, no traceback
    assert line.endswith(
        f" ERROR foreshock features: no samples in the lake under {tmp_path / 'data' / 'lake'}: run `foreshock ingest` first"
    )
