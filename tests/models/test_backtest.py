"""Walk-forward backtest: never trains on what was unknown at the cutoff; scores out of sample."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import polars as pl
import pytest

from foreshock.config import load_config
from foreshock.contract import UTC_TS
from foreshock.features.labels import add_labels
from foreshock.models.estimators.gbm import GradientBoostedRisk
from foreshock.models.estimators.training import label_cutoff_violations, labelled_until
from foreshock.models.evaluation.alerts import alert_starts
from foreshock.models.evaluation.backtest import plan_folds, walk_forward
from foreshock.models.evaluation.backtest_report import read_result, render_markdown, write_result
from tests.models.synthetic_fleet import T0, daily_disk_fleet, synthetic_fleet


@dataclass
class RecordingGBM(GradientBoostedRisk):
    """The real LightGBM model, noting what each fit was given."""

    seen: list = field(default_factory=list)

    def fit(self, frame, failures, *, until=None):
        labelled = labelled_until(frame, failures, self.horizons, until, weighted=True)
        self.seen.append(
            {
                "until": until,
                "last_snapshot": frame.get_column("ts").max(),
                "last_failure": failures.get_column("failed_at").max(),
                "violations": label_cutoff_violations(labelled, self.horizons, until),
                "labelled_rows": labelled.filter(pl.col("fails_within_3d").is_not_null()).height,
                "last_resolved_negative": labelled.filter(
                    (pl.col("fails_within_3d") == False) & (pl.col("label_weight_3d") == 1)  # noqa: E712
                )
                .get_column("ts")
                .max(),
                "open_negatives": labelled.filter(
                    (pl.col("fails_within_3d") == False) & (pl.col("label_weight_3d") < 1)  # noqa: E712
                ).height,
            }
        )
        return super().fit(frame, failures, until=until)


def test_folds_cover_the_last_share_of_a_short_history():
    first = T0
    daily = plan_folds(first, first + timedelta(days=39), timedelta(days=1), folds=4, test_fraction=0.4)
    assert daily[0].cutoff == first + timedelta(days=24)  # 40 days: the last 16 are scored
    assert daily[-1].test_end == first + timedelta(days=40)
    assert all(a.test_end == b.cutoff for a, b in zip(daily, daily[1:]))
    hourly = plan_folds(first, first + timedelta(days=30) - timedelta(hours=1), timedelta(hours=1))
    assert hourly[0].cutoff <= first + timedelta(days=20)  # a 30-day demo: at least its last third
    with pytest.raises(ValueError, match="too short"):
        plan_folds(first, first + timedelta(days=2), timedelta(days=1), folds=4)


def test_never_trains_on_labels_past_the_cutoff(rng):
    fleet = synthetic_fleet(rng, units=60, days=20)
    config = load_config()
    recorder = RecordingGBM(horizons=["24h", "72h"])
    result = walk_forward(
        fleet.features, fleet.failures, config, factories={"gbm": lambda: recorder}, folds=3, test_fraction=0.4
    )
    assert len(recorder.seen) == len(result.folds) == 3
    for fold, seen in zip(result.folds, recorder.seen):
        assert seen["until"] == fold.cutoff
        assert seen["last_snapshot"] < fold.cutoff
        assert seen["last_failure"] <= fold.cutoff
        assert seen["violations"] == 0
        # a negative counts fully only once its whole 72 h horizon has passed; the newer
        # ones are kept, weighted by the share of the horizon observed by the cutoff
        assert seen["last_resolved_negative"] + timedelta(hours=72) <= fold.cutoff
        assert seen["open_negatives"] > 0
        fold_scores = result.scores.filter(
            (pl.col("ts") >= pl.lit(fold.cutoff).cast(UTC_TS)) & (pl.col("ts") < pl.lit(fold.test_end).cast(UTC_TS))
        )
        assert fold_scores.height > 0
    # every score is out of sample: after the first cutoff, once per unit/snapshot/horizon
    assert result.scores.get_column("ts").min() >= result.folds[0].cutoff
    assert not result.scores.select("unit_id", "ts", "model", "horizon").is_duplicated().any()
    # the check itself can fail: labels from all failures leak past an early cutoff
    leaky = add_labels(fleet.features, fleet.failures, ["72h"])
    assert label_cutoff_violations(leaky, ["72h"], result.folds[0].cutoff) > 0


def test_report_compares_every_model_at_each_operating_point(rng, tmp_path):
    fleet = synthetic_fleet(rng, units=80, days=20)
    result = walk_forward(fleet.features, fleet.failures, load_config(), ground_truth=fleet.ground_truth, folds=2)
    assert set(result.scores.get_column("model")) == {"gbm", "cox", "baseline", "rules"}
    for model in ("gbm", "cox", "baseline"):
        for horizon in ("24h", "72h"):
            entry = result.report["models"][model][horizon]
            assert set(entry["operating_points"]) == {"budget", "target_precision", "policy", "budget_upper_bound"}
            budget = entry["operating_points"]["budget"]
            # [backtest] drain_budget_per_day = 2 is a cap: never more than 2 new alerts a day
            assert budget["alerts_per_day"] <= 2.0 + 1e-9
            assert budget["failures"] > 0
            assert budget["thresholds"][0] == "top-k"  # the first fold has no earlier scores
            assert entry["snapshot"]["calibration_error"] is not None
            assert entry["snapshot"]["unresolved_snapshots"] > 0  # the last horizon is open
    # The binary rules as run today: alerts at the rising edges of "some rule fires", uncapped.
    for horizon in ("24h", "72h"):
        rules = result.scores.filter((pl.col("model") == "rules") & (pl.col("horizon") == horizon))
        assert set(rules.get_column("risk").unique()) <= {0.0, 1.0}
        today = result.report["models"]["rules"][horizon]["operating_points"]["as_run_today"]
        assert today["alerts"] == alert_starts(rules.select("unit_id", "ts", "risk"), 1.0).height
    markdown = render_markdown(result.report)
    assert "| gbm |" in markdown and "| baseline |" in markdown
    assert "rules (binary, as run today" in markdown
    assert "UPPER BOUND" in markdown
    # What `foreshock backtest` leaves on disk reads back as it was judged.
    saved = read_result(write_result(result, tmp_path / "backtest"))
    assert saved.markdown == markdown and saved.report["models"].keys() == result.report["models"].keys()
    assert saved.scores.equals(result.scores)
    (tmp_path / "backtest" / "report.json").unlink()
    with pytest.raises(FileNotFoundError, match="report.json"):
        read_result(tmp_path / "backtest")


def test_daily_snapshots_of_non_gpu_telemetry(rng, tmp_path):
    """Bring your own telemetry: disk SMART-style counters, daily snapshots, 14-day horizon."""
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "metrics:\n"
        "  reallocated_sectors: {kind: counter, family: error, unit: count}\n"
        "  pending_sectors: {kind: gauge, family: error, unit: count}\n"
        "  drive_temp_c: {kind: gauge, family: thermal, unit: celsius}\n"
    )
    config = load_config(catalog=catalog).with_overrides(
        {
            "features": {"snapshot_every": "1d", "windows": ["1d", "3d", "7d"]},
            "labels": {"horizons": ["14d"]},
            "backtest": {"alert_window": "30d", "min_lead_time": "1d", "drain_budget_per_day": 1},
        }
    )
    # Every failure has a strong precursor here; 35 % of the disks fail, whatever their age.
    features, fails = daily_disk_fleet(
        rng, 300, 60, fail_share=(0.35, 0.0), silent_share=0.0, strength=(3.0, 3.0), fail_days=(20, 90)
    )
    result = walk_forward(features, fails, config, folds=3)
    print([f["notes"] for f in result.report["folds"]])
    assert set(result.scores.get_column("horizon")) == {"14d"}
    assert set(result.scores.get_column("model")) == {"gbm", "cox", "baseline", "rules"}
    assert result.report["settings"]["snapshot_every"] == "1d"
    # What ops run: one new alert a day at most, and a model with distinct risks spends
    # its budget (within 10 %); a saturated model (ties) cannot go over it either.
    for model in ("gbm", "cox", "baseline"):
        entry = result.report["models"][model]["14d"]
        rate = entry["operating_points"]["budget"]["alerts_per_day"]
        assert rate <= 1.1, (model, rate)
        if entry["snapshot"]["largest_tie_share"] <= 0.01:
            assert rate >= 0.9, (model, rate)
    first_scored = result.scores.get_column("ts").min()
    assert first_scored <= T0 + timedelta(days=40)  # at least the last third is out of sample
    gbm = result.report["models"]["gbm"]["14d"]["operating_points"]["budget"]
    assert gbm["caught"] > 0 and gbm["lead_time_p50_h"] >= 24
