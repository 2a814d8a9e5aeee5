"""A Prometheus holding the simulated fleet's dcgm-exporter series, for ``foreshock pull``.

The simulator writes the DCGM series as exported ``query_range`` answers (``dcgm/<day>/
<metric>.json``).  With ``prometheus`` and ``promtool`` installed, those series are written as
OpenMetrics, backfilled into a TSDB with ``promtool tsdb create-blocks-from openmetrics`` and
served by a real Prometheus on 127.0.0.1 (free port, stopped by its PID).  Without them, a
small HTTP server in this process answers ``/api/v1/query_range`` from the same series
(points inside ``[start, end]``, the step ignored: the series are regular and pulled at their
own step).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.pipelines.services import prometheus_server  # noqa: E402  (the tests' real Prometheus)


def read_series(dcgm_dir: Path) -> dict[tuple[tuple[str, str], ...], list[tuple[int, str]]]:
    """Every series of the exported files: sorted labels (``__name__`` included) -> points."""
    series: dict[tuple[tuple[str, str], ...], list[tuple[int, str]]] = {}
    for path in sorted(dcgm_dir.rglob("*.json")):
        for result in json.loads(path.read_text())["data"]["result"]:
            key = tuple(sorted(result["metric"].items()))
            series.setdefault(key, []).extend((int(float(t)), v) for t, v in result["values"])
    for points in series.values():
        points.sort()
    return series


def write_openmetrics(series: dict, out: Path) -> None:
    """The series as one OpenMetrics text (families grouped, points in time order)."""
    names = sorted({dict(key)["__name__"] for key in series})
    with open(out, "w") as handle:
        for name in names:
            handle.write(f"# TYPE {name} gauge\n")
            for key, points in series.items():
                labels = dict(key)
                if labels.pop("__name__") != name:
                    continue
                text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                handle.writelines(f"{name}{{{text}}} {value} {t}\n" for t, value in points)
        handle.write("# EOF\n")


@contextlib.contextmanager
def real_prometheus(dcgm_dir: Path, root: Path) -> Iterator[str]:
    """A real Prometheus serving the series of ``dcgm_dir``; yields its base URL."""
    root.mkdir(parents=True, exist_ok=True)
    write_openmetrics(read_series(dcgm_dir), root / "series.om")
    with prometheus_server(root / "series.om", root) as url:
        yield url


@contextlib.contextmanager
def query_range_server(dcgm_dir: Path) -> Iterator[str]:
    """An HTTP server in this process answering ``/api/v1/query_range`` (every series; the
    step ignored) from the series of ``dcgm_dir``; yields its base URL."""
    series = read_series(dcgm_dir)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            start, end = float(query["start"][0]), float(query["end"][0])
            result = []
            for key, points in series.items():
                values = [[t, v] for t, v in points if start <= t <= end]
                if values:
                    result.append({"metric": dict(key), "values": values})
            body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{http.server_address[1]}"
    finally:
        http.shutdown()
        http.server_close()


def prometheus_for(dcgm_dir: Path, root: Path) -> contextlib.AbstractContextManager[str]:
    """A real Prometheus when installed, else the in-process ``query_range`` server."""
    if shutil.which("prometheus") and shutil.which("promtool"):
        return real_prometheus(dcgm_dir, root)
    print("prometheus/promtool not installed: pull reads an in-process query_range server")
    return query_range_server(dcgm_dir)
