"""``foreshock publish`` as a real Prefect flow run, through the CLI."""

from __future__ import annotations

import json

import polars as pl
import pytest
from drain_helpers import score_rows, write_scores

from foreshock.pipelines.cli import main


def test_publish_command_runs_the_flow_and_prints_the_top(prefect_server, drain_config, capsys):
    data_dir = drain_config.data_dir
    write_scores(
        data_dir, score_rows({"gpu-node001-gpu0": (1.0, 1.0), "gpu-node002-gpu0": 0.15, "gpu-node003-gpu0": 0.01})
    )
    assert main(["--data-dir", str(data_dir), "publish", "--top", "5"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["gpu-node001-gpu0", "gpu-node001", "drain_now"]
    assert lines[2].split()[:3] == ["gpu-node002-gpu0", "gpu-node002", "watch"]
    outbox = data_dir / "outbox"
    latest = outbox / (outbox / "LATEST").read_text().strip()
    assert f"outbox: {latest}" in out
    listed = pl.read_parquet(latest / "risk_list.parquet")
    assert listed.height == 3
    assert (latest / "policy_state.parquet").is_file()
    # --json: the same outbox and top of the list, as one parsable document
    assert main(["--data-dir", str(data_dir), "publish", "--top", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    again = outbox / (outbox / "LATEST").read_text().strip()
    assert result["outbox"] == str(again) and "risk_list.parquet" in result["files"]
    assert [row["unit_id"] for row in result["top"]] == ["gpu-node001-gpu0", "gpu-node002-gpu0"]

    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    async def publish_runs():
        async with get_client() as client:
            return await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["publish"])))

    runs = asyncio.run(publish_runs())
    assert any(r.state and r.state.is_completed() for r in runs)


def test_publish_refuses_stale_scores_unless_allowed(prefect_server, drain_config, capsys):
    from drain_helpers import T0

    data_dir = drain_config.data_dir
    write_scores(data_dir, score_rows({"gpu-node001-gpu0": (1.0, 1.0)}, T0))
    assert main(["--data-dir", str(data_dir), "publish"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # the last log line (after its timestamp and level) says why and how to override
    assert "foreshock publish: scores are " in err[-1] and "--allow-stale" in err[-1]
    assert not (data_dir / "outbox" / "LATEST").exists()
    assert main(["--data-dir", str(data_dir), "publish", "--allow-stale"]) == 0
    assert (data_dir / "outbox" / "LATEST").is_file()


def test_publish_without_scores_says_what_is_missing(drain_config, capsys):
    assert main(["--data-dir", str(drain_config.data_dir), "publish"]) == 2
    assert "no scores to publish" in capsys.readouterr().err


def test_replay_command_writes_the_report(prefect_server, drain_config, capsys):
    from datetime import timedelta

    from drain_helpers import T0

    from foreshock.lake.merge import merge_into_lake

    data_dir = drain_config.data_dir
    failing, healthy = "gpu-node001-gpu0", "gpu-node002-gpu0"
    failed_at = T0 + timedelta(hours=40)
    rows = [
        {
            "unit_id": u,
            "ts": T0 + timedelta(hours=h),
            "model": m,
            "horizon": horizon,
            "risk": 0.9 if (m == "gbm" and u == failing and 10 <= h < 40) else 0.01,
        }
        for m in ("gbm", "baseline")
        for u in (failing, healthy)
        for h in range(48)
        for horizon in ("24h", "72h")  # every [labels] horizon, as a backtest scores them
    ]
    scores = pl.DataFrame(rows).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    (data_dir / "backtest").mkdir(parents=True)
    scores.write_parquet(data_dir / "backtest" / "scores.parquet")
    merge_into_lake(
        drain_config.lake_dir,
        "failures",
        pl.DataFrame({"unit_id": [failing], "failed_at": [failed_at], "mode": ["hbm"]}),
    )

    assert main(["--data-dir", str(data_dir), "replay", "--no-plots"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.startswith("| ") and "drained ahead" in line)
    header = [cell.strip() for cell in lines[header_at].split("|")]
    column = header.index("drained ahead")
    rows_by_policy = {}
    for line in lines[header_at + 2 :]:
        if not line.startswith("| "):
            break
        cells = [cell.strip() for cell in line.split("|")]
        rows_by_policy[cells[1]] = cells
    assert rows_by_policy["gbm"][column] == "1"
    assert rows_by_policy["baseline"][column] == "0"
    assert (data_dir / "reports" / "replay" / "replay.json").is_file()
    # the default entry, said where operators read the replay
    report = (data_dir / "reports" / "replay" / "replay.md").read_text()
    assert "a unit enters drain once risk_72h >= 0.6 held 2d or risk_24h >= 0.4 held 6h" in report


def test_command_help_is_printable(capsys):
    for command in ("publish", "replay"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        assert f"usage: foreshock {command}" in capsys.readouterr().out
