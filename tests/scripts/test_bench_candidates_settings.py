"""benchmarks/bench_candidates.py's ``--set SECTION.KEY=VALUE``: a setting changed for every
candidate keeps its TOML type, and a malformed or unknown one stops the run before any fit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_candidates import settings_overrides  # noqa: E402


def test_values_keep_their_toml_types():
    got = settings_overrides(
        ["models.sample_rule_firing=true", "models.max_healthy_rows = 1600000", 'labels.horizons=["24h"]']
    )
    assert got == {
        "models": {"sample_rule_firing": True, "max_healthy_rows": 1_600_000},
        "labels": {"horizons": ["24h"]},
    }


@pytest.mark.parametrize("bad", ["max_healthy_rows=5", "models.max_healthy_rows", "models.x=not toml"])
def test_a_malformed_setting_is_refused(bad):
    with pytest.raises(SystemExit, match="--set"):
        settings_overrides([bad])


def test_an_unknown_setting_stops_the_run_before_any_fit(tmp_path):
    config = tmp_path / "foreshock.toml"
    config.write_text("")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/bench_candidates.py"),
            "--config",
            str(config),
            "--data-dir",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--candidates",
            "gbm",
            "--set",
            "models.max_healthy_row=5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "no such setting models.max_healthy_row" in done.stderr
    assert not (tmp_path / "out").exists()
