"""One freshness check: the fleet page's "Pipeline freshness" says what ``foreshock status`` says."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import polars as pl

from foreshock.config import load_config
from foreshock.contract import conform
from foreshock.lake.merge import merge_into_lake
from foreshock.models.registry.score_files import write_scores
from foreshock.pipelines.cli import main
from foreshock.reporting.fleet_status import fleet_status
from foreshock.reporting.fleet_status_report import render_fleet_page

NEWEST = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _half_filled(data) -> None:
    """Telemetry ending at NEWEST and one scoring run; no features, no publish."""
    times = [NEWEST - timedelta(hours=h) for h in (2, 1, 0)]
    samples = pl.DataFrame(
        {"unit_id": ["n1-gpu0"] * 3, "ts": times, "metric": ["gpu_temp_c"] * 3, "value": [60.0, 61.0, 62.0]}
    )
    merge_into_lake(data / "lake", "samples", conform(samples, "samples"))
    scores = pl.DataFrame(
        {
            "unit_id": ["n1-gpu0", "n2-gpu0"],
            "ts": [NEWEST - timedelta(minutes=30)] * 2,
            "model": ["gbm"] * 2,
            "horizon": ["72h"] * 2,
            "risk": [0.2, 0.7],
        }
    )
    write_scores(scores, data / "scores", "20261120T113000Z")


def _page_freshness(page: str) -> dict[str, tuple[str, str, str]]:
    """``part: (state, age, detail)`` from the page's freshness table."""
    section = page[page.index('id="pipeline-freshness"') :]
    rows = re.findall(r"<tr>(<td.*?)</tr>", section)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    return {c[0]: (re.sub(r"<[^>]+>", "", c[1]), c[3], c[6]) for c in cells}


def test_page_and_status_judge_freshness_alike(tmp_path, capsys, mlflow_uri, monkeypatch):
    monkeypatch.setenv("FORESHOCK_MODELS_NAME", "freshness-never-registered")
    data = tmp_path / "data"
    _half_filled(data)
    now = NEWEST + timedelta(hours=1)  # lake 1h old (limit 30m), scores 1h30m old (limit 2h)
    page = _page_freshness(render_fleet_page(fleet_status(load_config(data_dir=data), now=now)))

    assert main(["--data-dir", str(data), "status", "--json", "--now", now.isoformat()]) != 0
    status = {p["part"]: p for p in json.loads(capsys.readouterr().out)["parts"]}

    assert list(page) == list(status) == ["lake", "features", "scores", "outbox", "champion"]
    assert {part: page[part][0] for part in page} == {part: status[part]["state"] for part in status}
    assert page["lake"][0] == "stale" and page["scores"][0] == "ok" and page["features"][0] == "broken"
    assert page["scores"][1] == status["scores"]["age"] == "1h30m"
    assert "foreshock publish" in page["outbox"][2]
    assert page["champion"][0] == "broken" and "freshness-never-registered@champion" in page["champion"][2]
