"""Review: the challenger's recipe is refitted before the review window, both versions are
judged on that window only, guardrails read bootstrap intervals; the champion alias moves
only when every guardrail holds; a report is written either way."""

from __future__ import annotations

import json
import math

import mlflow
import polars as pl
import pytest
from test_registry_fleet import SBE, TEMP, fast_config, synthetic_fleet, train_and_register

from foreshock.contract import label_column
from foreshock.durations import parse_duration
from foreshock.models.estimators import bundle as bundle_module
from foreshock.models.estimators.base import config_horizons
from foreshock.models.estimators.gbm import EXCLUDED_FEATURES
from foreshock.models.estimators.training import labelled_until
from foreshock.models.registry import promotion, registry, review

NAME = "review-test"
# Long enough that the history before the review window (and its purge) holds failures.
FLEET = {"units": 72, "days": 24, "failing": 30}
WINDOW = "5d"
RULES_SBE = "ecc_sbe_volatile_total_increase_24h"  # the column the operators' single-bit rule reads


def review_config(data_dir, **review):
    """A quick configuration, a 5-day review window, a drain budget of 2 alerts a day."""
    config = fast_config(data_dir, NAME, window=WINDOW, **review)
    return config.with_overrides({"backtest": {"drain_budget_per_day": 2}})


def worse_recipe(config):
    """The same models, but the gradient-boosted one blind to the error counter that
    announces failures (and to the rules built on it): it can only learn from noise."""
    return config.with_overrides({"models": {"gbm": {"exclude": [*EXCLUDED_FEATURES, SBE], "rules": False}}})


@pytest.fixture(scope="module")
def fleet(mlflow_uri, tmp_path_factory):
    """v1 trained on today's fleet (errors announce failures) is champion; v2, trained on a
    fleet where temperature did, is the challenger."""
    data_dir = tmp_path_factory.mktemp("data")
    config = review_config(data_dir)
    features, failures = synthetic_fleet(seed=21, **FLEET)
    train_and_register(config, features, failures)
    train_and_register(config, *synthetic_fleet(seed=22, precursor=TEMP, **FLEET))
    labelled = labelled_until(features, failures, config_horizons(config))
    return {"data_dir": data_dir, "features": features, "failures": failures, "labelled": labelled}


def test_the_review_challenger_is_trained_before_the_window(fleet, monkeypatch):
    config = review_config(fleet["data_dir"])
    seen = []
    real_fit = bundle_module.fit_models

    def spy(frame, failures, factories, until):
        seen.append({"frame": frame, "failures": failures, "until": until})
        return real_fit(frame, failures, factories, until)

    monkeypatch.setattr(bundle_module, "fit_models", spy)
    result = promotion.run_review(config, fleet["labelled"], fleet["failures"], promote=False)

    (fit,) = seen  # one fit: the challenger's recipe; the champion is scored as registered
    start, end = result.window
    assert end - start == parse_duration(WINDOW)
    horizon = parse_duration(result.horizon)
    frame = fit["frame"]
    # Purged: every training snapshot's horizon closed before the window opened ...
    assert frame.get_column("ts").max() + horizon <= start
    assert fit["until"] == start and fit["failures"].get_column("failed_at").max() <= start
    # ... so every label is resolved at the window start: what the window later reveals
    # changes none of them.
    horizons = config_horizons(config)
    keys = frame.select("unit_id", "ts")
    at_start = labelled_until(keys, fit["failures"], horizons, start)
    at_end = labelled_until(keys, fleet["failures"], horizons, end + horizon)
    for h in horizons:
        assert at_start[label_column(h)].null_count() == 0
        assert at_start[label_column(h)].equals(at_end[label_column(h)])
    assert at_start[label_column(result.horizon)].sum() > 0  # it learnt from failures
    assert frame.height < fleet["features"].filter(fleet["features"]["ts"] < start).height
    # What was scored on the window is that fit, not the registered all-history version.
    assert result.challenger.trained_range[1] == start
    assert result.refit_range[1] > start
    params = mlflow.MlflowClient().get_run(result.run_id).data.params
    assert params["challenger_fit.end"] == start.isoformat()
    assert "0% of the window in-sample" in result.report_md.read_text()


