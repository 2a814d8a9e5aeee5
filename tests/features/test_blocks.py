"""A first-pass task that stacks several blocks computes exactly what one task per block does."""

from __future__ import annotations

import shutil

from fleet_helpers import make_fleet
from polars.testing import assert_frame_equal

from foreshock.config import load_config
from foreshock.features import build
from foreshock.features.spec import feature_spec
from foreshock.features.store import scan_features


def _stored(config):
    return scan_features(config).collect().sort("unit_id", "ts")


def _config(tmp_path, max_task_rows):
    features = {"windows": ["1h", "6h", "1d"], "baseline_window": "1d", "expected_sample_every": "10m"}
    return load_config(None, data_dir=tmp_path / "data").with_overrides(
        {
            # blocks of a day; max_task_rows 0: one block per task
            "features": features | {"block_days": 1, "max_task_rows": max_task_rows},
            "lake": {"shards": 2},
        }
    )


def test_stacked_blocks_give_the_same_store_as_one_task_per_block(tmp_path):
    config = _config(tmp_path, max_task_rows=0)
    make_fleet(5, units=8, days=5, failures=2).write(config.lake_dir)
    plan = build.plan_update(config, full=True)
    blocks = len(plan.blocks())
    assert blocks >= 3
    assert [len(group) for group in plan.block_groups(feature_spec(config))] == [1] * blocks
    assert build.update_features(config, full=True) > 0
    one_per_task = _stored(config)

    shutil.rmtree(config.features_dir)
    config = _config(tmp_path, max_task_rows=2**18)  # every block in one task
    plan = build.plan_update(config, full=True)
    assert [len(group) for group in plan.block_groups(feature_spec(config))] == [blocks]
    assert build.update_features(config, full=True) == one_per_task.height
    assert_frame_equal(_stored(config), one_per_task, check_exact=True)
