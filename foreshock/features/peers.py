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
- ``<column>_model_pct`` (only with ``[features] peer_relative = true``): for each error
  metric's level (``<counter>_last``, ``<gauge>_last``) and window increases
  (``<counter>_increase_<w>``), the unit's percentile among the in-service units of the
  same inventory ``model`` at the same snapshot.  A count that is ordinary for the whole
  fleet may be extreme for a model whose units seldom log any (and the reverse).  When the
  inventory has ``fleet_weight`` (a subsampled fleet: how many fleet units a kept unit
  stands for), each peer counts with its weight, so a sample enriched in failing units
  ranks a unit as the whole fleet would.
"""

from __future__ import annotations

import polars as pl

from foreshock.features.spec import FeatureSpec
from foreshock.features.windows import error_activity_columns

MIN_PEERS_FOR_FIT = 3
# Helper column of the first pass: the unit's fleet_weight, for the peer percentiles.
PEER_WEIGHT = "_peer_weight"
PEER_SUFFIX = "_model_pct"


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


def peer_relative_bases(spec: FeatureSpec) -> list[str]:
    """The columns ranked among the same model's units: each error counter's increases
    and last value, each error gauge's last value (not 0/1 flags, which have no order)."""
    bases: list[str] = []
    for metric in spec.catalog:
        if metric.family != "error":
            continue
        if metric.is_counter:
            bases += [f"{metric.name}_increase_{spec.name(w)}" for w in spec.windows]
            bases.append(f"{metric.name}_last")
        elif metric.unit != "bool":
            bases.append(f"{metric.name}_last")
    return bases


def peer_relative_columns(spec: FeatureSpec) -> list[str]:
    """``<base>_model_pct`` for every base column, or none when the spec leaves them off."""
    return [f"{b}{PEER_SUFFIX}" for b in peer_relative_bases(spec)] if spec.peer_relative else []


def add_peer_weight(frame: pl.DataFrame, inventory: pl.DataFrame, spec: FeatureSpec) -> pl.DataFrame:
    """First pass: carry the unit's ``fleet_weight`` (1 without one) to the peer pass
    when the spec ranks units among their model's."""
    if not spec.peer_relative:
        return frame
    if "fleet_weight" not in inventory.columns:
        return frame.with_columns(pl.lit(1.0).alias(PEER_WEIGHT))
    weights = inventory.select(
        pl.col("unit_id").cast(pl.String), pl.col("fleet_weight").cast(pl.Float64).alias(PEER_WEIGHT)
    ).unique("unit_id")
    out = frame.join(weights, on="unit_id", how="left", maintain_order="left")
    return out.with_columns(pl.col(PEER_WEIGHT).fill_null(1.0))


def weighted_percentile(frame: pl.DataFrame, column: str, weight: pl.Expr, group: list[str]) -> pl.Series:
    """The mid-rank percentile of ``column`` within ``group``, each row counting ``weight``.

    ``(weight of the peers below + half the weight of the peers equal) / weight of all
    peers with a value``, in [0, 1]; the unit itself is one of its peers.  Ties share a
    percentile (a model whose units all read 0 puts every one at 0.5), so a unit is high
    only if its value is above most of its model's.  Null where the value or the group
    key is null.

    Returns ``<column>_model_pct``, one value per row of ``frame`` in its order.
    """
    keyed = frame.select(*group, pl.col(column).alias("_v"), weight.alias("_w"))
    ties = (
        keyed.drop_nulls(["_v", *group])
        .group_by(*group, "_v")
        .agg(pl.col("_w").sum().alias("_tie"))
        .sort(*group, "_v")
        .with_columns(
            (pl.col("_tie").cum_sum().over(group) - pl.col("_tie")).alias("_below"),
            pl.col("_tie").sum().over(group).alias("_all"),
        )
    )
    ranked = keyed.join(ties, on=[*group, "_v"], how="left", maintain_order="left")
    pct = (ranked.get_column("_below") + 0.5 * ranked.get_column("_tie")) / ranked.get_column("_all")
    return pct.alias(f"{column}{PEER_SUFFIX}")


def add_peer_relative(frame: pl.DataFrame, spec: FeatureSpec) -> pl.DataFrame:
    """Add ``<base>_model_pct`` (:func:`peer_relative_columns`) over ``model`` and ``ts``."""
    if not spec.peer_relative:
        return frame
    weight = pl.col(PEER_WEIGHT) if PEER_WEIGHT in frame.columns else pl.lit(1.0)
    group = ["model", "ts"]
    exprs = [
        weighted_percentile(frame, base, weight, group)
        if base in frame.columns
        else pl.lit(None, pl.Float64).alias(f"{base}{PEER_SUFFIX}")
        for base in peer_relative_bases(spec)
    ]
    return frame.with_columns(exprs)


def add_peer_features(frame: pl.DataFrame, spec: FeatureSpec) -> pl.DataFrame:
    """Add the peer features to the rows of one or more complete snapshots (all shards)
    and drop the helper columns the first pass left for them."""
    out = add_peer_relative(add_temperature_residuals(add_rack_error_rates(frame, spec), spec), spec)
    helpers = [*error_activity_columns(spec), PEER_WEIGHT]
    return out.drop([c for c in helpers if c in out.columns])
