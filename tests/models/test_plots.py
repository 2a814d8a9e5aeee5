"""Review plots tell a good model from a useless one the way a reader would see it."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from test_registry_fleet import START

from foreshock.models.evaluation import plots

UNITS = 200


@pytest.fixture
def scored(seed) -> pl.DataFrame:
    """One snapshot per unit: a model whose risk is the true failure probability (so it is
    calibrated and ranks well) and a model that outputs noise."""
    rng = np.random.default_rng(seed)
    truth = rng.beta(0.5, 4.0, UNITS)
    fails = rng.random(UNITS) < truth
    time_to_failure = np.where(fails, rng.uniform(1, 72, UNITS) / np.maximum(truth, 0.05), np.nan)
    base = pl.DataFrame(
        {
            "unit_id": [f"gpu-node{u:03d}-gpu0" for u in range(UNITS)],
            "ts": [START] * UNITS,
            "label": fails,
            "time_to_failure_h": time_to_failure,
        }
    ).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    return pl.concat(
        [
            base.with_columns(pl.lit("gbm").alias("model"), pl.Series("risk", truth)),
            base.with_columns(pl.lit("baseline").alias("model"), pl.Series("risk", rng.random(UNITS))),
        ]
    )


def test_scores_join_their_labels_for_one_horizon():
    ts = pl.Series([START] * 2).dt.cast_time_unit("us")
    scores = pl.DataFrame(
        {
            "unit_id": ["a", "b", "a"],
            "ts": [START] * 3,
            "model": "gbm",
            "horizon": ["72h", "72h", "24h"],
            "risk": [0.9, 0.1, 0.5],
        }
    ).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    labelled = pl.DataFrame({"unit_id": ["a", "b"], "ts": ts, "fails_within_3d": [True, None]})
    joined = plots.scores_with_labels(scores, labelled, "72h")
    # b's outcome is still open: it is left out rather than counted as a non-failure.
    assert joined.select("unit_id", "risk", "label").rows() == [("a", 0.9, True)]
    with pytest.raises(ValueError, match="fails_within_1d"):
        plots.scores_with_labels(scores, labelled, "24h")


def test_calibration_table_follows_the_diagonal_for_a_calibrated_model(scored):
    table = plots.calibration_table(scored, bins=5)
    good = table.filter(pl.col("model") == "gbm")
    assert good.height == 5 and good["snapshots"].sum() == UNITS
    assert good["mean_risk"].is_sorted()
    # Observed frequency rises with predicted risk and stays near it.
    assert good["observed"][-1] > good["observed"][0]
    assert (good["observed"] - good["mean_risk"]).abs().mean() < 0.12


def test_survival_curves_drop_fastest_for_the_riskiest_group(scored):
    good = scored.filter(pl.col("model") == "gbm")
    figure = plots.survival_by_risk_decile(good, end=START.replace(day=20), groups=4)
    lines = [line for line in figure.axes[0].get_lines() if line.get_label().startswith("risk group")]
    assert len(lines) == 4

    def surviving_at(line, hours: float) -> float:
        # a Kaplan–Meier curve is a step function: the last value at or before `hours`
        # (its far tail rests on one or two units, so compare where every group has many)
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        return float(y[np.searchsorted(x, hours, side="right") - 1])

    share = {line.get_label().split(" (")[0]: surviving_at(line, 72.0) for line in lines}
    assert share["risk group 4/4"] < share["risk group 1/4"]


def test_every_plot_renders_to_png(scored, tmp_path):
    lead_times = pl.DataFrame({"model": ["gbm"] * 3 + ["baseline"], "lead_time_h": [30.0, 50.0, 70.0, 5.0]})
    figures = {
        "pr_curve": plots.pr_curve(scored),
        "calibration": plots.calibration_curve(scored),
        "lead_time_histogram": plots.lead_time_histogram(lead_times),
        "no_catch": plots.lead_time_histogram(lead_times.clear()),
        "survival_by_risk_decile": plots.survival_by_risk_decile(scored.filter(pl.col("model") == "gbm")),
        "feature_importance": plots.feature_importance(
            {"ecc_sbe_volatile_increase_24h": 5.0, "gpu_temp_drift_c_24h": 1.0}
        ),
    }
    paths = plots.save_figures(figures, tmp_path / "plots")
    assert set(paths) == set(figures)
    for path in paths.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    legend = [text.get_text() for text in figures["lead_time_histogram"].axes[0].get_legend().get_texts()]
    assert "gbm (n=3, median 50 h)" in legend
    bars = figures["feature_importance"].axes[0].get_yticklabels()
    assert bars[-1].get_text() == "ecc_sbe_volatile_increase_24h"  # the most important on top
