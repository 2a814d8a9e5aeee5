"""The ``[health]`` settings, read once from the configuration."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from foreshock.config import Config, builtin_field, section_values


def _health(key: str, kind: Any) -> Any:
    """A field defaulting to ``[health] key`` of the built-in configuration."""
    return builtin_field("health", key, kind)


def _tuple_of(kind: Any) -> Any:
    """The conversion of a list setting to a tuple of ``kind``."""
    return lambda values: tuple(kind(v) for v in values)


@dataclass(frozen=True)
class HealthSettings:
    """What the telemetry health checks and the degradation trends use (``[health]``).

    Attributes
    ----------
    enabled : bool
        Compute and publish both at every publish.
    lookback : timedelta
        Raw telemetry read, back from the newest sample.
    scrape_gap : timedelta
        A unit (or one of its metrics) without a sample for this long is a finding.
    stuck_after : timedelta
        A counter unchanged, or a gauge frozen at one value, this long while peers move.
    peer_share : float
        "Peers move": at least this share of the same model's units changed the metric.
    sentinels : tuple of float
        Values an exporter serves for "no reading".
    reset_on_return : tuple of str
        Counters a drain and return should restart.
    trend_metrics : tuple of str
        Metrics whose trend is followed (counters: increases; gauges: mean level).
    trend_window : timedelta
        The window (one of ``[features] windows``) whose rate is compared with the span before.
    watch_accel, watch_min_increase : float
        Accelerating: the rate over ``trend_window`` is at least ``watch_accel`` times the
        rate over the span before, and the counter rose at least ``watch_min_increase``.
    sparkline_span : timedelta
        How far back the page's per-unit trend plot goes.
    features : bool
        Add the ``health_*`` model feature columns.
    """

    enabled: bool = _health("enabled", bool)
    lookback: timedelta = _health("lookback", timedelta)
    scrape_gap: timedelta = _health("scrape_gap", timedelta)
    stuck_after: timedelta = _health("stuck_after", timedelta)
    peer_share: float = _health("peer_share", float)
    sentinels: tuple[float, ...] = _health("sentinels", _tuple_of(float))
    reset_on_return: tuple[str, ...] = _health("reset_on_return", _tuple_of(str))
    trend_metrics: tuple[str, ...] = _health("trend_metrics", _tuple_of(str))
    trend_window: timedelta = _health("trend_window", timedelta)
    watch_accel: float = _health("watch_accel", float)
    watch_min_increase: float = _health("watch_min_increase", float)
    sparkline_span: timedelta = _health("sparkline_span", timedelta)
    features: bool = _health("features", bool)

    @classmethod
    def from_config(cls, config: Config) -> HealthSettings:
        """The settings of ``config``'s ``[health]`` section (every key has a default there)."""
        return cls(**section_values(cls, "health", config.section("health")))
