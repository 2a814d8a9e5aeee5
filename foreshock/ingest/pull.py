"""Pull dcgm-exporter series from a Prometheus server (``/api/v1/query_range``).

The pull fetches bounded chunks of time and writes each response, with the unit labels
normalised, as a Prometheus JSON file; the regular ``prometheus-json`` parser, checks,
quarantine and lake merge then ingest those files exactly as they ingest files a user
exported by hand.  This module only fetches and keeps the resume state; no Prefect.

Resume: ``<data-dir>/pull/state.json`` holds, per query and per series (its label set),
the last timestamp stored.  The next pull starts at the oldest of them (so a missed run
catches up, at most ``[pull] max_lookback`` back) and drops every point at or before its
series' last stored timestamp (so a rerun adds nothing).

Labels to units: ``[pull] host_labels`` lists the labels that may name the node, first
present wins (on Kubernetes dcgm-exporter's ``Hostname`` can be the exporter pod; a
relabelled ``node`` label is then the right one; ``instance`` loses its ``:port``), and
``gpu_label`` the GPU index.  They are written as the ``Hostname`` and ``gpu`` labels the
parser reads; without a GPU index the ``UUID`` label is looked up in the inventory.

Authentication, never stored in the configuration: a bearer token from the variable named
by ``[pull] token_env``, or basic auth from ``username_env``/``password_env`` (or the
URL's ``user:password@``, taken out of the URL before it is shown anywhere).  TLS
certificates are always verified (``ca_file`` adds a private CA).  Credentials are refused
over plain ``http://`` unless ``[pull] allow_http_credentials``, and a redirect to another
scheme, host or port is refused while they are set (``urllib`` would send them there).
Log lines and errors name the server by scheme, host and port only.
"""

from __future__ import annotations

import base64
import json
import math
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from foreshock.config import Config
from foreshock.durations import parse_duration
from foreshock.errors import UserError
from foreshock.lake.atomic import atomic_write_text
from foreshock.redaction import redact_url

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses a query_range above this
STATE_FILE = "state.json"


class PullError(OSError):
    """The server could not be reached or answered with an HTTP error (retried as I/O)."""


@dataclass
class PullSettings:
    """``[pull]`` with command-line overrides applied."""

    url: str
    query: str
    step: timedelta
    chunk: timedelta
    lookback: timedelta
    max_lookback: timedelta
    host_labels: list[str]
    gpu_label: str
    timeout: float
    ca_file: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> PullSettings:
        section = {**config.section("pull"), **{k: v for k, v in overrides.items() if v is not None}}
        url = str(section["url"]).rstrip("/")
        if not url:
            raise UserError("no Prometheus URL: pass --url or set [pull] url")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise UserError(f"[pull] url must start with http:// or https://, got {redact_url(url)}")
        url, headers = _credentials(url, section)
        if headers and urllib.parse.urlsplit(url).scheme == "http" and not section["allow_http_credentials"]:
            raise UserError(
                f"pull: credentials would cross the network in clear text to {redact_url(url)}: use https://, "
                "or set [pull] allow_http_credentials = true (FORESHOCK_PULL_ALLOW_HTTP_CREDENTIALS=true)"
            )
        step = parse_duration(section["step"])
        chunk = min(parse_duration(section["chunk"]), step * (MAX_POINTS_PER_SERIES - 1))
        return cls(
            url=url,
            query=str(section["query"]),
            step=step,
            chunk=chunk,
            lookback=parse_duration(section["lookback"]),
            max_lookback=parse_duration(section["max_lookback"]),
            host_labels=list(section["host_labels"]),
            gpu_label=str(section["gpu_label"]),
            timeout=parse_duration(section["timeout"]).total_seconds(),
            ca_file=str(section["ca_file"]),
            headers=headers,
        )

    @property
    def shown_url(self) -> str:
        """The server as log lines and errors may name it (scheme, host, port)."""
        return redact_url(self.url)


