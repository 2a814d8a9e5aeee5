"""Convert the Titan GPU lifetimes data (Ostrouchov et al., SC '20; olcf/TitanGPULife)
into foreshock's canonical tables, so it goes through the ordinary ingest path.

    uv run python scripts/titan_to_canonical.py PATH/TO/titan_gpu_lifetimes OUT_DIR
    (PATH/TO: a copy of the published files gc_full.csv, gc_summary_loc.csv, titan.service.txt)
    uv run foreshock --data-dir /tmp/titan ingest --source canonical --path OUT_DIR
    uv run foreshock --data-dir /tmp/titan reliability --by cage,lot

Unit = GPU serial number, placed at its longest-stay location (``cage`` 0-2 bottom to
top of the cabinet, ``position`` = node 0-3 on its blade, ``column`` = cabinet column of
the room); lot = replacement batch (old / new); failures = DBE (double-bit ECC) and OTB (off the bus) removals; GPUs removed
without a failure are censored at removal, failed ones leave service at failure
(``retired_at``).  Service nodes are excluded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl


def convert(src: Path, out: Path) -> tuple[int, int]:
    full = pl.read_csv(src / "gc_full.csv", schema_overrides={"SN": pl.String})
    summary = pl.read_csv(src / "gc_summary_loc.csv", schema_overrides={"SN": pl.String}, infer_schema_length=None)
    service = {
        line.split()[2] for line in (src / "titan.service.txt").read_text().splitlines() if len(line.split()) > 2
    }
    ts = "%Y-%m-%d %H:%M:%S"
    full = full.with_columns(
        pl.col("insert").str.to_datetime(ts, time_zone="UTC"),
        pl.col("remove").str.to_datetime(ts, time_zone="UTC"),
    )
    spans = full.group_by("SN").agg(
        pl.col("insert").min().alias("installed_at"),
        pl.col("remove").max().alias("removed_at"),
        pl.col("event").drop_nulls().first().alias("mode"),
    )
    units = (
        summary.join(spans, on="SN")
        .with_columns(
            (pl.format("c{}-{}c{}s{}n{}", "col", "row", "cage", "slot", "node")).alias("node"),
            pl.format("c{}-{}", "col", "row").alias("rack"),
        )
        .filter(~pl.col("node").is_in(list(service)))
    )
    study_end = full["remove"].max()
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    inventory = units.select(
        pl.col("SN").alias("unit_id"),
        "node",
        "rack",
        pl.lit("Tesla K20X").alias("model"),
        pl.col("batch").alias("lot"),
        pl.col("installed_at").dt.strftime(fmt),
        pl.col("cage").cast(pl.String).alias("cage"),
        # location within the cabinet and the room, the SC '20 Cox covariates
        pl.col("node").str.extract(r"n(\d+)$").alias("position"),
        pl.col("col").cast(pl.String).alias("column"),
        # a serial number has one life: it leaves service at its failure, or is censored at
        # a removal without failure before the study ended
        pl.when(pl.col("mode").is_not_null() | (pl.col("removed_at") < study_end))
        .then(pl.col("removed_at").dt.strftime(fmt))
        .alias("retired_at"),
    )
    failures = units.filter(pl.col("mode").is_not_null()).select(
        pl.col("SN").alias("unit_id"),
        pl.col("removed_at").dt.strftime(fmt).alias("failed_at"),
        "mode",
    )
    out.mkdir(parents=True, exist_ok=True)
    inventory.write_csv(out / "inventory.csv")
    failures.write_csv(out / "failures.csv")
    return inventory.height, failures.height


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    n_units, n_failures = convert(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"wrote {n_units:,} units and {n_failures:,} failures to {sys.argv[2]}")
