"""Run a `foreshock` command in a child process with no Prefect API anywhere in reach, and
report whether the command imported Prefect at all (the commands that nobody records must
not start Prefect's temporary server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = (
    "import sys; from foreshock.pipelines.cli import main; code = main(sys.argv[1:]); "
    "print('prefect loaded:', 'prefect' in sys.modules); sys.exit(code)"
)


def run_without_prefect_api(tmp_path: Path, arguments: list[str]) -> subprocess.CompletedProcess:
    """Run ``foreshock <arguments>`` in ``tmp_path`` with every ``PREFECT_*`` variable removed
    and an empty ``PREFECT_HOME`` (no profile that could name an API); its stdout ends with
    ``prefect loaded: True/False``."""
    return subprocess.run(
        [sys.executable, "-c", PROBE, *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        env=prefect_free_environment(tmp_path),
        cwd=tmp_path,
    )


def prefect_free_environment(tmp_path: Path) -> dict[str, str]:
    """This process's environment without any ``PREFECT_*`` variable and with an empty
    ``PREFECT_HOME`` under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    return env
