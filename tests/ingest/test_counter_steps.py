"""The counter-step check's path without a sort (each series one run of increasing times in
the batch, the lake holding none of its readings from the batch's first time on) finds
exactly the steps of the sorted path, from the row above or from the series' last stored
reading; batches that are not so take the sorted path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

import foreshock.ingest.counter_steps as counter_steps
import foreshock.ingest.validate as validate
from foreshock.config import load_config
from foreshock.ingest.context import IngestContext
from foreshock.lake.merge import merge_into_lake

START = datetime(2026, 11, 2, tzinfo=UTC)
UNITS = [f"node{n:02d}-gpu{g}" for n in range(6) for g in range(4)]
COUNTERS = ["ecc_sbe_volatile_total", "ecc_dbe_volatile_total"]


def readings(rng: np.random.Generator, start: datetime, steps: int, jumps: int) -> pl.DataFrame:
    """Metric after metric (two counters and a gauge), unit after unit, in time order;
    ``jumps`` counter readings jump far faster than the catalog allows."""
    frames = []
    for metric in [*COUNTERS, "gpu_temp_c"]:
        times = [start + timedelta(minutes=10 * s) for s in range(steps)]
        grid = pl.DataFrame({"unit_id": UNITS}).join(pl.DataFrame({"ts": times}), how="cross")
        if metric in COUNTERS:
            values = np.cumsum(rng.poisson(0.5, grid.height)).astype(float)
            values[rng.choice(grid.height, jumps, replace=False)] += 1e9
        else:
            values = rng.uniform(30, 80, grid.height)
        frames.append(grid.with_columns(metric=pl.lit(metric), value=pl.Series(values)))
    return pl.concat(frames).with_columns(ts=pl.col("ts").dt.cast_time_unit("us"))


def staged(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(_reason=pl.lit(None, dtype=pl.String), _field=pl.lit(None, dtype=pl.String))


@pytest.fixture
def ctx(tmp_path, seed):
    config = load_config(data_dir=tmp_path).with_overrides({"lake": {"shards": 4}})
    stored = readings(np.random.default_rng(seed), START - timedelta(days=1), 144, 0)
    merge_into_lake(config.lake_dir, "samples", stored, shards=4)
    return IngestContext.from_config(config)


def steps_both_ways(frame: pl.DataFrame, ctx: IngestContext, monkeypatch) -> tuple[pl.DataFrame, pl.DataFrame, bool]:
    """``(steps of with_counter_steps, steps of the sorted path alone, whether runs were used)``."""
    used: list[bool] = []
    real = counter_steps._steps_along_runs

    def recorded(*args):
        used.append(True)
        return real(*args)

    monkeypatch.setattr(counter_steps, "_steps_along_runs", recorded)
    fast = counter_steps.with_counter_steps(frame, ctx)
    monkeypatch.setattr(counter_steps, "_series_runs", lambda candidates, metric_numbers=None: None)
    slow = counter_steps.with_counter_steps(frame, ctx)
    monkeypatch.undo()
    return fast, slow, used == [True]


def test_runs_find_the_steps_of_the_sorted_path(ctx, seed, monkeypatch):
    frame = staged(readings(np.random.default_rng(seed + 1), START, 36, 12))
    # the first reading of a run follows the series' last stored one: make one jump from it
    first = frame.with_row_index().filter((pl.col("metric") == COUNTERS[0]) & (pl.col("ts") == START)).row(0)[0]
    frame = frame.with_columns(value=pl.when(pl.int_range(pl.len()) == first).then(1e10).otherwise("value"))
    fast, slow, used = steps_both_ways(frame, ctx, monkeypatch)
    assert used
    assert fast.equals(slow)
    found = fast.filter(pl.col("_step_rate").is_not_null())
    assert found.height >= 12  # the jumps (a jump's next reading falls back: a reset, no step)
    assert found.filter(pl.col("ts") == START).height >= 1  # found against the stored reading
    assert set(found.get_column("metric").unique()) <= set(COUNTERS)


@pytest.mark.parametrize(
    "disorder", ["readings time by time", "series in two runs", "a time repeated", "a time going back", "stored rows"]
)
def test_batches_that_are_not_runs_take_the_sorted_path(ctx, seed, monkeypatch, disorder):
    frame = readings(np.random.default_rng(seed + 2), START, 36, 6)
    if disorder == "readings time by time":  # every unit's reading at one time, then the next time
        frame = frame.sort("ts", maintain_order=True)
    elif disorder == "series in two runs":  # the first series' later half listed last
        frame = pl.concat([frame.slice(0, 18), frame.slice(36), frame.slice(18, 18)])
    elif disorder == "a time repeated":
        frame = pl.concat([frame.slice(0, 10), frame.slice(9, 1), frame.slice(10)])
    elif disorder == "a time going back":
        frame = pl.concat([frame.slice(0, 8), frame.slice(9, 1), frame.slice(8, 1), frame.slice(10)])
    else:  # the batch starts before the lake's last readings of the day before
        frame = readings(np.random.default_rng(seed + 2), START - timedelta(hours=2), 36, 6)
    fast, slow, used = steps_both_ways(staged(frame), ctx, monkeypatch)
    assert not used
    assert fast.equals(slow)


@pytest.mark.parametrize("bad", [None, "negative counter", "above max", "below min"])
def test_catalog_bounds_found_per_metric_then_per_row(tmp_path, bad):
    """Each metric's smallest and largest value decide whether any row needs its bounds;
    a batch with one bad value quarantines exactly that row, with its reason, also for a
    counter whose catalog sets no minimum."""
    from foreshock.catalog import parse_catalog

    catalog = parse_catalog(
        {
            "metrics": {
                "errors_total": {"kind": "counter", "family": "error", "unit": "count"},  # no min, no max
                "temp_c": {"kind": "gauge", "family": "thermal", "unit": "celsius", "min": -20, "max": 130},
            }
        }
    )
    config = load_config(data_dir=tmp_path)
    ctx = IngestContext.from_config(config, catalog=catalog)
    times = [START + timedelta(minutes=m) for m in range(100)]
    frame = pl.concat(
        [
            pl.DataFrame({"unit_id": "node01-gpu0", "ts": times, "metric": "errors_total", "value": np.arange(100.0)}),
            pl.DataFrame({"unit_id": "node01-gpu0", "ts": times, "metric": "temp_c", "value": np.full(100, 50.0)}),
        ]
    ).with_columns(ts=pl.col("ts").dt.cast_time_unit("us"))
    row, value, reason = {
        None: (None, None, None),
        "negative counter": (10, -1.0, "negative counter value -1.0 for errors_total"),
        "above max": (150, 131.0, "absurd value 131.0 for temp_c"),
        "below min": (160, -21.0, "absurd value -21.0 for temp_c"),
    }[bad]
    if row is not None:
        frame = frame.with_columns(value=pl.when(pl.int_range(pl.len()) == row).then(value).otherwise("value"))
    good, failed = validate.validate("samples", staged(frame), ctx)
    assert not set(validate.BOUND_COLUMNS) & (set(good.columns) | set(failed.columns))
    if row is None:
        assert good.height == 200 and failed.height == 0
    else:
        assert good.height == 199 and failed.height == 1
        assert failed.get_column("_reason").item().startswith(reason)
        assert failed.get_column("value").item() == value


def test_a_counter_holding_one_value_is_a_step_only_from_a_lower_stored_reading(ctx, seed, monkeypatch):
    """A counter at one value through the batch cannot step within it: its rows are left out
    of the look when the stored readings it follows hold that value too (remapped rows at
    0), not when they are lower (the first reading of each series jumps from them)."""
    held = "remapped_rows_uncorrectable"
    before = pl.DataFrame({"unit_id": UNITS, "ts": START - timedelta(minutes=10), "metric": held, "value": 0.0})
    merge_into_lake(ctx.lake_dir, "samples", before.with_columns(ts=pl.col("ts").dt.cast_time_unit("us")), shards=4)
    frame = readings(np.random.default_rng(seed + 3), START, 36, 0)
    frame = pl.concat(
        [
            frame.with_columns(value=pl.when(pl.col("metric") == COUNTERS[1]).then(1e10).otherwise("value")),
            frame.filter(pl.col("metric") == COUNTERS[0]).with_columns(metric=pl.lit(held), value=pl.lit(0.0)),
        ]
    )
    left_out = []
    real = counter_steps._flat_counters

    def recorded(metrics, *args):
        flat = real(metrics, *args)
        left_out.extend(metrics.present[p] for p in flat)
        return flat

    monkeypatch.setattr(counter_steps, "_flat_counters", recorded)
    found = counter_steps.with_counter_steps(staged(frame), ctx)
    monkeypatch.setattr(counter_steps, "_flat_counters", lambda *args: [])
    assert found.equals(counter_steps.with_counter_steps(staged(frame), ctx))  # as if every row were looked at
    assert left_out == [held]
    steps = found.filter(pl.col("_step_rate").is_not_null())
    assert steps.get_column("metric").unique().to_list() == [COUNTERS[1]]
    assert steps.height == len(UNITS) and (steps.get_column("ts") == START).all()
