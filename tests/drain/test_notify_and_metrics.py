"""Publish tells people and Prometheus: a JSON webhook message, a textfile, a dashboard."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest
from drain_helpers import recent, score_rows, write_scores
from prometheus_client.parser import text_string_to_metric_families

from foreshock.drain.outbox import publish
from foreshock.drain.textfile import TEXTFILE_NAME
from foreshock.hold import HELD_COLUMN

DASHBOARD = Path(__file__).resolve().parents[2] / "pipelines" / "grafana" / "foreshock.json"


class Receiver:
    """A JSON webhook on 127.0.0.1 (free port) that records what it receives."""

    def __init__(self, status: int = 200) -> None:
        self.messages: list[dict] = []
        self.status = status
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.messages.append({"path": self.path, "json": json.loads(body)})
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.server.server_address[1]}/hooks/foreshock"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


RISKS = {
    "gpu-node001-gpu0": (1.0, 1.0),  # drain_now
    "gpu-node002-gpu3": (0.3, 0.8),  # drain_at_checkpoint
    "gpu-node003-gpu0": 0.15,  # watch: below min_action, not notified
    "gpu-node004-gpu0": 0.01,
}


def test_one_message_with_the_new_drains_and_none_when_nothing_changed(drain_config):
    with Receiver() as receiver:
        config = drain_config.with_overrides({"notify": {"urls": [receiver.url]}})
        write_scores(config.data_dir, score_rows(RISKS))
        first = publish(config)
        assert first.notified is True
        assert len(receiver.messages) == 1
        message = receiver.messages[0]
        assert message["path"] == "/hooks/foreshock"
        assert message["json"]["title"] == "foreshock: 1 drain_at_checkpoint, 1 drain_now"
        lines = message["json"]["message"].splitlines()
        assert lines[0].startswith("new: gpu-node001-gpu0 on gpu-node001: drain_now, P(fail<72h)=1.00, lead ~")
        assert "signals: ecc_sbe_increase_24h=42" in lines[0]
        assert lines[1].startswith("new: gpu-node002-gpu3 on gpu-node002: drain_at_checkpoint, P(fail<72h)=0.80")
        assert "gpu-node003" not in message["json"]["message"]
        assert "model: models:/foreshock-risk/3 (run 0123abcd)" in lines
        assert f"outbox: {first.directory}" in lines

        write_scores(config.data_dir, score_rows(RISKS, recent() + timedelta(minutes=10)))
        second = publish(config)
        assert second.notification is None and second.notified is None
        assert len(receiver.messages) == 1  # nothing changed: nothing sent

        escalate = RISKS | {"gpu-node002-gpu3": (1.0, 1.0)}
        write_scores(config.data_dir, score_rows(escalate, recent() + timedelta(minutes=20)))
        publish(config)
        assert len(receiver.messages) == 2
        assert receiver.messages[1]["json"]["message"].startswith("escalated: gpu-node002-gpu3")


def test_a_failing_receiver_is_retried_and_never_fails_the_publish(drain_config, caplog):
    with Receiver(status=500) as receiver:
        config = drain_config.with_overrides({"notify": {"urls": [receiver.url], "attempts": 3, "retry_delay": "1s"}})
        write_scores(config.data_dir, score_rows(RISKS))
        result = publish(config)
    assert result.notified is False
    assert len(receiver.messages) == 3
    assert (config.outbox_dir / "LATEST").read_text().strip() == result.directory.name
    failures = [r for r in caplog.records if "notification failed" in r.getMessage()]
    assert len(failures) == 3 and "127.0.0.1" in failures[-1].getMessage()
    assert "attempt 3 of 3" in failures[-1].getMessage()


def test_unreachable_receiver_does_not_fail_the_publish(drain_config):
    config = drain_config.with_overrides(
        {"notify": {"urls": ["json://127.0.0.1:9/nothing-listens"], "attempts": 2, "retry_delay": "1s"}}
    )
    write_scores(config.data_dir, score_rows(RISKS))
    result = publish(config)
    assert result.notified is False and result.directory.is_dir()


def parse(path: Path) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(path.read_text())}


def test_the_held_risk_is_a_column_of_the_list_and_not_a_horizon_of_the_textfile(drain_config):
    scores = score_rows(RISKS)
    write_scores(drain_config.data_dir, scores.with_columns((pl.col("risk") * 0.5).alias(HELD_COLUMN)))
    result = publish(drain_config)
    listed = pl.read_parquet(result.directory / "risk_list.parquet")
    assert listed.columns[listed.columns.index("risk_72h") + 1] == HELD_COLUMN
    row = listed.filter(pl.col("unit_id") == "gpu-node002-gpu3").row(0, named=True)
    assert row[HELD_COLUMN] == pytest.approx(0.4)  # the decision horizon's (72h: 0.8 x 0.5)
    horizons = {s.labels["horizon"] for s in parse(result.textfile)["foreshock_unit_risk"]}
    assert horizons == {"24h", "72h"}


def test_textfile_has_risk_action_and_freshness(drain_config):
    write_scores(drain_config.data_dir, score_rows(RISKS))
    result = publish(drain_config)
    assert result.textfile == drain_config.outbox_dir / TEXTFILE_NAME
    families = parse(result.textfile)
    risk = {(s.labels["unit_id"], s.labels["horizon"]): s.value for s in families["foreshock_unit_risk"]}
    assert risk[("gpu-node002-gpu3", "72h")] == pytest.approx(0.8)
    assert risk[("gpu-node002-gpu3", "24h")] == pytest.approx(0.3)
    assert len(risk) == 2 * len(RISKS)
    sample = next(s for s in families["foreshock_unit_action"] if s.labels["unit_id"] == "gpu-node001-gpu0")
    assert sample.labels == {"unit_id": "gpu-node001-gpu0", "node": "gpu-node001", "rack": "r1", "action": "drain_now"}
    assert sample.value == 4
    units = {s.labels["action"]: s.value for s in families["foreshock_units"]}
    assert units == {
        "none": 1,
        "watch": 1,
        "run_diagnostics": 0,
        "drain_at_checkpoint": 1,
        "drain_now": 1,
        "replace": 0,
    }
    scores_at = families["foreshock_scores_timestamp_seconds"][0].value
    published_at = families["foreshock_publish_timestamp_seconds"][0].value
    assert scores_at == recent().timestamp()
    assert families["foreshock_score_age_seconds"][0].value == pytest.approx(published_at - scores_at)
    assert families["foreshock_new_drains"][0].value == 2
    info = families["foreshock_model_info"][0]
    assert info.labels == {"model_name": "foreshock-risk", "model_version": "3", "run_id": "0123abcd"}

    # The next publish replaces it whole (and a configured path is honoured).
    elsewhere = drain_config.data_dir / "textfile" / "risk.prom"
    config = drain_config.with_overrides({"metrics": {"textfile": str(elsewhere)}})
    write_scores(config.data_dir, score_rows({"gpu-node009-gpu0": 0.01}, recent() + timedelta(minutes=5)))
    assert publish(config).textfile == elsewhere
    assert [s.labels["unit_id"] for s in parse(elsewhere)["foreshock_unit_action"]] == ["gpu-node009-gpu0"]
    assert not list(elsewhere.parent.glob(".*tmp*"))


def test_grafana_dashboard_reads_only_metrics_the_textfile_has(drain_config):
    write_scores(drain_config.data_dir, score_rows(RISKS))
    written = set(parse(publish(drain_config).textfile))
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 5
    used = {name for expr in exprs for name in re.findall(r"\bforeshock_[a-z_]+", expr)}
    assert used and used <= written, used - written
    assert {"foreshock_unit_risk", "foreshock_unit_action", "foreshock_scores_timestamp_seconds"} <= used


def test_node_exporter_serves_the_textfile_and_promtool_accepts_it(drain_config, tmp_path):
    exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if exporter is None or shutil.which("promtool") is None:
        pytest.skip("prometheus-node-exporter or promtool not installed (apt-get install prometheus)")
    write_scores(drain_config.data_dir, score_rows(RISKS))
    textfile = publish(drain_config).textfile
    lint = subprocess.run(
        ["promtool", "check", "metrics"], input=textfile.read_text(), capture_output=True, text=True, timeout=60
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [
            exporter,
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textfile.parent}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        scraped = ""
        while time.monotonic() < deadline and "foreshock_unit_risk" not in scraped:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    scraped = response.read().decode()
            except OSError:
                time.sleep(0.2)
        families = {f.name: f.samples for f in text_string_to_metric_families(scraped)}
        assert "node_textfile_scrape_error" in families and families["node_textfile_scrape_error"][0].value == 0
        drain_now = [s for s in families["foreshock_unit_action"] if s.labels["action"] == "drain_now"]
        assert [s.labels["unit_id"] for s in drain_now] == ["gpu-node001-gpu0"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_an_unwritable_textfile_fails_the_publish_whole_and_the_next_one_announces(drain_config, tmp_path):
    from foreshock.drain.outbox_files import newest_list_dir

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the textfile's folder should be\n")
    with Receiver() as receiver:
        broken = drain_config.with_overrides(
            {"notify": {"urls": [receiver.url]}, "metrics": {"textfile": str(blocker / "foreshock.prom")}}
        )
        write_scores(broken.data_dir, score_rows(RISKS))
        with pytest.raises(OSError):
            publish(broken)
        assert newest_list_dir(broken.outbox_dir) is None  # nothing in place, nothing announced
        assert receiver.messages == []

        fixed = broken.with_overrides({"metrics": {"textfile": ""}})
        result = publish(fixed)
        assert result.notified is True and result.textfile.is_file()
        assert receiver.messages[0]["json"]["title"] == "foreshock: 1 drain_at_checkpoint, 1 drain_now"


def test_changes_of_a_publish_stopped_before_notifying_are_announced_by_the_next(drain_config, monkeypatch):
    from foreshock.drain import outbox

    with Receiver() as receiver:
        config = drain_config.with_overrides({"notify": {"urls": [receiver.url]}})
        write_scores(config.data_dir, score_rows(RISKS))

        def killed(*args, **kwargs):
            raise SystemExit("killed between the outbox and the notification")

        monkeypatch.setattr(outbox, "send", killed)
        with pytest.raises(SystemExit):
            publish(config)
        assert (config.outbox_dir / "LATEST").is_file()  # the list is in place, unannounced
        monkeypatch.undo()

        write_scores(config.data_dir, score_rows(RISKS, recent() + timedelta(minutes=10)))
        result = publish(config)  # nothing changed since the previous list ...
        assert result.diff.filter(result.diff["change"] == "new").height == 0
        assert len(receiver.messages) == 1  # ... but its drains were never announced
        lines = receiver.messages[0]["json"]["message"].splitlines()
        assert [line.split(":")[0] for line in lines[:2]] == ["new", "new"]

        write_scores(config.data_dir, score_rows(RISKS, recent() + timedelta(minutes=20)))
        publish(config)
        assert len(receiver.messages) == 1  # announced once
