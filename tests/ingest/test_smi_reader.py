"""nvidia-smi files read by the CSV reader (clean text) and line by line (a file with an
undecodable byte) quarantine the same lines with the same line numbers, reasons and text:
blank and whitespace-only lines, Windows line ends, a repeated header, lines with too few
or too many fields and a line whose last field is empty."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from landing_files import SMI_FIELDS, START, smi_line, write_landing

from foreshock.config import load_config
from foreshock.ingest import ingest_path


def messy_lines() -> list[str]:
    width = SMI_FIELDS.count(",") + 1
    line = [smi_line(START + timedelta(minutes=m), m % 2, 0, m) for m in range(8)]
    return [
        "",
        SMI_FIELDS,
        line[0],
        "   ",
        line[1] + ", surplus",
        "",
        line[2],
        SMI_FIELDS,
        ", ".join(line[3].split(", ")[: width - 1]) + ",",  # right count, last field empty
        ", ".join(line[4].split(", ")[:3]),
        "\t",
        line[5],
    ]


def quarantined(tmp_path, name: str, content: bytes) -> pl.DataFrame:
    root = tmp_path / name / "raw"
    write_landing(root, nodes=1, gpus=2, days=1, steps_per_day=1)
    (root / "nvidia-smi" / "gpu-node001" / "2026-11-01-extra.csv").write_bytes(content)
    config = load_config(data_dir=tmp_path / name / "data").with_overrides({"ingest": {"timezone": "UTC"}})
    report = ingest_path(root, config)
    assert report.adds_up
    frames = [pl.read_parquet(q) for q in report.quarantine_files]
    rows = pl.concat(frames) if frames else pl.DataFrame()
    return rows.filter(pl.col("source_file").str.ends_with("-extra.csv")).select("line", "field", "reason", "raw")


def test_clean_and_line_by_line_files_quarantine_the_same_lines(tmp_path):
    lines = messy_lines()
    clean = "\r\n".join(lines).encode() + b"\r\n"
    # One undecodable byte in the last line sends the file down the line-by-line path.
    undecodable = ("\r\n".join(lines[:-1]) + "\r\n").encode() + b"\xff\r\n"

    by_reader = quarantined(tmp_path, "clean", clean).sort("line", "field")
    by_lines = quarantined(tmp_path, "lines", undecodable).sort("line", "field")

    malformed = by_reader.filter(pl.col("reason").str.starts_with("malformed line"))
    assert malformed.get_column("line").to_list() == [5, 10]  # 1-based, blank lines counted
    assert malformed.get_column("raw").to_list() == [lines[4], lines[9]]  # without the \r
    width = SMI_FIELDS.count(",") + 1
    assert malformed.get_column("reason").to_list() == [
        f"malformed line: expected {width} fields, got {width + 1}",
        f"malformed line: expected {width} fields, got 3",
    ]
    empty_last = by_reader.filter(pl.col("line") == 9)
    assert empty_last.height == 1 and empty_last.get_column("reason")[0].startswith("not a number")
    assert by_reader.height == 3  # blank lines, whitespace lines and the repeated header are not rows

    undecodable_line = by_lines.filter(pl.col("reason").str.starts_with("undecodable bytes"))
    assert undecodable_line.get_column("line").to_list() == [len(lines)]
    assert by_lines.filter(pl.col("line") != len(lines)).equals(by_reader)
