"""The risk bundle: every model side by side, saved without pickles, loaded back identically."""

from __future__ import annotations

import json

import pytest

from foreshock.config import load_config
from foreshock.models.estimators.bundle import RiskBundle, train_bundle
from tests.models.synthetic_fleet import synthetic_fleet


def test_round_trip_gives_identical_scores_and_explanations(rng, tmp_path):
    fleet = synthetic_fleet(rng, units=60, days=16)
    bundle = train_bundle(fleet.features, fleet.failures, load_config())
    assert sorted(bundle.models) == ["baseline", "cox", "gbm"]
    assert bundle.primary == "gbm" and bundle.horizons == ["24h", "72h"]
    scores = bundle.score(fleet.features)
    assert scores.columns == ["unit_id", "ts", "model", "horizon", "risk"]
    assert scores.height == fleet.features.height * 3 * 2
    assert scores.get_column("risk").is_between(0, 1).all()

    bundle.save(tmp_path / "bundle")
    files = sorted(str(p.relative_to(tmp_path / "bundle")) for p in (tmp_path / "bundle").rglob("*") if p.is_file())
    assert all(f.endswith((".json", ".txt")) for f in files), files  # JSON + LightGBM text, no pickles
    meta = json.loads((tmp_path / "bundle" / "bundle.json").read_text())
    assert meta["models"] == {"gbm": "gbm", "cox": "cox", "baseline": "baseline"}

    again = RiskBundle.load(tmp_path / "bundle")
    assert again.score(fleet.features).equals(scores)
    sample = fleet.features.sample(200, seed=1)
    assert again.explain(sample, top=3).equals(bundle.explain(sample, top=3))
    assert again.trained_range == bundle.trained_range


def test_primary_model_without_failures_is_a_clear_error(rng):
    fleet = synthetic_fleet(rng, units=20, days=5)
    with pytest.raises(ValueError, match="primary model 'gbm' could not be trained"):
        train_bundle(fleet.features, fleet.failures.clear(), load_config())


def test_loading_something_else_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        RiskBundle.load(tmp_path)
