"""Labels at a training cutoff, the purged holdout, calibration on margins, the training sample.

What a user would notice if these broke: a model that learns "everything fails" from the
newest rows, risks tied at 1.0, P(fail in 24 h) above P(fail in 72 h), a drained unit
taught as healthy, or a backtest that needs the whole fleet in memory.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foreshock.contract import UTC_TS, label_column, weight_column
from foreshock.features.labels import drain_censoring, outcome_labels
from foreshock.models.estimators.base import monotone_risk
from foreshock.models.estimators.calibration import PlattCalibrator
from foreshock.models.estimators.cox_time_varying import CoxTimeVaryingRisk
from foreshock.models.estimators.dataset import FrameSource, TrainingSample, training_frame
from foreshock.models.estimators.gbm import GradientBoostedRisk
from foreshock.models.estimators.training import intervals_until, labelled_until, purged_holdout
from tests.models.synthetic_fleet import daily_disk_fleet, synthetic_fleet

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _keys(units: int, hours: int) -> pl.DataFrame:
    """``units`` x ``hours`` hourly snapshot keys from T0, sorted by unit and time."""
    times = pl.datetime_range(T0, T0 + timedelta(hours=hours - 1), "1h", eager=True, time_zone="UTC").cast(UTC_TS)
    return (
        pl.DataFrame({"unit_id": [f"u{u:04d}" for u in range(units)]})
        .join(pl.DataFrame({"ts": times}), how="cross")
        .sort("unit_id", "ts")
    )


def _failures(rows: list[tuple[str, datetime]], detected: list[datetime] | None = None) -> pl.DataFrame:
    frame = pl.DataFrame(
        {"unit_id": [u for u, _ in rows], "failed_at": [t for _, t in rows]},
        schema={"unit_id": pl.String, "failed_at": UTC_TS},
    )
    if detected is not None:
        frame = frame.with_columns(pl.Series("detected_at", detected, dtype=UTC_TS))
    return frame


# -- one rule for both classes -----------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    failures=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 200), st.integers(0, 30)), max_size=8),
    later=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 200), st.integers(0, 30)), max_size=5),
    cutoff_h=st.integers(1, 200),
    horizon_h=st.sampled_from([6, 24, 72]),
)
def test_no_label_depends_on_anything_after_the_cutoff(failures, later, cutoff_h, horizon_h):
    """Adding failures (or drains) that become known only after the cutoff changes no label,
    weight or life of any snapshot before it."""
    keys = _keys(6, 200)
    until = T0 + timedelta(hours=cutoff_h)
    known = [
        (f"u{u:04d}", T0 + timedelta(hours=h, minutes=7), T0 + timedelta(hours=h, minutes=7 + lag))
        for u, h, lag in failures
    ]
    known = [k for k in known if k[2] <= until]
    # Failures detected after the cutoff: some happened before it (a late ticket).
    hidden = [
        (f"u{u:04d}", T0 + timedelta(hours=h, minutes=7), max(until + timedelta(minutes=1 + lag), until))
        for u, h, lag in later
    ]
    hidden = [k for k in hidden if k[2] > until and k[1] <= k[2]]
    horizons = [f"{horizon_h}h"]

    def labels(rows):
        fails = _failures([(u, f) for u, f, _ in rows], [d for _, _, d in rows])
        return outcome_labels(keys, fails, horizons, until).filter(keys.get_column("ts") < until)

    before, after = labels(known), labels(known + hidden)
    assert before.equals(after)
    # and a drain that starts after the cutoff censors nothing before it
    drains = pl.DataFrame(
        {"unit_id": ["u0000"], "drained_at": [until + timedelta(hours=1)], "returned_at": [None]},
        schema={"unit_id": pl.String, "drained_at": UTC_TS, "returned_at": UTC_TS},
    )
    censored = keys.with_columns(drain_censoring(keys, drains))
    fails = _failures([(u, f) for u, f, _ in known], [d for _, _, d in known])
    with_drain = outcome_labels(censored, fails, horizons, until).filter(keys.get_column("ts") < until)
    assert with_drain.equals(before)


def _stationary_fleet(rng, units: int, hours: int, rate_per_h: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Units failing at a constant hazard; a failed unit is replaced at once (a new life)."""
    rows = []
    for u in range(units):
        t = rng.exponential(1 / rate_per_h)
        while t < hours:
            rows.append((f"u{u:04d}", T0 + timedelta(hours=float(t))))
            t += rng.exponential(1 / rate_per_h)
    return _keys(units, hours), _failures(rows)


