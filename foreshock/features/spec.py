"""What to compute, read once from the configuration: snapshot spacing, windows, catalog."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from foreshock.catalog import Catalog, Metric
from foreshock.config import Config
from foreshock.durations import format_duration, parse_duration

# The gauge of how busy a GPU is: a power gauge's swings that it does not explain are jitter
# (features ``<power>_jitter_max_<w>``, :mod:`foreshock.features.windows`).
LOAD_GAUGE = "gpu_util_pct"


@dataclass(frozen=True)
class FeatureSpec:
    """The feature set a configuration asks for.

    Attributes
    ----------
    every : timedelta
        Snapshot spacing (``[features] snapshot_every``).
    windows : tuple of timedelta
        Trailing windows, shortest first; each a multiple of ``every``.
    baseline : timedelta
        A unit's own thermal baseline (``[features] baseline_window``).
    expected_every : timedelta
        Sample spacing a healthy exporter delivers (``[features] expected_sample_every``).
    catalog : Catalog
        The metric catalog: which metrics exist, their kind and family.
    peer_relative : bool
        Add each error metric's level and increases as a percentile among the units of
        the same model at the same snapshot (``[features] peer_relative``).
    rising_share : bool
        Add each error counter's share of a window's snapshot intervals in which it rose
        (``[features] rising_share``).
    health_window : timedelta or None
        With ``[health] features``: the window of the ``health_*`` columns
        (:mod:`foreshock.features.health_features`); None without them.
    """

    every: timedelta
    windows: tuple[timedelta, ...]
    baseline: timedelta
    expected_every: timedelta
    catalog: Catalog
    peer_relative: bool = False
    rising_share: bool = False
    health_window: timedelta | None = None

    @property
    def longest(self) -> timedelta:
        return self.windows[-1]

    @property
    def lookback(self) -> timedelta:
        """Raw data a snapshot may depend on: a window of data plus, before it, the longest
        gap a counter step may bridge; or the thermal baseline if that is longer."""
        return max(2 * self.longest, self.baseline)

    def buckets(self, span: timedelta) -> int:
        return int(span / self.every)

    def name(self, span: timedelta) -> str:
        return format_duration(span)

    @property
    def accel_pairs(self) -> list[tuple[timedelta, timedelta]]:
        """(short, long): every shorter window against the longest."""
        return [(w, self.longest) for w in self.windows[:-1]]

    @property
    def drift_windows(self) -> list[timedelta]:
        """Windows short enough to compare with the baseline (a window as long as the
        baseline would be compared with itself)."""
        return [w for w in self.windows if w < self.baseline]

    def counters(self) -> list[Metric]:
        return [m for m in self.catalog if m.is_counter]

    def gauges(self) -> list[Metric]:
        return [m for m in self.catalog if not m.is_counter]

    def thermal_levels(self) -> list[Metric]:
        """Thermal gauges that measure a temperature (not a 0/1 throttle flag)."""
        return [m for m in self.gauges() if m.family == "thermal" and m.unit != "bool"]

    def power_levels(self) -> list[Metric]:
        return [m for m in self.gauges() if m.family == "power" and m.unit != "bool"]

    def jitter_pairs(self) -> list[tuple[Metric, Metric]]:
        """(power gauge, load gauge): each power level whose jitter the load explains
        (none when the catalog has no :data:`LOAD_GAUGE`)."""
        load = [m for m in self.gauges() if m.name == LOAD_GAUGE]
        return [(power, load[0]) for power in self.power_levels()] if load else []

    @property
    def spanning_windows(self) -> list[timedelta]:
        """Windows of more than one snapshot interval."""
        return [w for w in self.windows if self.buckets(w) > 1]

    @property
    def jitter_windows(self) -> list[timedelta]:
        """:attr:`spanning_windows` (over one interval, the largest jitter is the window's
        own power spread, which the gradient-boosted model derives itself)."""
        return self.spanning_windows

    @property
    def rising_windows(self) -> list[timedelta]:
        """With :attr:`rising_share`, the :attr:`spanning_windows` (over one interval, the
        share of intervals in which an error counter rose is 0 or 1: whether its increase is
        above 0); else none."""
        return self.spanning_windows if self.rising_share else []


def feature_spec(config: Config) -> FeatureSpec:
    """Build the :class:`FeatureSpec` of a configuration, checking it is computable.

    Raises
    ------
    ValueError
        When a window or the baseline is not a whole multiple of ``snapshot_every`` (window
        features are sums of whole snapshot buckets).
    """
    section = config.section("features")
    every = config.snapshot_every
    windows = tuple(sorted(set(config.windows)))
    baseline = parse_duration(section["baseline_window"])
    expected = parse_duration(section["expected_sample_every"])
    for key, span in [("windows", w) for w in windows] + [("baseline_window", baseline)]:
        if span < every or span % every:
            raise ValueError(
                f"{config.source}: [features] {key}: {format_duration(span)} is not a whole multiple "
                f"of snapshot_every = {format_duration(every)}"
            )
    return FeatureSpec(
        every=every,
        windows=windows,
        baseline=baseline,
        expected_every=expected,
        catalog=config.catalog,
        peer_relative=bool(section["peer_relative"]),
        rising_share=bool(section["rising_share"]),
        health_window=_health_window(config, windows),
    )


def _health_window(config: Config, windows: tuple[timedelta, ...]) -> timedelta | None:
    """The longest window not longer than ``[health] stuck_after`` when ``[health]
    features`` is on (the shortest when all are longer), else None."""
    health = config.section("health")
    if not health["features"]:
        return None
    stuck = parse_duration(health["stuck_after"])
    return max([w for w in windows if w <= stuck], default=windows[0])
