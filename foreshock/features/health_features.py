"""Telemetry health as model features (``[health] features = true``; off by default).

Two counts per unit and snapshot, read from the window features the first pass has just
computed (no second read of raw data), for the telemetry-health findings a publish
reports (``foreshock.health.telemetry``) that can precede a failure:

- ``health_vanished_metrics``: catalog metrics with a sample in the longest window but
  none in the shortest, while the unit still reports in the shortest (a field that
  stopped: ``vanished_metric``);
- ``health_frozen_gauges_<w>``: gauges (not 0/1 flags) that held one value over window
  ``w``, the longest window not longer than ``[health] stuck_after`` (``frozen_gauge``).

Scrape gaps are already features (``telemetry_gap_hours``, ``telemetry_missing_frac_<w>``)
and are not repeated.  Stuck counters need the peers' movement at the same snapshot, and
were left out.  Measured on the demo fleet in docs/operations.md ("Telemetry health as
model features"): they add no lead for the "fell off bus" failures, so they are off.
"""

from __future__ import annotations

import polars as pl

from foreshock.features.spec import FeatureSpec


def _gauges(spec: FeatureSpec) -> list[str]:
    return [m.name for m in spec.gauges() if m.unit != "bool"]


def health_feature_columns(spec: FeatureSpec) -> list[str]:
    """The columns :func:`add_health_features` adds (none when the setting is off)."""
    if spec.health_window is None:
        return []
    return ["health_vanished_metrics", f"health_frozen_gauges_{spec.name(spec.health_window)}"]


def _present(metric, spec: FeatureSpec, window) -> pl.Expr:
    kind = "increase" if metric.is_counter else "mean"
    return pl.col(f"{metric.name}_{kind}_{spec.name(window)}").is_not_null()


def add_health_features(frame: pl.DataFrame, spec: FeatureSpec) -> pl.DataFrame:
    """``frame`` (window features of the first pass) with the health columns added."""
    if spec.health_window is None or frame.height == 0:
        return frame
    short, longest = spec.windows[0], spec.longest
    scraped = pl.col(f"telemetry_missing_frac_{spec.name(short)}").fill_null(1.0) < 1.0
    vanished = pl.sum_horizontal(
        [(_present(m, spec, longest) & ~_present(m, spec, short)).cast(pl.Float64) for m in spec.catalog]
    )
    name = spec.name(spec.health_window)
    frozen = pl.sum_horizontal(
        [(pl.col(f"{g}_std_{name}") == 0).fill_null(False).cast(pl.Float64) for g in _gauges(spec)]
    )
    return frame.with_columns(
        pl.when(scraped).then(vanished).otherwise(None).alias("health_vanished_metrics"),
        frozen.alias(f"health_frozen_gauges_{name}"),
    )