def _weighted_share(labels: pl.DataFrame, name: str, weight: str) -> float:
    rows = labels.filter(pl.col(name).is_not_null())
    w = rows.get_column(weight).cast(pl.Float64)
    return float((w * rows.get_column(name).cast(pl.Float64)).sum() / w.sum())


def test_positive_share_near_the_cutoff_equals_that_far_from_it(rng):
    """On a stationary fleet the (weighted) share of positives among labelled rows in the last
    horizon before a cutoff matches the share far from it; the old rule (keep the known
    positives, drop the open negatives) makes that tail far more positive."""
    horizon, hours = 72, 1200
    keys, failures = _stationary_fleet(rng, units=1500, hours=hours, rate_per_h=1 / 1500)
    until = T0 + timedelta(hours=hours)
    labels = keys.with_columns(outcome_labels(keys, failures, [f"{horizon}h"], until))
    name, weight = label_column(f"{horizon}h"), weight_column(f"{horizon}h")
    ts = pl.col("ts")
    near = labels.filter(ts >= until - timedelta(hours=horizon))
    far = labels.filter((ts >= until - timedelta(hours=10 * horizon)) & (ts < until - timedelta(hours=2 * horizon)))
    share_near, share_far = _weighted_share(near, name, weight), _weighted_share(far, name, weight)
    print(f"positive share near={share_near:.4f} far={share_far:.4f}")
    assert abs(share_near - share_far) < 0.2 * share_far
    # the asymmetric rule: every open row that has not failed yet is dropped
    old = near.filter(pl.col(name) | (pl.col(weight) == 1))
    assert old.get_column(name).mean() > 1.5 * share_far


def test_drained_then_repaired_unit_is_censored_not_a_negative():
    keys = _keys(2, 200)
    drained_at, returned_at = T0 + timedelta(hours=100), T0 + timedelta(hours=130)
    drains = pl.DataFrame(
        {"unit_id": ["u0000"], "drained_at": [drained_at], "returned_at": [returned_at]},
        schema={"unit_id": pl.String, "drained_at": UTC_TS, "returned_at": UTC_TS},
    )
    censored = keys.with_columns(drain_censoring(keys, drains))
    until = T0 + timedelta(hours=200)
    labels = censored.with_columns(outcome_labels(censored, _failures([]), ["24h"], until))
    unit = labels.filter(pl.col("unit_id") == "u0000")
    at = {row["ts"]: row for row in unit.iter_rows(named=True)}
    # 12 h before the drain: half the horizon was observed, a half-weight negative
    assert at[drained_at - timedelta(hours=12)]["label_weight_1d"] == 0.5
    assert at[drained_at - timedelta(hours=12)]["fails_within_1d"] is False
    # inside the drain nothing is observed: no label at all
    inside = unit.filter((pl.col("ts") >= drained_at) & (pl.col("ts") < returned_at))
    assert inside.get_column("fails_within_1d").null_count() == inside.height == 30
    # back in service it is observed again
    assert at[returned_at]["label_weight_1d"] == 1.0
    # the unit without a drain: full negatives over the same hours
    other = labels.filter((pl.col("unit_id") == "u0001") & (pl.col("ts") < T0 + timedelta(hours=170)))
    assert (other.get_column("label_weight_1d") == 1.0).all()
    # survival intervals stop at the drain without an event
    intervals = intervals_until(censored.with_columns(pl.lit(1.0).alias("x")), _failures([]), until, timedelta(hours=1))
    drained = intervals.filter(pl.col("unit_id") == "u0000")
    assert drained.height == 200 - 30 and drained.get_column("event").sum() == 0


