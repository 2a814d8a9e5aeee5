"""SIGKILL the lake's writers (ingest, features) at a random point, rerun, compare with a
clean run.  benchmarks/fault_injection.py kills every stage (backtest, train, score and
publish too) many times; a round of all six takes tens of minutes on 2 shared cores."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_harness():
    spec = importlib.util.spec_from_file_location("fault_injection", ROOT / "benchmarks" / "fault_injection.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_killed_stage_reruns_to_the_clean_result(tmp_path, prefect_server, seed):
    from prefect.settings import PREFECT_API_URL

    faults = load_harness()
    harness = faults.prepare(tmp_path / "work", units=16, days=7, seed=11, api_url=PREFECT_API_URL.value())
    stages = ("ingest", "features")
    harness.clean_run(until=stages[-1])
    rng = random.Random(seed)
    # killed in the first half of the clean run time, so the kill lands before the stage ends
    trials = [faults.inject(harness, stage, rng, number, within=(0.1, 0.5)) for number, stage in enumerate(stages)]
    print(faults.summarise(trials, harness.clean_seconds))
    assert all(t.killed for t in trials), "a stage finished before its kill: nothing was tested"
    assert not [t for t in trials if t.stale_lock], "a killed stage left the lake locked"
    assert not [p for t in trials for p in t.partial], "a killed stage left a partial file visible"
    assert not [m for t in trials for m in t.mismatches]
