"""``--failure-rate``: a fleet failing as often as requested, with the demo's modes and precursors."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from foreshock.pipelines.cli import main as cli_main
from foreshock.simulate import SimulationParams, simulate_fleet
from foreshock.simulate.fleet import MODES, build_fleet, schedule_lives, unit_days_in_service
from foreshock.simulate.formats import failures_in_window, ground_truth_frame

# Large enough that sampling noise is well inside the 15 % asked for (about 580 failures at
# 0.5 per 1,000 GPU-days: a standard error of 4 %), small enough to draw in about a second:
# only the failure schedule is drawn, no telemetry.
UNITS = 20_000
DAYS = 60
# sha256 of the demo fleet's ground truth (CSV text) as drawn before --failure-rate existed.
DEMO_TRUTH_SHA256 = "69e033dcfd311b01aa351da3f9e971efed4dc76c4c8b4e311146db86c85a5771"


def _schedule(units: int = UNITS, **kwargs):
    params = SimulationParams(units=units, days=DAYS, seed=3, **kwargs)
    lives = schedule_lives(build_fleet(params), params)
    return failures_in_window(lives, params), unit_days_in_service(lives, params)


def _mode_shares(failed) -> dict[str, float]:
    counts = Counter(x.mode for x in failed)
    return {mode: counts[mode] / len(failed) for mode in MODES}


@pytest.fixture(scope="module")
def demo_mix() -> dict[str, float]:
    """The mode mix of the default (demo) rate on the same large fleet."""
    failed, _ = _schedule()
    return _mode_shares(failed)


@pytest.mark.parametrize("rate", [0.5, 5.0])
def test_observed_rate_is_the_requested_one_with_the_demo_mode_mix(rate, demo_mix):
    failed, unit_days = _schedule(failure_rate=rate)
    observed = 1000.0 * len(failed) / unit_days
    assert observed == pytest.approx(rate, rel=0.15)
    shares = _mode_shares(failed)
    for mode in MODES:
        assert shares[mode] == pytest.approx(demo_mix[mode], abs=0.06), mode
    with_precursor = sum(x.has_precursor for x in failed) / len(failed)
    assert with_precursor == pytest.approx(1.0 - demo_mix["sudden"], abs=0.06)


def test_the_rate_holds_where_repairs_take_a_visible_share_of_the_time():
    # At 100 per 1,000 GPU-days a bad-lot GPU is in repair about a third of the time; the
    # plain hazard would be observed about 7 % low, the calibrated one is not (about 12,000
    # failures on 2,000 GPUs: a standard error of 1 %).
    failed, unit_days = _schedule(units=2_000, failure_rate=100.0)
    assert 1000.0 * len(failed) / unit_days == pytest.approx(100.0, rel=0.03)


def test_without_a_rate_the_demo_ground_truth_is_unchanged():
    # The demo fleet (256 GPUs, 30 days, seed 7) as drawn before the option existed: a
    # digest of its ground truth.  If the simulator's draws change on purpose, update it.
    params = SimulationParams(seed=7)
    fleet = build_fleet(params)
    truth = ground_truth_frame(fleet, failures_in_window(schedule_lives(fleet, params), params))
    digest = hashlib.sha256(truth.write_csv().encode()).hexdigest()
    assert truth.height == 49
    assert digest == DEMO_TRUTH_SHA256


def test_the_requested_rate_is_recorded_and_a_plain_run_writes_no_rate(tmp_path):
    rated = simulate_fleet(tmp_path / "rated", units=16, days=2, seed=2, failure_rate=40.0)
    written = json.loads((tmp_path / "rated" / "simulation.json").read_text())
    assert written["parameters"]["failure_rate"] == 40.0
    record = written["failure_rate"]
    assert record["requested_per_1000_unit_days"] == 40.0
    assert record["observed_per_1000_unit_days"] == pytest.approx(
        1000.0 * rated["failures"]["total"] / record["unit_days_in_service"], rel=1e-3
    )
    # In service: at most every slot for the whole span, less the repairs under way.
    assert 0 < record["unit_days_in_service"] <= 16 * 2
    simulate_fleet(tmp_path / "plain", units=16, days=2, seed=2)
    plain = json.loads((tmp_path / "plain" / "simulation.json").read_text())
    assert "failure_rate" not in plain and "failure_rate" not in plain["parameters"]


def test_the_command_prints_the_requested_and_observed_rate(tmp_path, capsys):
    rc = cli_main(["--data-dir", str(tmp_path), "simulate", "--units", "16", "--days", "1", "--failure-rate", "30"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "per 1,000 GPU-days in service observed (requested 30)" in printed


@pytest.mark.parametrize("value", ["0", "-0.5", "nan", "inf"])
def test_a_rate_that_is_not_positive_is_rejected_clearly(tmp_path, capsys, value):
    rc = cli_main(["--data-dir", str(tmp_path), "simulate", "--out", str(tmp_path / "x"), "--failure-rate", value])
    assert rc == 2
    assert "failure rate must be a positive number of failures per 1,000 unit-days" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
