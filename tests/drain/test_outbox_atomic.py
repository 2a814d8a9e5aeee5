"""A publish is all or nothing: one that fails or is killed half way never misleads the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from drain_helpers import T0, score_rows, write_scores

from foreshock.drain.outbox import publish

UNIT = "gpu-node001-gpu0"

# Run in a child process: publish, killed by SIGKILL the moment it starts on the scripts.
KILLED_PUBLISH = """
import os, signal, sys
from datetime import datetime, UTC
from pathlib import Path
from foreshock.config import load_config
import foreshock.drain.outbox as outbox

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

outbox.slurm_script = die
config = load_config(data_dir=Path(sys.argv[1])).with_overrides(
    {"policy": {"max_drained_share_cluster": 0.5, "max_drained_share_per_domain": 1.0}}
)
outbox.publish(config, generated_at=datetime.fromisoformat(sys.argv[2]))
"""


def visible_entries(outbox_dir):
    return sorted(p.name for p in outbox_dir.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("how", ["fails", "killed"])
def test_a_broken_publish_leaves_the_next_diff_correct(drain_config, how):
    data_dir, outbox_dir = drain_config.data_dir, drain_config.outbox_dir
    calm = {UNIT: 0.01, "gpu-node002-gpu0": 0.01}
    write_scores(data_dir, score_rows(calm, T0))
    first = publish(drain_config, generated_at=datetime(2026, 11, 1, 0, tzinfo=UTC))
    assert first.risk_list.filter(first.risk_list["unit_id"] == UNIT)["action"][0] == "none"

    hot = {UNIT: (1.0, 1.0), "gpu-node002-gpu0": 0.01}
    broken_at = datetime(2026, 11, 1, 1, tzinfo=UTC)
    if how == "fails":
        # Scores without a node column: the list is built, the scripts cannot be.
        write_scores(data_dir, score_rows(hot, T0 + timedelta(hours=1)).drop("node"))
        with pytest.raises(ValueError, match="not a valid id"):
            publish(drain_config, generated_at=broken_at)
    else:
        write_scores(data_dir, score_rows(hot, T0 + timedelta(hours=1)))
        killed = subprocess.run(
            [sys.executable, "-c", KILLED_PUBLISH, str(data_dir), broken_at.isoformat()],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ},
        )
        assert killed.returncode == -9, killed.stderr
    # Nothing half written is visible: only the first publish, LATEST still naming it.
    assert visible_entries(outbox_dir) == sorted(["LATEST", "NOTIFIED", "foreshock.prom", first.directory.name])
    assert (outbox_dir / "LATEST").read_text().strip() == first.directory.name
    assert list(outbox_dir.glob(".staging-*"))  # the broken publish's leftovers, hidden

    write_scores(data_dir, score_rows(hot, T0 + timedelta(hours=2)))
    second = publish(drain_config, generated_at=datetime(2026, 11, 1, 2, tzinfo=UTC))
    changes = {(r["unit_id"], r["change"], r["action"]) for r in second.diff.to_dicts()}
    assert changes == {(UNIT, "new", "drain_now")}
    manifest = json.loads((second.directory / "manifest.json").read_text())
    assert manifest["previous"] == first.directory.name
    assert manifest["new_drains"] == [UNIT]
    assert not list(outbox_dir.glob(".staging-*"))  # cleaned under the lock
    assert (outbox_dir / "LATEST").read_text().strip() == second.directory.name
