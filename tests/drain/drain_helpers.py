"""Small score frames for the drain tests (imported by name: conftest modules are not)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from foreshock.costs import DrainCosts
from foreshock.models.registry.score_files import latest_path

T0 = datetime(2026, 11, 1, tzinfo=UTC)

# Costs whose GPU-hours the replay and learned-chooser tests work out by hand: an unplanned
# failure 100 x (2 h / 2 + 0.5 h) = 150, a drain 100 x 0.1 h = 10, a unit out 24 h.
HAND_COSTS = DrainCosts(
    job_gpus=100,
    checkpoint_interval=timedelta(hours=2),
    restart_time=timedelta(minutes=30),
    drain_overhead=timedelta(minutes=6),
    repair_turnaround=timedelta(days=1),
)


def recent() -> datetime:
    """The start of the previous hour: scores fresh enough to publish now."""
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)


SLURM_NODES = [f"gpu-node{i:03d}" for i in range(1, 9)]


def score_rows(
    risks: dict[str, float | tuple[float, float]],
    ts: datetime | None = None,
    *,
    rack_of=lambda node: "r1",
    model_name: str = "foreshock-risk",
    model_version: str = "3",
    signal: str = "ecc_sbe_increase_24h",
) -> pl.DataFrame:
    """Live scores for ``{unit_id: risk_72h}`` or ``{unit_id: (risk_24h, risk_72h)}``.

    The node is the unit id up to ``-gpu``; the 24h risk defaults to half the 72h risk;
    the snapshot time defaults to :func:`recent`.
    """
    ts = ts or recent()
    rows = []
    for unit_id, risk in risks.items():
        r24, r72 = risk if isinstance(risk, tuple) else (risk / 2, risk)
        node = unit_id.split("-gpu")[0]
        for horizon, value in (("24h", r24), ("72h", r72)):
            rows.append(
                {
                    "unit_id": unit_id,
                    "ts": ts,
                    "node": node,
                    "rack": rack_of(node),
                    "horizon": horizon,
                    "risk": value,
                    "model": "gbm",
                    "model_name": model_name,
                    "model_version": model_version,
                    "run_id": "0123abcd",
                    "top_signals": [{"signal": signal, "value": 42.0, "contribution": 0.3}],
                }
            )
    return pl.DataFrame(rows).with_columns(pl.col("ts").dt.cast_time_unit("us"))


def write_scores(data_dir: Path, frame: pl.DataFrame) -> Path:
    path = latest_path(Path(data_dir) / "scores")  # where publish reads live scores
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(path)
    return path
