"""`foreshock ingest` without a Prefect API: the landing is ingested here, without Prefect."""

from __future__ import annotations

import os
import subprocess
import sys

from landing_files import write_landing

from foreshock.lake.read import read_table

PROBE = (
    "import sys; from foreshock.pipelines.cli import main; code = main(sys.argv[1:]); "
    "print('prefect loaded:', 'prefect' in sys.modules); sys.exit(code)"
)


def test_the_command_without_an_api_ingests_without_prefect(tmp_path):
    """No temporary server (nor Prefect's import) for an ingest nobody records: every
    sample lands, the accounting adds up, and a second run finds the files already stored."""
    landing = write_landing(tmp_path / "raw", nodes=1, gpus=2, days=2)
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")  # no profile that could name an API
    arguments = ["--data-dir", str(data_dir), "ingest", "--path", str(landing.root), "--timezone", "UTC"]

    def command() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", PROBE, *arguments],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp_path,
        )

    first = command()
    assert first.returncode == 0, first.stderr
    assert "prefect loaded: False" in first.stdout
    assert "total: read" in first.stdout and "DOES NOT ADD UP" not in first.stdout
    assert read_table(data_dir / "lake", "samples").height == landing.smi_samples + landing.dcgm_samples
    again = command()
    assert again.returncode == 0 and "prefect loaded: False" in again.stdout
    assert read_table(data_dir / "lake", "samples").height == landing.smi_samples + landing.dcgm_samples
