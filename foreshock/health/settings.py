"""The ``[health]`` settings, read once from the configuration."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from foreshock.config import Config
from foreshock.durations import parse_duration


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

    enabled: bool = True
    lookback: timedelta = timedelta(days=7)
    scrape_gap: timedelta = timedelta(hours=1)
    stuck_after: timedelta = timedelta(hours=24)
    peer_share: float = 0.5
    sentinels: tuple[float, ...] = ()
    reset_on_return: tuple[str, ...] = ()
    trend_metrics: tuple[str, ...] = ()
    trend_window: timedelta = timedelta(hours=24)
    watch_accel: float = 2.0
    watch_min_increase: float = 3.0
    sparkline_span: timedelta = timedelta(days=7)
    features: bool = False

    @classmethod
    def from_config(cls, config: Config) -> HealthSettings:
        """The settings of ``config``'s ``[health]`` section (every key has a default there)."""
        s = config.section("health")
        return cls(
            enabled=bool(s["enabled"]),
            lookback=parse_duration(s["lookback"]),
            scrape_gap=parse_duration(s["scrape_gap"]),
            stuck_after=parse_duration(s["stuck_after"]),
            peer_share=float(s["peer_share"]),
            sentinels=tuple(float(v) for v in s["sentinels"]),
            reset_on_return=tuple(str(v) for v in s["reset_on_return"]),
            trend_metrics=tuple(str(v) for v in s["trend_metrics"]),
            trend_window=parse_duration(s["trend_window"]),
            watch_accel=float(s["watch_accel"]),
            watch_min_increase=float(s["watch_min_increase"]),
            sparkline_span=parse_duration(s["sparkline_span"]),
            features=bool(s["features"]),
        )
