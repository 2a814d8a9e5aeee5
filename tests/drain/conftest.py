"""Drain test fixtures: a config for small fleets and a real local Slurm controller.

The Slurm fixture runs Debian's ``munged`` and ``slurmctld`` (no ``slurmd``: a controller
alone is enough to drain nodes) in a temporary directory with a private munge socket and
key, a free port and fake nodes ``gpu-node[001-008]``; it is stopped by its PID files.
It skips when the binaries are absent (install with ``.ci/services.sh``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from foreshock.config import load_config


@pytest.fixture
def drain_config(tmp_path):
    """A config on a fresh data dir with guards loose enough for small fleets, draining on
    the decision horizon's risk (the tests drive drains by the 72-hour risk; the default's
    entry on the held 24-hour risk is tested in test_second_horizon.py)."""
    config = load_config(data_dir=tmp_path / "data")
    return config.with_overrides(
        {
            "policy": {
                "second_horizon": "",
                "max_drained_share_cluster": 0.5,
                "max_drained_share_per_domain": 1.0,
                "max_new_drains_per_run": 10,
            },
            "fleet": {"fault_domains": ["node", "rack"]},
        }
    )


# --- a real Slurm controller ----------------------------------------------------------


@dataclass
class SlurmController:
    directory: Path
    conf: Path
    env: dict[str, str]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check, timeout=60)

    def node_reasons(self) -> dict[str, tuple[str, str | None]]:
        """``{node: (state, reason)}`` from ``sinfo`` (reason ``None`` when unset)."""
        out = self.run("sinfo", "--noheader", "--Node", "--format=%N|%T|%E").stdout
        result = {}
        for line in out.splitlines():
            node, state, reason = line.split("|", 2)
            result[node] = (state, None if reason == "none" else reason)
        return result


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(pid_file: Path) -> None:
    if not pid_file.exists():
        return
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (ValueError, ProcessLookupError):
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)  # still there after 5 s
    except ProcessLookupError:  # it ended just now
        return


@pytest.fixture(scope="session")
def slurm_controller(tmp_path_factory):
    missing = [b for b in ("munged", "slurmctld", "scontrol", "sinfo") if shutil.which(b) is None]
    if missing:
        pytest.skip(
            f"Slurm not installed ({', '.join(missing)} not found): "
            "apt-get install -y slurmctld slurm-client munge (or run .ci/services.sh)"
        )
    if os.geteuid() != 0:
        pytest.skip("the local Slurm controller runs with SlurmUser=root: run the tests as root")
    directory = tmp_path_factory.mktemp("slurm")
    directory.chmod(0o700)
    key = directory / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = directory / "munge.socket"
    subprocess.run(
        [
            "munged",
            "--force",
            f"--key-file={key}",
            f"--socket={socket_path}",
            f"--pid-file={directory / 'munged.pid'}",
            f"--log-file={directory / 'munged.log'}",
            f"--seed-file={directory / 'munged.seed'}",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    (directory / "state").mkdir()
    conf = directory / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=foreshock-test",
                "SlurmctldHost=localhost",
                f"SlurmctldPort={_free_port()}",
                "SlurmUser=root",
                "AuthType=auth/munge",
                f"AuthInfo=socket={socket_path}",
                f"StateSaveLocation={directory / 'state'}",
                f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
                f"SlurmctldLogFile={directory / 'slurmctld.log'}",
                f"SlurmdSpoolDir={directory / 'slurmd'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "MpiDefault=none",
                "MailProg=/bin/true",
                "SlurmdTimeout=0",  # no slurmd here: never mark the fake nodes down
                "ReturnToService=0",
                "NodeName=gpu-node[001-008] NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN",
                "PartitionName=gpu Nodes=gpu-node[001-008] Default=YES State=UP",
                "",
            ]
        )
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    controller = SlurmController(directory=directory, conf=conf, env=env)
    try:
        subprocess.run(["slurmctld", "-c", "-f", str(conf)], env=env, check=True, capture_output=True, timeout=30)
        deadline = time.monotonic() + 30
        while controller.run("scontrol", "ping", check=False).returncode != 0:
            if time.monotonic() > deadline:
                log = (directory / "slurmctld.log").read_text() if (directory / "slurmctld.log").exists() else ""
                pytest.fail(f"slurmctld did not answer within 30 s; log tail:\n{log[-2000:]}")
            time.sleep(0.2)
        yield controller
    finally:
        _stop(directory / "slurmctld.pid")
        _stop(directory / "munged.pid")
