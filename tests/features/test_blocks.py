"""A first-pass task that stacks several blocks computes exactly what one task per block does."""

from __future__ import annotations

import shutil
from datetime import timedelta

from conftest import make_fleet
from polars.testing import assert_frame_equal

from foreshock.config import load_config
from foreshock.features import build
from foreshock.features.spec import feature_spec
from foreshock.features.store import scan_features


def _stored(config):
    return scan_features(config).collect().sort("unit_id", "ts")


def test_stacked_blocks_give_the_same_store_as_one_task_per_block(tmp_path, monkeypatch):
    config = load_config(None, data_dir=tmp_path / "data").with_overrides(
        {
            "features": {"windows": ["1h", "6h", "1d"], "baseline_window": "1d", "expected_sample_every": "10m"},
            "lake": {"shards": 2},
        }
    )
    make_fleet(5, units=8, days=5, failures=2).write(config.lake_dir)
    monkeypatch.setattr(build, "MAX_BLOCK", timedelta(days=1))  # blocks of a day

    monkeypatch.setattr(build, "MAX_TASK_ROWS", 0)  # one block per task
    plan = build.plan_update(config, full=True)
    blocks = len(plan.blocks())
    assert blocks >= 3
    assert [len(group) for group in plan.block_groups(feature_spec(config))] == [1] * blocks
    assert build.update_features(config, full=True) > 0
    one_per_task = _stored(config)

    shutil.rmtree(config.features_dir)
    monkeypatch.setattr(build, "MAX_TASK_ROWS", 2**18)  # every block in one task
    assert [len(group) for group in plan.block_groups(feature_spec(config))] == [blocks]
    assert build.update_features(config, full=True) == one_per_task.height
    assert_frame_equal(_stored(config), one_per_task, check_exact=True)
