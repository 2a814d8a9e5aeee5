"""The next batch is parsed on a thread while the current one is checked and merged
(``ingest_batch(next_files=...)``): the lake, quarantine, change log and per-file counts are
those of parsing each batch in its own turn; only batches whose parsers read nothing of the
lake but the inventory are parsed ahead, and a file whose parse read stored rows (a DCGM XID
gauge held from the day before) has those rows staged again in its turn; a parse error
reaches the call that takes the batch."""

from __future__ import annotations

import shutil
import threading
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from landing_files import START, assert_same_lake, write_canonical_inventory, write_messy_landing

import foreshock.ingest.parse_ahead as run
import foreshock.ingest.parsing as parsing
from foreshock.config import load_config
from foreshock.ingest.planning import plan_ingest
from foreshock.ingest.run import finish_report, ingest_batch, ingest_path
from foreshock.lake.changes import read_changes


def _landing(root: Path):
    """Four days of the messy landing, the first three without DCGM files: the batches
    from the second day on may be parsed ahead, the first's not (it would be parsed before
    the inventory is stored)."""
    landing = write_messy_landing(root, days=4)
    for d in (0, 1, 2):
        shutil.rmtree(root / "dcgm" / f"{START + timedelta(days=d):%Y-%m-%d}")
    return landing


def _config(data_dir: Path):
    return load_config(data_dir=data_dir).with_overrides(
        {"ingest": {"timezone": "UTC", "parse_ahead": True}, "runner": {"local_workers": 2}, "lake": {"shards": 4}}
    )


def _each_in_turn(landing_root: Path, data_dir: Path):
    """What ``ingest_path`` does, without parsing any batch ahead."""
    config = _config(data_dir)
    plan = plan_ingest(landing_root, config)
    reports, quarantine_files = [], []
    for number, batch in enumerate(plan.batches):
        done, quarantine = ingest_batch(batch, config, run_id=plan.run_id, batch_number=number)
        reports += done
        quarantine_files += [quarantine] if quarantine else []
    return finish_report(plan, reports, quarantine_files, 0.0, config)


def _counts(report) -> list[tuple]:
    return sorted(
        (f.path, f.status, f.rows_read, f.rows_stored, f.rows_quarantined, f.duplicates_dropped, f.rows_updated)
        for f in report.files
    )


def _quarantine(data_dir: Path) -> pl.DataFrame:
    files = sorted((data_dir / "quarantine").rglob("*.parquet"))
    return pl.concat([pl.read_parquet(f) for f in files]).drop("run_id").sort(pl.all())


def _lake_files(lake_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(lake_dir)): p.read_bytes() for p in sorted(lake_dir.rglob("part.parquet"))}


@pytest.fixture
def parses(monkeypatch):
    """``(batch's first file, thread name)`` of every parse stage."""
    seen: list[tuple[str, str]] = []
    real = run.parse_stage

    def recorded(files, *args, **kwargs):
        seen.append((files[0].path, threading.current_thread().name))
        return real(files, *args, **kwargs)

    monkeypatch.setattr(run, "parse_stage", recorded)
    return seen


@pytest.fixture
def json_parses(monkeypatch):
    """``(file, thread name)`` of every Prometheus JSON file parsed."""
    seen: list[tuple[str, str]] = []
    real = parsing.PARSERS["prometheus-json"]

    def recorded(path, ctx):
        seen.append((str(path), threading.current_thread().name))
        return real(path, ctx)

    monkeypatch.setitem(parsing.PARSERS, "prometheus-json", recorded)
    return seen


def test_parsing_ahead_stores_exactly_what_parsing_in_turn_does(tmp_path, parses, json_parses, monkeypatch):
    """Four days with DCGM files every day: the XID gauge of unit 0 holds code 79 from the
    first day on, so from the second day its file's parse looks up the stored events (the
    batch before stores them meanwhile): parsed ahead, its events staged again in its turn."""
    restaged = []
    real_restage = run._restage_in_turn

    def restage(parsed, ctx):
        restaged.append(parsed.path.name)
        return real_restage(parsed, ctx)

    monkeypatch.setattr(run, "_restage_in_turn", restage)
    landing = write_messy_landing(tmp_path / "raw", days=4)
    ahead = ingest_path(landing.root, _config(tmp_path / "ahead"))
    plan = plan_ingest(landing.root, _config(tmp_path / "probe"))
    formats = [{f.format for f in batch} for batch in plan.batches]

    # batches after the first telemetry batch whose formats allow it were parsed on a thread
    on_threads = [path for path, thread in parses if thread.startswith("ingest-prefetch")]
    expected = [
        batch[0].path
        for number, batch in enumerate(plan.batches)
        if number >= 2 and formats[number] <= run.PARSE_AHEAD_FORMATS
    ]
    assert len(expected) == 4 and on_threads == expected
    # the XID files whose first code is held from the day before: parsed ahead only, their
    # events staged again in their turn (the lake then holds the day before's)
    xid = sorted(p for p, _ in json_parses if p.endswith("XID_ERRORS.json"))
    assert len(xid) == len(set(xid)) == 4  # each parsed once
    assert not [p for p, thread in json_parses if thread == "MainThread"]  # none parsed again in turn
    assert restaged == [Path(p).name for p in xid[1:]]
    assert run._prefetched == {}  # nothing left behind

    parses.clear()
    in_turn = _each_in_turn(landing.root, tmp_path / "in_turn")
    assert not [p for p in parses if p[1].startswith("ingest-prefetch")]
    # [ingest] parse_ahead = false: each batch parsed in its turn
    off = _config(tmp_path / "off").with_overrides({"ingest": {"parse_ahead": False}})
    assert ingest_path(landing.root, off).adds_up
    assert not [p for p in parses if p[1].startswith("ingest-prefetch")]

    assert ahead.adds_up and _counts(ahead) == _counts(in_turn)
    assert ahead.totals["rows_quarantined"] >= 4  # the input is messy
    assert_same_lake(tmp_path / "ahead" / "lake", tmp_path / "in_turn" / "lake")
    assert _lake_files(tmp_path / "ahead" / "lake") == _lake_files(tmp_path / "in_turn" / "lake")
    assert _quarantine(tmp_path / "ahead").equals(_quarantine(tmp_path / "in_turn"))
    assert read_changes(tmp_path / "ahead" / "lake") == read_changes(tmp_path / "in_turn" / "lake")


