"""Do telemetry health findings precede failures?  Measured per failure mode on a data
directory's lake (the demo's: ``foreshock demo``), with nothing fitted.

For each recorded failure, the findings are computed as a publish an hour before it
would have seen them (``[health]`` settings, raw telemetry of the ``--lookback`` before
that hour, failures recorded by then); a failure "has a precursor" when its unit carries
a finding then.  Control: at the same hour, every unit that neither failed within
``--quiet`` of it nor is the failing unit.  A signal that precedes failures shows as a
hit rate among failing units well above the controls' rate.  Nothing here was tuned on
the failures: the rules and their settings are the built-in ones, so the figures are
out of sample.

    uv run python benchmarks/bench_health_lead.py --data-dir /tmp/demo
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import polars as pl

from foreshock.config import load_config
from foreshock.durations import parse_duration
from foreshock.health.settings import HealthSettings
from foreshock.health.telemetry import telemetry_findings
from foreshock.lake.read import read_table, scan_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--lookback", default="2d", help="raw telemetry each evaluation reads (default 2d)")
    parser.add_argument("--ahead", default="1h", help="evaluate this long before each failure (default 1h)")
    parser.add_argument("--quiet", default="7d", help="controls did not fail within this of the hour (default 7d)")
    args = parser.parse_args()
    config = load_config(data_dir=args.data_dir)
    settings = dataclasses.replace(HealthSettings.from_config(config), lookback=parse_duration(args.lookback))
    ahead, quiet = parse_duration(args.ahead), parse_duration(args.quiet)
    inventory = read_table(config.lake_dir, "inventory")
    failures = read_table(config.lake_dir, "failures").sort("failed_at")
    drains = read_table(config.lake_dir, "drains")
    first = scan_table(config.lake_dir, "samples").select(pl.col("ts").min()).collect().item()
    rows, started, cpu = [], time.perf_counter(), time.process_time()
    for failure in failures.iter_rows(named=True):
        at = failure["failed_at"] - ahead
        if at - settings.lookback < first:
            continue
        start = at - settings.lookback
        samples = (
            scan_table(config.lake_dir, "samples", start=start.date(), end=at.date())
            .filter((pl.col("ts") > start) & (pl.col("ts") <= at))
            .collect()
        )
        known = failures.filter(pl.col("failed_at") <= at)
        found = telemetry_findings(samples, inventory, config.catalog, at, settings, failures=known, drains=drains)
        near = failures.filter((pl.col("failed_at") - at).abs() <= quiet)["unit_id"].to_list()
        units = samples["unit_id"].unique().to_list()
        controls = [u for u in units if u not in near]
        flagged = set(found["unit_id"].to_list())
        kinds = found.filter(pl.col("unit_id") == failure["unit_id"])["kind"].unique().sort().to_list()
        rows.append(
            {
                "mode": failure["mode"] or "unknown",
                "hit": failure["unit_id"] in flagged,
                "kinds": ",".join(kinds),
                "control_rate": sum(u in flagged for u in controls) / max(len(controls), 1),
            }
        )
    table = pl.DataFrame(rows)
    summary = (
        table.group_by("mode")
        .agg(
            pl.len().alias("failures"),
            pl.col("hit").sum().alias("with_finding"),
            pl.col("hit").mean().alias("hit_rate"),
            pl.col("control_rate").mean().alias("control_rate"),
            pl.col("kinds").filter(pl.col("kinds") != "").unique().alias("kinds"),
        )
        .sort("mode")
    )
    with pl.Config(tbl_rows=20, fmt_str_lengths=80, tbl_width_chars=160):
        print(summary)
    print(
        f"{len(rows)} failures evaluated {args.ahead} ahead with {args.lookback} of telemetry: "
        f"{time.perf_counter() - started:.0f} s wall, {time.process_time() - cpu:.0f} s CPU"
    )


if __name__ == "__main__":
    main()
