"""The live scores folder: every run kept, the newest one where publish and status read it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from polars.testing import assert_frame_equal

from foreshock.models.registry.score_files import latest_path, newest_scored, run_files, write_scores

T0 = datetime(2026, 11, 20, 12, tzinfo=UTC)


def _scores(ts: datetime, risk: float) -> pl.DataFrame:
    return pl.DataFrame({"unit_id": ["n1-gpu0", "n2-gpu0"], "ts": [ts, ts - timedelta(hours=1)], "risk": [risk] * 2})


def test_each_run_is_kept_and_the_newest_is_latest(tmp_path):
    scores_dir = tmp_path / "scores"
    assert newest_scored(scores_dir) is None and run_files(scores_dir) == []

    write_scores(_scores(T0, 0.1), scores_dir, "20261120T120500Z")
    written = write_scores(_scores(T0 + timedelta(hours=1), 0.2), scores_dir, "20261120T130500Z")

    assert written == latest_path(scores_dir)
    assert [p.name for p in run_files(scores_dir)] == [
        "scores-20261120T120500Z.parquet",
        "scores-20261120T130500Z.parquet",
    ]
    assert_frame_equal(pl.read_parquet(written), _scores(T0 + timedelta(hours=1), 0.2))
    assert newest_scored(scores_dir) == (T0 + timedelta(hours=1), 2)
