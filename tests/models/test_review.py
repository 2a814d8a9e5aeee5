"""Review: challenger and champion judged on the same window; the champion alias moves
only when every guardrail holds; a report is written either way."""

from __future__ import annotations

import math

import mlflow
import pytest
from test_registry_fleet import TEMP, fast_config, synthetic_fleet, train_and_register

from foreshock.models import promotion, registry, review
from foreshock.models.base import config_horizons
from foreshock.models.training import labelled_until

NAME = "review-test"


@pytest.fixture(scope="module")
def fleet(mlflow_uri, tmp_path_factory):
    """v1 trained on today's fleet (errors announce failures) is champion; v2, trained on a
    fleet where temperature did, is the challenger."""
    data_dir = tmp_path_factory.mktemp("data")
    config = fast_config(data_dir, NAME)
    features, failures = synthetic_fleet(seed=21)
    train_and_register(config, features, failures)
    train_and_register(config, *synthetic_fleet(seed=22, precursor=TEMP))
    labelled = labelled_until(features, failures, config_horizons(config))
    return {"data_dir": data_dir, "features": features, "failures": failures, "labelled": labelled}


def test_worse_challenger_stays_out_and_the_report_says_why(fleet):
    config = fast_config(fleet["data_dir"], NAME)
    result = promotion.run_review(config, fleet["labelled"], fleet["failures"])

    assert not result.promoted
    assert registry.aliases(NAME) == {"champion": "1", "challenger": "2"}
    assert result.decision.startswith("kept version 1 as champion: challenger 2 failed")
    failed = {check.name for check in result.checks if not check.passed}
    assert "recall at drain budget" in failed
    # Same window, same failures for both.
    assert result.champion.metrics["failures"] == result.challenger.metrics["failures"] > 0
    assert result.challenger.metrics["recall"] < result.champion.metrics["recall"]

    markdown = result.report_md.read_text()
    assert result.report_md.parent == config.reports_dir
    assert result.report_md.name.startswith("review-") and result.report_html.suffix == ".html"
    assert "| metric | champion v1 | challenger v2 | change |" in markdown
    recall_row = next(line for line in markdown.splitlines() if line.startswith("| recall at drain budget |"))
    assert recall_row.split("|")[2].strip() == f"{result.champion.metrics['recall']:.3f}"
    assert "FAIL" in markdown
    html = result.report_html.read_text()
    assert "<table>" in html and "data:image/png;base64," in html
    assert set(result.figures) >= {"pr_curve", "calibration", "lead_time_histogram"}
    assert all(path.stat().st_size > 1000 for path in result.figures.values())

    client = mlflow.MlflowClient()
    logged = {a.path for a in client.list_artifacts(result.run_id, "review")}
    assert {f"review/{result.report_md.name}", f"review/{result.report_html.name}"} <= logged
    run = client.get_run(result.run_id)
    assert run.data.tags["foreshock.promoted"] == "false"
    assert math.isclose(run.data.metrics["champion.recall"], result.champion.metrics["recall"])
    assert client.get_model_version(NAME, "2").tags["foreshock.review"] == "failed"


def test_equal_challenger_is_promoted_only_within_the_calibration_bound(fleet):
    # v3 is trained on the same data as v1: as good as the champion on every metric.
    config = fast_config(fleet["data_dir"], NAME)
    record = train_and_register(config, fleet["features"], fleet["failures"])
    assert registry.aliases(NAME) == {"champion": "1", "challenger": record.version}

    strict = fast_config(fleet["data_dir"], NAME, max_calibration_error=0.0)
    blocked = promotion.run_review(strict, fleet["labelled"], fleet["failures"])
    assert [check.passed for check in blocked.checks] == [True, True, False]
    assert not blocked.promoted and registry.aliases(NAME)["champion"] == "1"

    loose = fast_config(fleet["data_dir"], NAME, max_calibration_error=1.0)
    dry = promotion.run_review(loose, fleet["labelled"], fleet["failures"], promote=False)
    assert dry.passed and not dry.promoted and registry.aliases(NAME)["champion"] == "1"

    passed = promotion.run_review(loose, fleet["labelled"], fleet["failures"])
    assert passed.promoted
    assert registry.aliases(NAME) == {"champion": record.version, "challenger": record.version}
    tags = mlflow.MlflowClient().get_model_version(NAME, record.version).tags
    assert tags["foreshock.promotion"] == "review"
    assert tags["foreshock.previous_champion"] == "1"
    assert passed.run_id in tags["foreshock.promotion_reason"]

    again = promotion.run_review(loose, fleet["labelled"], fleet["failures"])
    assert not again.promoted and "already champion" in again.decision
    assert again.report_md.exists()


def test_approval_by_hand_is_recorded_and_not_undone_by_the_next_review(fleet):
    config = fast_config(fleet["data_dir"], NAME)
    challenger = registry.aliases(NAME)["challenger"]
    previous = promotion.approve(config, 1, by="alice", reason="v1 is what the fleet team validated")
    assert previous == challenger
    assert registry.aliases(NAME) == {"champion": "1", "challenger": challenger}
    tags = mlflow.MlflowClient().get_model_version(NAME, "1").tags
    assert tags["foreshock.promotion"] == "approved"
    assert tags["foreshock.promoted_by"] == "alice"
    assert tags["foreshock.promotion_reason"] == "v1 is what the fleet team validated"
    assert tags["foreshock.previous_champion"] == challenger

    # The demoted challenger passes every guardrail, yet the review leaves alice's choice.
    loose = fast_config(fleet["data_dir"], NAME, max_calibration_error=1.0)
    result = promotion.run_review(loose, fleet["labelled"], fleet["failures"])
    assert result.passed and not result.promoted
    assert f"only `foreshock review --approve {challenger}` brings it back" in result.decision
    assert registry.aliases(NAME)["champion"] == "1"

    promotion.rollback(config, challenger, by="bob", reason="undo")
    assert registry.aliases(NAME)["champion"] == challenger


class TestGuardrails:
    rails = review.Guardrails(max_recall_drop=0.0, max_precision_drop=0.05, max_calibration_error=0.05)

    def test_small_precision_drop_within_margin_passes(self):
        checks = review.check_guardrails(
            {"recall": 0.6, "precision": 0.46, "calibration_error": 0.02},
            {"recall": 0.6, "precision": 0.50, "calibration_error": 0.01},
            self.rails,
        )
        assert all(check.passed for check in checks)

    def test_any_recall_drop_fails_at_zero_margin(self):
        checks = review.check_guardrails(
            {"recall": 0.59, "precision": 0.9, "calibration_error": 0.01},
            {"recall": 0.60, "precision": 0.5, "calibration_error": 0.01},
            self.rails,
        )
        assert [check.passed for check in checks] == [False, True, True]

    def test_unmeasurable_metric_never_passes(self):
        checks = review.check_guardrails(
            {"recall": math.nan, "precision": 0.5, "calibration_error": 0.01},
            {"recall": math.nan, "precision": 0.5, "calibration_error": 0.01},
            self.rails,
        )
        assert [check.passed for check in checks] == [False, True, True]
