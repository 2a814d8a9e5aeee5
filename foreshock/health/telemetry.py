"""Telemetry health: where the monitoring itself says something is wrong.

Each finding is one row naming the unit, the metric (null for the unit as a whole), the
kind, since when, what was seen (``detail``) and what to check (``check``, one sentence
an operator can act on).  The checks read raw telemetry over ``[health] lookback`` back
from the newest sample (``now``) and compare a unit with its peers, the units of the same
GPU model (inventory ``model``):

=========================  ==================================================================
kind                       finding
=========================  ==================================================================
``scrape_gap``             no sample at all for ``scrape_gap`` or longer (the most recent gap,
                           with how many there were); gaps a recorded failure or drain explains
                           are left out
``vanished_metric``        the unit still reports, but not this metric, which its peers report
``missing_metric``         a metric most peers report and this unit never did in the lookback
``stuck_counter``          a counter unchanged for ``stuck_after`` while most peers' moved
``frozen_gauge``           a gauge at one value for ``stuck_after`` while most peers' varied
``sentinel``               a metric pinned at a "no reading" value (``[health] sentinels``) or
                           at its catalog maximum for ``stuck_after``
``no_reset_after_repair``  a counter that did not restart after a drain's return
                           (``reset_on_return``) or a GPU replacement (every error counter)
``duplicate_uuid``         one GPU uuid on two units of the inventory
=========================  ==================================================================

Everything here is a plain function of frames (tests call them directly);
:mod:`foreshock.health.report` reads the lake for a publish.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from foreshock.catalog import Catalog
from foreshock.contract import UTC_TS
from foreshock.durations import format_duration
from foreshock.health.settings import HealthSettings
from foreshock.health.values import no_findings, pinned_values, unreset_counters

FINDING_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "unit_id": pl.String(),
    "node": pl.String(),
    "metric": pl.String(),
    "since": UTC_TS,
    "detail": pl.String(),
    "check": pl.String(),
}
KINDS = (
    "scrape_gap",
    "vanished_metric",
    "missing_metric",
    "stuck_counter",
    "frozen_gauge",
    "sentinel",
    "no_reset_after_repair",
    "duplicate_uuid",
)
# What to check, per kind; ``{}`` is the unit's node.
CHECKS = {
    "scrape_gap": "Check the scrape of node {}: is the exporter running and did the node reboot or drop off "
    "the network? A GPU that falls off the bus often shows first as telemetry that stops.",
    "vanished_metric": "The unit still reports other metrics: check the exporter's field list and the driver "
    "on node {}, and read the field with nvidia-smi -q; a field that stops while peers report it can be a GPU "
    "that no longer answers.",
    "missing_metric": "Peers of the same model report it: check that the exporter on node {} collects this field "
    "(its counters list) and runs the same version as its peers.",
    "stuck_counter": "Peers of the same model see it move: check that the exporter on node {} is not serving a "
    "cached value (restart it) and compare with nvidia-smi -q.",
    "frozen_gauge": "Peers of the same model vary: check that the exporter on node {} is not serving a cached "
    "value (restart it) and that the sensor answers in nvidia-smi -q.",
    "sentinel": "The exporter serves a placeholder, not a reading: read the field with nvidia-smi -q on node {} "
    "and check the exporter's log (a blank DCGM field, a sensor that does not answer).",
    "no_reset_after_repair": "The counter kept its old value across the repair: check on node {} that the GPU "
    "was really reset or swapped (nvidia-smi -r, its serial and uuid) and that the exporter restarted; until "
    "then its error counts are not this GPU's.",
    "duplicate_uuid": "One GPU uuid on two units: check the inventory source and nvidia-smi -L on node {} and "
    "on the other unit's node; scrapes and tickets matched by uuid go to the wrong unit.",
}


def empty_findings() -> pl.DataFrame:
    return pl.DataFrame(schema=FINDING_SCHEMA)


def _hours(expr: pl.Expr) -> pl.Expr:
    return (expr.dt.total_seconds() / 3600.0).round(1)


def _peers(inventory: pl.DataFrame) -> pl.DataFrame:
    """``unit_id, node, model`` of the inventory (model: the peer group)."""
    cols = [c for c in ("unit_id", "node", "model") if c in inventory.columns]
    frame = inventory.select(cols)
    for name in ("node", "model"):
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None, pl.String).alias(name))
    return frame.select("unit_id", pl.col("node").cast(pl.String), pl.col("model").cast(pl.String))


def scrape_gaps(
    samples: pl.DataFrame | pl.LazyFrame,
    now: datetime,
    settings: HealthSettings,
    failures: pl.DataFrame | None = None,
    drains: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Each unit's most recent stretch of ``scrape_gap`` or more without any sample.

    A unit silent now counts from its last sample.  A gap during which the unit failed
    (a recorded failure) or was drained is expected and left out.  Columns ``unit_id,
    since, until`` (null: still silent), ``hours``, ``gaps``.
    """
    gap = settings.scrape_gap
    # Lazy up to the gaps: only they are held, never a copy of the raw rows.
    times = samples.lazy().select("unit_id", "ts").unique().sort("unit_id", "ts")
    past = (
        times.with_columns(pl.col("ts").shift(1).over("unit_id").alias("since"))
        .filter((pl.col("ts") - pl.col("since")) >= gap)
        .select("unit_id", "since", pl.col("ts").alias("until"))
    )
    silent = (
        times.group_by("unit_id")
        .agg(pl.col("ts").max().alias("since"))
        .filter((pl.lit(now, UTC_TS) - pl.col("since")) >= gap)
        .with_columns(pl.lit(None, UTC_TS).alias("until"))
    )
    gaps = (
        pl.concat([past, silent]).collect().with_columns(pl.col("until").fill_null(pl.lit(now, UTC_TS)).alias("_end"))
    )
    explained = []
    if failures is not None and failures.height:
        hit = gaps.join(failures.select("unit_id", "failed_at"), on="unit_id")
        explained.append(hit.filter(pl.col("failed_at").is_between(pl.col("since"), pl.col("_end"))))
    if drains is not None and drains.height:
        hit = gaps.join(drains.select("unit_id", "drained_at", "returned_at"), on="unit_id")
        explained.append(
            hit.filter(
                (pl.col("drained_at") <= pl.col("_end"))
                & (pl.col("returned_at").is_null() | (pl.col("returned_at") >= pl.col("since")))
            )
        )
    if explained:
        gaps = gaps.join(
            pl.concat([e.select("unit_id", "since") for e in explained]), on=["unit_id", "since"], how="anti"
        )
    return (
        gaps.sort("unit_id", "since")
        .group_by("unit_id")
        .agg(
            pl.col("since").last(),
            pl.col("until").last(),
            _hours(pl.col("_end") - pl.col("since")).last().alias("hours"),
            pl.len().alias("gaps"),
        )
        .sort("unit_id")
    )


