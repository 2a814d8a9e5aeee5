"""Error counters as a percentile among the same hardware model's units at the same snapshot
(``[features] peer_relative``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from fleet_helpers import make_fleet

from foreshock.features.build import build_features, output_schema
from foreshock.features.peers import PEER_WEIGHT, add_peer_relative, peer_relative_columns
from foreshock.features.spec import feature_spec

T = datetime(2026, 11, 2, tzinfo=UTC)
SBE = "ecc_sbe_volatile_total_increase_1h"
PCT = f"{SBE}_model_pct"


@pytest.fixture
def spec(small_config):
    return replace(feature_spec(small_config), peer_relative=True)


def _snapshot(units: dict[str, tuple[str, float, float]], ts: datetime = T) -> pl.DataFrame:
    """One snapshot: unit -> (model, SBE increase over 1h, fleet_weight)."""
    return pl.DataFrame(
        {
            "unit_id": list(units),
            "ts": [ts] * len(units),
            "rack": [f"rack-{u}" for u in units],
            "model": [m for m, _, _ in units.values()],
            SBE: [v for _, v, _ in units.values()],
            PEER_WEIGHT: [w for _, _, w in units.values()],
        }
    )


def _pct(frame: pl.DataFrame, unit: str) -> float:
    return frame.filter(pl.col("unit_id") == unit)[PCT].item()


def test_a_count_high_for_its_model_but_ordinary_for_the_fleet_ranks_high(spec):
    # A100s seldom log SBEs; H100s log tens an hour. 3 is the fleet's lowest non-zero count
    # but the most any A100 logged.
    units = {f"a{i}": ("A100", 0.0, 1.0) for i in range(5)}
    units["a-odd"] = ("A100", 3.0, 1.0)
    units.update({f"h{i}": ("H100", 10.0 + 5 * i, 1.0) for i in range(6)})
    out = add_peer_relative(_snapshot(units), spec)
    assert _pct(out, "a-odd") > 0.9
    assert _pct(out, "a0") < 0.5
    # Against the whole fleet it would be in the lower half: ranked only among its model.
    assert (pl.Series([v for _, v, _ in units.values()]) > 3.0).sum() == 6
    # Within a model the percentile follows the count.
    h = out.filter(pl.col("model") == "H100").sort(SBE)[PCT]
    assert h.is_sorted() and h.n_unique() == 6


def test_weights_count_each_unit_as_the_fleet_units_it_stands_for(spec):
    # A subsampled fleet: four kept healthy units standing for 20 each, four failing ones
    # (weight 1) with counts. Unweighted, a count of 2 is mid-list; in the fleet the healthy
    # units stand for, it is above almost everything.
    units = {f"ok{i}": ("HDD", 0.0, 20.0) for i in range(4)}
    units.update({f"bad{i}": ("HDD", float(i + 1), 1.0) for i in range(4)})
    weighted = add_peer_relative(_snapshot(units), spec)
    unweighted = add_peer_relative(_snapshot(units).with_columns(pl.lit(1.0).alias(PEER_WEIGHT)), spec)
    assert _pct(unweighted, "bad1") == pytest.approx((4 + 1 + 0.5) / 8)
    assert _pct(weighted, "bad1") == pytest.approx((80 + 1 + 0.5) / 84)
    # The zeros are most of the weighted fleet: their shared mid-rank moves up to near 1/2.
    assert _pct(weighted, "ok0") == pytest.approx(0.5 * 80 / 84)
    assert _pct(unweighted, "ok0") == pytest.approx(0.5 * 4 / 8)


def test_only_the_same_snapshot_and_known_values_count(spec):
    earlier = _snapshot({"u1": ("A100", 0.0, 1.0), "u2": ("A100", 100.0, 1.0)}, T - timedelta(hours=1))
    now = _snapshot({"u1": ("A100", 5.0, 1.0), "u2": ("A100", 1.0, 1.0), "u3": ("A100", None, 1.0)})
    both = add_peer_relative(pl.concat([earlier, now]), spec).filter(pl.col("ts") == T)
    alone = add_peer_relative(now, spec)
    assert both.sort("unit_id")[PCT].to_list() == alone.sort("unit_id")[PCT].to_list() == [0.75, 0.25, None]


def test_off_by_default_and_on_in_the_build(small_config, tmp_path):
    assert peer_relative_columns(feature_spec(small_config)) == []
    config = small_config.with_overrides({"features": {"peer_relative": True}})
    spec = feature_spec(config)
    fleet = make_fleet(3, units=6, days=1.5, failures=0)
    fleet.write(config.lake_dir)
    frame = build_features(config.lake_dir, config)
    assert frame.schema == pl.Schema(output_schema(spec))  # the helper weight column is dropped
    pct = frame[PCT].drop_nulls()
    assert pct.len() > 0 and pct.min() > 0 and pct.max() < 1
    # Each model's units at one snapshot share the percentile mass: the mean is 1/2.
    means = frame.drop_nulls(PCT).group_by("model", "ts").agg(pl.col(PCT).mean())[PCT]
    assert ((means - 0.5).abs() < 1e-9).all()
