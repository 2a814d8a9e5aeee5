"""Fuzzing every parser with hypothesis: truncations, byte flips, wrong columns, huge lines
and deep JSON never crash or hang a parser, and damage to one line keeps the other lines'
rows.  Bounded for CI (a few dozen examples per property, seeded by hypothesis' database-
free derandomised mode so a failure reproduces)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from landing_files import PCI, SMI_FIELDS, smi_line, uuid_of

from foreshock.catalog import load_catalog
from foreshock.contract import KEYS
from foreshock.ingest.context import IngestContext
from foreshock.ingest.parsers import PARSERS
from foreshock.ingest.staged import UnreadableFile
from foreshock.ingest.validate import validate

START = datetime(2026, 11, 1, tzinfo=UTC)
T = int(START.timestamp())
INVENTORY = pl.DataFrame(
    {
        "unit_id": [f"gpu-node001-gpu{g}" for g in range(2)],
        "node": ["gpu-node001"] * 2,
        "rack": ["r1"] * 2,
        "model": ["H100"] * 2,
        "lot": ["L1"] * 2,
        "installed_at": [START - timedelta(days=100)] * 2,
        "uuid": [uuid_of(0, g) for g in range(2)],
        "pci_bus_id": list(PCI[:2]),
    }
)


def _canonical() -> bytes:
    rows = [f"gpu-node001-gpu{k % 2},2026-11-01T00:{k:02d}:00Z,gpu_temp_c,{40 + k % 7}" for k in range(30)]
    return ("unit_id,ts,metric,value\n" + "\n".join(rows) + "\n").encode()


def _smi() -> bytes:
    lines = [smi_line(START + timedelta(minutes=10 * k), k % 2, 0, k) for k in range(12)]
    return (SMI_FIELDS + "\n" + "\n".join(lines) + "\n").encode()


def _prom_text() -> bytes:
    lines = [
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="{k % 2}",Hostname="gpu-node001"}} {40 + k} {(T + 60 * k) * 1000}'
        for k in range(20)
    ]
    return ("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n" + "\n".join(lines) + "\n").encode()


def _prom_json() -> bytes:
    result = [
        {
            "metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": str(g), "Hostname": "gpu-node001"},
            "values": [[T + 60 * k, str(40 + k)] for k in range(10)],
        }
        for g in range(2)
    ]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def _xid() -> bytes:
    lines = [
        f"2026-11-01T12:{k:02d}:03+00:00 gpu-node001 kernel: NVRM: Xid (PCI:{PCI[k % 2]}): {48 + k % 3}, pid=1, x"
        for k in range(15)
    ]
    return ("\n".join(lines) + "\n").encode()


def _tickets() -> bytes:
    rows = [f"T{k},2026-11-0{1 + k % 5}T10:00:00Z,gpu-node001,{k % 2},,memory,broken" for k in range(8)]
    return ("ticket_id,opened_at,node,gpu_index,gpu_uuid,category,summary\n" + "\n".join(rows) + "\n").encode()


def _rasdaemon() -> bytes:
    rows = [f"2026-11-01 0{k % 10}:00:00 +0000,{1 + k},Corrected,DIMM_{k % 2},gpu-node001" for k in range(10)]
    return ("timestamp,err_count,err_type,label,host\n" + "\n".join(rows) + "\n").encode()


def _parquet() -> bytes:
    buffer = io.BytesIO()
    pl.DataFrame(
        {
            "unit_id": ["gpu-node001-gpu0"] * 40,
            "ts": [START + timedelta(minutes=k) for k in range(40)],
            "metric": ["gpu_temp_c"] * 40,
            "value": [40.0 + k % 5 for k in range(40)],
        }
    ).write_parquet(buffer)
    return buffer.getvalue()


# format -> (file name, seed content, header lines that name the columns)
SEEDS = {
    "canonical": ("samples.csv", _canonical(), 1),
    "nvidia-smi": ("nvidia-smi/gpu-node001/2026-11-01.csv", _smi(), 1),
    "prometheus-text": ("scrape.prom", _prom_text(), 1),
    "prometheus-json": ("query.json", _prom_json(), 0),
    "xid-log": ("kern.log", _xid(), 0),
    "tickets": ("tickets.csv", _tickets(), 1),
    "rasdaemon": ("ras.csv", _rasdaemon(), 1),
    "canonical-parquet": ("samples.parquet", _parquet(), 0),
}
LINE_FORMATS = ["canonical", "nvidia-smi", "prometheus-text", "xid-log", "tickets", "rasdaemon"]
FUZZ = settings(
    max_examples=12,
    deadline=timedelta(seconds=10),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    lake = tmp_path_factory.mktemp("lake")
    return IngestContext(catalog=load_catalog(), inventory=INVENTORY, lake_dir=lake, timezone="UTC")


def parse(fmt: str, content: bytes, root: Path, ctx: IngestContext) -> dict[str, pl.DataFrame] | None:
    """Parse and validate; None when the file is refused (UnreadableFile). Anything else raises."""
    name = SEEDS[fmt][0]
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    try:
        parsed = PARSERS["canonical" if fmt == "canonical-parquet" else fmt](path, ctx)
    except UnreadableFile as exc:
        assert str(exc)  # a refusal always says why
        return None
    good = {}
    for table, staged in parsed.tables.items():
        ok, bad = validate(table, staged, ctx)
        assert ok.height + bad.height == staged.height
        assert bad.get_column("_reason").null_count() == 0  # every quarantined row says why
        good[table] = ok
        parsed.raw_text(bad)  # the quarantine can show each bad row's text
    return good


def mutate(data: bytes, draw) -> bytes:
    kind = draw(st.sampled_from(["truncate", "flip", "huge line", "wrong columns", "deep json", "splice"]))
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data)))]
    if kind == "flip":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            if out:
                at = draw(st.integers(0, len(out) - 1))
                out[at] = draw(st.integers(0, 255))
        return bytes(out)
    if kind == "huge line":
        at = draw(st.integers(0, len(data)))
        filler = draw(st.sampled_from([b"9", b"a,", b'{"', b"\x00", b"\xff", b"["]))
        return data[:at] + filler * (1 << 20) + b"\n" + data[at:]
    if kind == "wrong columns":
        lines = data.split(b"\n")
        lines[0] = draw(st.sampled_from([b"a,b,c", b"unit_id,ts", b"value,metric,ts,unit_id,extra", b""]))
        return b"\n".join(lines)
    if kind == "deep json":
        depth = draw(st.integers(1000, 200_000))
        return b'{"status":"success","data":{"resultType":"matrix","result":' + b"[" * depth + b"]" * depth + b"}}"
    return data + draw(st.binary(max_size=200))


@pytest.mark.parametrize("fmt", sorted(SEEDS))
def test_no_parser_crashes_or_hangs_on_damaged_input(fmt, ctx, tmp_path):
    assert parse(fmt, SEEDS[fmt][1], tmp_path / "seed", ctx)  # the seed itself parses

    @FUZZ
    @given(data=st.data())
    def damaged(data):
        content = mutate(SEEDS[fmt][1], data.draw)
        parse(fmt, content, tmp_path / "damaged", ctx)

    damaged()


def _rows(good: dict[str, pl.DataFrame]) -> set[tuple]:
    found = set()
    for table, frame in good.items():
        columns = ["_line", *KEYS[table]]
        found |= {(table, *row) for row in frame.select(columns).iter_rows()}
    return found


@pytest.mark.parametrize("fmt", LINE_FORMATS)
def test_damage_to_one_line_keeps_every_other_lines_rows(fmt, ctx, tmp_path):
    name, seed, header_lines = SEEDS[fmt]
    baseline = _rows(parse(fmt, seed, tmp_path / "seed", ctx))
    lines = seed.split(b"\n")
    body = [i for i in range(header_lines, len(lines)) if lines[i] and not lines[i].startswith(b"#")]

    @FUZZ
    @given(data=st.data())
    def one_line(data):
        target = data.draw(st.sampled_from(body))
        line = bytearray(lines[target])
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(line) - 1))
            line[at] = data.draw(st.integers(0, 255).filter(lambda b: b not in (10, 13)))
        damaged = b"\n".join([*lines[:target], bytes(line), *lines[target + 1 :]])
        kept = _rows(parse(fmt, damaged, tmp_path / "damaged", ctx) or {})
        others = {row for row in baseline if row[1] != target + 1}
        assert others <= kept, sorted(others - kept)[:3]

    one_line()
