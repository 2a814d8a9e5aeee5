"""``foreshock publish`` as a real Prefect flow run, through the CLI."""

from __future__ import annotations

import polars as pl
from conftest import score_rows, write_scores

from pipelines.cli import main


def test_publish_command_runs_the_flow_and_prints_the_top(prefect_server, drain_config, capsys):
    data_dir = drain_config.data_dir
    write_scores(data_dir, score_rows({"gpu-node001-gpu0": (1.0, 1.0), "gpu-node002-gpu0": 0.15, "gpu-node003-gpu0": 0.01}))
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
    assert (outbox / "policy_state.parquet").is_file()

    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    async def publish_runs():
        async with get_client() as client:
            return await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["publish"])))

    runs = asyncio.run(publish_runs())
    assert any(r.state and r.state.is_completed() for r in runs)


def test_publish_without_scores_says_what_is_missing(drain_config, capsys):
    assert main(["--data-dir", str(drain_config.data_dir), "publish"]) == 1
    assert "no scores to publish" in capsys.readouterr().err