def test_a_failure_counts_from_its_detection():
    keys = _keys(1, 100)
    failed_at, detected_at = T0 + timedelta(hours=50, minutes=30), T0 + timedelta(hours=80)
    fails = _failures([("u0000", failed_at)], [detected_at])
    before = outcome_labels(keys, fails, ["24h"], T0 + timedelta(hours=70))
    after = outcome_labels(keys, fails, ["24h"], T0 + timedelta(hours=90))
    assert not before.get_column("fails_within_1d").any()  # the ticket was not there yet
    assert after.get_column("fails_within_1d").sum() == 24


# -- purged holdout -----------------------------------------------------------------------


def test_purged_holdout_ends_one_horizon_before_the_cutoff_and_counts_failures():
    keys = _keys(40, 600)
    failures = _failures([(f"u{u:04d}", T0 + timedelta(hours=30 + 14 * u, minutes=10)) for u in range(40)])
    until = T0 + timedelta(hours=600)
    labels = keys.with_columns(outcome_labels(keys, failures, ["72h"], until))
    known = labels.filter(pl.col("label_weight_3d") > 0)
    ts = known.get_column("ts").to_numpy()
    ids = known.select(pl.format("{}#{}", "unit_id", "life")).to_series().to_numpy()
    split = purged_holdout(ts, known.get_column("fails_within_3d").to_numpy(), ids, until, "72h", min_failures=5)
    assert split is not None
    assert split.end == until - timedelta(hours=72)
    assert split.failures == 5  # failures, not their 72 positive rows each
    held = known.filter(pl.Series(split.holdout))
    fit = known.filter(pl.Series(split.fit))
    assert held.get_column("ts").max() <= split.end
    # embargo: no fit row's horizon reaches into the holdout
    assert fit.get_column("ts").max() + timedelta(hours=72) <= held.get_column("ts").min()
    assert held.get_column("fails_within_3d").any() and (~held.get_column("fails_within_3d")).any()
    # too few failures: no holdout (the model then stays uncalibrated, and says so)
    assert purged_holdout(ts, known.get_column("fails_within_3d").to_numpy(), ids, until, "72h", 500) is None


# -- calibration on margins ---------------------------------------------------------------


def test_calibrating_margins_keeps_the_top_of_the_ranking_apart():
    margin = np.array([-4.0, -2.0, 0.0, 8.0, 12.0, 20.0, 30.0])
    y = np.array([0, 0, 0, 1, 1, 1, 1])
    p = PlattCalibrator(link="margin").fit(margin, y).predict(margin)
    assert np.all(np.diff(p) > 0)  # strictly increasing, no tie at 1.0


def test_prior_keeps_slope_near_one_with_few_failures(rng):
    margin = rng.normal(-3, 1, 400)
    y = np.zeros(400)
    y[np.argsort(margin)[-3:]] = 1  # three failures, perfectly ranked
    cal = PlattCalibrator(link="margin").fit(margin, y)
    assert 0.5 < cal.slope_ < 3.0
    assert abs(cal.predict(margin).mean() - y.mean()) < 0.02


# -- the gradient-boosted model ------------------------------------------------------------


def test_daily_fourteen_day_horizon_gives_distinct_unsaturated_risks(rng):
    """The saturation of issue 10: a daily fleet with a 14-day horizon used to score every
    test snapshot 0.9999999.  Now the risks are spread and the mean risk stays near the
    observed failure rate.  What ties remain is the trees' own plateau at the top: test
    rows whose cumulative counters exceed anything seen in training share the highest
    leaf of every tree (about 1 % of the rows here)."""
    features, failures = daily_disk_fleet(rng)
    cutoff = T0 + timedelta(days=40)
    train = features.filter(pl.col("ts") < cutoff)
    test = features.filter((pl.col("ts") >= cutoff) & (pl.col("ts") < cutoff + timedelta(days=6)))
    model = GradientBoostedRisk(horizons=["14d"]).fit(
        train, failures.filter(pl.col("failed_at") <= cutoff), until=cutoff
    )
    print(model.notes_, model.holdouts_)
    risk = model.predict_risk(test).get_column("risk")
    top_share = risk.value_counts().get_column("count").max() / risk.len()
    labels = labelled_until(test, failures, ["14d"], cutoff + timedelta(days=20))
    rate = labels.get_column("fails_within_14d").cast(pl.Float64).mean()
    print(f"rows={risk.len()} top value share={top_share:.4f} mean risk={risk.mean():.3f} failure rate={rate:.3f}")
    assert top_share <= 0.015
    assert risk.n_unique() > 0.5 * risk.len()
    assert risk.max() < 1.0
    assert risk.mean() < 3 * rate  # the saturated model's mean risk was 17x the rate


