"""``foreshock pull`` against a real Prometheus holding simulated dcgm-exporter series.

The series are backfilled with ``promtool tsdb create-blocks-from openmetrics``; the lake
the pulls build must equal the lake file ingest builds from the same series, a resumed
pull must catch up, and a rerun must add nothing.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from foreshock.errors import EXIT_OK
from foreshock.lake.read import read_table
from foreshock.pipelines.cli import main
from tests.pipelines.services import free_port, prometheus_server

pytestmark = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")),
    reason="Prometheus is not installed (apt-get install prometheus; .ci/services.sh)",
)

START = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
MINUTES = 180
HOSTS = ("node01", "node02")
GPUS = (0, 1)


def _series() -> list[tuple[str, dict[str, str], list[tuple[int, float]]]]:
    """dcgm-exporter series as Kubernetes shows them: ``Hostname`` is the exporter pod,
    the ``node`` label (relabelled from the pod's node) names the machine."""
    out = []
    t0 = int(START.timestamp())
    for h, host in enumerate(HOSTS):
        for gpu in GPUS:
            labels = {"gpu": str(gpu), "UUID": f"GPU-{h}{gpu}-abcd", "Hostname": f"dcgm-exporter-{h}x7k", "node": host}
            temp = [(t0 + 60 * m, 55.0 + h + gpu + (m % 7)) for m in range(MINUTES)]
            sbe = [(t0 + 60 * m, float((m // 20) * (1 + h))) for m in range(MINUTES)]
            out.append(("DCGM_FI_DEV_GPU_TEMP", labels, temp))
            out.append(("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", labels, sbe))
    return out


def _openmetrics(series) -> str:
    lines = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge", "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL gauge"]
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"):
        for metric, labels, points in series:
            if metric != name:
                continue
            text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            lines += [f"{name}{{{text}}} {value} {t}" for t, value in points]
    return "\n".join(lines) + "\n# EOF\n"


def _query_range_file(series) -> dict:
    """The same series as a user's exported query_range response (the file-ingest path)."""
    result = []
    for name, labels, points in series:
        exported = {**labels, "Hostname": labels["node"], "__name__": name}
        result.append({"metric": exported, "values": [[t, str(v)] for t, v in points]})
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def _inventory(path) -> None:
    rows = ["unit_id,node,rack,model,lot,installed_at"]
    rows += [f"{host}-gpu{gpu},{host},r1,H100,L1,2026-01-01T00:00:00Z" for host in HOSTS for gpu in GPUS]
    path.write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    root = tmp_path_factory.mktemp("prometheus")
    (root / "series.om").write_text(_openmetrics(_series()))
    with prometheus_server(root / "series.om", root, timeout=60) as url:
        yield url


def _samples(data) -> pl.DataFrame:
    return (
        read_table(data / "lake", "samples").select("unit_id", "ts", "metric", "value").sort("unit_id", "metric", "ts")
    )


def test_pull_matches_file_ingest_resumes_and_reruns_add_nothing(prometheus, tmp_path, prefect_server, capsys):
    site = tmp_path / "site.toml"
    site.write_text('[pull]\nhost_labels = ["node", "Hostname"]\nchunk = "1h"\n')
    landing = tmp_path / "landing"
    landing.mkdir()
    _inventory(landing / "inventory.csv")

    # file ingest of the same series: the reference lake
    (landing / "export.json").write_text(json.dumps(_query_range_file(_series())))
    by_file = tmp_path / "by-file"
    assert main(["--config", str(site), "--data-dir", str(by_file), "ingest", "--path", str(landing)]) == EXIT_OK

    pulled = tmp_path / "pulled"
    (landing / "export.json").unlink()
    assert main(["--config", str(site), "--data-dir", str(pulled), "ingest", "--path", str(landing)]) == EXIT_OK
    base = ["--config", str(site), "--data-dir", str(pulled), "pull", "--url", prometheus, "--json"]
    middle = START + timedelta(minutes=100)
    last = START + timedelta(minutes=MINUTES - 1)
    capsys.readouterr()

    assert main([*base, "--start", START.isoformat(), "--end", middle.isoformat()]) == EXIT_OK
    first = json.loads(capsys.readouterr().out)
    assert first["series"] == 8 and first["points"] == 8 * 101  # 3 one-hour chunks, 101 minutes
    assert _samples(pulled)["ts"].max() == middle

    # a missed run catches up from where each series stopped
    assert main([*base, "--end", last.isoformat()]) == EXIT_OK
    second = json.loads(capsys.readouterr().out)
    assert second["points"] == 8 * (MINUTES - 101)
    reference, got = _samples(by_file), _samples(pulled)
    assert got.height == reference.height == 8 * MINUTES
    assert got.equals(reference)
    assert set(got["unit_id"].unique()) == {f"{h}-gpu{g}" for h in HOSTS for g in GPUS}  # node label, not the pod

    # a rerun adds nothing
    assert main([*base, "--end", last.isoformat()]) == EXIT_OK
    third = json.loads(capsys.readouterr().out)
    assert third["points"] == 0 and third["ingest"] is None
    assert _samples(pulled).equals(reference)
    assert not any(p.is_dir() for p in (pulled / "pull").iterdir())  # fetched files removed after ingest


def test_bad_query_is_a_usage_error(prometheus, tmp_path, prefect_server, capsys):
    code = main(
        [
            "--data-dir",
            str(tmp_path / "d"),
            "pull",
            "--url",
            prometheus,
            "--query",
            "rate(",
            "--start",
            START.isoformat(),
        ]
    )
    assert code == 2
    assert "Prometheus refused the query" in capsys.readouterr().err


def test_unreachable_server_fails_after_retries(tmp_path, prefect_server, capsys, monkeypatch):
    from foreshock.pipelines import pull_cmd

    monkeypatch.setattr(pull_cmd.fetch_task, "retry_delay_seconds", [0, 0, 0])
    code = main(
        [
            "--data-dir",
            str(tmp_path / "d"),
            "pull",
            "--url",
            f"http://127.0.0.1:{free_port()}",
            "--start",
            START.isoformat(),
        ]
    )
    assert code == 1
    assert "Connection refused" in capsys.readouterr().err
