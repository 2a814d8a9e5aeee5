"""``import foreshock`` sets Polars' jemalloc decay before Polars loads (the kernel's page
zeroing took a quarter of an ingest's CPU), and a value the user exported wins."""

from __future__ import annotations

import os
import subprocess
import sys

from foreshock import JEMALLOC_CONF

# The variable as foreshock leaves it, then as Polars hands it to jemalloc (its own setting
# first, the variable's after it: in jemalloc's options the later value wins).
PROBE = (
    "import os, foreshock; print(os.environ.get('_RJEM_MALLOC_CONF')); "
    "import polars; print(os.environ.get('_RJEM_MALLOC_CONF'))"
)


def _probe(env: dict[str, str]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_foreshock_sets_the_jemalloc_decay_unless_the_user_did():
    ours = JEMALLOC_CONF
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    set_by_us, given_to_jemalloc = _probe(env)
    assert set_by_us == ours and given_to_jemalloc.endswith("," + ours)
    user = "dirty_decay_ms:0,muzzy_decay_ms:0"
    set_by_user, given_to_jemalloc = _probe({**env, "_RJEM_MALLOC_CONF": user})
    assert set_by_user == user and given_to_jemalloc.endswith("," + user) and ours not in given_to_jemalloc
    # Polars' own setting, as a parent process that imported Polars passes it on: replaced
    inherited = subprocess.run(
        [sys.executable, "-c", "import os, polars; print(os.environ['_RJEM_MALLOC_CONF'])"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert _probe({**env, "_RJEM_MALLOC_CONF": inherited})[0] == ours