def test_the_review_reads_the_store_window_by_window_with_the_figures_of_the_frame(fleet, tmp_path, monkeypatch):
    # A long history does not fit in memory as one frame: the review reads the feature
    # store's keys for the outcomes and scores its window in batches, and measures exactly
    # what it measures on the same snapshots held in memory.
    from foreshock.features.store import write_features
    from foreshock.models.estimators.dataset import FeatureSource
    from foreshock.models.registry.review_data import ReviewData

    features = fleet["features"]
    day = features.filter(pl.col("ts").dt.date() == features.get_column("ts").min().date()).height  # rows a day
    config = review_config(fleet["data_dir"]).with_overrides({"backtest": {"score_batch_rows": day}})
    write_features(features, tmp_path / "features", 2)
    read = []
    real_rows = FeatureSource.rows

    def spy(self, start, end, columns=None, keys=None):
        out = real_rows(self, start, end, columns, keys)
        read.append((keys is None, out.height))
        return out

    monkeypatch.setattr(FeatureSource, "rows", spy)
    data = ReviewData.from_store(
        FeatureSource.from_dir(tmp_path / "features"), fleet["failures"], config_horizons(config), day
    )
    from_store = review.review_versions(config, data, fleet["failures"], promote=False)
    in_memory = review.review_versions(config, fleet["labelled"], fleet["failures"], promote=False)

    assert from_store.window == in_memory.window
    assert from_store.table().equals(in_memory.table(), null_equal=True)
    assert [(c.name, c.passed) for c in from_store.checks] == [(c.name, c.passed) for c in in_memory.checks]
    assert from_store.rules.metrics == pytest.approx(in_memory.rules.metrics, nan_ok=True)
    assert from_store.decision == in_memory.decision
    # Each of the three (challenger, champion, rules) scored the window in batches of at
    # most a day's rows, never the window whole.
    window_reads = [height for whole, height in read if whole]
    assert max(window_reads) <= day < sum(window_reads) / 3


def test_worse_challenger_stays_out_and_the_report_says_why(fleet):
    config = worse_recipe(review_config(fleet["data_dir"]))
    result = promotion.run_review(config, fleet["labelled"], fleet["failures"])

    assert not result.promoted
    assert registry.aliases(NAME) == {"champion": "1", "challenger": "2"}
    assert result.decision.startswith("kept version 1 as champion: challenger 2 failed")
    checks = {check.name: check for check in result.checks}
    recall = checks["recall at drain budget"]
    assert not recall.passed
    # The whole interval of the difference is a drop; the point estimates are the table's.
    difference = result.intervals["difference"]["recall"]
    assert recall.interval == difference and difference.low <= difference.estimate <= difference.high < 0
    assert recall.challenger == result.challenger.metrics["recall"]
    assert recall.champion == result.champion.metrics["recall"]
    # Same window, same failures for both.
    assert result.champion.metrics["failures"] == result.challenger.metrics["failures"] > 0
    assert result.challenger.metrics["recall"] < result.champion.metrics["recall"]

    markdown = result.report_md.read_text()
    assert result.report_md.parent == config.reports_dir
    assert result.report_md.name.startswith("review-") and result.report_html.suffix == ".html"
    assert "| metric | champion v1 | challenger v2 | change |" in markdown
    recall_row = next(line for line in markdown.splitlines() if line.startswith("| recall at drain budget |"))
    assert recall_row.split("|")[2].strip() == f"{result.champion.metrics['recall']:.3f}"
    guardrail_row = next(
        line for line in markdown.splitlines() if line.startswith("| recall at drain budget | interval")
    )
    assert f"{difference.low:.3f} .. {difference.high:.3f}" in guardrail_row and "FAIL" in guardrail_row
    html = result.report_html.read_text()
    assert "<table>" in html and "data:image/png;base64," in html
    assert set(result.figures) >= {"pr_curve", "calibration", "lead_time_histogram"}
    assert all(path.stat().st_size > 1000 for path in result.figures.values())

    client = mlflow.MlflowClient()
    logged = {a.path for a in client.list_artifacts(result.run_id, "review")}
    assert {f"review/{result.report_md.name}", f"review/{result.report_html.name}", "review/intervals.json"} <= logged
    run = client.get_run(result.run_id)
    assert run.data.tags["foreshock.promoted"] == "false"
    assert run.data.tags["foreshock.refit_run_id"] == client.get_model_version(NAME, "2").run_id
    assert math.isclose(run.data.metrics["champion.recall"], result.champion.metrics["recall"])
    assert math.isclose(run.data.metrics["difference.recall.high"], difference.high)
    assert run.data.metrics["guardrail.recall_at_drain_budget"] == 0.0
    stored = json.loads(mlflow.artifacts.load_text(f"{run.info.artifact_uri}/review/intervals.json"))
    assert stored["intervals"]["difference"]["recall"]["high"] == pytest.approx(difference.high)
    assert client.get_model_version(NAME, "2").tags["foreshock.review"] == "failed"


