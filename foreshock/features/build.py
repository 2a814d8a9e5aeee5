"""Build feature snapshots from the lake.

Two passes, so that memory is bounded by one shard whatever the fleet size:

1. **Per shard** (:func:`shard_unit_features`): roll each raw partition (date x shard) up to
   snapshot buckets, one file at a time (:mod:`features.day_rollups`, cached per date x
   shard), then compute window features, lives and context
   for the shard's units.  Only the partitions a snapshot can depend on are read: the
   snapshots' dates plus :attr:`FeatureSpec.lookback` before them.
2. **Per date, across shards** (:func:`features.peers.add_peer_features`): the rack error
   rate and the temperature-vs-power residual need every unit of a snapshot.  They are
   computed from the first-pass results of all shards of one date, which are small (one
   row per unit and snapshot), then the rows are written per shard.

:func:`build_features` runs both in memory and returns a frame (tests, notebooks).
:func:`stage_shard` / :func:`finalize_day` are the same passes with files in between, for
incremental runs: one chunk loop (:func:`run_plan`) works through time chunk by chunk
(:meth:`UpdatePlan.chunks`), here (:func:`apply_update`, :func:`update_features`) or as the
Prefect flow's tasks, so a run's memory is set by the fleet's width and the lookback, not by
the days it covers, and the rollup cache is pruned between chunks either way.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.config import Config
from foreshock.contract import INVENTORY_CONTEXT_COLUMNS, UTC_TS
from foreshock.features import store
from foreshock.features.context import (
    add_cohort_hazard,
    add_inventory_context,
    add_lot_failure_rates,
    life_table,
    snapshot_grid,
)
from foreshock.features.day_rollups import shard_rollup
from foreshock.features.health_features import add_health_features, health_feature_columns
from foreshock.features.peers import add_peer_features, add_peer_weight, peer_relative_columns
from foreshock.features.resume import Pending, changes_digest, clear_pending, read_pending, record_pending
from foreshock.features.rollup_cache import cache_in_use, prune_rollups, remove_empty_staging
from foreshock.features.spec import FeatureSpec, feature_spec
from foreshock.features.update_plan import UpdatePlan, as_utc, ceil_to, floor_to, late_spans, merged_spans
from foreshock.features.windows import (
    SEGMENT,
    error_activity_columns,
    jitter_feature_names,
    metric_feature_names,
    window_features,
)
from foreshock.features.xid import KNOWN_XID_CODES, XID_CLASS_NAMES
from foreshock.lake.changes import consume_changes, read_changes
from foreshock.lake.layout import lake_shards, partition_dates, shard_of
from foreshock.lake.read import read_table, scan_table


def spec_feature_columns(spec: FeatureSpec) -> list[str]:
    """Every model-feature column a spec makes the build write, in output order."""
    names: list[str] = []
    for metric in spec.catalog:
        names += metric_feature_names(metric, spec)
    names += jitter_feature_names(spec)
    for w in spec.windows:
        name = spec.name(w)
        names += [f"xid_{code}_count_{name}" for code in KNOWN_XID_CODES]
        names += [f"xid_class_{c}_count_{name}" for c in XID_CLASS_NAMES]
        names.append(f"events_total_count_{name}")
    names.append("telemetry_gap_hours")
    names += [f"telemetry_missing_frac_{spec.name(w)}" for w in spec.windows]
    names.append("age_days")
    names += [f"rack_error_rate_{spec.name(w)}" for w in spec.windows]
    names += [f"lot_failure_rate_{spec.name(w)}" for w in spec.windows]
    names += [f"temp_residual_c_{spec.name(w)}" for w in spec.windows]
    names.append("cohort_cum_hazard")
    names += peer_relative_columns(spec)
    names += health_feature_columns(spec)  # none unless [health] features
    return names


def output_schema(spec: FeatureSpec) -> dict[str, pl.DataType]:
    schema: dict[str, pl.DataType] = {"unit_id": pl.String(), "ts": UTC_TS}
    schema.update({c: pl.String() for c in INVENTORY_CONTEXT_COLUMNS})
    schema.update({"life": pl.Int32(), "life_start": UTC_TS})
    schema.update({c: pl.Float64() for c in spec_feature_columns(spec)})
    return schema


def _conform(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    have = frame.schema
    return frame.select(
        [
            (pl.col(c) if have[c] == t else pl.col(c).cast(t)) if c in have else pl.lit(None, t).alias(c)
            for c, t in schema.items()
        ]
    )


def lake_extent(lake_dir: Path) -> tuple[datetime, datetime] | None:
    """Earliest and latest sample time in the lake (reads only the first and last date)."""
    days = partition_dates(lake_dir, "samples")
    if not days:
        return None
    first = scan_table(lake_dir, "samples", start=days[0], end=days[0]).select(pl.col("ts").min()).collect().item()
    last = scan_table(lake_dir, "samples", start=days[-1], end=days[-1]).select(pl.col("ts").max()).collect().item()
    if first is None or last is None:
        return None
    return as_utc(first), as_utc(last)


def snapshot_range(
    lake_dir: Path,
    spec: FeatureSpec,
    start: date | datetime | None = None,
    end: date | datetime | None = None,
) -> tuple[datetime, datetime] | None:
    """First and last snapshot to compute, or None when there is nothing to compute.

    ``start``/``end`` are dates (whole days, inclusive) or datetimes.  The last snapshot
    is never later than the newest sample in the lake (a later one would be incomplete).
    """
    extent = lake_extent(lake_dir)
    if extent is None:
        return None
    first = ceil_to(extent[0], spec.every)
    last = floor_to(extent[1], spec.every)
    if start is not None:
        moment = start if isinstance(start, datetime) else datetime.combine(start, datetime.min.time())
        first = max(first, ceil_to(as_utc(moment), spec.every))
    if end is not None:
        if isinstance(end, datetime):
            moment = as_utc(end)
        else:
            moment = datetime.combine(end + timedelta(days=1), datetime.min.time(), tzinfo=UTC) - timedelta(
                microseconds=1
            )
        last = min(last, floor_to(moment, spec.every))
    return (first, last) if first <= last else None


def shard_unit_features(
    lake_dir: Path,
    spec: FeatureSpec,
    shard: int,
    first: datetime,
    last: datetime,
    inventory: pl.DataFrame,
    failures: pl.DataFrame,
    cache_dir: Path | None = None,
) -> pl.DataFrame:
    """First pass for one shard: every feature except the peer ones, plus the helper
    columns ``_error_any_<w>`` the peer pass needs."""
    return shard_block_features(lake_dir, spec, shard, [(first, last)], inventory, failures, cache_dir)


def shard_block_features(
    lake_dir: Path,
    spec: FeatureSpec,
    shard: int,
    blocks: list[tuple[datetime, datetime]],
    inventory: pl.DataFrame,
    failures: pl.DataFrame,
    cache_dir: Path | None = None,
) -> pl.DataFrame:
    """:func:`shard_unit_features` for consecutive blocks of snapshots ``(first, last)`` at
    once: the raw partitions are rolled up and combined once for all of them, and the
    blocks' grids are stacked into one window pass (one segment each), every block
    computed from the same rows as when it runs alone, so the results are the same."""
    rollup = shard_rollup(lake_dir, spec, shard, blocks[0][0], blocks[-1][1], failures, cache_dir)
    lives = life_table(inventory, failures)
    grids, keeps = [], []
    for first, last in blocks:
        lo = first - spec.lookback
        buckets = rollup.scrapes.filter((pl.col("bucket") > lo) & (pl.col("bucket") <= last))
        if buckets.height == 0:
            continue
        earliest_data = buckets.get_column("bucket").min()
        grid_start = min(first, max(first - spec.lookback + spec.every, earliest_data))
        units = buckets.get_column("unit_id").unique().to_list()
        grid = snapshot_grid(units, grid_start, last, spec.every, failures, lives)
        grids.append(grid.with_columns(pl.lit(len(grids), pl.Int32).alias(SEGMENT)))
        keeps.append(grid.get_column("bucket") >= first)  # the block's snapshots; before them its lookback
    if not grids:
        return pl.DataFrame()
    grid, keep = (grids[0], keeps[0]) if len(grids) == 1 else (pl.concat(grids), pl.concat(keeps))
    frame = window_features(grid, rollup.pieces, rollup.scrapes, rollup.events, spec, keep)
    del rollup, grid, grids
    frame = add_health_features(frame, spec)
    in_service = pl.col("_in_service")
    if not frame.select(in_service.all()).item():  # a copy of the wide rows only when some must go
        frame = frame.filter(in_service)
    frame = frame.drop("_in_service", SEGMENT).rename({"bucket": "ts"})
    frame = add_inventory_context(frame, inventory)
    frame = add_lot_failure_rates(frame, inventory, failures, spec)
    return add_peer_weight(add_cohort_hazard(frame, inventory, failures), inventory, spec)


def _finish(frame: pl.DataFrame, spec: FeatureSpec) -> pl.DataFrame:
    """Peer features added and the columns of the output schema, rows in their order."""
    return _conform(add_peer_features(frame, spec), output_schema(spec))


def _global_tables(lake_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    inventory = read_table(lake_dir, "inventory")
    failures = read_table(lake_dir, "failures").select("unit_id", "failed_at").drop_nulls().unique()
    return inventory, failures


def build_features(
    lake_dir: Path,
    config: Config,
    start: date | datetime | None = None,
    end: date | datetime | None = None,
    shards: Iterable[int] | None = None,
) -> pl.DataFrame:
    """Feature snapshots for ``start..end`` computed in memory.

    Parameters
    ----------
    lake_dir : Path
        The canonical lake (``config.lake_dir`` normally).
    config : Config
        Supplies the catalog, ``[features]`` windows and snapshot spacing.
    start, end : date or datetime, optional
        Inclusive range of snapshots (dates mean whole days); default: all the lake holds.
    shards : iterable of int, optional
        Return only these unit shards.  Peer features still use every shard.

    Returns
    -------
    pl.DataFrame
        One row per unit and snapshot, keyed ``unit_id, ts``, sorted; columns as in
        :func:`output_schema`.
    """
    spec = feature_spec(config)
    schema = output_schema(spec)
    span = snapshot_range(lake_dir, spec, start, end)
    if span is None:
        return pl.DataFrame(schema=schema)
    inventory, failures = _global_tables(lake_dir)
    parts = [
        part
        for shard in range(lake_shards(lake_dir, config.shards))
        if (part := shard_unit_features(lake_dir, spec, shard, span[0], span[1], inventory, failures)).height
    ]
    if not parts:
        return pl.DataFrame(schema=schema)
    frame = _finish(pl.concat(parts, how="diagonal_relaxed"), spec).sort("unit_id", "ts")
    if shards is not None:
        wanted = {int(s) for s in shards}
        n = lake_shards(lake_dir, config.shards)
        keep = [u for u in frame.get_column("unit_id").unique().to_list() if shard_of(u, n) in wanted]
        frame = frame.filter(pl.col("unit_id").is_in(keep))
    return frame


# Staged passes (the flow and incremental runs) ------------------------------------------


def plan_update(
    config: Config,
    start: date | None = None,
    end: date | None = None,
    full: bool = False,
) -> UpdatePlan | None:
    """What a run must compute: snapshots after the last one stored (all of them with
    ``full``), the stored ones that late rows can change and those an interrupted run left
    (:mod:`features.resume`), within ``start..end``, up to the newest complete snapshot of
    the lake.  None when there is nothing to compute."""
    spec = feature_spec(config)
    changes = read_changes(config.lake_dir)
    pending = read_pending(config.features_dir)
    # The leading entries an interrupted run handled: what it left to do stands for them.
    covered = pending.covered(changes) if pending else 0
    # The change log is handled only by a run that covers every snapshot it may touch.
    whole = start is None and end is None
    span = snapshot_range(config.lake_dir, spec, start, end)
    if span is None:
        return None
    first, last = span
    spans = [(first, last)]
    if not full:
        stored = store.last_snapshot(config.features_dir)
        if stored is not None:
            reached = late_spans(changes[covered:], spec, stored) + list(pending.spans if pending else ())
            late = [(max(lo, first), min(hi, last)) for lo, hi in reached]
            spans = [(lo, hi) for lo, hi in late if lo <= hi]
            if max(first, stored + spec.every) <= last:
                spans.append((max(first, stored + spec.every), last))
    if not spans:
        if whole:  # nothing they could change is stored
            clear_pending(config.features_dir)
            consume_changes(config.lake_dir, len(changes))
        return None
    section = config.section("features")
    return UpdatePlan(
        spans=merged_spans(spans, spec.every),
        shards=lake_shards(config.lake_dir, config.shards),
        block=timedelta(days=int(section["block_days"])),
        max_task_rows=int(section["max_task_rows"]),
        changes=len(changes) if whole else 0,
        units=read_table(config.lake_dir, "inventory").height,
        digest=changes_digest(changes) if whole else None,
    )


def finish_update(config: Config, plan: UpdatePlan) -> None:
    """After every date of ``plan`` is stored: drop its progress record, then the change-log
    entries it handled (in that order: a kill in between recomputes more, never less), the
    cached rollups no later run reads (:mod:`features.rollup_cache`) and an empty staging
    area."""
    if plan.digest is not None:
        clear_pending(config.features_dir)
    consume_changes(config.lake_dir, plan.changes)
    prune_rollups(config, feature_spec(config), store.last_snapshot(config.features_dir) or plan.last)
    remove_empty_staging(config.features_dir)


def stage_shard(config: Config, shard: int, blocks: list[tuple[datetime, datetime]]) -> list[str]:
    """First pass of one shard for consecutive blocks of snapshots ``(first, last)`` (one
    of :meth:`UpdatePlan.block_groups`), written per date under the staging area; returns
    the staged files."""
    spec = feature_spec(config)
    inventory, failures = _global_tables(config.lake_dir)
    cache_dir = store.rollup_cache_dir(config.features_dir)
    with cache_in_use(cache_dir):  # no prune removes a cached date under this pass
        frame = shard_block_features(config.lake_dir, spec, shard, blocks, inventory, failures, cache_dir)
    parts = _by_date(frame)
    del frame  # the dates' rows are a copy when they had to be put in date order
    written = []
    for day, part in parts:
        path = store.staging_path(config.features_dir, day, shard)
        store.write_staged(part, path)
        written.append(str(path))
    return sorted(written)


def _by_date(frame: pl.DataFrame) -> list[tuple[date, pl.DataFrame]]:
    """The rows of each snapshot date, in their order (unit, then time): one stable sort of
    the dates and one gather of the wide frame, then a slice per date; a gather per date
    (a group-by's parts) costs twice as much over a few hundred columns."""
    if frame.height == 0:
        return []
    days = frame.get_column("ts").dt.date().to_physical().to_numpy()
    first = int(days.min())
    counts = np.bincount(days - first)
    if not (np.diff(days) >= 0).all():
        frame = frame[pl.Series(np.argsort(days, kind="stable"))]
    offsets = np.concatenate(([0], np.cumsum(counts)))
    return [
        (date(1970, 1, 1) + timedelta(days=first + int(i)), frame.slice(int(offsets[i]), int(counts[i])))
        for i in np.flatnonzero(counts)
    ]


def finalize_day(config: Config, day: date, lo: datetime, hi: datetime) -> int:
    """Second pass for one date: peer features over all staged shards, then the rows replace
    the stored snapshots ``lo..hi`` of that date.  Returns the number of rows written."""
    spec = feature_spec(config)
    staged = store.staged_files(config.features_dir, day)
    if staged:
        # in shard, unit and time order as staged: write_features then has nothing to reorder
        frame = _finish(pl.concat([store.read_scratch(p) for p in staged], how="diagonal_relaxed"), spec)
    else:
        frame = pl.DataFrame(schema=output_schema(spec))
    in_span = pl.col("ts").is_between(lo, hi)
    if not frame.select(in_span.all()).item():  # a copy of the wide rows only when some must go
        frame = frame.filter(in_span)
    rows = store.write_features(
        frame, config.features_dir, lake_shards(config.lake_dir, config.shards), replace=(lo, hi)
    )
    shutil.rmtree(store.staging_day_dir(config.features_dir, day), ignore_errors=True)
    return rows


def finalize_days(config: Config, spans: list[tuple[date, datetime, datetime]]) -> int:
    """:func:`finalize_day` for each ``(day, lo, hi)``, dates side by side on ``[runner]
    local_workers`` threads (each date reads its own staged files and writes its own
    partitions).  Returns the rows written."""
    if len(spans) < 2 or config.local_workers < 2:
        return sum(finalize_day(config, day, lo, hi) for day, lo, hi in spans)
    with ThreadPoolExecutor(max_workers=config.local_workers) as pool:
        return sum(pool.map(lambda span: finalize_day(config, *span), spans))


def update_features(
    config: Config,
    start: date | None = None,
    end: date | None = None,
    full: bool = False,
) -> int:
    """Compute and store the snapshots :func:`plan_update` finds missing or changed, without
    Prefect (the flow runs the same steps as tasks).  Returns the number of rows written."""
    return locked_update(config, start, end, full, lambda plan: apply_update(config, plan))["rows"]


def locked_update(
    config: Config,
    start: date | None,
    end: date | None,
    full: bool,
    run: Callable[[UpdatePlan], dict],
) -> dict:
    """Plan a run (:func:`plan_update`) and ``run(plan)`` it, both under the store's
    :func:`~foreshock.features.store.writer_lock`: a second run at once refuses in one line
    instead of planning from, and writing over, a store the first is changing.  Returns
    ``run``'s :meth:`UpdatePlan.summary`, or that of an empty run when nothing is to compute."""
    with store.writer_lock(config.features_dir):
        plan = plan_update(config, start, end, full)
        if plan is None:
            return {"snapshots_from": None, "snapshots_to": None, "rows": 0, "partitions": 0}
        return run(plan)


# Every shard's first pass over a chunk's blocks -> the files staged, per shard.
StageChunk = Callable[[list[tuple[datetime, datetime]], int], list[list[str]]]
# A chunk's dates ``(date, lo, hi)``: their peer pass and write -> the rows written.
WriteChunk = Callable[[list[tuple[date, datetime, datetime]]], int]


def run_plan(
    config: Config,
    plan: UpdatePlan,
    stage: StageChunk,
    write: WriteChunk,
    progress: Callable[[list, str], Iterable] | None = None,
) -> dict:
    """The one chunk loop of a features run, here (:func:`apply_update`) or as Prefect
    tasks (the flow passes ``stage`` and ``write`` that submit them).

    Chunk by chunk in time (:meth:`UpdatePlan.chunks`): ``stage(blocks, shards)`` runs every
    shard's first pass over a chunk's blocks, ``write(days)`` stores the chunk's dates, and
    only then is the next chunk staged, so a run holds one chunk whatever the days it
    covers.  Between chunks the rollup cache loses the dates neither the next chunks nor a
    later run read, so it stays bounded during a long run too, not only after it, and a run
    over every snapshot records what it has left to do (:mod:`features.resume`), so that a
    rerun after a kill resumes from the first chunk not stored instead of from the start.
    ``progress(items, description)`` wraps the chunks (a bar or log lines).  Returns
    :meth:`UpdatePlan.summary`.
    """
    spec = feature_spec(config)
    chunks = plan.chunks(spec)
    rows = partitions = 0
    for i, (blocks, days) in enumerate(progress(chunks, "features: time chunks") if progress else chunks):
        partitions += sum(len(files) for files in stage(blocks, plan.shards))
        rows += write(days)
        if i + 1 < len(chunks):
            if plan.digest is not None:  # a rerun after a kill resumes from the next chunk
                left = merged_spans([block for later, _ in chunks[i + 1 :] for block in later], spec.every)
                record_pending(config.features_dir, Pending(plan.changes, plan.digest, left))
            prune_rollups(config, spec, plan.last, chunks[i + 1][0][0][0])
    finish_update(config, plan)
    return plan.summary(rows, partitions)


def apply_update(
    config: Config,
    plan: UpdatePlan,
    progress: Callable[[list, str], Iterable] | None = None,
) -> dict:
    """Run ``plan`` here, without Prefect: what ``foreshock features`` does when no Prefect
    API records its runs.  :func:`run_plan`'s loop, shards side by side on ``[runner]
    local_workers`` threads (each shard writes its own staging files), as the flow's thread
    pool runs its shard tasks.  Returns :meth:`UpdatePlan.summary`."""
    with ThreadPoolExecutor(max_workers=config.local_workers) as pool:

        def stage(blocks: list[tuple[datetime, datetime]], shards: int) -> list[list[str]]:
            return list(pool.map(lambda shard: stage_shard(config, shard, blocks), range(shards)))

        return run_plan(config, plan, stage, lambda days: finalize_days(config, days), progress)


__all__ = [
    "apply_update",
    "build_features",
    "error_activity_columns",
    "finalize_day",
    "finalize_days",
    "finish_update",
    "locked_update",
    "output_schema",
    "plan_update",
    "run_plan",
    "shard_block_features",
    "shard_unit_features",
    "spec_feature_columns",
    "snapshot_range",
    "stage_shard",
    "update_features",
]