def test_an_error_parsing_ahead_is_raised_by_the_batch_that_takes_it(tmp_path, monkeypatch):
    landing = _landing(tmp_path / "raw")
    config = _config(tmp_path / "data")
    plan = plan_ingest(landing.root, config)
    later = [
        n for n, batch in enumerate(plan.batches) if n >= 2 and {f.format for f in batch} <= run.PARSE_AHEAD_FORMATS
    ]
    broken = plan.batches[later[0]][0].path
    real = parsing.parse_batch

    def failing(files, ctx, workers=1, indices=None):
        if files[0].path == broken:
            raise OSError(5, "Input/output error", broken)
        return real(files, ctx, workers, indices)

    monkeypatch.setattr(parsing, "parse_batch", failing)
    with pytest.raises(OSError, match="Input/output error"):
        ingest_path(landing.root, config)
    assert run._prefetched == {}
    # the batches before it are stored and recorded; a rerun stores the rest, nothing twice
    monkeypatch.setattr(parsing, "parse_batch", real)
    rerun = ingest_path(landing.root, config)
    assert rerun.adds_up
    assert_same_lake(tmp_path / "data" / "lake", _fresh_lake(landing.root, tmp_path / "fresh"))


def _fresh_lake(root: Path, data_dir: Path) -> Path:
    ingest_path(root, _config(data_dir))
    return data_dir / "lake"


def test_the_flow_parses_ahead_on_the_local_runner(tmp_path, prefect_server, parses, capsys):
    from foreshock.pipelines.cli import main

    landing = _landing(tmp_path / "raw")
    toml = tmp_path / "foreshock.toml"
    toml.write_text('[ingest]\ntimezone = "UTC"\nparse_ahead = true\n[lake]\nshards = 4\n[runner]\nlocal_workers = 2\n')
    assert (
        main(["--config", str(toml), "--data-dir", str(tmp_path / "flow"), "ingest", "--path", str(landing.root)]) == 0
    )
    assert "DOES NOT ADD UP" not in capsys.readouterr().out
    on_threads = [path for path, thread in parses if thread.startswith("ingest-prefetch")]
    plan = plan_ingest(landing.root, _config(tmp_path / "probe"))
    assert len(plan.batches) == 6 and on_threads == [batch[0].path for batch in plan.batches[2:]]
    assert run._prefetched == {}

    in_turn = _each_in_turn(landing.root, tmp_path / "in_turn")
    assert _lake_files(tmp_path / "flow" / "lake") == _lake_files(tmp_path / "in_turn" / "lake")
    assert _quarantine(tmp_path / "flow").equals(_quarantine(tmp_path / "in_turn"))
    assert in_turn.totals["rows_quarantined"] >= 4


def _canonical_landing(root: Path) -> Path:
    """An inventory and two days of canonical samples (Parquet), one unit of them missing
    from the inventory."""
    root.mkdir(parents=True)
    units = [f"node{n:02d}-gpu{g}" for n in range(4) for g in range(4)]
    write_canonical_inventory(root, units)
    for day in (0, 1):
        start = START + timedelta(days=day)
        times = [start + timedelta(minutes=10 * i) for i in range(144)]
        frame = pl.DataFrame({"unit_id": [*units, "stranger-gpu0"]}).join(pl.DataFrame({"ts": times}), how="cross")
        frame = frame.with_columns(
            metric=pl.lit("gpu_temp_c"), value=pl.lit(55.0), ts=pl.col("ts").dt.cast_time_unit("us")
        )
        frame.write_parquet(root / f"samples-{start:%Y-%m-%d}.parquet")
    return root


def test_a_batch_whose_parser_reads_nothing_of_the_lake_is_parsed_while_the_inventory_is_stored(tmp_path, parses):
    """The first samples batch is parsed on a thread while the inventory batch before it is
    stored; its checks read that inventory (only the stranger's rows are quarantined)."""
    root = _canonical_landing(tmp_path / "raw")
    ahead = ingest_path(root, _config(tmp_path / "ahead"))
    plan = plan_ingest(root, _config(tmp_path / "probe"))
    assert [len(batch) for batch in plan.batches] == [1, 1, 1] and plan.batches[0][0].inventory
    on_threads = [path for path, thread in parses if thread.startswith("ingest-prefetch")]
    assert on_threads == [plan.batches[1][0].path, plan.batches[2][0].path]

    in_turn = _each_in_turn(root, tmp_path / "in_turn")
    assert ahead.adds_up and _counts(ahead) == _counts(in_turn)
    quarantined = _quarantine(tmp_path / "ahead")
    assert quarantined.height == 2 * 144
    assert quarantined.get_column("reason").str.starts_with("unknown unit 'stranger-gpu0'").all()
    assert quarantined.equals(_quarantine(tmp_path / "in_turn"))
    assert _lake_files(tmp_path / "ahead" / "lake") == _lake_files(tmp_path / "in_turn" / "lake")
