"""Per-unit window features from bucket rollups: counters, gauges, events, telemetry health.

The input is a dense grid (one row per unit, life and bucket, sorted) joined with the
rollups; every window feature is a rolling sum, maximum or minimum over the last
``w / every`` rows of a unit's life.  A life never sees the buckets of the previous GPU in
the slot.  Feature names follow docs/architecture.md; windows are spelled by
``format_duration``.

Windows with no samples give null statistics (unknown, not zero); event counts give 0 (no
event was logged).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import numpy as np
import polars as pl

from foreshock.catalog import Metric
from foreshock.features.packed_key import BUCKET_SLOTS, LIFE_SLOTS, bucket_number
from foreshock.features.rollups import UNIT_LIFE_BUCKET
from foreshock.features.spec import FeatureSpec
from foreshock.features.xid import KNOWN_XID_CODES, XID_CLASS_NAMES, XID_CLASSES, XID_SOURCES

LIFE = ["unit_id", "life"]
# A grid may stack several runs of rows (``SEGMENT``): each is rolled on its own, as if it
# were a separate grid (the staged passes stack the blocks of one shard this way).
SEGMENT = "_segment"
_HOUR_US = 3_600_000_000.0
KEY_ROW = "_key_row"  # a rollup row's grid key number (_GridKeys)


# A window of one bucket is the bucket itself: no rolling pass over the grid's groups (a
# quarter of them with hourly snapshots and a 1h window).  The same values bit for bit: a
# sum of one value is the value but for -0.0, which sums to 0.0; a maximum or minimum the
# value.


def _rolling_sum(expr: pl.Expr, k: int, over: list[str]) -> pl.Expr:
    if k == 1:  # (not ``+ 0``, which the optimizer drops)
        filled = expr.fill_null(0)
        return pl.when(filled != 0).then(filled).otherwise(0)
    return expr.fill_null(0).rolling_sum(k, min_samples=1).over(over)


def _rolling_max(expr: pl.Expr, k: int, over: list[str]) -> pl.Expr:
    return expr if k == 1 else expr.rolling_max(k, min_samples=1).over(over)


def _rolling_min(expr: pl.Expr, k: int, over: list[str]) -> pl.Expr:
    return expr if k == 1 else expr.rolling_min(k, min_samples=1).over(over)


def _sample_std(prefix: str, suffix: str = "") -> pl.Expr:
    """Sample standard deviation from the columns ``<prefix>n``, ``<prefix>sum`` and
    ``<prefix>sumsq`` (each followed by ``suffix``); null below 2 samples."""
    n, s, ss = (pl.col(f"{prefix}{c}{suffix}") for c in ("n", "sum", "sumsq"))
    return pl.when(n > 1).then(((ss - s * s / n) / (n - 1)).clip(lower_bound=0.0).sqrt())


def _hours_before_snapshot(ts: pl.Expr) -> pl.Expr:
    return (pl.col("bucket").dt.epoch("us") - ts).cast(pl.Float64) / _HOUR_US


class _GridKeys:
    """The grid's ``unit_id, life, bucket`` keys, numbered once, so that each rollup's
    columns are attached to the grid by a gather instead of a join on the three keys per
    metric (a string hashed per row each time: half of this module's CPU before).

    The same rows as ``grid.join(part, on=UNIT_LIFE_BUCKET, how="left",
    maintain_order="left")`` for a ``part`` with one row per key (every rollup here has
    it): each grid row gets its key's row of ``part``, or nulls."""

    def __init__(self, grid: pl.DataFrame, every: timedelta):
        self.every_us = int(every.total_seconds() * 1_000_000)
        keys = grid.select(UNIT_LIFE_BUCKET)
        distinct = keys.unique(maintain_order=True).with_row_index(KEY_ROW)
        self.size = distinct.height
        self.numbered = distinct.select(self._packed(), KEY_ROW)
        if self.size == grid.height:  # one grid (no stacked segments): keys in row order
            self.grid_rows = np.arange(grid.height, dtype=np.int64)
        else:
            self.grid_rows = self.rows(keys)

    def _packed(self) -> pl.Expr:
        # One integer per key (packed_key's layout, with the unit's Categorical code): a
        # join on it holds a fraction of what one on the three columns does (their rows
        # encoded per row of a rollup of millions).
        unit = pl.col("unit_id").cast(pl.Categorical).to_physical().cast(pl.UInt64)
        number = bucket_number(pl.col("bucket"), self.every_us).cast(pl.UInt64)
        return ((unit * LIFE_SLOTS + pl.col("life").cast(pl.UInt64)) * BUCKET_SLOTS + number).alias("_key")

    def rows(self, part: pl.DataFrame) -> np.ndarray:
        """The key number of each row of ``part`` (-1: a key the grid does not hold).
        The rollups' ids are Categorical: their codes are packed as they are, not every
        rollup row turned into text."""
        found = part.select(self._packed()).join(self.numbered, on="_key", how="left", maintain_order="left")
        return found.get_column(KEY_ROW).fill_null(-1).to_numpy().astype(np.int64)

    def attach(
        self, grid: pl.DataFrame, part: pl.DataFrame, columns: list[str], prefix: str, rows: np.ndarray | None = None
    ) -> pl.DataFrame:
        """``grid`` with ``part``'s ``columns`` (renamed ``prefix + name``) at the rows of
        their keys; ``part``'s key numbers are ``rows``, else its ``_key_row`` column
        (:meth:`rows` once for all the metrics' pieces), else looked up here."""
        if rows is None:
            rows = part.get_column(KEY_ROW).to_numpy() if KEY_ROW in part.columns else self.rows(part)
        at = np.full(self.size, -1, dtype=np.int64)
        found = rows >= 0
        at[rows[found]] = np.flatnonzero(found)
        take = at[self.grid_rows]
        index = pl.Series("_take", take, dtype=pl.Int64).set(pl.Series(take < 0), None)  # null: no row
        renamed = part.select([pl.col(c).alias(f"{prefix}{c}") for c in columns]).select(pl.all().gather(index))
        return grid.hstack(renamed)


def _counter_features(
    grid: pl.DataFrame, part: pl.DataFrame, metric: Metric, spec: FeatureSpec, over: list[str], keys: _GridKeys
) -> tuple[pl.DataFrame, list[pl.Expr], list[pl.Expr]]:
    m, p = metric.name, f"_{metric.name}__"
    error = metric.family == "error"
    columns = ["n", "inc", "last_v"] + (["first_inc_ts", "last_inc_ts"] if error else [])
    grid = keys.attach(grid, part, columns, p)
    longest_k = spec.buckets(spec.longest)
    staged = []
    for w in spec.windows:
        k = spec.buckets(w)
        staged += [
            _rolling_sum(pl.col(f"{p}n"), k, over).alias(f"{p}n_{k}"),
            _rolling_sum(pl.col(f"{p}inc"), k, over).alias(f"{p}inc_{k}"),
        ]
    if error:
        # Whether the counter rose in a bucket, and whether the bucket had a reading: a step
        # (a burst of a few hours) and a ramp (days of steps) of the same increase differ here.
        for w in spec.rising_windows:
            k = spec.buckets(w)
            staged += [
                _rolling_sum((pl.col(f"{p}inc") > 0).cast(pl.Int32), k, over).alias(f"{p}rose_{k}"),
                _rolling_sum((pl.col(f"{p}n") > 0).cast(pl.Int32), k, over).alias(f"{p}read_{k}"),
            ]
        staged += [
            _rolling_min(pl.col(f"{p}first_inc_ts").dt.epoch("us"), longest_k, over).alias(f"{p}first_inc_us"),
            _rolling_max(pl.col(f"{p}last_inc_ts").dt.epoch("us"), longest_k, over).alias(f"{p}last_inc_us"),
        ]
    staged.append(pl.col(f"{p}last_v").forward_fill(limit=longest_k - 1).over(over).alias(f"{p}last_ff"))

    out: list[pl.Expr] = []
    for w in spec.windows:
        k = spec.buckets(w)
        out.append(pl.when(pl.col(f"{p}n_{k}") > 0).then(pl.col(f"{p}inc_{k}")).alias(f"{m}_increase_{spec.name(w)}"))
    for short, long in spec.accel_pairs:
        ks, kl = spec.buckets(short), spec.buckets(long)
        short_rate = pl.col(f"{p}inc_{ks}") / (short.total_seconds() / 3600)
        long_rate = pl.col(f"{p}inc_{kl}") / (long.total_seconds() / 3600)
        # Steady errors give 1; none at all in the long window gives 0 rather than 0/0.
        out.append(
            pl.when(pl.col(f"{p}inc_{kl}") > 0)
            .then(short_rate / long_rate)
            .when(pl.col(f"{p}n_{kl}") > 0)
            .then(0.0)
            .alias(f"{m}_accel_{spec.name(short)}_{spec.name(long)}")
        )
    out.append(pl.col(f"{p}last_ff").alias(f"{m}_last"))
    if error:
        for w in spec.rising_windows:
            k = spec.buckets(w)
            read = pl.col(f"{p}read_{k}")
            out.append(pl.when(read > 0).then(pl.col(f"{p}rose_{k}") / read).alias(f"{m}_rising_share_{spec.name(w)}"))
        out.append(_hours_before_snapshot(pl.col(f"{p}first_inc_us")).alias(f"{m}_hours_since_first_increase"))
        out.append(_hours_before_snapshot(pl.col(f"{p}last_inc_us")).alias(f"{m}_hours_since_last_increase"))
    return grid, staged, out


def _gauge_features(
    grid: pl.DataFrame, part: pl.DataFrame, metric: Metric, spec: FeatureSpec, over: list[str], keys: _GridKeys
) -> tuple[pl.DataFrame, list[pl.Expr], list[pl.Expr]]:
    m, p = metric.name, f"_{metric.name}__"
    grid = keys.attach(grid, part, ["n", "sum", "sumsq", "max", "last_v"], p)
    longest_k = spec.buckets(spec.longest)
    spans = sorted(set(spec.windows) | ({spec.baseline} if metric in spec.thermal_levels() else set()))
    staged = []
    for span in spans:
        k = spec.buckets(span)
        staged += [
            _rolling_sum(pl.col(f"{p}n"), k, over).alias(f"{p}n_{k}"),
            _rolling_sum(pl.col(f"{p}sum"), k, over).alias(f"{p}sum_{k}"),
            _rolling_sum(pl.col(f"{p}sumsq"), k, over).alias(f"{p}sumsq_{k}"),
            _rolling_max(pl.col(f"{p}max"), k, over).alias(f"{p}max_{k}"),
        ]
    staged.append(pl.col(f"{p}last_v").forward_fill(limit=longest_k - 1).over(over).alias(f"{p}last_ff"))

    def mean(k: int) -> pl.Expr:
        return pl.when(pl.col(f"{p}n_{k}") > 0).then(pl.col(f"{p}sum_{k}") / pl.col(f"{p}n_{k}"))

    out: list[pl.Expr] = []
    for w in spec.windows:
        k, name = spec.buckets(w), spec.name(w)
        n = pl.col(f"{p}n_{k}")
        out += [
            mean(k).alias(f"{m}_mean_{name}"),
            pl.when(n > 0).then(pl.col(f"{p}max_{k}")).alias(f"{m}_max_{name}"),
            _sample_std(f"{p}", f"_{k}").alias(f"{m}_std_{name}"),
        ]
        if metric in spec.power_levels():
            # How far the peak rose above the window's mean draw (a power excursion).
            out.append((pl.when(n > 0).then(pl.col(f"{p}max_{k}")) - mean(k)).alias(f"{m}_excursion_{name}"))
    out.append(pl.col(f"{p}last_ff").alias(f"{m}_last"))
    if metric in spec.thermal_levels():
        kb = spec.buckets(spec.baseline)
        for w in spec.drift_windows:
            out.append((mean(spec.buckets(w)) - mean(kb)).alias(f"{m}_drift_c_{spec.name(w)}"))
    return grid, staged, out


def _jitter_features(
    grid: pl.DataFrame,
    power_part: pl.DataFrame,
    load_part: pl.DataFrame,
    power: Metric,
    spec: FeatureSpec,
    over: list[str],
    keys: _GridKeys,
) -> tuple[pl.DataFrame, list[pl.Expr], list[pl.Expr]]:
    """``<power>_jitter_max_<w>``: the largest jitter of one snapshot interval in the window.

    A GPU's draw follows its load, so over a window in which jobs start and stop the power's
    spread is high on every busy GPU; within one interval at a steady load it is not, unless
    the power delivery is failing (noise, spikes and dips hours before the GPU falls off the
    bus).  An interval's jitter is the power's standard deviation over the load's plus one
    (watts per percentage point of utilization, as the model's ``power_w_spread_<w>``), and
    the window keeps its largest: a failing supply shows in some intervals and not in those
    where a changing load hides it."""
    p, u = f"_{power.name}__j_", "_load__j_"
    grid = keys.attach(grid, power_part, ["n", "sum", "sumsq"], p)
    grid = keys.attach(grid, load_part, ["n", "sum", "sumsq"], u)

    jitter = (_sample_std(p) / (_sample_std(u) + 1.0)).alias(f"{p}jitter")
    grid = grid.with_columns(jitter)
    staged = [
        _rolling_max(pl.col(f"{p}jitter"), spec.buckets(w), over).alias(f"{p}jitter_{spec.buckets(w)}")
        for w in spec.jitter_windows
    ]
    names = _jitter_names(power, spec)
    out = [pl.col(f"{p}jitter_{spec.buckets(w)}").alias(n) for w, n in zip(spec.jitter_windows, names, strict=True)]
    return grid, staged, out


def _jitter_names(power: Metric, spec: FeatureSpec) -> list[str]:
    return [f"{power.name}_jitter_max_{spec.name(w)}" for w in spec.jitter_windows]


def jitter_feature_names(spec: FeatureSpec) -> list[str]:
    """The jitter columns of :func:`_jitter_features`, in output order."""
    return [n for power, _ in spec.jitter_pairs() for n in _jitter_names(power, spec)]


def _event_features(
    grid: pl.DataFrame, events: pl.DataFrame, spec: FeatureSpec, over: list[str], keys: _GridKeys
) -> tuple[pl.DataFrame, list[pl.Expr], list[pl.Expr]]:
    is_xid = pl.col("source").is_in(list(XID_SOURCES))
    known_classes = [c for c in XID_CLASS_NAMES if c != "other"]
    classified = [code for c in known_classes for code in XID_CLASSES[c]]
    per_bucket = events.group_by(UNIT_LIFE_BUCKET).agg(
        *[
            pl.col("count").filter(is_xid & (pl.col("code") == code)).sum().alias(f"_xid_{code}")
            for code in KNOWN_XID_CODES
        ],
        *[
            pl.col("count").filter(is_xid & pl.col("code").is_in(list(XID_CLASSES[c]))).sum().alias(f"_xid_class_{c}")
            for c in known_classes
        ],
        pl.col("count").filter(is_xid & ~pl.col("code").is_in(classified)).sum().alias("_xid_class_other"),
        pl.col("count").sum().alias("_events_total"),
    )
    names = [f"xid_{code}" for code in KNOWN_XID_CODES] + [f"xid_class_{c}" for c in XID_CLASS_NAMES] + ["events_total"]
    grid = keys.attach(grid, per_bucket, [f"_{n}" for n in names], "")
    counts = [f"{n}_count_{spec.name(w)}" for w in spec.windows for n in names]
    windows = [
        _rolling_sum(pl.col(f"_{n}"), spec.buckets(w), over).cast(pl.Float64).alias(f"_{n}_count_{spec.name(w)}")
        for w in spec.windows
        for n in names
    ]
    return grid, windows, [pl.col(f"_{c}").alias(c) for c in counts]


def _scrape_features(
    grid: pl.DataFrame, scrapes: pl.DataFrame, spec: FeatureSpec, over: list[str], keys: _GridKeys
) -> tuple[pl.DataFrame, list[pl.Expr], list[pl.Expr]]:
    """``telemetry_gap_hours``, ``telemetry_missing_frac_<w>`` and ``_in_service`` from the
    scrape counts (the ``health_*`` columns are :mod:`foreshock.features.health_features`)."""
    grid = keys.attach(grid, scrapes, ["n_ts", "last_ts"], "_scrape_")
    longest_k = spec.buckets(spec.longest)
    staged = [
        _rolling_sum(pl.col("_scrape_n_ts"), spec.buckets(w), over).alias(f"_scrape_n_{spec.buckets(w)}")
        for w in spec.windows
    ]
    staged.append(_rolling_max(pl.col("_scrape_last_ts").dt.epoch("us"), longest_k, over).alias("_scrape_last_us"))
    out = [_hours_before_snapshot(pl.col("_scrape_last_us")).alias("telemetry_gap_hours")]
    since_life_start = (pl.col("bucket") - pl.col("life_start")).dt.total_microseconds().cast(pl.Float64)
    for w in spec.windows:
        # A new GPU cannot have missed samples before it was installed.
        observable = pl.min_horizontal(
            pl.lit(w.total_seconds() * 1e6), since_life_start.fill_null(w.total_seconds() * 1e6)
        )
        expected = observable / (spec.expected_every.total_seconds() * 1e6)
        frac = (1.0 - pl.col(f"_scrape_n_{spec.buckets(w)}") / expected).clip(0.0, 1.0)
        out.append(pl.when(expected > 0).then(frac).alias(f"telemetry_missing_frac_{spec.name(w)}"))
    # A unit silent for the whole longest window is out of service: no snapshot.
    out.append((pl.col(f"_scrape_n_{longest_k}") > 0).alias("_in_service"))
    return grid, staged, out


LIFE_RUN = "_life_run"


def _life_runs(grid: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """What the windows roll over: a unit's life (in each stacked segment).  The grid holds
    each life's rows together, so they are numbered by runs once (``_life_run``, dropped
    with the other helper columns) and every window groups by that integer instead of
    hashing ``unit_id, life`` again per expression; a grid whose lives are not contiguous
    keeps the columns themselves (the same groups either way)."""
    over = [*LIFE, SEGMENT] if SEGMENT in grid.columns else LIFE
    runs = grid.select(pl.struct(over).rle_id()).to_series()
    if grid.height and runs[-1] + 1 != grid.select(pl.struct(over).n_unique()).item():
        return grid, over
    # Run numbers rise with the rows: flagged sorted, the windows' groups are runs found
    # in one pass rather than hashed (a quarter of the windows' CPU).
    return grid.with_columns(runs.alias(LIFE_RUN).set_sorted()), [LIFE_RUN]


def error_activity_columns(spec: FeatureSpec) -> list[str]:
    return [f"_error_any_{spec.name(w)}" for w in spec.windows]


def window_features(
    grid: pl.DataFrame,
    pieces: pl.DataFrame,
    scrapes: pl.DataFrame,
    events: pl.DataFrame,
    spec: FeatureSpec,
    keep: pl.Series | None = None,
) -> pl.DataFrame:
    """Window features for the rows of ``grid`` (those ``keep`` marks).

    Parameters
    ----------
    grid : pl.DataFrame
        ``unit_id, life, bucket, life_start``: one row per unit, life and bucket with no
        holes, sorted by ``unit_id, bucket``; or several such grids stacked, told apart
        by a ``_segment`` column (each is computed as if alone).
    pieces, scrapes, events : pl.DataFrame
        Combined rollups (one row per unit, life, [metric,] bucket).
    spec : FeatureSpec
        What to compute.
    keep : pl.Series of bool, optional
        The grid rows whose features are wanted (default: every row).  The windows roll
        over every row; the others (a lookback, which is most of a block's grid) only feed
        them.

    Returns
    -------
    pl.DataFrame
        ``grid``'s columns (``_segment`` too) of the kept rows, in their order, the
        feature columns, ``_in_service`` (the unit reported within the longest window)
        and ``_error_any_<w>`` (any error-family counter increase or event in the window,
        used for fault-domain rates).
    """
    grid, over = _life_runs(grid)
    keys = _GridKeys(grid, spec.every)
    kept = grid if keep is None else grid.filter(keep)
    pieces = pieces.with_columns(pl.Series(KEY_ROW, keys.rows(pieces)))
    # Each metric's rows, gathered only when its features are computed (a partition of all
    # the pieces up front would hold a second copy of them through the whole pass).
    rows = pieces.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"), "metric").group_by("metric")
    found = rows.agg("_row")
    rows_of = dict(zip(found.get_column("metric").to_list(), found.get_column("_row"), strict=True))

    # Each builder attaches its rollup's columns to the grid and returns the windows over
    # them (``staged``, rolled over every grid row) and the features computed from those
    # (row by row, so only on the kept rows).  One builder at a time: its helper columns
    # are dropped once its features are taken, so no more than one metric's are held over
    # the whole grid (all in one context hold ~400 columns over the lookback too, for no
    # less CPU: sorted runs, :func:`_life_runs`, are grouped without hashing).
    def features_of(build: Callable[[pl.DataFrame], tuple[pl.DataFrame, list[pl.Expr], list[pl.Expr]]]) -> pl.DataFrame:
        attached, staged, features = build(grid)
        # One query: only the columns the features read are carried through the filter.
        rolled = attached.lazy().with_columns(staged)
        rolled = rolled if keep is None else rolled.filter(keep)
        return rolled.select(features).collect(engine="in-memory")

    def nulls(names: list[str]) -> pl.DataFrame:
        return kept.with_columns(pl.lit(None, pl.Float64).alias(n) for n in names).select(names)

    parts = []
    for metric in spec.catalog:
        if metric.name not in rows_of:
            parts.append(nulls(metric_feature_names(metric, spec)))
            continue
        build = _counter_features if metric.is_counter else _gauge_features
        part = pieces[rows_of[metric.name]]
        parts.append(features_of(lambda g, b=build, p=part, m=metric: b(g, p, m, spec, over, keys)))
        del part
    for power, load in spec.jitter_pairs():
        if power.name not in rows_of or load.name not in rows_of:
            parts.append(nulls(_jitter_names(power, spec)))
            continue
        both = pieces[rows_of[power.name]], pieces[rows_of[load.name]]
        parts.append(features_of(lambda g, b=both, m=power: _jitter_features(g, *b, m, spec, over, keys)))
        del both
    parts.append(features_of(lambda g: _event_features(g, events, spec, over, keys)))
    parts.append(features_of(lambda g: _scrape_features(g, scrapes, spec, over, keys)))
    out = pl.concat([kept, *parts], how="horizontal")
    error_counters = [m.name for m in spec.counters() if m.family == "error"]
    activity = []
    for w in spec.windows:
        name = spec.name(w)
        signals = [pl.col(f"{m}_increase_{name}").fill_null(0) > 0 for m in error_counters]
        signals.append(pl.col(f"events_total_count_{name}") > 0)
        activity.append(pl.any_horizontal(signals).alias(f"_error_any_{name}"))
    out = out.with_columns(activity)
    keep_columns = [
        c for c in out.columns if not c.startswith("_") or c in ("_in_service", SEGMENT) or c.startswith("_error_any_")
    ]
    return out.select(keep_columns)


def metric_feature_names(metric: Metric, spec: FeatureSpec) -> list[str]:
    """Feature columns one catalog metric contributes, in output order."""
    m, names = metric.name, []
    if metric.is_counter:
        names += [f"{m}_increase_{spec.name(w)}" for w in spec.windows]
        names += [f"{m}_accel_{spec.name(short)}_{spec.name(long)}" for short, long in spec.accel_pairs]
        names.append(f"{m}_last")
        if metric.family == "error":
            names += [f"{m}_rising_share_{spec.name(w)}" for w in spec.rising_windows]
            names += [f"{m}_hours_since_first_increase", f"{m}_hours_since_last_increase"]
        return names
    for w in spec.windows:
        names += [f"{m}_mean_{spec.name(w)}", f"{m}_max_{spec.name(w)}", f"{m}_std_{spec.name(w)}"]
        if metric in spec.power_levels():
            names.append(f"{m}_excursion_{spec.name(w)}")
    names.append(f"{m}_last")
    if metric in spec.thermal_levels():
        names += [f"{m}_drift_c_{spec.name(w)}" for w in spec.drift_windows]
    return names
