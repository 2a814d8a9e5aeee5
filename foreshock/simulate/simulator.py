"""``simulate_fleet``: a GPU fleet's raw telemetry, tickets and ground truth on disk."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from foreshock.simulate import dcgm_formats, formats
from foreshock.simulate.fleet import MODES, Fleet, Life, build_fleet, schedule_lives, unit_days_in_service
from foreshock.simulate.params import DEFAULT_START, SimulationParams
from foreshock.simulate.telemetry import simulate_node

# What the simulator owns inside its output directory (cleared before a new run so a
# smaller rerun leaves no stale files for ingest to pick up).
OUTPUTS = (
    "inventory.csv",
    "tickets.csv",
    "ground_truth.parquet",
    "simulation.json",
    "nvidia-smi",
    "dcgm",
    "scrape",
    "kernel",
)


def simulate_fleet(
    out_dir: str | Path,
    units: int = 256,
    days: float = 30,
    seed: int = 0,
    sample_every: str = "10m",
    start: datetime = DEFAULT_START,
    gpus_per_node: int = 8,
    racks: int = 4,
    sudden_share: float = 1.0 / 3.0,
    failures_per_1000_unit_days: float = 7.0,
    failure_rate: float | None = None,
    dcgm_step: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Simulate a GPU fleet and write its raw telemetry in the formats real fleets produce.

    Failure modes, each with its own precursor (or none):

    - ``memory``: the HBM single-bit (corrected) ECC rate rises exponentially from
      ~0.3/h to tens or hundreds per hour over 3-10 days; rows are remapped (pages
      retired on pre-Ampere GPUs) with XID 63 (sometimes 64); the failure is a
      double-bit error (uncorrected ECC counters +1, XID 48).
    - ``thermal``: GPU and memory temperature drift up by 20-32 °C over 3-10 days
      beyond what the power draw explains; ``hw_thermal_slowdown`` goes Active and
      the thermal violation time grows; then the GPU fails.
    - ``power``: power variance, spikes and dips and PCIe replays for 6-48 hours, then
      XID 79 (fallen off the bus).
    - ``sudden``: no precursor (about ``sudden_share`` of failures); XID 79, 43 or none.

    Correlated risk: one manufacturing lot (``LOT-2025-07A``) has four times the hazard
    and one rack runs hotter with three times the thermal hazard.  Nuisances: benign
    correctable-error bursts on healthy GPUs (some remap a row and log XID 63),
    application XIDs (13, 31, 45), temperature and power following the workload,
    volatile counters reset at node reboots, nodes silent for hours, duplicate and
    out-of-order rows in some nvidia-smi files.  A failed slot stays empty for a 1-3
    day repair, then a new GPU (new UUID, counters from zero) starts a new life in it.

    The default rate (7 failures per 1,000 GPU-days) gives the default 256-GPU, 30-day
    fleet roughly 40-70 failures.  That is more than ten times real fleet rates
    (docs/design.md: ~0.5 per 1,000 GPU-days from all causes on Llama 3's 16k H100s); the
    demo needs enough failures for a backtest.  ``failure_rate=0.5`` simulates a fleet
    failing as often as that one, with the same modes and precursors.

    Parameters
    ----------
    out_dir
        Directory to write (see the raw output layout in ``docs/``); previous
        simulator outputs in it are replaced.
    units, days, seed
        Fleet size in GPUs, simulated span in days, random seed (same seed, same bytes).
    sample_every
        nvidia-smi sampling interval (``"10m"``); must divide a day.
    start
        Start of the simulation (timezone-aware).
    gpus_per_node, racks
        Layout: nodes ``gpu-node001``.. of ``gpus_per_node`` GPUs spread over racks.
    sudden_share
        Expected share of failures without precursor.
    failures_per_1000_unit_days
        Fleet-average hazard per GPU-day in service (the observed rate is about 1 % lower
        at the default, more at higher rates: failing GPUs spend days in repair).
    failure_rate
        Failures per 1,000 GPU-days in service to observe (replacements included); when
        given, the hazard is calibrated to it instead of ``failures_per_1000_unit_days``,
        and ``simulation.json`` records it with the rate observed.  ``None`` (default)
        keeps the schedule drawn from ``failures_per_1000_unit_days``.
    dcgm_step
        Step of the Prometheus ``query_range`` exports (default one hour).
    **options
        Any other :class:`~foreshock.simulate.params.SimulationParams` field.

    Returns
    -------
    dict
        The content of ``simulation.json`` (parameters, failures by mode and ticket
        category, files, rows and bytes written) plus ``seconds`` taken.
    """
    # Over 80 lines for its docstring (the failure modes and every parameter); the body
    # builds the parameters, writes the telemetry and the tables, and records the summary.
    started = time.perf_counter()
    params = SimulationParams.build(
        sample_every=sample_every,
        dcgm_step=dcgm_step,
        units=units,
        days=float(days),
        seed=seed,
        start=start,
        gpus_per_node=gpus_per_node,
        racks=racks,
        sudden_share=sudden_share,
        failures_per_1000_unit_days=failures_per_1000_unit_days,
        failure_rate=failure_rate,
        **options,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()

    fleet = build_fleet(params)
    lives = schedule_lives(fleet, params)
    files, size, rows = _write_telemetry(out, fleet, lives, params)

    failed = formats.failures_in_window(lives, params)
    size["inventory"] += formats.write_inventory(out, fleet, lives, params)
    size["tickets"] += formats.write_tickets(out, fleet, failed)
    truth = formats.ground_truth_frame(fleet, failed)
    truth.write_parquet(out / "ground_truth.parquet", compression="zstd")
    size["ground_truth"] += (out / "ground_truth.parquet").stat().st_size
    files.update({"inventory": 1, "tickets": 1, "ground_truth": 1})
    rows.update({"tickets": len(failed), "inventory": fleet.units})

    summary = _summary(params, fleet, lives, failed, files, rows, size)
    unit_days = unit_days_in_service(lives, params)
    rate = {
        "requested_per_1000_unit_days": params.failure_rate,
        "observed_per_1000_unit_days": round(1000.0 * len(failed) / unit_days, 4),
        "unit_days_in_service": round(unit_days, 2),
    }
    if params.failure_rate is not None:  # a run without the option writes the same bytes as before it
        summary["failure_rate"] = rate
    # Written without the timing so that the same seed gives byte-identical output.
    (out / "simulation.json").write_text(json.dumps(summary, indent=2) + "\n")
    summary["failure_rate"] = rate
    summary["seconds"] = round(time.perf_counter() - started, 2)
    return summary


def _write_telemetry(
    out: Path, fleet: Fleet, lives: list[Life], params: SimulationParams
) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Every node's telemetry in every raw format, node by node: files, bytes and rows
    written per format."""
    lives_by_slot: dict[int, list[int]] = {s: [] for s in range(fleet.units)}
    for index, life in enumerate(lives):
        lives_by_slot[life.slot].append(index)

    files: Counter[str] = Counter()
    size: Counter[str] = Counter()
    rows: Counter[str] = Counter()
    day_names = [formats.iso_z(params.start_s + d * 86_400)[:10] for d in range(int(-(-params.days // 1)))]
    dcgm = dcgm_formats.DcgmWriter(out, day_names)
    for node_index in range(len(fleet.node)):
        tel = simulate_node(node_index, fleet, lives, lives_by_slot, params)
        n_files, n_rows, n_bytes = formats.write_nvidia_smi(out, tel, fleet, lives, params)
        files["nvidia-smi"] += n_files
        rows["nvidia-smi"] += n_rows
        size["nvidia-smi"] += n_bytes
        dcgm.add(dcgm_formats.dcgm_series(tel, fleet, lives, params))
        size["scrape"] += dcgm_formats.write_scrape(out, tel, fleet, lives, dcgm_formats.xid_gauge(tel, lives))
        files["scrape"] += 1
        n_bytes, n_lines = formats.write_kernel_log(out, tel, fleet, lives, params)
        size["kernel"] += n_bytes
        rows["kernel"] += n_lines
        files["kernel"] += 1
        rows["xid"] += len(tel.xids)
    n_files, n_bytes = dcgm.close()
    files["dcgm"] += n_files
    size["dcgm"] += n_bytes
    return files, size, rows


def _summary(
    params: SimulationParams,
    fleet: Fleet,
    lives: list[Life],
    failed: list[Life],
    files: Counter[str],
    rows: Counter[str],
    size: Counter[str],
) -> dict[str, Any]:
    """What ``simulation.json`` says of the run: parameters, fleet, failures, files, rows, bytes."""
    return {
        "parameters": params.to_json(),
        "fleet": {
            "units": fleet.units,
            "nodes": len(fleet.node),
            "racks": fleet.rack,
            "hot_rack": fleet.hot_rack,
            "bad_lot": fleet.bad_lot,
            "models": sorted({m.name for m in fleet.node_model}),
            "lives": sum(1 for x in lives if x.start_s < params.end_s),
        },
        "failures": {
            "total": len(failed),
            "by_mode": {m: sum(1 for x in failed if x.mode == m) for m in MODES},
            "by_category": dict(sorted(Counter(x.category for x in failed).items())),
            "with_precursor": sum(1 for x in failed if x.has_precursor),
            "bad_lot": sum(1 for x in failed if fleet.lot[x.slot] == fleet.bad_lot),
            "hot_rack": sum(1 for x in failed if fleet.slot_rack(x.slot) == fleet.hot_rack),
            # Degrading at the end, failing after it: precursors with no failure in view.
            "censored_degrading": sum(
                1 for x in lives if x.onset_s is not None and x.onset_s < params.end_s <= (x.failed_at_s or 0)
            ),
        },
        "files": dict(sorted(files.items())),
        "rows": dict(sorted(rows.items())),
        "bytes": dict(sorted(size.items())),
        "total_bytes": sum(size.values()),
    }