def test_a_challenger_worse_than_the_ranked_rules_is_refused_and_the_report_says_why(fleet):
    # The blind recipe cannot see the error counter that announces failures; the ranked
    # rules can (the counter under the name their single-bit rule reads): at the same
    # budget on the same window they catch more of the same failures.
    labelled = fleet["labelled"].with_columns(pl.col(SBE).alias(RULES_SBE))
    blind = {"exclude": [*EXCLUDED_FEATURES, SBE, RULES_SBE], "rules": False}
    config = review_config(fleet["data_dir"]).with_overrides({"models": {"gbm": blind}})
    result = promotion.run_review(config, labelled, fleet["failures"], promote=False)

    assert not result.promoted and registry.aliases(NAME) == {"champion": "1", "challenger": "2"}
    checks = {check.name: check for check in result.checks}
    catches = checks["catches at drain budget vs the ranked rules"]
    assert not catches.passed
    assert catches.challenger == result.challenger.metrics["recall"]
    assert catches.champion == result.rules.metrics["recall"] > catches.challenger
    assert result.rules.metrics["failures"] == result.challenger.metrics["failures"] > 0
    assert catches.interval == result.intervals["vs_rules"]["recall"] and catches.interval.high < 0
    assert "catches at drain budget vs the ranked rules" in result.decision
    markdown = result.report_md.read_text()
    assert "measured at the drain budget: 2 a day" in markdown
    assert "ranked rules on the same window at the same budget" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| catches at drain budget vs the ranked"))
    assert "FAIL" in row


def test_a_challenger_that_cannot_be_fitted_before_the_window_is_not_promoted(fleet):
    # A window covering nearly all history leaves nothing to refit on: no out-of-sample
    # evidence, so even with every other guardrail loosened nothing is promoted.
    config = fast_config(
        fleet["data_dir"],
        NAME,
        window="20d",
        max_recall_drop=1.0,
        max_precision_drop=1.0,
        max_calibration_error=1.0,
        min_pr_auc_lift=0.0,
    )
    result = promotion.run_review(config, fleet["labelled"], fleet["failures"])
    assert [check.name for check in result.checks if not check.passed] == [review.OUT_OF_SAMPLE]
    assert not result.promoted and registry.aliases(NAME) == {"champion": "1", "challenger": "2"}
    assert "challenger 2 failed challenger refitted before the window" in result.decision
    assert "challenger as registered" in result.report_md.read_text()


def test_better_challenger_is_promoted_only_within_the_calibration_bound(fleet):
    # The champion becomes v2 (it learnt temperature, which says nothing on this fleet) and
    # the challenger v3, whose recipe learns from the errors that announce failures here.
    config = review_config(fleet["data_dir"])
    promotion.approve(config, 2, by="test", reason="the misleading model in production")
    record = train_and_register(config, fleet["features"], fleet["failures"])
    assert registry.aliases(NAME) == {"champion": "2", "challenger": record.version}

    strict = review_config(fleet["data_dir"], max_calibration_error=0.0)
    blocked = promotion.run_review(strict, fleet["labelled"], fleet["failures"])
    assert {check.name for check in blocked.checks if not check.passed} == {"calibration error"}
    assert not blocked.promoted and registry.aliases(NAME)["champion"] == "2"
    assert blocked.intervals["difference"]["recall"].estimate > 0

    loose = review_config(fleet["data_dir"], max_calibration_error=1.0)
    dry = promotion.run_review(loose, fleet["labelled"], fleet["failures"], promote=False)
    assert dry.passed and not dry.promoted and registry.aliases(NAME)["champion"] == "2"

    passed = promotion.run_review(loose, fleet["labelled"], fleet["failures"])
    assert passed.promoted
    assert registry.aliases(NAME) == {"champion": record.version, "challenger": record.version}
    tags = mlflow.MlflowClient().get_model_version(NAME, record.version).tags
    assert tags["foreshock.promotion"] == "review"
    assert tags["foreshock.previous_champion"] == "2"
    assert passed.run_id in tags["foreshock.promotion_reason"]

    again = promotion.run_review(loose, fleet["labelled"], fleet["failures"])
    assert not again.promoted and "already champion" in again.decision
    assert again.report_md.exists()


def test_approval_by_hand_is_recorded_and_not_undone_by_the_next_review(fleet):
    config = review_config(fleet["data_dir"])
    challenger = registry.aliases(NAME)["challenger"]
    previous = promotion.approve(config, 1, by="alice", reason="v1 is what the fleet team validated")
    assert previous == challenger
    assert registry.aliases(NAME) == {"champion": "1", "challenger": challenger}
    tags = mlflow.MlflowClient().get_model_version(NAME, "1").tags
    assert tags["foreshock.promotion"] == "approved"
    assert tags["foreshock.promoted_by"] == "alice"
    assert tags["foreshock.promotion_reason"] == "v1 is what the fleet team validated"
    assert tags["foreshock.previous_champion"] == challenger

    # The demoted challenger passes every (loosened) guardrail, yet the review leaves alice's choice.
    loose = review_config(
        fleet["data_dir"], max_recall_drop=1.0, max_precision_drop=1.0, max_calibration_error=1.0, min_pr_auc_lift=0.0
    )
    result = promotion.run_review(loose, fleet["labelled"], fleet["failures"])
    assert result.passed and not result.promoted
    assert f"only `foreshock review --approve {challenger}` brings it back" in result.decision
    assert registry.aliases(NAME)["champion"] == "1"

    promotion.rollback(config, challenger, by="bob", reason="undo")
    assert registry.aliases(NAME)["champion"] == challenger
