"""Reproduce the fleet reliability analysis of the Titan GPU lifetimes (Ostrouchov et al.,
"GPU Lifetimes on Titan Supercomputer: Survival Analysis and Reliability", SC '20) through
foreshock's canonical contract.

    uv run python benchmarks/titan_reliability.py TITAN_DIR [WORK_DIR]

TITAN_DIR holds the published files (gc_full.csv, gc_summary_loc.csv, titan.service.txt).
The script converts them with ``scripts/titan_to_canonical.py``, ingests the canonical
CSVs with ``foreshock ingest --source canonical`` into WORK_DIR (default a temporary
directory), reads the lake back and prints:

- events per cage and batch, Kaplan–Meier survival and Weibull fits by cage and by batch;
- the multi-covariate Cox model of the old batch (cage + node position + cabinet column)
  with hazard ratios and 95% confidence intervals, then the same model over both batches
  stratified by batch;
- DBE and OTB as competing risks (cumulative incidence by age, per batch);
- independence of failures per cabinet (rack) and node;

with wall and CPU time.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import polars as pl

from foreshock.config import load_config
from foreshock.lake.read import read_table
from foreshock.models.reliability.fleet import ReliabilitySettings
from foreshock.models.reliability.interruptions import domain_dispersion, job_interruptions
from foreshock.models.reliability.lives import unit_lives
from foreshock.models.reliability.reliability_report import cohort_section, cox_section
from foreshock.models.reliability.survival import cohort_reliability, cox_hazard_ratios, cumulative_incidence
from foreshock.pipelines.cli import main as foreshock

ROOT = Path(__file__).parents[1]
YEARS = (1.0, 2.0, 3.0, 4.0, 5.0)


def _converter():
    spec = importlib.util.spec_from_file_location("titan_to_canonical", ROOT / "scripts" / "titan_to_canonical.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _print_table(frame: pl.DataFrame) -> None:
    with pl.Config(tbl_rows=100, tbl_cols=20, tbl_width_chars=200, tbl_hide_dataframe_shape=True, float_precision=3):
        print(frame)


def main(titan_dir: Path, work: Path) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    canonical = work / "canonical"
    units, failures_n = _converter().convert(titan_dir, canonical)
    print(f"converted: {units:,} GPUs, {failures_n:,} failures")
    data = work / "data"
    if foreshock(["--data-dir", str(data), "ingest", "--source", "canonical", "--path", str(canonical)]) != 0:
        sys.exit("ingest failed")
    config = load_config(data_dir=data)
    inventory = read_table(config.lake_dir, "inventory")
    failures = read_table(config.lake_dir, "failures")
    study_end = max(failures["failed_at"].max(), inventory["installed_at"].max())
    lives = unit_lives(inventory, failures, observed_until=study_end)
    print(f"lives: {lives.height:,}, failures {int(lives['event'].sum()):,}, study end {study_end:%Y-%m-%d}")
    ages = tuple(365.25 * y for y in YEARS)
    settings = ReliabilitySettings(by=("cage", "lot"), ages_days=ages)

    print("\n== Events per cage and batch (lot)")
    _print_table(
        lives.group_by("lot", "cage")
        .agg(
            pl.len().alias("gpus"),
            pl.col("event").sum().alias("failures"),
            (pl.col("mode") == "DBE").sum().alias("DBE"),
            (pl.col("mode") == "OTB").sum().alias("OTB"),
            (pl.col("duration_days").sum() / 365.25).alias("gpu_years"),
        )
        .with_columns((pl.col("failures") / pl.col("gpu_years") * 1000).alias("per_1000_gpu_years"))
        .sort("lot", "cage")
    )

    class _Result:  # the pieces of FleetReliability the cohort/Cox sections read
        pass

    result = _Result()
    result.ages_days = ages
    result.settings = settings
    result.cohorts = {c: cohort_reliability(lives, c, ages) for c in ("cage", "lot")}
    print("\n== Kaplan–Meier and Weibull, ages in days (365 d = 1 year)\n")
    for column in ("cage", "lot"):
        print("\n".join(cohort_section(result, column)))

    for batch in ("old", "new"):
        part = lives.filter(pl.col("lot") == batch)
        result.cohorts = {f"cage (batch {batch})": cohort_reliability(part, "cage", ages)}
        print("\n".join(cohort_section(result, f"cage (batch {batch})")))

    old = lives.filter(pl.col("lot") == "old")
    print(
        f"\n== Cox, old batch ({old.height:,} GPUs, {int(old['event'].sum()):,} failures): cage + position + column\n"
    )
    result.cox = cox_hazard_ratios(old, ["cage", "position", "column"], numeric=["column"])
    result.settings = ReliabilitySettings(numeric=("column",))
    print("\n".join(cox_section(result)))
    print("== Cox, both batches, stratified by batch\n")
    result.cox = cox_hazard_ratios(lives, ["cage", "position", "column"], strata=["lot"], numeric=["column"])
    result.settings = ReliabilitySettings(strata=("lot",), numeric=("column",))
    print("\n".join(cox_section(result)))

    print("== Competing risks: cumulative incidence of DBE and OTB by age (Aalen–Johansen)")
    for batch in ("old", "new"):
        cif = cumulative_incidence(lives.filter(pl.col("lot") == batch), ages)
        print(f"\nbatch {batch}:")
        _print_table(
            cif.with_columns((pl.col("age_days") / 365.25).round(1).alias("years")).select(
                "mode", "years", "incidence", "ci_low", "ci_high", "failures"
            )
        )

    start = lives["start"].min()
    split = start + (study_end - start) / 2
    print(
        f"\n== Job interruptions against job size: hazard fitted on {start:%Y-%m-%d}..{split:%Y-%m-%d}, "
        f"checked on {split:%Y-%m-%d}..{study_end:%Y-%m-%d}"
    )
    earlier = unit_lives(
        inventory.filter(pl.col("installed_at") < split), failures.filter(pl.col("failed_at") <= split), split
    )
    later = unit_lives(inventory, failures, observed_until=study_end)
    _print_table(
        job_interruptions(
            later, [64, 1024, 4096, 16384], observed_from=split, observed_until=study_end, fitted_on=earlier
        ).select(
            "job_gpus",
            "jobs",
            "mttf_job_h",
            "mttf_job_h_constant",
            "observed_per_day",
            "expected_per_day",
            "ratio",
            "jobs_dispersion",
        )
    )
    print("\n== Independence per fault domain (30-day windows)")
    for domain in ("rack", "node"):
        d = domain_dispersion(
            lives, domain, window=timedelta(days=30), observed_from=start, observed_until=study_end, simulations=199
        )
        print(
            f"{domain:>5}: {d.cells:,} cells, {d.failures:,} failures, dispersion index {d.dispersion_index:.2f}, "
            f"p = {d.p_value:.3g}, most in one cell {d.max_in_one_cell} (largest expected {d.expected_max:.2f})"
        )
    print(f"\nwall {time.perf_counter() - wall:.1f} s, CPU {time.process_time() - cpu:.1f} s (this process)")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    if len(sys.argv) == 3:
        main(Path(sys.argv[1]), Path(sys.argv[2]))
    else:
        with tempfile.TemporaryDirectory(prefix="titan-") as tmp:
            main(Path(sys.argv[1]), Path(tmp))
