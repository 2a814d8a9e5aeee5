"""The outbox folder's readers read back what a publish wrote (names spelled once)."""

from __future__ import annotations

from datetime import timedelta

from drain_helpers import T0, score_rows, write_scores
from polars.testing import assert_frame_equal

from foreshock.drain.outbox import publish
from foreshock.drain.outbox_files import (
    latest_list_dir,
    newest_list_dir,
    published_rows,
    read_manifest,
    read_published_list,
)


def test_readers_find_and_read_the_newest_publish(drain_config):
    outbox_dir = drain_config.outbox_dir
    assert newest_list_dir(outbox_dir) is None and latest_list_dir(outbox_dir) is None

    write_scores(drain_config.data_dir, score_rows({"gpu-node001-gpu0": 0.01, "gpu-node002-gpu0": 0.01}, T0))
    publish(drain_config, generated_at=T0 + timedelta(hours=1))
    hot = {"gpu-node001-gpu0": (1.0, 1.0), "gpu-node002-gpu0": 0.01, "gpu-node003-gpu0": 0.02}
    write_scores(drain_config.data_dir, score_rows(hot, T0 + timedelta(hours=1)))
    second = publish(drain_config, generated_at=T0 + timedelta(hours=2))

    assert newest_list_dir(outbox_dir) == latest_list_dir(outbox_dir) == second.directory
    assert_frame_equal(read_published_list(second.directory), second.risk_list)
    assert published_rows(second.directory) == 3
    manifest = read_manifest(second.directory)
    assert manifest["actions"] == second.counts and manifest["previous"] is not None
