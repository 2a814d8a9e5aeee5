"""The real Prefect flow and the CLI command around it."""

from __future__ import annotations

import json

from landing_files import write_landing

from foreshock.config import load_config
from foreshock.lake.read import read_table
from foreshock.pipelines import ingest_flow
from foreshock.pipelines.cli import main  # noqa: E402  (imports only the requested command's module)


def test_cli_runs_the_ingest_flow_and_prints_the_accounting(tmp_path, prefect_server, capsys):
    import anyio
    from prefect import get_client

    landing = write_landing(tmp_path / "raw", nodes=1, gpus=2, days=2)
    (landing.root / "nvidia-smi" / "gpu-node001" / "2026-11-03.csv").write_bytes(b"\xff\xfe junk")
    data_dir = tmp_path / "data"

    code = main(["--data-dir", str(data_dir), "ingest", "--path", str(landing.root), "--timezone", "UTC", "--strict"])

    out = capsys.readouterr().out
    assert code == 1  # one file was rejected, and --strict makes the exit code say so
    assert "2026-11-03.csv  [rejected: binary content" in out
    assert "total: read" in out and "DOES NOT ADD UP" not in out
    assert read_table(data_dir / "lake", "samples").height == landing.smi_samples + landing.dcgm_samples
    (record,) = (data_dir / "ingest_runs").glob("*.json")
    totals = json.loads(record.read_text())["totals"]
    assert totals["rows_stored"] + totals["rows_updated"] + totals["duplicates_dropped"] == totals["rows_read"]

    async def flow_runs():
        async with get_client() as client:
            return await client.read_flow_runs()

    runs = [r for r in anyio.run(flow_runs) if r.parameters.get("path") == str(landing.root)]
    assert len(runs) == 1 and runs[0].state.is_completed()


def test_cli_rejects_unknown_timezone_and_missing_path(tmp_path, prefect_server, capsys):
    assert main(["--data-dir", str(tmp_path / "data"), "ingest", "--path", str(tmp_path / "nope")]) == 2
    assert "ingest path not found" in capsys.readouterr().err
    (tmp_path / "raw").mkdir()
    assert (
        main(
            [
                "--data-dir",
                str(tmp_path / "data"),
                "ingest",
                "--path",
                str(tmp_path / "raw"),
                "--timezone",
                "Mars/Olympus",
            ]
        )
        == 2
    )
    assert "unknown timezone 'Mars/Olympus'" in capsys.readouterr().err


def test_a_batch_that_fails_on_io_is_retried_by_the_flow(tmp_path, prefect_server, monkeypatch):
    landing = write_landing(tmp_path / "raw", nodes=1, gpus=2, days=1)
    real = ingest_flow.ingest_batch
    calls = []

    def flaky(files, config, **kwargs):
        calls.append(len(files))
        if len(calls) == 1:  # the first batch meets a full disk once
            raise OSError(28, "No space left on device")
        return real(files, config, **kwargs)

    monkeypatch.setattr(ingest_flow, "ingest_batch", flaky)
    settings = load_config(data_dir=tmp_path / "data").to_settings()
    result = ingest_flow.ingest(settings, path=str(landing.root), timezone="UTC")
    assert calls[0] == calls[1]  # the same batch again
    assert result["adds_up"] and result["totals"]["rows_quarantined"] == 0
    assert read_table(tmp_path / "data" / "lake", "samples").height == landing.smi_samples + landing.dcgm_samples
