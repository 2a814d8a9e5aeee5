"""Reading the feature store for training and scoring without holding the fleet in memory.

The feature store holds one row per unit and snapshot with a few hundred columns; a fleet
of thousands of GPUs over weeks does not fit in memory as one frame (4,096 GPUs x 30 days
hourly x 380 float64 columns is about 9 GB, and every copy doubles it).  Everything here
reads lazily:

* only the partitions (``date=...``) of the time range asked for, only the columns asked
  for, with the time filter pushed into the Parquet scan;
* feature columns as ``Float32`` (half the memory; LightGBM bins them anyway);
* keys first (``unit_id, ts, life_start``: a few bytes a row), so labels and the training
  sample are decided on keys and only the chosen rows' features are read.

The training sample (:func:`training_frame`) keeps every *failure-adjacent* row (its life
ends in a known failure within ``adjacent`` of the snapshot) and a random share of the
healthy unit-hours, at most ``max_healthy_rows`` of them, each weighted by the inverse of
its sampling rate (``sample_weight``), so weighted sums over the sample estimate sums over
the fleet (Horvitz & Thompson, 1952).  Memory then grows with the sample, not the fleet.

With ``[models] sample_rule_firing`` the healthy rows where an operator rule fires (the
fixed-threshold rules of :mod:`~foreshock.models.estimators.baseline`: a correctable-error
burst, a remapped row, an Xid) are a second stratum, kept whole at weight 1; the
``max_healthy_rows`` are then drawn from the quiet rest.  Those are the negatives that look
most like a precursor (the hard negatives); a uniform draw keeps one in ten of them at a
weight of ten, this keeps all, and the weighted sums stay unbiased either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.contract import UTC_TS
from foreshock.durations import parse_duration
from foreshock.features.labels import CENSORED_AT, drain_censoring, outcome_labels
from foreshock.features.store import feature_files
from foreshock.models.estimators.base import SAMPLE_WEIGHT
from foreshock.models.estimators.baseline import ThresholdBaseline

KEYS = ("unit_id", "ts")
# Columns read with the keys (life bookkeeping), never cast.
KEY_LIKE = ("unit_id", "ts", "life", "life_start")


def _day_of(path: Path) -> date:
    return date.fromisoformat(path.parent.parent.name.removeprefix("date="))


@dataclass
class FeatureSource:
    """The feature store, read lazily by time range and columns.

    Parameters
    ----------
    files
        The store's partition files (``features.store.feature_files``).
    until
        Rows at or after this time are never read (a view of the store's past:
        :meth:`before`); None: every row.
    """

    files: list[Path]
    _schema: dict[str, pl.DataType] | None = field(default=None, init=False, repr=False)
    until: datetime | None = None

    @classmethod
    def from_dir(cls, features_dir: Path) -> FeatureSource:
        return cls(feature_files(Path(features_dir)))

    @property
    def schema(self) -> dict[str, pl.DataType]:
        """Union of the partitions' columns (a column missing from older ones reads as null)."""
        if self._schema is None:
            schema: dict[str, pl.DataType] = {}
            for path in self.files:
                for name, dtype in pl.read_parquet_schema(path).items():
                    schema.setdefault(name, dtype)
            self._schema = schema
        return self._schema

    @property
    def empty(self) -> bool:
        return not self.files

    def before(self, cut: datetime) -> FeatureSource:
        """The same store with only the snapshots taken before ``cut`` (e.g. a fit that must
        not see a review window): nothing later is read, whatever range is asked for."""
        cut = cut if self.until is None else min(cut, self.until)
        last_day = (cut - timedelta(microseconds=1)).date()
        view = FeatureSource([p for p in self.files if _day_of(p) <= last_day], until=cut)
        view._schema = self._schema
        return view

    def scan(self, start: datetime | None = None, end: datetime | None = None) -> pl.LazyFrame:
        """Rows with ``start <= ts < end`` (either open), from the partitions of those dates only."""
        if self.until is not None:
            end = self.until if end is None else min(end, self.until)
        files = [
            p
            for p in self.files
            if (start is None or _day_of(p) >= start.date())
            and (end is None or _day_of(p) <= (end - timedelta(microseconds=1)).date())  # end is exclusive
        ]
        if not files:
            return pl.LazyFrame(schema=self.schema or {"unit_id": pl.String, "ts": UTC_TS})
        lazy = pl.scan_parquet(files, schema=self.schema, missing_columns="insert", hive_partitioning=False)
        if start is not None:
            lazy = lazy.filter(pl.col("ts") >= pl.lit(start).cast(UTC_TS))
        if end is not None:
            lazy = lazy.filter(pl.col("ts") < pl.lit(end).cast(UTC_TS))
        return lazy

    def columns(self, names: list[str] | None = None) -> list[pl.Expr]:
        """Selection expressions: key-like columns as stored, numeric features as Float32."""
        schema = self.schema  # once: a frame's schema is rebuilt at every access
        names = list(schema) if names is None else names
        out = []
        for name in names:
            dtype = schema.get(name)
            if dtype is None:
                out.append(pl.lit(None, pl.Float32).alias(name))
            elif name not in KEY_LIKE and dtype.is_numeric():
                out.append(pl.col(name).cast(pl.Float32))
            else:
                out.append(pl.col(name))
        return out

    def keys(
        self, start: datetime | None = None, end: datetime | None = None, extra: list[str] | None = None
    ) -> pl.DataFrame:
        """``unit_id, ts`` (+ ``life_start`` when stored) of the range, sorted; with ``extra``
        those columns too, read in the same scan (features as Float32)."""
        wanted = [pl.col(c) for c in ("unit_id", "ts", "life_start") if c in self.schema]
        columns = self.columns(extra) if extra else []
        return self.scan(start, end).select(*wanted, *columns).collect(engine="streaming").sort(list(KEYS))

    def span(self) -> tuple[datetime, datetime]:
        """First and last snapshot time (reads only ``ts``; of the store, only the first and
        the last date's partitions: a scan of every partition grows with the history)."""
        files = getattr(self, "files", None)  # None: a frame in memory (FrameSource)
        if files and self.until is None:
            first, last = _edge_time(files, min), _edge_time(files, max)
        else:  # a frame, or a view of the past (its last partition may hold later rows)
            first, last = self.scan().select(pl.col("ts").min(), pl.col("ts").max().alias("b")).collect().row(0)
        if first is None:
            raise ValueError("no feature snapshots")
        return first, last

    def step(self) -> timedelta:
        """The snapshot interval: the most common gap between a unit's snapshots on its first day."""
        from foreshock.models.estimators.training import snapshot_step

        first, _ = self.span()
        return snapshot_step(self.keys(first, first + timedelta(days=2)))

    def rows(
        self,
        start: datetime | None,
        end: datetime | None,
        columns: list[str] | None = None,
        keys: pl.DataFrame | None = None,
    ) -> pl.DataFrame:
        """Feature rows of the range (only ``keys``' rows when given, with their extra
        columns), features as Float32, sorted by ``unit_id, ts``.

        With ``keys`` the range is read one day at a time, each day joined with its keys
        before the next is read, so memory holds the rows kept plus one day of the fleet
        (never the whole range); the rows are then put in key order one column at a time.
        """
        if keys is None:
            return self.scan(start, end).select(self.columns(columns)).collect(engine="streaming").sort(list(KEYS))

        def empty() -> pl.DataFrame:
            schema = self.scan(start, end).select(self.columns(columns)).collect_schema()
            return pl.DataFrame(schema=schema).join(keys.head(0), on=list(KEYS))

        if keys.height == 0:
            return empty()
        first, last = keys.get_column("ts").min(), keys.get_column("ts").max()
        lo = first if start is None else max(first, start)
        hi = last + timedelta(microseconds=1) if end is None else min(last + timedelta(microseconds=1), end)
        keys = keys.filter(pl.col("ts").is_between(pl.lit(lo).cast(UTC_TS), pl.lit(hi).cast(UTC_TS), closed="left"))
        parts = []
        day = datetime.combine(lo.date(), datetime.min.time(), tzinfo=lo.tzinfo)
        while day < hi:
            stop = min(day + timedelta(days=1), hi)
            a = max(day, lo)
            wanted = keys.filter(
                pl.col("ts").is_between(pl.lit(a).cast(UTC_TS), pl.lit(stop).cast(UTC_TS), closed="left")
            )
            if wanted.height:
                part = self.scan(a, stop).select(self.columns(columns)).join(wanted.lazy(), on=list(KEYS), how="inner")
                parts.append(part.collect())
            day = stop
        return _sorted_by_keys(parts) if parts else empty()

    def batches(
        self, start: datetime, end: datetime, max_rows: int, columns: list[str] | None = None
    ) -> Iterator[pl.DataFrame]:
        """The rows of ``[start, end)`` in consecutive time windows of about ``max_rows`` rows."""
        units = max(self.scan(start, end).select(pl.col("unit_id").n_unique()).collect().item() or 1, 1)
        step = self.step()
        window = step * max(int(max_rows // units), 1)
        t = start
        while t < end:
            stop = min(t + window, end)
            part = self.rows(t, stop, columns)
            if part.height:
                yield part
            t = stop

    def latest(self, lookback: timedelta = timedelta(days=7), count: int = 1) -> pl.DataFrame:
        """The ``count`` most recent snapshots of every unit (units silent for longer than
        ``lookback`` before the newest snapshot are left out); reads only the last days'
        partitions.  Sorted by unit and time."""
        files = getattr(self, "files", None)
        # the newest date's partitions only (a view of the past: its newest snapshot)
        last = _edge_time(files, max) if files and self.until is None else self.span()[1]
        recent = self.scan(last - lookback, None).select(self.columns())
        return (
            recent.filter(pl.col("ts").rank("dense", descending=True).over("unit_id") <= count)
            .collect(engine="streaming")
            .unique(["unit_id", "ts"], keep="last")
            .sort("unit_id", "ts")
        )


def _edge_time(files: list[Path], pick) -> datetime | None:
    """The first (``pick=min``) or last (``max``) snapshot time of the store: read from the
    partitions of its first or last date only (a partition holds its date's snapshots)."""
    day = pick(_day_of(p) for p in files)
    edge = [p for p in files if _day_of(p) == day]
    bound = pl.col("ts").min() if pick is min else pl.col("ts").max()
    return pl.scan_parquet(edge, hive_partitioning=False).select(bound).collect().item()


def _sorted_by_keys(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """``parts`` concatenated and sorted by ``unit_id, ts``, one column at a time: each
    column is gathered into key order and its unsorted chunks freed before the next, so the
    sort needs one extra column of memory, not a second copy of the frame.  ``parts`` is
    emptied (its frames must not be referenced elsewhere for the memory to be freed)."""
    frame = pl.concat(parts, how="vertical", rechunk=False)
    parts.clear()
    order = frame.select(pl.arg_sort_by(list(KEYS))).to_series()
    columns = frame.get_columns()
    del frame
    for i, column in enumerate(columns):
        columns[i] = column.gather(order)
        del column
    return pl.DataFrame(columns)


@dataclass(frozen=True)
class TrainingSample:
    """How many healthy unit-hours a training sample keeps.

    Parameters
    ----------
    max_healthy_rows
        At most this many rows that are not failure-adjacent (0 or less: keep all).
    adjacent
        A row whose life ends in a known failure within this long is always kept.
    seed
        Seed of the healthy-row draw (the sample is the same for the same keys).
    """

    max_healthy_rows: int = 400_000
    adjacent: timedelta = timedelta(days=7)
    seed: int = 0
    rules: ThresholdBaseline | None = None  # keep every healthy row where one of these fires

    @classmethod
    def from_config(cls, config, horizons: list[str]) -> TrainingSample:
        """``[models] max_healthy_rows``, ``sample_adjacent`` (default: twice the longest
        horizon) and ``sample_rule_firing`` (the operators' rules of ``[baseline]``)."""
        section = config.section("models")
        longest = max((parse_duration(h) for h in horizons), default=timedelta(days=3))
        adjacent = parse_duration(section["sample_adjacent"]) if section.get("sample_adjacent") else 2 * longest
        rules = ThresholdBaseline.from_config(config) if section.get("sample_rule_firing") else None
        return cls(
            max_healthy_rows=int(section["max_healthy_rows"]),
            adjacent=adjacent,
            seed=int(section["sample_seed"]),
            rules=rules,
        )

    def choose(
        self, keys: pl.DataFrame, failures: pl.DataFrame, until: datetime, firing: np.ndarray | None = None
    ) -> pl.DataFrame:
        """``keys`` of the rows kept, with ``sample_weight`` (1 for adjacent rows, the inverse
        sampling rate for healthy ones).  ``keys`` must be sorted by ``unit_id, ts``;
        ``firing`` (aligned with ``keys``): healthy rows kept whole, at weight 1, the draw of
        ``max_healthy_rows`` taken from the other healthy rows."""
        lives = outcome_labels(keys, failures, [], until)
        ttf = lives.get_column("time_to_failure_h").to_numpy()
        adjacent = np.nan_to_num(ttf, nan=np.inf) <= self.adjacent.total_seconds() / 3600
        whole = adjacent if firing is None else adjacent | firing
        drawn = ~whole
        n_drawn = int(drawn.sum())
        rate = (
            1.0 if self.max_healthy_rows <= 0 or n_drawn <= self.max_healthy_rows else self.max_healthy_rows / n_drawn
        )
        draw = np.random.default_rng(self.seed).random(keys.height) < rate
        keep = whole | (drawn & draw)
        weight = np.where(whole, 1.0, 1.0 / rate)[keep]
        return keys.filter(pl.Series(keep)).with_columns(pl.Series(SAMPLE_WEIGHT, weight, dtype=pl.Float32))


def training_frame(
    source: FeatureSource,
    failures: pl.DataFrame,
    until: datetime,
    sample: TrainingSample,
    *,
    drains: pl.DataFrame | None = None,
    columns: list[str] | None = None,
) -> pl.DataFrame:
    """The rows a model trains on at cutoff ``until``: snapshots before it, sampled on keys,
    then read with their features (Float32), ``sample_weight`` and ``censored_at``.

    Raises
    ------
    ValueError
        When no snapshot precedes ``until``.
    """
    return training_sample(source, failures, until, sample, drains=drains, columns=columns).frame()


@dataclass
class StoredSample:
    """A training sample left in the feature store: the keys of its rows, their
    ``sample_weight`` and ``censored_at``, and where to read the rest.

    :meth:`frame` reads it whole (what :func:`training_frame` returns); a model that can
    spread its rows over a cluster reads only :attr:`keys` here and lets each worker read
    its share of the rows from :attr:`source`'s files (:mod:`foreshock.models.estimators.gbm_dask`).

    Attributes
    ----------
    source
        The feature store (or a frame in memory, which only :meth:`frame` can read).
    keys
        ``unit_id, ts, sample_weight, censored_at`` of the rows, sorted by ``unit_id, ts``.
    until
        The training cutoff: every row is before it.
    columns
        The columns read with the keys, in the store's order.
    """

    source: FeatureSource | FrameSource
    keys: pl.DataFrame
    until: datetime
    columns: list[str]

    @property
    def height(self) -> int:
        return self.keys.height

    def frame(self) -> pl.DataFrame:
        """Every row with every column (features Float32), sorted by ``unit_id, ts``."""
        return self.source.rows(None, self.until, self.columns, keys=self.keys)

    def head(self) -> pl.DataFrame:
        """The first row with every column, as :meth:`frame` has them (names and types)."""
        return self.source.rows(None, self.until, self.columns, keys=self.keys.head(1))


def training_sample(
    source: FeatureSource | FrameSource,
    failures: pl.DataFrame,
    until: datetime,
    sample: TrainingSample,
    *,
    drains: pl.DataFrame | None = None,
    columns: list[str] | None = None,
) -> StoredSample:
    """The rows a model trains on at cutoff ``until`` (see :func:`training_frame`), chosen
    on keys and not read yet.

    Raises
    ------
    ValueError
        When no snapshot precedes ``until``.
    """
    # the rules of a rule-firing stratum read their few columns in the keys' own scan
    rules = None if sample.rules is None else sample.rules.fixed_rules(pl.DataFrame(schema=source.schema))
    extra = sorted({c for r in rules.rules_ for c in r.columns}) if rules is not None else []
    keys = source.keys(None, until, extra)
    if keys.height == 0:
        raise ValueError(f"no feature snapshots before {until}")
    firing = rules.fires(keys) if rules is not None else None
    chosen = sample.choose(keys.drop(extra), failures, until, firing)
    del keys
    chosen = chosen.with_columns(drain_censoring(chosen, drains))
    wanted = [c for c in (columns or list(source.schema)) if c not in (SAMPLE_WEIGHT, CENSORED_AT)]
    return StoredSample(source, chosen.drop([c for c in chosen.columns if c == "life_start"]), until, wanted)


@dataclass
class FrameSource:
    """A feature frame already in memory, read through the same interface as
    :class:`FeatureSource` (tests, notebooks, small fleets)."""

    frame: pl.DataFrame

    def __post_init__(self) -> None:
        self.frame = self.frame.with_columns(pl.col("ts").cast(UTC_TS))

    @property
    def schema(self) -> dict[str, pl.DataType]:
        return dict(self.frame.schema)

    @property
    def empty(self) -> bool:
        return self.frame.height == 0

    until = None  # a frame is cut by :meth:`before` itself

    def before(self, cut: datetime) -> FrameSource:
        """The snapshots taken before ``cut`` (:meth:`FeatureSource.before`)."""
        return FrameSource(self.frame.filter(pl.col("ts") < pl.lit(cut).cast(UTC_TS)))

    def scan(self, start: datetime | None = None, end: datetime | None = None) -> pl.LazyFrame:
        lazy = self.frame.lazy()
        if start is not None:
            lazy = lazy.filter(pl.col("ts") >= pl.lit(start).cast(UTC_TS))
        if end is not None:
            lazy = lazy.filter(pl.col("ts") < pl.lit(end).cast(UTC_TS))
        return lazy

    columns = FeatureSource.columns
    keys = FeatureSource.keys
    span = FeatureSource.span
    step = FeatureSource.step
    rows = FeatureSource.rows
    batches = FeatureSource.batches
    latest = FeatureSource.latest


def as_source(features: pl.DataFrame | FeatureSource | FrameSource) -> FeatureSource | FrameSource:
    """A source for a frame in memory or the feature store."""
    return FrameSource(features) if isinstance(features, pl.DataFrame) else features