def test_risk_never_decreases_with_the_horizon(rng):
    fleet = synthetic_fleet(rng, units=60, days=16)
    model = GradientBoostedRisk(horizons=["24h", "72h", "6h"]).fit(fleet.features, fleet.failures)
    risk = model.predict_risk(fleet.features).pivot(on="horizon", index=["unit_id", "ts"], values="risk")
    assert (risk.get_column("6h") <= risk.get_column("24h")).all()
    assert (risk.get_column("24h") <= risk.get_column("72h")).all()
    # and for any model's output (the backtest and the bundle apply it to every model)
    raw = pl.DataFrame(
        {"unit_id": ["a", "a", "a"], "ts": [T0] * 3, "horizon": ["72h", "24h", "7d"], "risk": [0.2, 0.3, 0.25]}
    )
    fixed = {r["horizon"]: r["risk"] for r in monotone_risk(raw).iter_rows(named=True)}
    assert fixed == {"24h": 0.3, "72h": 0.3, "7d": 0.3}


# -- Cox: the separation loop --------------------------------------------------------------


class _EverSeparating(CoxTimeVaryingRisk):
    """lifelines with a log hazard ratio past the limit on the first covariate of every
    fit: each pass drops one covariate, so the loop reaches its last pass."""

    fits: list[int] = []

    def _fit_lifelines(self, chosen, pool, x_pool, ids, start, stop, event, weight):
        fitter, chosen, centers, scales, z = super()._fit_lifelines(
            chosen, pool, x_pool, ids, start, stop, event, weight
        )
        self.fits.append(len(chosen))
        fitter.params_.iloc[0] = 10.0
        return fitter, chosen, centers, scales, z


def test_cox_separation_loop_saves_what_it_fitted_on_the_last_pass(rng):
    fleet = synthetic_fleet(rng, units=60, days=16)
    model = _EverSeparating(horizons=["24h"], max_features=6, max_correlation=0.999)
    model.fits = []
    model.fit(fleet.features, fleet.failures)
    assert len(model.fits) == 4 and model.summary_["separation_passes"] == 4
    assert model.fits == sorted(model.fits, reverse=True) and model.fits[0] > model.fits[-1]
    n = len(model.feature_names_)
    assert n == model.fits[-1]
    assert n == model.coefficients_.size == model.centers_.size == model.scales_.size == model.compressed_.size
    assert model.predict_risk(fleet.features).get_column("risk").is_finite().all()


# -- the training sample -------------------------------------------------------------------


def test_training_sample_keeps_failure_adjacent_rows_and_weights_the_rest(rng):
    fleet = synthetic_fleet(rng, units=80, days=20)
    until = fleet.features.get_column("ts").max()
    sample = TrainingSample(max_healthy_rows=5_000, adjacent=timedelta(hours=72))
    frame = training_frame(FrameSource(fleet.features), fleet.failures, until, sample)
    labels = outcome_labels(fleet.features.filter(pl.col("ts") < until), fleet.failures, [], until)
    near = (labels.get_column("time_to_failure_h") <= 72).sum()
    kept_near = outcome_labels(frame, fleet.failures, [], until).get_column("time_to_failure_h") <= 72
    assert kept_near.sum() == near  # every failure-adjacent row
    healthy = frame.filter(~kept_near.fill_null(False))
    assert abs(healthy.height - 5_000) < 300
    total_healthy = fleet.features.filter(pl.col("ts") < until).height - near
    assert abs(healthy.get_column("sample_weight").sum() - total_healthy) < 0.01 * total_healthy
    assert frame.schema["ecc_sbe_volatile_total_increase_1d"] == pl.Float32
