"""Shortcuts give what the Polars passes they replace give, bit for bit: the rollup of a
partition of any shape (rows put in metric order, runs reduced with numpy) and a window of
one bucket."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

from foreshock.contract import UTC_TS
from foreshock.features.metric_runs import metric_run_pieces
from foreshock.features.packed_key import BUCKET_SLOTS, packed_key
from foreshock.features.windows import _rolling_max, _rolling_min, _rolling_sum

EVERY, MAX_GAP = timedelta(hours=1), timedelta(hours=6)


def _per_metric(samples: pl.DataFrame, counter: np.ndarray) -> pl.DataFrame:
    """The reference: each metric's rows alone, grouped by the packed key in Polars."""
    series = pl.col("_key") // BUCKET_SLOTS
    same = (series == series.shift(1)).fill_null(False)
    parts = []
    for code in samples.get_column("_metric").unique().sort().to_list():
        rows = samples.filter(pl.col("_metric") == code).with_columns(packed_key(EVERY).set_sorted())
        v, previous = pl.col("value"), pl.col("value").shift(1)
        linked = same & ((pl.col("ts") - pl.col("ts").shift(1)) <= MAX_GAP)
        step = pl.when(linked).then(pl.when(v >= previous).then(v - previous).otherwise(v))
        rows = rows.with_columns(
            step.alias("_step"), (~same).alias("_head"), (series != series.shift(-1)).fill_null(True).alias("_tail")
        )
        aggs = [
            pl.len().cast(pl.Int64).alias("n"),
            v.sum().alias("sum"),
            (v * v).sum().alias("sumsq"),
            v.max().alias("max"),
            pl.col("ts").last().alias("last_ts"),
            v.last().alias("last_v"),
            (pl.col("_head").first() | pl.col("_tail").last()).alias("edge"),
        ]
        if counter[code]:
            increased = pl.when(pl.col("_step") > 0).then(pl.col("ts"))
            aggs += [
                pl.col("ts").first().alias("first_ts"),
                v.first().alias("first_v"),
                pl.col("_step").sum().alias("inc"),
                increased.min().alias("first_inc_ts"),
                increased.max().alias("last_inc_ts"),
                pl.col("_head").first().alias("head"),
            ]
        grouped = rows.lazy().group_by("_key", maintain_order=True).agg(aggs).collect(engine="in-memory")
        parts.append(grouped.with_columns(pl.lit(code, pl.UInt8).alias("_metric")))
    return pl.concat(parts, how="diagonal_relaxed")


def _partition(seed: int) -> pl.DataFrame:
    """Three units (one with a second life) x four metrics sampled at their own times:
    runs of 1 to 200 rows, silences longer than ``MAX_GAP``, counter resets, -0.0 and 0.0
    mixed in (Polars keeps one or the other as the maximum depending on the run's length)."""
    rng = np.random.default_rng(seed)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    frames = []
    for unit in range(3):
        for code, every_s in enumerate([600, 17, 3600 * 8, 45]):  # the third: a step every 8 h
            times = np.sort(rng.choice(86_400 // every_s * 3, size=86_400 // every_s, replace=False)) * every_s // 3
            values = np.cumsum(rng.exponential(0.4, len(times))) * 10.0 ** rng.integers(-2, 6)
            values[len(values) // 2 :] -= values[len(values) // 2]  # a reset mid-day
            # unit 2: runs of zeros only; the second metric's long runs: no zero elsewhere
            zeros = rng.random(len(values)) < (0.97 if unit == 2 else 0.3 if code != 1 else 0.0)
            values[zeros] = rng.choice([0.0, -0.0], zeros.sum())
            frames.append(
                pl.DataFrame(
                    {
                        "_unit": np.full(len(times), unit, np.uint32),
                        "ts": [start + timedelta(seconds=int(s)) for s in times],
                        "_metric": np.full(len(times), code, np.uint8),
                        "value": values,
                    }
                )
            )
    samples = pl.concat(frames).with_columns(pl.col("ts").cast(UTC_TS)).sort("_unit", "ts", "_metric")
    second_life = (pl.col("_unit") == 1) & (pl.col("ts") > start + timedelta(hours=13, minutes=30))
    return samples.with_columns(second_life.cast(pl.Int32).alias("life"))


def test_runs_in_metric_order_give_the_per_metric_group_by_bit_for_bit():
    counter = np.array([True, False, True, False])
    for seed in range(3):
        samples = _partition(seed)
        pieces, scrapes = metric_run_pieces(samples, counter, EVERY, MAX_GAP)
        expected = _per_metric(samples, counter).select(pieces.columns)
        assert pieces.get_column("n").max() > 128  # runs Polars sums pairwise are met too
        assert_frame_equal(pieces.sort("_metric", "_key"), expected.sort("_metric", "_key"), check_exact=True)
        for name in ("sum", "sumsq", "max", "inc"):  # bits, zero's sign included
            got = pieces.sort("_metric", "_key").get_column(name).to_numpy().view(np.int64)
            assert (got == expected.sort("_metric", "_key").get_column(name).to_numpy().view(np.int64)).all()
        keyed = samples.with_columns(packed_key(EVERY))
        new_ts = (pl.col("ts") != pl.col("ts").shift(1)).fill_null(True) | (pl.col("_key") != pl.col("_key").shift(1))
        reference = keyed.group_by("_key", maintain_order=True).agg(
            new_ts.sum().cast(pl.Int64).alias("n_ts"), pl.col("ts").max().alias("last_ts")
        )
        assert_frame_equal(scrapes, reference, check_exact=True)


def test_a_window_of_one_bucket_is_the_rolling_window_bit_for_bit():
    """The windows take a one-bucket window as the bucket itself (no rolling pass): the
    same bits as Polars' rolling sum, maximum and minimum over one row, -0.0, nulls and
    integers included."""
    frame = pl.DataFrame(
        {
            "g": [0, 0, 0, 1, 1],
            "x": [-0.0, 1.5, None, -0.0, 0.0],
            "i": [1, None, 3, 0, 2],
        }
    )
    for column in ("x", "i"):
        got = frame.select(
            _rolling_sum(pl.col(column), 1, ["g"]).alias("sum"),
            _rolling_max(pl.col(column), 1, ["g"]).alias("max"),
            _rolling_min(pl.col(column), 1, ["g"]).alias("min"),
        )
        polars = frame.select(
            pl.col(column).fill_null(0).rolling_sum(1, min_samples=1).over("g").alias("sum"),
            pl.col(column).rolling_max(1, min_samples=1).over("g").alias("max"),
            pl.col(column).rolling_min(1, min_samples=1).over("g").alias("min"),
        )
        assert got.schema == polars.schema
        # compared as text: 0.0 and -0.0 are equal as numbers
        assert got.cast(pl.String).equals(polars.cast(pl.String))
