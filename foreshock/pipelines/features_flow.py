"""The Prefect flow that turns the lake into feature snapshots (``foreshock features`` when a
Prefect API records its runs, :mod:`foreshock.pipelines.features_cmd`; ``foreshock serve``).

Wiring only; the work and the chunk loop (:func:`features.build.run_plan`, shared with the
command's run without Prefect) live in :mod:`features.build`.  Two kinds of coarse tasks:

- ``features-shard``: one unit shard over consecutive blocks of ``[features] block_days``
  of snapshots (reads each raw partition of the blocks once, plus the lookback before
  them; a small fleet's whole span is one task per shard);
- ``features-dates``: up to a week of dates, each over all shards (peer features: rack
  error rate, the temperature-vs-power residual), then the rows are written to
  ``data/features/date=.../shard=.../part.parquet``.

Tasks take and return plain values (settings, shard numbers, ISO times, paths, counts).
Runs are incremental: only snapshots after the last stored one are computed, plus the
stored snapshots that rows ingested late can change (the lake's change log).
"""

from __future__ import annotations

from datetime import date, datetime

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.features.build import finalize_days, locked_update, run_plan, stage_shard
from foreshock.pipelines.progress import track


@task(name="features-shard", retries=1, retry_delay_seconds=2, cache_policy=NO_CACHE)
def stage_shard_task(settings: dict, shard: int, blocks: list[list[str]]) -> list[str]:
    return stage_shard(
        Config.from_settings(settings),
        shard,
        [(datetime.fromisoformat(first), datetime.fromisoformat(last)) for first, last in blocks],
    )


# Dates per second-pass task: a task each would cost more in task bookkeeping than the
# date's work on a small fleet.
DATES_PER_TASK = 7


@task(name="features-dates", retries=1, retry_delay_seconds=2, cache_policy=NO_CACHE)
def finalize_days_task(settings: dict, days: list[list[str]]) -> int:
    config = Config.from_settings(settings)
    return finalize_days(
        config,
        [(date.fromisoformat(day), datetime.fromisoformat(lo), datetime.fromisoformat(hi)) for day, lo, hi in days],
    )


@flow(name="features", validate_parameters=False)
def features_flow(settings: dict, start: str | None = None, end: str | None = None, full: bool = False) -> dict:
    """Compute and store missing feature snapshots; returns what was done."""
    config = Config.from_settings(settings)

    def stage(blocks: list[tuple[datetime, datetime]], shards: int) -> list[list[str]]:
        times = [[lo.isoformat(), hi.isoformat()] for lo, hi in blocks]
        return [future.result() for future in [stage_shard_task.submit(settings, s, times) for s in range(shards)]]

    def write(days: list[tuple[date, datetime, datetime]]) -> int:
        # Each date waits for every shard's first pass (the peer features need all of them).
        spans = [[day.isoformat(), lo.isoformat(), hi.isoformat()] for day, lo, hi in days]
        groups = [spans[i : i + DATES_PER_TASK] for i in range(0, len(spans), DATES_PER_TASK)]
        return sum(future.result() for future in [finalize_days_task.submit(settings, group) for group in groups])

    return locked_update(
        config,
        date.fromisoformat(start) if start else None,
        date.fromisoformat(end) if end else None,
        full,
        lambda plan: run_plan(config, plan, stage, write, track),
    )
