"""``foreshock status``: healthy, stale and broken pipelines, as text and as JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from foreshock.contract import conform
from foreshock.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from foreshock.features.store import write_features
from foreshock.lake.atomic import atomic_write_parquet
from foreshock.lake.merge import merge_into_lake
from foreshock.pipelines.cli import main

NEWEST = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _fill_pipeline(data, model_name: str) -> None:
    """Every part written as the stages write it, the newest timestamp of each at NEWEST."""
    import mlflow

    times = [NEWEST - timedelta(hours=h) for h in (2, 1, 0)]
    samples = pl.DataFrame(
        {"unit_id": ["n1-gpu0"] * 3, "ts": times, "metric": ["gpu_temp_c"] * 3, "value": [60.0, 61.0, 62.0]}
    )
    merge_into_lake(data / "lake", "samples", conform(samples, "samples"))
    snapshots = pl.DataFrame({"unit_id": ["n1-gpu0", "n2-gpu0"] * 3, "ts": sorted(times * 2), "gpu_temp_c": [1.0] * 6})
    write_features(snapshots, data / "features", 8)
    scores = pl.DataFrame({"unit_id": ["n1-gpu0", "n2-gpu0"], "ts": [NEWEST, NEWEST], "risk": [0.2, 0.7]})
    atomic_write_parquet(scores, data / "scores" / "latest.parquet")
    outbox = data / "outbox" / NEWEST.strftime("%Y%m%dT%H%M%SZ")
    outbox.mkdir(parents=True)
    atomic_write_parquet(scores.with_columns(pl.lit(1).alias("schema_version")), outbox / "risk_list.parquet")
    (outbox / "manifest.json").write_text(json.dumps({"generated_at": NEWEST.isoformat()}))
    client = mlflow.MlflowClient()
    client.create_registered_model(model_name)
    version = client.create_model_version(model_name, source=str(data), run_id=None)
    client.set_registered_model_alias(model_name, "champion", version.version)


@pytest.fixture
def pipeline(tmp_path, mlflow_uri, monkeypatch, request):
    name = f"status-{request.node.name}".replace("[", "-").replace("]", "")
    monkeypatch.setenv("FORESHOCK_MODELS_NAME", name)  # one registered model per test
    data = tmp_path / "data"
    _fill_pipeline(data, name)
    return data


def _status(data, capsys, *extra: str) -> tuple[int, dict]:
    code = main(["--data-dir", str(data), "status", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_healthy(pipeline, capsys):
    code, result = _status(pipeline, capsys, "--now", (NEWEST + timedelta(minutes=10)).isoformat())
    assert code == EXIT_OK and result["state"] == "ok"
    parts = {p["part"]: p for p in result["parts"]}
    assert list(parts) == ["lake", "features", "scores", "outbox", "champion"]
    assert parts["lake"]["rows"] == 3 and parts["features"]["rows"] == 6 and parts["outbox"]["rows"] == 2
    assert parts["scores"]["age_seconds"] == 600 and parts["scores"]["age"] == "10m"
    assert datetime.fromisoformat(parts["lake"]["newest"]) == NEWEST
    assert "version 1" in parts["champion"]["detail"]


def test_stale_part_is_exit_1_and_named(pipeline, capsys):
    # 3 h later: lake (30m), features, scores and outbox (2h) are stale; the champion (30d) is not
    code, result = _status(pipeline, capsys, "--now", (NEWEST + timedelta(hours=3)).isoformat())
    assert code == EXIT_FAILURE and result["state"] == "stale"
    states = {p["part"]: p["state"] for p in result["parts"]}
    assert states == {"lake": "stale", "features": "stale", "scores": "stale", "outbox": "stale", "champion": "ok"}


def test_limits_come_from_the_config(pipeline, capsys, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        '[status]\nlake_max_age = "4h"\nfeatures_max_age = "4h"\nscores_max_age = "4h"\noutbox_max_age = "4h"\n'
    )
    code, result = _status(pipeline, capsys, "--now", (NEWEST + timedelta(hours=3)).isoformat())
    assert code == EXIT_FAILURE
    code = main(
        [
            "--config",
            str(site),
            "--data-dir",
            str(pipeline),
            "status",
            "--now",
            (NEWEST + timedelta(hours=3)).isoformat(),
        ]
    )
    assert code == EXIT_OK
    assert "pipeline: ok" in capsys.readouterr().out


def test_broken_part_is_exit_2(pipeline, capsys):
    (pipeline / "scores" / "latest.parquet").unlink()
    (pipeline / "lake" / "samples").rename(pipeline / "lake" / "samples-moved")
    code, result = _status(pipeline, capsys, "--now", (NEWEST + timedelta(minutes=10)).isoformat())
    assert code == EXIT_USAGE and result["state"] == "broken"
    parts = {p["part"]: p for p in result["parts"]}
    assert parts["scores"]["state"] == "broken" and "foreshock score" in parts["scores"]["detail"]
    assert parts["lake"]["state"] == "broken" and "foreshock ingest" in parts["lake"]["detail"]
    assert parts["outbox"]["state"] == "ok"


def test_unreadable_file_is_broken_not_a_crash(pipeline, capsys):
    (pipeline / "scores" / "latest.parquet").write_bytes(b"not parquet")
    code, result = _status(pipeline, capsys, "--now", (NEWEST + timedelta(minutes=10)).isoformat())
    assert code == EXIT_USAGE
    scores = next(p for p in result["parts"] if p["part"] == "scores")
    assert scores["state"] == "broken" and scores["detail"]


def test_textfile_gauges_say_which_part_went_stale(pipeline, capsys):
    from prometheus_client.parser import text_string_to_metric_families

    # the lake stopped 40 minutes ago (limit 30m); every other part is within its limit
    now = NEWEST + timedelta(minutes=40)
    code, _ = _status(pipeline, capsys, "--now", now.isoformat(), "--textfile")
    assert code == EXIT_FAILURE
    text = (pipeline / "outbox" / "foreshock_status.prom").read_text()
    samples = {
        (s.name, s.labels.get("part")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("foreshock_part_ok", "lake")] == 0
    assert samples[("foreshock_part_ok", "scores")] == 1
    assert samples[("foreshock_part_age_seconds", "lake")] == pytest.approx(40 * 60)
    assert samples[("foreshock_part_max_age_seconds", "lake")] == 30 * 60
    assert samples[("foreshock_part_newest_timestamp_seconds", "champion")] > 0
    assert samples[("foreshock_status_timestamp_seconds", None)] == now.timestamp()


def test_status_answers_without_loading_mlflow_or_prefect(pipeline):
    """A probe every minute must not pay for MLflow's client and Prefect (seconds to import
    on a small machine): the champion is read straight from the embedded store."""
    import os
    import subprocess
    import sys

    probe = (
        "import sys; from foreshock.pipelines.cli import main; code = main(sys.argv[1:]); "
        "print('loaded:', sorted(m for m in ('mlflow', 'prefect', 'sqlalchemy', 'apprise') if m in sys.modules)); "
        "sys.exit(code)"
    )
    now = (NEWEST + timedelta(minutes=10)).isoformat()
    done = subprocess.run(
        [sys.executable, "-c", probe, "--data-dir", str(pipeline), "status", "--json", "--now", now],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "FORESHOCK_MODELS_NAME": os.environ["FORESHOCK_MODELS_NAME"]},
    )
    assert done.returncode == EXIT_OK, done.stderr
    result, loaded = done.stdout.rsplit("loaded:", 1)
    assert loaded.strip() == "[]"
    champion = {p["part"]: p for p in json.loads(result)["parts"]}["champion"]
    assert champion["state"] == "ok" and "version 1" in champion["detail"]
