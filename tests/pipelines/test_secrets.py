"""Secrets stay where the operator put them: out of MLflow, Prefect's database, the lake,
the outbox and every log line; credentials never follow a redirect to another server."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from foreshock.config import load_config
from foreshock.errors import UserError
from foreshock.ingest.pull import PullSettings, query_range
from foreshock.redaction import redact_url

SECRET = "s3cretQ7x"  # in the notification URL, the Prometheus URL and the token variable


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"json://user:{SECRET}@hooks.example:8080/x?token={SECRET}", "json://hooks.example:8080"),
        (f"https://ops:{SECRET}@prometheus.example/api", "https://prometheus.example"),
        (f"tgram://123456:{SECRET}/-100200300", "tgram://…"),
        (f"pagerduty://{SECRET}@{SECRET}/", "pagerduty://…"),
        (f"slack://T1/B2/{SECRET}", "slack://…"),
        (f"hooks.example/{SECRET}", "<redacted>"),
        (f"json://[::1]:{SECRET}/", "json://…"),
    ],
)
def test_a_url_is_shown_by_its_scheme_and_host_only(url, shown):
    assert redact_url(url) == shown


class Server:
    """An HTTP server on 127.0.0.1 (free port) that records each request's path and
    ``Authorization`` header and answers with ``respond(path) -> (status, headers, body)``."""

    def __init__(self, respond) -> None:
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server.requests.append((self.path, self.headers.get("Authorization")))
                status, headers, body = respond(self.path)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 - a webhook (the notification)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.do_GET()

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


EMPTY = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


@pytest.fixture
def servers():
    started: list[Server] = []

    def start(respond) -> Server:
        started.append(Server(respond))
        return started[-1]

    yield start
    for server in started:
        server.close()


def _pull_settings(tmp_path, url: str, allow_http: bool = True) -> PullSettings:
    site = tmp_path / "site.toml"
    site.write_text(f'[pull]\nurl = "{url}"\nallow_http_credentials = {str(allow_http).lower()}\n')
    return PullSettings.from_config(load_config(site, data_dir=tmp_path / "d"))


def test_credentials_never_follow_a_redirect_to_another_server(tmp_path, servers, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_TOKEN", SECRET)
    elsewhere = servers(lambda path: (200, {}, EMPTY))
    redirecting = servers(lambda path: (302, {"Location": elsewhere.url + path}, b""))
    with pytest.raises(UserError, match=r"redirects to http://127\.0\.0\.1:\d+ \(HTTP 302\): refused"):
        query_range(_pull_settings(tmp_path, redirecting.url), 0, 60)
    assert redirecting.requests[0][1] == f"Bearer {SECRET}"
    assert elsewhere.requests == []  # never asked, so never given the token


def test_a_redirect_on_the_same_server_keeps_the_credentials(tmp_path, servers, monkeypatch):
    monkeypatch.delenv("PROMETHEUS_TOKEN", raising=False)
    monkeypatch.delenv("PROMETHEUS_USERNAME", raising=False)

    def respond(path: str):
        if path.startswith("/old/"):
            return 301, {"Location": path.removeprefix("/old")}, b""
        return 200, {}, EMPTY

    server = servers(respond)
    host = server.url.removeprefix("http://")
    doc = query_range(_pull_settings(tmp_path, f"http://ops:{SECRET}@{host}/old"), 0, 60)
    assert doc["status"] == "success"
    basic = "Basic " + base64.b64encode(f"ops:{SECRET}".encode()).decode()
    assert [auth for _, auth in server.requests] == [basic, basic]


def test_credentials_over_plain_http_are_refused_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_TOKEN", SECRET)
    with pytest.raises(UserError, match=r"clear text to http://prometheus\.example:9090: use https://") as err:
        _pull_settings(tmp_path, "http://prometheus.example:9090", allow_http=False)
    assert SECRET not in str(err.value)
    monkeypatch.delenv("PROMETHEUS_TOKEN")
    monkeypatch.delenv("PROMETHEUS_USERNAME", raising=False)
    assert _pull_settings(tmp_path, "http://prometheus.example:9090", allow_http=False).headers == {}


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in Path(root).rglob("*") if p.is_file() and needle in p.read_bytes()]


def _prometheus(path: str):
    """query_range of one dcgm-exporter series (two points) whatever the window."""
    from urllib.parse import parse_qs, urlsplit

    query = parse_qs(urlsplit(path).query)
    start = float(query["start"][0])
    labels = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "node01", "UUID": "GPU-1"}
    values = [[start, "51"], [start + 60, "52"]]
    body = {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": labels, "values": values}]}}
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


@pytest.mark.slow  # a training run, a score, a publish and a pull through Prefect: minutes
def test_no_secret_reaches_mlflow_prefect_the_lake_the_outbox_or_a_log_line(
    tmp_path, servers, mlflow_uri, prefect_server, capfd, monkeypatch
):
    from prefect.settings import get_current_settings

    from foreshock.features.store import write_features
    from foreshock.lake.merge import merge_into_lake
    from foreshock.pipelines.cli import main
    from tests.models.test_registry_fleet import synthetic_fleet

    for name in ("PROMETHEUS_TOKEN", "PROMETHEUS_USERNAME", "PROMETHEUS_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    features, failures = synthetic_fleet(seed=43)
    data_dir = tmp_path / "data"
    write_features(features, data_dir / "features", shards=2)
    merge_into_lake(data_dir / "lake", "failures", failures, shards=2)
    prometheus = servers(_prometheus)
    receiver = servers(lambda path: (200, {}, b""))
    if True:  # one block: what the commands log is read at its end
        hook = receiver.url.replace("http://", f"json://ops:{SECRET}@") + "/hook"
        site = tmp_path / "foreshock.toml"
        site.write_text(
            '[models]\nname = "secret-model"\n'
            "gbm = { params = { num_threads = 1 }, num_boost_round = 40, early_stopping_rounds = 10 }\n"
            "[backtest]\nfolds = 1\ndrain_budget_per_day = 1\n"
            f'[notify]\nurls = ["{hook}"]\nmin_action = "watch"\n'
            "[pull]\nallow_http_credentials = true\n"
        )
        args = ["--config", str(site), "--data-dir", str(data_dir)]
        pull_url = prometheus.url.replace("http://", f"http://ops:{SECRET}@")
        assert main([*args, "train"]) == 0
        assert main([*args, "score"]) == 0
        assert main([*args, "publish", "--allow-stale"]) == 0
        assert main(
            [*args, "pull", "--url", pull_url, "--start", "2026-11-01T00:00:00Z", "--end", "2026-11-01T00:05:00Z"]
        ) in (0, 3)
        logged = capfd.readouterr()
    # the secrets were used where they belong, read inside the tasks
    assert [auth for path, auth in receiver.requests if path == "/hook"], "publish sent no notification"
    assert prometheus.requests and all(auth.startswith("Basic ") for _, auth in prometheus.requests)
    assert base64.b64decode(prometheus.requests[0][1].split()[1]).decode() == f"ops:{SECRET}"
    # ... and nowhere else
    assert SECRET not in logged.out and SECRET not in logged.err
    needle = SECRET.encode()
    assert _files_holding(data_dir, needle) == []  # lake, quarantine, outbox, pull state, models, scores
    mlflow_db = Path(mlflow_uri.removeprefix("sqlite:///"))
    assert _files_holding(mlflow_db.parent, needle) == []
    prefect_db = get_current_settings().server.database.connection_url.get_secret_value()
    prefect_path = Path(prefect_db.split("///", 1)[1])
    assert prefect_path.exists()
    assert _files_holding(prefect_path.parent, needle) == []


def test_flow_settings_carry_references_and_tasks_read_the_secret(tmp_path, monkeypatch):
    from foreshock.config import Config

    site = tmp_path / "site.toml"
    site.write_text(f'[notify]\nurls = ["json://ops:{SECRET}@file.example/x"]\n')
    config = load_config(site, data_dir=tmp_path / "d")
    in_code = config.with_overrides({"notify": {"urls": [f"json://ops:{SECRET}@code.example/x"]}})
    settings = json.loads(json.dumps(in_code.to_settings(str(site))))  # what Prefect stores
    assert SECRET not in json.dumps(settings)
    assert Config.from_settings(settings).section("notify")["urls"] == [f"json://ops:{SECRET}@code.example/x"]
    # another process holds no reference: the task reads the file (or the variable) again
    monkeypatch.setattr("foreshock.redaction._HELD", {})
    assert Config.from_settings(settings).section("notify")["urls"] == [f"json://ops:{SECRET}@file.example/x"]
