"""pipelines/: the production files say the same as the code.

``prefect.yaml`` defines the deployments ``foreshock serve`` serves (names, flows,
parameters, schedules, concurrency), in a form Prefect's own loader accepts; the
production ``foreshock.toml`` loads with foreshock's config loader and covers every
section; the systemd unit starts a real ``foreshock serve`` with that configuration.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from foreshock.config import default_settings, load_config
from foreshock.pipelines.cli import build_parser
from foreshock.pipelines.serve_cmd import deployments

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ROOT / "pipelines"
PREFECT_YAML = PIPELINES / "prefect.yaml"
SITE_CONFIG = PIPELINES / "foreshock.toml"
UNIT = PIPELINES / "systemd" / "foreshock-serve.service"
INSTALLED_CONFIG = "/etc/foreshock/foreshock.toml"  # where the README, the unit and prefect.yaml put it


@pytest.fixture
def site_config(monkeypatch, tmp_path):
    for name in ("FORESHOCK_DATA_DIR", "FORESHOCK_PATHS_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./foreshock.toml of the checkout in between
    return load_config(SITE_CONFIG)


def _served(config) -> dict:
    """What ``foreshock --config /etc/foreshock/foreshock.toml serve`` would serve, as data."""
    out = {}
    for d in deployments(config, INSTALLED_CONFIG):
        out[d.name] = {
            "entrypoint": d.entrypoint,
            "flow": d.flow_name,
            "parameters": d.parameters,
            "schedules": [(s.schedule.cron, s.schedule.timezone) for s in d.schedules or []],
            "concurrency": (d.concurrency_limit, d.concurrency_options.collision_strategy.value),
            "tags": sorted(d.tags),
            "description": d.description,
        }
    return out


def _declared() -> dict:
    """The same, read from prefect.yaml the way ``prefect deploy`` reads it."""
    from prefect.cli.deploy._models import PrefectYamlModel  # the model `prefect deploy` validates with
    from prefect.cli.deploy._schedules import _schedule_config_to_deployment_schedule
    from prefect.flows import load_flow_from_entrypoint

    model = PrefectYamlModel.model_validate(yaml.safe_load(PREFECT_YAML.read_text()))
    out = {}
    for deployment in model.deployments:
        d = deployment.model_dump(exclude_unset=True, mode="json")
        schedules = [_schedule_config_to_deployment_schedule(s)["schedule"] for s in d.get("schedules") or []]
        limit = d["concurrency_limit"]
        out[d["name"]] = {
            "entrypoint": d["entrypoint"],
            "flow": load_flow_from_entrypoint(d["entrypoint"]).name,
            "parameters": d["parameters"],
            "schedules": [(s.cron, s.timezone) for s in schedules],
            "concurrency": (limit["limit"], limit["collision_strategy"]),
            "tags": sorted(d["tags"]),
            "description": d["description"],
        }
        assert d["work_pool"]["name"], f"{d['name']}: `prefect deploy` needs a work pool"
    return out


def test_prefect_yaml_defines_what_serve_serves(site_config):
    declared, served = _declared(), _served(site_config)
    assert set(declared) == {"foreshock-ingest", "foreshock-cycle", "foreshock-retrain"}
    for name in served:
        assert declared[name] == served[name], name
    assert served["foreshock-cycle"]["parameters"] == {
        "data_dir": "/srv/foreshock/data",
        "config_path": INSTALLED_CONFIG,
    }


def test_prefect_yaml_and_serve_disagree_when_a_schedule_changes(site_config):
    """The comparison itself: a site that moves its cycle and keeps prefect.yaml is caught."""
    moved = site_config.with_overrides({"schedule": {"cycle": "30 * * * *"}})
    assert _declared()["foreshock-cycle"] != _served(moved)["foreshock-cycle"]


def test_site_config_loads_and_covers_every_section(site_config):
    assert str(site_config.data_dir) == "/srv/foreshock/data"
    builtin = default_settings()
    text = SITE_CONFIG.read_text()
    assert set(tomllib.loads(text)) == set(builtin), "the example names every section of foreshock/foreshock.toml"
    # a commented-out key shows a real key of its section (it is not checked when loaded)
    section, wrong = None, []
    for line in text.splitlines():
        if header := re.match(r"^\[(\w+)\]", line):
            section = header.group(1)
        elif (key := re.match(r"^#\s*(\w+)\s*=", line)) and section:
            if key.group(1) not in builtin[section]:
                wrong.append(f"[{section}] {key.group(1)}")
    assert not wrong, wrong


def _unit_values(key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in UNIT.read_text().splitlines() if line.startswith(f"{key}=")]


def test_systemd_unit_starts_foreshock_serve_with_the_site_config():
    (exec_start,) = _unit_values("ExecStart")
    argv = shlex.split(exec_start)
    program = Path(argv[0])
    assert program.is_absolute(), "systemd needs an absolute path"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert program.name in scripts, f"{program.name} is not a command the package installs"
    args = build_parser(argv[1:]).parse_args(argv[1:])
    assert args.command == "serve" and args.func.__module__ == "foreshock.pipelines.serve_cmd"
    assert args.config == INSTALLED_CONFIG
    assert args.data_dir == tomllib.loads(SITE_CONFIG.read_text())["paths"]["data_dir"]
    assert program.parent.parent.parent.as_posix() in _unit_values("WorkingDirectory")
    assert any(v.startswith("PREFECT_API_URL=") for v in _unit_values("Environment"))


def test_the_units_command_line_runs(tmp_path):
    """The same arguments through the installed command (``serve --help``: no server)."""
    argv = shlex.split(_unit_values("ExecStart")[0])
    command = Path(sys.executable).parent / Path(argv[0]).name
    result = subprocess.run([str(command), *argv[1:], "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "foreshock-ingest" in result.stdout


@pytest.mark.slow
def test_prefect_deploy_accepts_prefect_yaml(prefect_server, site_config, tmp_path):
    """``prefect deploy --all`` against a real server creates the three deployments as
    ``foreshock serve`` defines them."""
    import json
    import os
    import urllib.request

    from prefect.settings import PREFECT_API_URL

    from tests.pipelines.services import wait_http

    prefect = Path(sys.executable).parent / "prefect"
    if not prefect.exists():
        pytest.skip("the prefect command is not installed")
    api = PREFECT_API_URL.value()
    wait_http(f"{api}/health", 240)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_API_URL=api, PREFECT_HOME=str(tmp_path / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false"
    )

    def run(*argv: str) -> None:
        result = subprocess.run(
            [str(prefect), "--no-prompt", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    run("work-pool", "create", "foreshock", "--type", "process", "--overwrite")
    run("deploy", "--all", "--prefect-file", str(PREFECT_YAML))
    body = json.dumps({"deployments": {"tags": {"all_": ["foreshock"]}}}).encode()
    request = urllib.request.Request(
        f"{api}/deployments/filter", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        found = {d["name"]: d for d in json.loads(response.read()) if d["work_pool_name"] == "foreshock"}
    served = _served(site_config)
    assert set(found) == set(served)
    for name, want in served.items():
        got = found[name]
        assert got["entrypoint"] == want["entrypoint"] and got["parameters"] == want["parameters"]
        assert [(s["schedule"]["cron"], s["schedule"]["timezone"]) for s in got["schedules"]] == want["schedules"]
        assert got["concurrency_options"]["collision_strategy"] == want["concurrency"][1]
        limit = got.get("global_concurrency_limit") or {}
        assert limit.get("limit") == 1 or got.get("concurrency_limit") == 1, got
