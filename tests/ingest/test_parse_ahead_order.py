"""A batch parsed in its turn (not ahead: a run's first telemetry batch, after the inventory)
starts the next batch's parse ahead before its own parse, so that the two run side by side."""

from __future__ import annotations

from landing_files import write_messy_landing

import foreshock.ingest.run as run
from foreshock.config import load_config
from foreshock.ingest.planning import plan_ingest


def test_the_next_batch_is_parsed_beside_a_batch_parsed_in_its_turn(tmp_path, monkeypatch):
    landing = write_messy_landing(tmp_path / "raw", days=3)
    config = load_config(data_dir=tmp_path / "data").with_overrides(
        {"ingest": {"timezone": "UTC", "parse_ahead": True}, "runner": {"local_workers": 2}}
    )
    calls: list[tuple[str, int | str]] = []
    real_prefetch, real_parse = run.prefetch, run.parse_stage

    def prefetch(run_id, number, *args, **kwargs):
        calls.append(("prefetch", number))
        return real_prefetch(run_id, number, *args, **kwargs)

    def parse_stage(files, *args, **kwargs):
        calls.append(("in turn", files[0].path))
        return real_parse(files, *args, **kwargs)

    batches = plan_ingest(landing.root, config).batches  # before the ingest records the files
    monkeypatch.setattr(run, "prefetch", prefetch)
    monkeypatch.setattr(run, "parse_stage", parse_stage)
    report = run.ingest_path(landing.root, config)

    assert report.adds_up
    assert batches[0][0].inventory  # the inventory first: the next batch's parser reads it
    assert calls == [
        ("in turn", batches[0][0].path),  # no parse ahead while the inventory is stored
        ("prefetch", 2),  # the first day's batch, parsed in its turn, with the next beside it
        ("in turn", batches[1][0].path),
        *[("prefetch", number) for number in range(3, len(batches))],  # later: taken, then the next started
    ]
