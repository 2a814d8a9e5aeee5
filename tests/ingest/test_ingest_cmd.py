"""`foreshock ingest` without a Prefect API: the landing is ingested here, without Prefect."""

from __future__ import annotations

from landing_files import write_landing
from prefect_free import run_without_prefect_api

from foreshock.lake.read import read_table


def test_the_command_without_an_api_ingests_without_prefect(tmp_path):
    """No temporary server (nor Prefect's import) for an ingest nobody records: every
    sample lands, the accounting adds up, and a second run finds the files already stored."""
    landing = write_landing(tmp_path / "raw", nodes=1, gpus=2, days=2)
    data_dir = tmp_path / "data"
    arguments = ["--data-dir", str(data_dir), "ingest", "--path", str(landing.root), "--timezone", "UTC"]

    first = run_without_prefect_api(tmp_path, arguments)
    assert first.returncode == 0, first.stderr
    assert "prefect loaded: False" in first.stdout
    assert "total: read" in first.stdout and "DOES NOT ADD UP" not in first.stdout
    assert read_table(data_dir / "lake", "samples").height == landing.smi_samples + landing.dcgm_samples
    again = run_without_prefect_api(tmp_path, arguments)
    assert again.returncode == 0 and "prefect loaded: False" in again.stdout
    assert read_table(data_dir / "lake", "samples").height == landing.smi_samples + landing.dcgm_samples
