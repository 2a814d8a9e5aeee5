"""What changed since the previous risk list: new, escalated, lowered, cleared.

Only units whose action is above ``none`` in either list take part:

- ``new``: above ``none`` now, ``none`` or absent before;
- ``escalated``: a more severe action than before;
- ``lowered``: a less severe action that is still above ``none``;
- ``cleared``: above ``none`` before, ``none`` or absent now.

Units with the same action in both lists are not listed.
"""

from __future__ import annotations

import polars as pl

from foreshock.drain.actions import SEVERITY

CHANGES = ("new", "escalated", "lowered", "cleared")

DIFF_SCHEMA: dict[str, pl.DataType] = {
    "unit_id": pl.String(),
    "node": pl.String(),
    "change": pl.String(),
    "previous_action": pl.String(),
    "action": pl.String(),
    "previous_risk": pl.Float64(),
    "risk": pl.Float64(),
    "reason": pl.String(),
}


def _side(frame: pl.DataFrame | None, suffix: str) -> pl.DataFrame:
    if frame is None or frame.height == 0:
        return pl.DataFrame(
            schema={
                "unit_id": pl.String,
                f"node{suffix}": pl.String,
                f"action{suffix}": pl.String,
                f"risk{suffix}": pl.Float64,
                f"reason{suffix}": pl.String,
            }
        )
    cols = {c: pl.col(c) for c in ("unit_id", "node", "action", "risk", "reason") if c in frame.columns}
    out = frame.select(list(cols.values()))
    for name in ("node", "reason"):
        if name not in out.columns:
            out = out.with_columns(pl.lit(None, dtype=pl.String).alias(name))
    return out.rename({c: f"{c}{suffix}" for c in ("node", "action", "risk", "reason")})


def diff_risk_lists(previous: pl.DataFrame | None, current: pl.DataFrame) -> pl.DataFrame:
    """Compare two risk lists (schema v1 frames); returns one row per changed unit.

    Parameters
    ----------
    previous
        The previous list, or ``None`` on the first publish (everything above ``none``
        is then ``new``).
    current
        The list just built.
    """
    joined = _side(current, "").join(_side(previous, "_prev"), on="unit_id", how="full", coalesce=True)
    sev = {k: v for k, v in SEVERITY.items()}
    joined = joined.with_columns(
        pl.col("action").fill_null("none").replace_strict(sev, return_dtype=pl.Int32).alias("_now"),
        pl.col("action_prev").fill_null("none").replace_strict(sev, return_dtype=pl.Int32).alias("_before"),
    )
    change = (
        pl.when((pl.col("_now") > 0) & (pl.col("_before") == 0))
        .then(pl.lit("new"))
        .when((pl.col("_now") == 0) & (pl.col("_before") > 0))
        .then(pl.lit("cleared"))
        .when(pl.col("_now") > pl.col("_before"))
        .then(pl.lit("escalated"))
        .when(pl.col("_now") < pl.col("_before"))
        .then(pl.lit("lowered"))
        .otherwise(None)
    )
    out = (
        joined.with_columns(change.alias("change"))
        .filter(pl.col("change").is_not_null())
        .select(
            "unit_id",
            pl.coalesce("node", "node_prev").alias("node"),
            "change",
            pl.col("action_prev").fill_null("none").alias("previous_action"),
            pl.col("action").fill_null("none").alias("action"),
            pl.col("risk_prev").alias("previous_risk"),
            "risk",
            pl.coalesce("reason", "reason_prev").alias("reason"),
        )
        .with_columns(pl.col("change").replace_strict({c: i for i, c in enumerate(CHANGES)}).alias("_order"))
        .sort(["_order", "unit_id"])
        .drop("_order")
    )
    return out.cast(DIFF_SCHEMA)


def summarize_diff(diff: pl.DataFrame) -> dict[str, int]:
    """Counts per change kind (every kind present, zero when absent)."""
    counts = dict(diff.group_by("change").len().iter_rows()) if diff.height else {}
    return {change: int(counts.get(change, 0)) for change in CHANGES}
