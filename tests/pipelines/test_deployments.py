"""The deployments `foreshock serve` would serve, built without a server."""

from __future__ import annotations

import json

from foreshock.config import load_config
from foreshock.pipelines.serve_cmd import deployments


def test_deployments_follow_the_schedule_section(tmp_path, monkeypatch):
    site = tmp_path / "site.toml"
    site.write_text('[schedule]\ncycle = "30 * * * *"\ningest = ""\n')
    monkeypatch.setenv("FORESHOCK_SCHEDULE_RETRAIN", "0 4 * * 6")
    config = load_config(site, data_dir=tmp_path / "data")
    served = {d.name: d for d in deployments(config, str(site))}
    assert set(served) == {"foreshock-ingest", "foreshock-cycle", "foreshock-retrain"}
    assert [s.schedule.cron for s in served["foreshock-cycle"].schedules] == ["30 * * * *"]
    assert [s.schedule.cron for s in served["foreshock-retrain"].schedules] == ["0 4 * * 6"]
    assert not served["foreshock-ingest"].schedules
    for deployment in served.values():
        assert deployment.concurrency_limit == 1
        # an ingest due while one runs is dropped (the next takes every landed file); the rest queue
        want = "CANCEL_NEW" if deployment.name == "foreshock-ingest" else "ENQUEUE"
        assert deployment.concurrency_options.collision_strategy.value == want
        # plain, JSON-ready parameters a schedule can carry
        assert json.loads(json.dumps(deployment.parameters)) == {
            "data_dir": str(tmp_path / "data"),
            "config_path": str(site),
        }
        assert deployment.entrypoint.startswith("foreshock.pipelines.serve_cmd.")
    only = deployments(config, None, only=["cycle"])
    assert [d.name for d in only] == ["foreshock-cycle"] and only[0].parameters["config_path"] is None