def _credentials(url: str, section: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """``(url without user:password@, headers)``: a bearer token from ``token_env``, else
    basic auth from ``username_env``/``password_env``, else from the URL's own
    ``user:password@`` (taken out of the URL, which is shown in logs and errors)."""
    parts = urllib.parse.urlsplit(url)
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    token = os.environ.get(str(section["token_env"]), "")
    if token:
        return bare, {"Authorization": f"Bearer {token}"}
    user = os.environ.get(str(section["username_env"]), "")
    password = os.environ.get(str(section["password_env"]), "")
    if not user and parts.username:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
    if user:
        encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
        return bare, {"Authorization": f"Basic {encoded}"}
    return bare, {}


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to the same scheme, host and port while the request carries
    credentials: ``urllib`` would send the ``Authorization`` header to wherever the server
    points (another host, or from ``https`` to plain ``http``)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        if req.has_header("Authorization") and _origin(newurl) != _origin(req.full_url):
            raise UserError(
                f"pull: {redact_url(req.full_url)} redirects to {redact_url(newurl)} (HTTP {code}): "
                "refused, the credentials would follow it; point [pull] url at the final server"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def query_range(settings: PullSettings, start: float, end: float) -> dict[str, Any]:
    """One ``/api/v1/query_range`` request; the decoded response (status checked)."""
    params = urllib.parse.urlencode(
        {
            "query": settings.query,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{settings.step.total_seconds():g}",
        }
    )
    request = urllib.request.Request(
        f"{settings.url}/api/v1/query_range?{params}", headers={"Accept": "application/json", **settings.headers}
    )
    context = ssl.create_default_context(cafile=settings.ca_file or None)
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _SameOriginRedirects)
    try:
        with opener.open(request, timeout=settings.timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        if exc.code in (400, 422):  # a bad query: the user's to fix, not worth a retry
            raise UserError(f"Prometheus refused the query {settings.query!r}: HTTP {exc.code}: {detail}") from None
        raise PullError(f"{settings.shown_url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError) as exc:
        raise PullError(f"{settings.shown_url}: {getattr(exc, 'reason', exc)}") from None
    doc = json.loads(body)
    if doc.get("status") != "success":
        raise PullError(f"{settings.shown_url}: query failed: {doc.get('errorType')}: {doc.get('error')}")
    return doc


def series_key(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True)


def normalise_labels(labels: dict[str, str], settings: PullSettings) -> dict[str, str]:
    """The labels with ``Hostname`` and ``gpu`` taken from the configured unit labels."""
    out = dict(labels)
    for name in settings.host_labels:
        value = labels.get(name)
        if value:
            if name == "instance":
                value = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
            out["Hostname"] = value
            break
    if settings.gpu_label != "gpu":
        if labels.get(settings.gpu_label) is not None:
            out["gpu"] = labels[settings.gpu_label]
        else:
            out.pop("gpu", None)
    return out


@dataclass
class PullState:
    """Last stored timestamp (unix seconds) per series, for one query."""

    query: str
    series: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path, query: str) -> PullState:
        path = Path(directory) / STATE_FILE
        if not path.is_file():
            return cls(query)
        stored = json.loads(path.read_text()).get("queries", {}).get(query, {})
        return cls(query, {k: float(v) for k, v in stored.items()})

    def save(self, directory: Path) -> None:
        path = Path(directory) / STATE_FILE
        doc = json.loads(path.read_text()) if path.is_file() else {"queries": {}}
        doc["queries"][self.query] = self.series
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _unix(value: datetime | float) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(value)


def pull_window(
    settings: PullSettings, state: PullState, start: datetime | None, end: datetime | None, now: datetime
) -> tuple[float, float]:
    """``[start, end]`` in unix seconds: given, else from the oldest series' last stored
    timestamp (or ``lookback`` before now), never more than ``max_lookback`` back; the
    start is aligned to the step so every run evaluates the same instants."""
    stop = _unix(end or now)
    if start is not None:
        first = _unix(start)
    elif state.series:
        first = min(state.series.values())
    else:
        first = stop - settings.lookback.total_seconds()
    if start is None:
        first = max(first, stop - settings.max_lookback.total_seconds())
    step = settings.step.total_seconds()
    first = math.floor(first / step) * step
    if first > stop:
        shown = [datetime.fromtimestamp(t, UTC).isoformat() for t in (first, stop)]
        raise UserError(f"pull: start {shown[0]} is after end {shown[1]}")
    return first, stop


@dataclass
class PullResult:
    directory: Path
    files: list[str]
    series: int
    points: int
    start: float
    end: float
    state: PullState


def fetch(
    config: Config,
    settings: PullSettings,
    run_id: str,
    start: datetime | None = None,
    end: datetime | None = None,
    now: datetime | None = None,
) -> PullResult:
    """Fetch the window chunk by chunk into ``<pull_dir>/<run_id>/chunk-NNNN.json``; only
    points newer than their series' last stored timestamp are written.  The returned
    state holds the new last timestamps; save it once the files are ingested."""
    state = PullState.load(config.pull_dir, settings.query)
    first, stop = pull_window(settings, state, start, end, now or datetime.now(UTC))
    directory = config.pull_dir / run_id
    directory.mkdir(parents=True, exist_ok=True)
    latest = dict(state.series)
    files, points, seen = [], 0, set()
    step, chunk = settings.step.total_seconds(), settings.chunk.total_seconds()
    lo = first
    while lo <= stop:
        hi = min(lo + chunk, stop)
        doc = query_range(settings, lo, hi)
        kept = []
        for series in doc["data"].get("result", []):
            labels = series.get("metric", {})
            key = series_key(labels)
            last = latest.get(key, -math.inf)
            values = [v for v in series.get("values", []) if float(v[0]) > last]
            if not values:
                continue
            seen.add(key)
            latest[key] = max(float(v[0]) for v in values)
            points += len(values)
            kept.append({"metric": normalise_labels(labels, settings), "values": values})
        if kept:
            path = directory / f"chunk-{len(files) + 1:04d}.json"
            body = {"status": "success", "data": {"resultType": "matrix", "result": kept}}
            atomic_write_text(path, json.dumps(body))
            files.append(str(path))
        lo = hi + step
    horizon = stop - settings.max_lookback.total_seconds()  # series gone for longer are forgotten
    new_state = PullState(settings.query, {k: v for k, v in latest.items() if v >= horizon})
    return PullResult(directory, files, len(seen), points, first, stop, new_state)
