"""Fleet reliability recovers known lifetimes and cohort effects."""

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from foreshock.contract import conform
from foreshock.models.reliability.lives import unit_lives
from foreshock.models.reliability.survival import cohort_reliability, cox_hazard_ratios, failure_rates

T0 = datetime(2020, 1, 1, tzinfo=UTC)


def _fleet(seed: int, n: int = 3000, hot_factor: float = 3.0, end_days: float = 2000.0):
    """Weibull(shape 2) lifetimes; 'hot' racks fail faster by a hazard ratio of hot_factor."""
    rng = np.random.default_rng(seed)
    hot = rng.random(n) < 0.5
    shape, scale = 2.0, 1500.0
    # hazard ratio r on a Weibull scales its scale parameter by r ** (-1 / shape)
    scales = np.where(hot, scale * hot_factor ** (-1 / shape), scale)
    life = scales * rng.weibull(shape, n)
    inventory = conform(
        pl.DataFrame(
            {
                "unit_id": [f"u{i}" for i in range(n)],
                "node": [f"n{i // 8}" for i in range(n)],
                "rack": np.where(hot, "hot", "cool").tolist(),
                "model": ["H100"] * n,
                "lot": ["A"] * n,
                "installed_at": [T0] * n,
            }
        ),
        "inventory",
    )
    failed = life < end_days
    failures = conform(
        pl.DataFrame(
            {
                "unit_id": [f"u{i}" for i in np.flatnonzero(failed)],
                "failed_at": [T0 + timedelta(days=float(d)) for d in life[failed]],
                "mode": ["DBE"] * int(failed.sum()),
            }
        ),
        "failures",
    )
    return inventory, failures, T0 + timedelta(days=end_days), life


def test_lives_are_censored_at_the_end_of_observation(seed):
    inventory, failures, end, life = _fleet(seed, n=200)
    lives = unit_lives(inventory, failures, observed_until=end)
    first = lives.filter(pl.col("life") == 0).sort(pl.col("unit_id").str.slice(1).cast(pl.Int64))
    assert first["event"].sum() == failures.height
    expected = np.minimum(life, 2000.0)
    assert np.allclose(first["duration_days"].to_numpy(), expected, atol=1e-3)


def test_replaced_slot_starts_a_new_life():
    inventory = conform(
        pl.DataFrame({"unit_id": ["s1"], "node": ["n1"], "rack": ["r1"], "model": ["m"], "installed_at": [T0]}),
        "inventory",
    )
    failures = conform(
        pl.DataFrame({"unit_id": ["s1"], "failed_at": [T0 + timedelta(days=10)], "mode": ["OTB"]}), "failures"
    )
    lives = unit_lives(inventory, failures, observed_until=T0 + timedelta(days=25)).sort("life")
    assert lives["life"].to_list() == [0, 1]
    assert lives["duration_days"].to_list() == pytest.approx([10.0, 15.0])
    assert lives["event"].to_list() == [1, 0]


def test_weibull_and_cox_recover_the_simulated_fleet(seed):
    inventory, failures, end, _ = _fleet(seed)
    # the simulated lifetimes are of the first GPU in each slot; replacements are not simulated
    lives = unit_lives(inventory, failures, observed_until=end).filter(pl.col("life") == 0)
    by_rack = {r.cohort: r for r in cohort_reliability(lives, "rack")}
    assert by_rack["rack=cool"].weibull_shape == pytest.approx(2.0, rel=0.15)
    assert by_rack["rack=cool"].weibull_scale_days == pytest.approx(1500.0, rel=0.1)
    assert by_rack["rack=hot"].mttf_days < by_rack["rack=cool"].mttf_days
    hr = cox_hazard_ratios(lives, ["rack"]).row(0, named=True)
    assert hr["covariate"] == "rack_hot"
    assert hr["ci_low"] < 3.0 < hr["ci_high"] or hr["hazard_ratio"] == pytest.approx(3.0, rel=0.2)


def test_other_modes_censor_a_cause_specific_analysis():
    inventory = conform(
        pl.DataFrame(
            {
                "unit_id": ["a", "b"],
                "node": ["n", "n"],
                "rack": ["r", "r"],
                "model": ["m", "m"],
                "installed_at": [T0, T0],
            }
        ),
        "inventory",
    )
    failures = conform(
        pl.DataFrame(
            {
                "unit_id": ["a", "b"],
                "failed_at": [T0 + timedelta(days=3), T0 + timedelta(days=5)],
                "mode": ["DBE", "OTB"],
            }
        ),
        "failures",
    )
    lives = unit_lives(inventory, failures, observed_until=T0 + timedelta(days=5), mode="DBE")
    assert lives.filter(pl.col("life") == 0).sort("unit_id")["event"].to_list() == [1, 0]


def test_units_installed_before_observation_enter_late(seed):
    """Left truncation: a fleet first observed after years in service is not 'immortal'."""
    inventory, failures, end, life = _fleet(seed, n=4000, hot_factor=1.0, end_days=2000.0)
    observed_from = T0 + timedelta(days=600)
    seen = failures.filter(pl.col("failed_at") >= observed_from)
    alive = [f"u{i}" for i in np.flatnonzero(life >= 600)]
    lives = unit_lives(inventory.filter(pl.col("unit_id").is_in(alive)), seen, end, observed_from=observed_from)
    first = lives.filter(pl.col("life") == 0)
    assert first["entry_days"].min() == pytest.approx(600.0)
    for cohort in cohort_reliability(first, "rack"):  # hot_factor 1: both racks alike
        assert cohort.weibull_shape == pytest.approx(2.0, rel=0.2)
        assert cohort.weibull_scale_days == pytest.approx(1500.0, rel=0.15)


def test_failure_rates_per_exposure():
    inventory = conform(
        pl.DataFrame(
            {
                "unit_id": ["a", "b", "c"],
                "node": ["n"] * 3,
                "rack": ["hot", "cool", "cool"],
                "model": ["m"] * 3,
                "installed_at": [T0] * 3,
            }
        ),
        "inventory",
    )
    failures = conform(
        pl.DataFrame({"unit_id": ["a"], "failed_at": [T0 + timedelta(days=10)], "mode": ["DBE"]}), "failures"
    )
    lives = unit_lives(inventory, failures, observed_until=T0 + timedelta(days=10))
    rates = {r["rack"]: r for r in failure_rates(lives, "rack").iter_rows(named=True)}
    assert rates["hot"]["per_1000_unit_days"] == pytest.approx(100.0)  # 1 failure in 10 unit-days
    assert rates["cool"]["failures"] == 0 and rates["cool"]["unit_days"] == pytest.approx(20.0)
