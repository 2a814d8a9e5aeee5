"""Features that compare a unit with its peers at the same snapshot.

They need every shard of a snapshot, so they are added in a second pass per date over the
per-shard results (see :mod:`features.build`).  Both use only rows at the same snapshot
time, which themselves use only data at or before it: point-in-time correct.

- ``rack_error_rate_<w>``: share of the *other* in-service units of the rack that logged
  an error (any error-family counter increase or any event) in the window.  Correlated
  failures (cooling, a shared PDU or switch) show up here before they hit this unit.
- ``temp_residual_c_<w>``: the unit's mean temperature minus what its mean power draw
  predicts, from an ordinary least-squares line fitted per GPU model across all units at
  the same snapshot.  A GPU running hotter than peers at the same load has poor cooling
  or a degrading thermal interface.
"""

from __future__ import annotations

import polars as pl

from foreshock.features.spec import FeatureSpec
from foreshock.features.windows import error_activity_columns

MIN_PEERS_FOR_FIT = 3


def add_rack_error_rates(frame: pl.DataFrame, spec: FeatureSpec) -> pl.DataFrame:
    exprs = []
    for w, flag in zip(spec.windows, error_activity_columns(spec)):
        own = pl.col(flag).cast(pl.Float64)
        others = pl.len().over("rack", "ts").cast(pl.Float64) - 1.0
        erring_others = own.sum().over("rack", "ts") - own
        exprs.append(
            pl.when(pl.col("rack").is_not_null() & (others > 0))
            .then(erring_others / others)
            .alias(f"rack_error_rate_{spec.name(w)}")
        )
    return frame.with_columns(exprs)


def add_temperature_residuals(frame: pl.DataFrame, spec: FeatureSpec) -> pl.DataFrame:
    thermal, power = spec.thermal_levels(), spec.power_levels()
    names = [f"temp_residual_c_{spec.name(w)}" for w in spec.windows]
    if not thermal or not power:
        # A catalog without a temperature or a power gauge (disks, NICs): nothing to fit.
        return frame.with_columns([pl.lit(None, pl.Float64).alias(n) for n in names])
    group = ["model", "ts"]
    pairs = []
    for w in spec.windows:
        y = pl.col(f"{thermal[0].name}_mean_{spec.name(w)}")
        x = pl.col(f"{power[0].name}_mean_{spec.name(w)}")
        valid = x.is_not_null() & y.is_not_null()
        pairs.append((x, y, pl.when(valid).then(x), pl.when(valid).then(y)))
    # Least-squares sums per model and snapshot, then one join back.
    sums = frame.group_by(group).agg(
        [
            agg.alias(f"_{i}_{tag}")
            for i, (_, _, xv, yv) in enumerate(pairs)
            for tag, agg in (
                ("n", xv.count()),
                ("sx", xv.sum()),
                ("sy", yv.sum()),
                ("sxx", (xv * xv).sum()),
                ("sxy", (xv * yv).sum()),
            )
        ]
    )
    joined = frame.join(sums, on=group, how="left", maintain_order="left")
    exprs = []
    for i, ((x, y, _, _), name) in enumerate(zip(pairs, names)):
        n = pl.col(f"_{i}_n").cast(pl.Float64)
        mean_x, mean_y = pl.col(f"_{i}_sx") / n, pl.col(f"_{i}_sy") / n
        sxx = pl.col(f"_{i}_sxx") - n * mean_x * mean_x
        sxy = pl.col(f"_{i}_sxy") - n * mean_x * mean_y
        # All peers at the same draw: no slope to fit, compare with their mean temperature.
        slope = pl.when(sxx > 1e-9 * n).then(sxy / sxx).otherwise(0.0)
        predicted = mean_y + slope * (x - mean_x)
        exprs.append(
            pl.when(x.is_not_null() & y.is_not_null() & (n >= MIN_PEERS_FOR_FIT)).then(y - predicted).alias(name)
        )
    return joined.with_columns(exprs).drop(sums.columns[len(group) :])


def add_peer_features(frame: pl.DataFrame, spec: FeatureSpec) -> pl.DataFrame:
    """Add the peer features to the rows of one or more complete snapshots (all shards)
    and drop the helper columns the first pass left for them."""
    out = add_temperature_residuals(add_rack_error_rates(frame, spec), spec)
    return out.drop([c for c in error_activity_columns(spec) if c in out.columns])