def _gap_findings(gaps: pl.DataFrame, settings: HealthSettings) -> pl.DataFrame:
    window = format_duration(settings.lookback)
    detail = (
        pl.when(pl.col("until").is_null())
        .then(pl.format("no sample for {} h, still silent", pl.col("hours")))
        .otherwise(
            pl.format("no sample for {} h, until {}", pl.col("hours"), pl.col("until").dt.strftime("%Y-%m-%d %H:%M"))
        )
    )
    return gaps.select(
        pl.lit("scrape_gap").alias("kind"),
        "unit_id",
        pl.lit(None, pl.String).alias("metric"),
        "since",
        pl.format("{}; {} gap(s) in {}", detail, pl.col("gaps"), pl.lit(window)).alias("detail"),
    )


def metric_presence(
    samples: pl.DataFrame | pl.LazyFrame, inventory: pl.DataFrame, now: datetime, settings: HealthSettings
):
    """Metrics a unit stopped reporting, or never reported, that its peers report.

    A metric's own cadence (the lookback over its median samples per unit) sets how old
    its last sample may be before it counts as stopped (at least ``scrape_gap``): an
    hourly export is not "vanished" ten minutes after its last point.  Only units that
    report something now are judged (a silent unit is a scrape gap).
    """
    now_lit = pl.lit(now, UTC_TS)
    rows = samples.lazy()
    # One pass over the rows: a unit's first and last sample follow from its metrics'.
    per = (
        rows.group_by("unit_id", "metric")
        .agg(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"), pl.len().alias("n"))
        .collect()
    )
    units = (
        per.group_by("unit_id")
        .agg(pl.col("last").max().alias("unit_last"), pl.col("first").min().alias("unit_first"))
        .join(_peers(inventory), on="unit_id", how="left")
    )
    gap_s = settings.scrape_gap.total_seconds()
    cadence = per.group_by("metric").agg(
        pl.max_horizontal(
            pl.lit(gap_s), 3 * settings.lookback.total_seconds() / pl.col("n").median().clip(lower_bound=1)
        ).alias("_allowed_s")
    )
    per = per.join(cadence, on="metric").join(units, on="unit_id")
    per = per.with_columns(((now_lit - pl.col("last")).dt.total_seconds() <= pl.col("_allowed_s")).alias("_fresh"))
    model_units = units.group_by("model").agg(pl.len().alias("_units"))
    share = (
        per.group_by("model", "metric")
        .agg(pl.col("_fresh").sum().alias("_fresh_units"), pl.len().alias("_any_units"))
        .join(model_units, on="model", how="left", nulls_equal=True)
    )
    reporting = units.filter((now_lit - pl.col("unit_last")) < settings.scrape_gap)
    vanished = (
        per.join(share, on=["model", "metric"], nulls_equal=True)
        .filter(
            ~pl.col("_fresh")
            & ((now_lit - pl.col("unit_last")) < settings.scrape_gap)
            & (pl.col("_fresh_units") >= settings.peer_share * pl.col("_units"))
        )
        .select(
            pl.lit("vanished_metric").alias("kind"),
            "unit_id",
            "metric",
            pl.col("last").alias("since"),
            pl.format(
                "last sample {} h ago while the unit still reports; {} of {} peers report it",
                _hours(now_lit - pl.col("last")),
                pl.col("_fresh_units"),
                pl.col("_units"),
            ).alias("detail"),
        )
    )
    expected = reporting.join(
        share.filter(pl.col("_any_units") >= settings.peer_share * pl.col("_units")), on="model", nulls_equal=True
    )
    missing = expected.join(per.select("unit_id", "metric"), on=["unit_id", "metric"], how="anti").select(
        pl.lit("missing_metric").alias("kind"),
        "unit_id",
        "metric",
        pl.col("unit_first").alias("since"),
        pl.format(
            "never reported in {}; {} of {} peers report it",
            pl.lit(format_duration(settings.lookback)),
            pl.col("_any_units"),
            pl.col("_units"),
        ).alias("detail"),
    )
    return pl.concat([vanished, missing])


def duplicate_uuids(inventory: pl.DataFrame) -> pl.DataFrame:
    """Units whose inventory ``uuid`` another unit also holds."""
    if "uuid" not in inventory.columns:
        return no_findings()
    held = inventory.select("unit_id", pl.col("uuid").cast(pl.String)).filter(
        pl.col("uuid").is_not_null() & (pl.col("uuid").str.strip_chars() != "")
    )
    holders = (
        held.group_by("uuid")
        .agg(pl.col("unit_id").unique().sort().alias("_units"))
        .filter(pl.col("_units").list.len() > 1)
    )
    since = (
        inventory.select("unit_id", pl.col("installed_at").cast(UTC_TS))
        if "installed_at" in inventory.columns
        else inventory.select("unit_id", pl.lit(None, UTC_TS).alias("installed_at"))
    )
    return (
        held.join(holders, on="uuid")
        .join(since, on="unit_id", how="left")
        .select(
            pl.lit("duplicate_uuid").alias("kind"),
            "unit_id",
            pl.lit(None, pl.String).alias("metric"),
            pl.col("installed_at").alias("since"),
            pl.format("uuid {} is on units {}", pl.col("uuid"), pl.col("_units").list.join(", ")).alias("detail"),
        )
    )


def telemetry_findings(
    samples: pl.DataFrame | pl.LazyFrame,
    inventory: pl.DataFrame,
    catalog: Catalog,
    now: datetime,
    settings: HealthSettings,
    *,
    failures: pl.DataFrame | None = None,
    drains: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Every finding over ``samples`` (the lookback up to ``now``), in :data:`FINDING_SCHEMA`,
    sorted by kind (in :data:`KINDS` order), unit and metric.

    Parameters
    ----------
    samples : pl.DataFrame or pl.LazyFrame
        ``unit_id, ts, metric, value`` of the lookback.  A lazy scan is read by each
        check for what it needs, so the raw rows are never held whole.
    inventory : pl.DataFrame
        ``unit_id, node, model`` (peers), ``uuid`` and ``installed_at`` when known.
    catalog : Catalog
        Which metrics are counters, their family and maximum.
    now : datetime
        The newest sample: what "still silent" and "for 24h" are counted to.
    settings : HealthSettings
        ``[health]``.
    failures, drains : pl.DataFrame, optional
        The lake's tables: they explain gaps and mark repairs.
    """
    peers = _peers(inventory)
    parts = [
        _gap_findings(scrape_gaps(samples, now, settings, failures, drains), settings),
        metric_presence(samples, inventory, now, settings),
        pinned_values(samples, peers, catalog, now, settings),
        unreset_counters(samples, catalog, settings, failures=failures, drains=drains),
        duplicate_uuids(inventory),
    ]
    found = pl.concat([p.select("kind", "unit_id", "metric", pl.col("since").cast(UTC_TS), "detail") for p in parts])
    order = pl.DataFrame({"kind": list(KINDS), "_order": list(range(len(KINDS)))})
    found = found.join(peers.select("unit_id", "node"), on="unit_id", how="left").join(order, on="kind")
    checks = [
        pl.when(pl.col("kind") == kind).then(pl.format(text, pl.col("node").fill_null("(unknown node)")))
        for kind, text in CHECKS.items()
    ]
    return (
        found.with_columns(pl.coalesce(checks).alias("check"))
        .sort("_order", "unit_id", "metric", nulls_last=True)
        .select([pl.col(c).cast(t) for c, t in FINDING_SCHEMA.items()])
    )


def finding_counts(findings: pl.DataFrame) -> dict[str, int]:
    """Findings per kind, every kind present (zero when absent)."""
    found = dict(findings.group_by("kind").len().iter_rows()) if findings.height else {}
    return {kind: int(found.get(kind, 0)) for kind in KINDS}
