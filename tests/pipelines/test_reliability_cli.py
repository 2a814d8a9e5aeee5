"""A failure history in Titan's published format goes through the ordinary canonical
ingest and comes out as a reliability report (the data set itself is not needed)."""

import importlib.util
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.pipelines.cli import main

ROOT = Path(__file__).parents[2]


def _converter():
    spec = importlib.util.spec_from_file_location("titan_to_canonical", ROOT / "scripts" / "titan_to_canonical.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _titan_like(src: Path, seed: int) -> None:
    """GPUs in cages 0 and 2; cage 2 (top of the cabinet, hotter) fails ~4x as often."""
    rng = np.random.default_rng(seed)
    rows, summary = [], []
    for i in range(400):
        cage = 0 if i % 2 else 2
        life_days = rng.weibull(2.0) * (2500 if cage == 0 else 2500 / 2.0)
        end_days = 1800.0
        failed = life_days < end_days
        sn = f"0320{i:09d}"
        rows.append(
            (
                sn,
                f"c1-2c{cage}s3n1",
                min(life_days, end_days),
                "DBE" if failed and i % 3 else ("OTB" if failed else None),
            )
        )
        summary.append(
            {"SN": sn, "col": 1, "row": 2, "cage": cage, "slot": 3, "node": 1, "batch": "old" if i % 5 else "new"}
        )
    t0 = np.datetime64("2014-01-01T00:00:00")
    full = pl.DataFrame(
        {
            "SN": [r[0] for r in rows],
            "location": [r[1] for r in rows],
            "insert": ["2014-01-01 00:00:00"] * len(rows),
            "remove": [str(t0 + np.timedelta64(int(r[2] * 86400), "s")).replace("T", " ") for r in rows],
            "duration": [int(r[2] * 86400) for r in rows],
            "out": [r[3] is not None for r in rows],
            "event": [r[3] for r in rows],
        }
    )
    src.mkdir(parents=True)
    full.write_csv(src / "gc_full.csv")
    pl.DataFrame(summary).write_csv(src / "gc_summary_loc.csv")
    (src / "titan.service.txt").write_text("     0      0x0  c0-0c0s0n0  service        up       other\n")


def test_titan_history_to_reliability_report(prefect_server, tmp_path, seed, capsys):
    _titan_like(tmp_path / "titan", seed)
    units, failures = _converter().convert(tmp_path / "titan", tmp_path / "canonical")
    assert units == 400 and failures > 50
    inventory = pl.read_csv(tmp_path / "canonical" / "inventory.csv", infer_schema_length=0)
    assert inventory["unit_id"].str.starts_with("0320").all()  # serials keep their leading zero

    data = str(tmp_path / "data")
    assert main(["--data-dir", data, "ingest", "--source", "canonical", "--path", str(tmp_path / "canonical")]) == 0
    capsys.readouterr()
    assert main(["--data-dir", data, "reliability", "--by", "cage,lot", "--until", "2018-12-01T00:00:00Z"]) == 0
    report = capsys.readouterr().out
    assert "| cage=0 |" in report and "| cage=2 |" in report
    hazard_ratio = float(next(line for line in report.splitlines() if line.startswith("| cage_2 |")).split("|")[2])
    assert 2.0 < hazard_ratio < 8.0  # simulated: scale halved at Weibull shape 2 -> HR 4
    assert (tmp_path / "data" / "reports" / "reliability.md").read_text().startswith("# Fleet reliability")
