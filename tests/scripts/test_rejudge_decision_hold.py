"""``benchmarks/rejudge_policy.py --decision-hold``: the decision horizon's risk replaced by
its held value over the extra snapshots, so the judge's own hold makes the longer one; the
second horizon's series untouched; a gap in the snapshots breaks a run."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from rejudge_policy import decision_held  # noqa: E402

from foreshock.config import load_config  # noqa: E402

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_the_decision_risk_is_held_the_extra_snapshots_and_the_second_is_not():
    hours = [h for h in range(18) if h != 12]  # no snapshot at hour 12: a gap
    r72 = {h: (0.9 if 2 <= h < 9 else 0.1) for h in hours}
    rows = [
        ("gbm", "u1", T0 + timedelta(hours=h), hz, r72[h] if hz == "72h" else 0.5)
        for h in hours
        for hz in ("24h", "72h")
    ]
    scores = pl.DataFrame(rows, schema=["model", "unit_id", "ts", "horizon", "risk"], orient="row")
    config = load_config().with_overrides({"features": {"snapshot_every": "1h"}})
    # a 6 h hold of the decision risk against the judge's 3 h: 3 extra snapshots
    out = decision_held(scores.lazy(), config, "6h", "3h").collect().sort("horizon", "ts")
    held = dict(
        zip(
            out.filter(pl.col("horizon") == "72h").get_column("ts"),
            out.filter(pl.col("horizon") == "72h").get_column("risk"),
        )
    )
    at = lambda h: held[T0 + timedelta(hours=h)]  # noqa: E731
    assert [at(h) for h in (0, 1, 2)] == [0.0, 0.0, 0.0]  # fewer than 4 snapshots yet
    assert at(4) == pytest.approx(0.1) and at(5) == pytest.approx(0.9) and at(8) == pytest.approx(0.9)
    assert at(9) == pytest.approx(0.1)  # the minimum of hours 6..9
    # the gap at hour 12 breaks the run: four consecutive snapshots again from hour 16
    assert at(13) == 0.0 and at(15) == 0.0 and at(16) == pytest.approx(0.1)
    assert out.filter(pl.col("horizon") == "24h").get_column("risk").to_list() == [0.5] * len(hours)
    # no longer than the judge's own hold: nothing changes
    assert decision_held(scores.lazy(), config, "3h", "3h").collect().equals(scores)
