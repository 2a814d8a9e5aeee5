"""Reading a registered version without MLflow's client: for commands of a second's work.

``foreshock status`` and ``foreshock score`` only need to know which version an alias
points at (its number, run, creation time and tags) and the tags of its run.  MLflow's
client takes seconds to import on a small machine (it pulls in SQLAlchemy, Alembic,
pandas and its GenAI stack), far longer than the lookup.  Two stores are read directly:

* the embedded SQLite store (``sqlite:///PATH``), opened read-only with :mod:`sqlite3`;
* a tracking server (``http://`` or ``https://``) through MLflow's REST API:
  ``GET /api/2.0/mlflow/registered-models/alias`` and ``GET /api/2.0/mlflow/runs/get``,
  with ``MLFLOW_TRACKING_TOKEN`` or ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` when set.

Anything else (PostgreSQL, a file store, workspaces, custom auth or TLS settings, a schema
this code does not know) raises :class:`NotReadable` and the caller uses the client
(:mod:`foreshock.models.registry`).  Only rows and JSON are read here: nothing from the
registry is ever executed.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# Settings that change how MLflow's client reaches a server or which rows it sees: with
# any of them set, the client decides (this reader would not honour them).
CLIENT_ONLY_SETTINGS = (
    "MLFLOW_TRACKING_AUTH",
    "MLFLOW_TRACKING_INSECURE_TLS",
    "MLFLOW_TRACKING_SERVER_CERT_PATH",
    "MLFLOW_TRACKING_CLIENT_CERT_PATH",
    "MLFLOW_ENABLE_WORKSPACES",
    "MLFLOW_WORKSPACE",
    "MLFLOW_WORKSPACE_STORE_URI",
)
DEFAULT_WORKSPACE = "default"
DELETED_STAGE = "Deleted_Internal"  # how MLflow's SQL store marks a deleted version
TIMEOUT_S = 30.0


class NotReadable(Exception):
    """This store (or setting) is not read directly: use MLflow's client."""


@dataclass(frozen=True)
class VersionRecord:
    """The fields of an MLflow ``ModelVersion`` that foreshock reads (same names)."""

    name: str
    version: str
    run_id: str | None
    creation_timestamp: int  # milliseconds since the epoch, as MLflow stores it
    source: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


def _check_settings() -> None:
    for key in CLIENT_ONLY_SETTINGS:
        if os.environ.get(key, "").strip().lower() not in ("", "false", "0"):
            raise NotReadable(f"{key} is set")


def _sqlite_path(uri: str) -> Path | None:
    """The database file of ``sqlite:///PATH`` (``None`` for other URIs)."""
    if not uri.startswith("sqlite:///") or "?" in uri:
        return None
    return Path(uri[len("sqlite:///") :])


def _is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def readable(uri: str) -> bool:
    """Whether :func:`alias_record` reads this store itself (else it raises NotReadable)."""
    try:
        _check_settings()
    except NotReadable:
        return False
    return _sqlite_path(uri) is not None or _is_http(uri)


# --------------------------------------------------------------------------------------
# SQLite
# --------------------------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?mode=ro", uri=True, timeout=TIMEOUT_S)


def _sqlite_alias(path: Path, name: str, alias: str) -> VersionRecord | None:
    if not path.is_file():
        return None  # the client would create an empty store: there is no alias in it
    try:
        with _connect(path) as db:
            row = db.execute(
                "SELECT v.name, v.version, v.run_id, v.creation_time, v.source FROM registered_model_aliases a "
                "JOIN model_versions v ON v.workspace = a.workspace AND v.name = a.name AND v.version = a.version "
                "WHERE a.workspace = ? AND a.name = ? AND a.alias = ? AND v.current_stage != ?",
                (DEFAULT_WORKSPACE, name, alias, DELETED_STAGE),
            ).fetchone()
            if row is None:
                return None
            tags = db.execute(
                "SELECT key, value FROM model_version_tags WHERE workspace = ? AND name = ? AND version = ?",
                (DEFAULT_WORKSPACE, row[0], row[1]),
            ).fetchall()
    except sqlite3.Error as exc:  # an older or newer schema than this code knows
        raise NotReadable(f"{path}: {exc}") from None
    return VersionRecord(str(row[0]), str(row[1]), row[2] or None, int(row[3] or 0), row[4], dict(tags))


def _sqlite_run_tags(path: Path, run_id: str) -> dict[str, str]:
    try:
        with _connect(path) as db:
            if db.execute("SELECT 1 FROM runs WHERE run_uuid = ?", (run_id,)).fetchone() is None:
                raise NotReadable(f"no run {run_id}")  # the client says how it is missing
            return dict(db.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (run_id,)).fetchall())
    except sqlite3.Error as exc:
        raise NotReadable(f"{path}: {exc}") from None


# --------------------------------------------------------------------------------------
# REST
# --------------------------------------------------------------------------------------


def _get(uri: str, endpoint: str, params: dict[str, str]) -> dict | None:
    """``GET <uri>/api/2.0/mlflow/<endpoint>``; ``None`` when the server says the
    resource does not exist (MLflow answers 404 ``RESOURCE_DOES_NOT_EXIST``)."""
    url = f"{uri.rstrip('/')}/api/2.0/mlflow/{endpoint}?{urllib.parse.urlencode(params)}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    elif user:
        password = os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 - http(s) only
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            try:
                body = json.loads(exc.read() or b"{}")
            except ValueError:
                body = {}
            if body.get("error_code") == "RESOURCE_DOES_NOT_EXIST":
                return None
        raise NotReadable(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NotReadable(f"{url}: {exc}") from None


def _rest_alias(uri: str, name: str, alias: str) -> VersionRecord | None:
    found = _get(uri, "registered-models/alias", {"name": name, "alias": alias})
    if found is None:
        return None
    mv = found.get("model_version") or {}
    tags = {t["key"]: t.get("value", "") for t in mv.get("tags") or []}
    return VersionRecord(
        str(mv["name"]),
        str(mv["version"]),
        mv.get("run_id") or None,
        int(mv.get("creation_timestamp") or 0),
        mv.get("source"),
        tags,
    )


def _rest_run_tags(uri: str, run_id: str) -> dict[str, str]:
    found = _get(uri, "runs/get", {"run_id": run_id})
    if found is None:
        raise NotReadable(f"no run {run_id}")  # the client says how it is missing
    tags = ((found.get("run") or {}).get("data") or {}).get("tags") or []
    return {t["key"]: t.get("value", "") for t in tags}


# --------------------------------------------------------------------------------------
# The two reads
# --------------------------------------------------------------------------------------


def tracking_uri() -> str:
    """The tracking URI MLflow's client would use: its own answer once MLflow is imported
    (``mlflow.set_tracking_uri`` wins), else ``MLFLOW_TRACKING_URI``.

    Raises
    ------
    NotReadable
        When neither says (MLflow's default store is MLflow's business).
    """
    mlflow = sys.modules.get("mlflow")
    if mlflow is not None:
        return str(mlflow.get_tracking_uri())
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise NotReadable("no MLFLOW_TRACKING_URI")
    return uri


def alias_record(uri: str, name: str, alias: str) -> VersionRecord | None:
    """The version ``alias`` points at in the registry at ``uri``, or ``None`` (no such
    model or alias), as ``MlflowClient.get_model_version_by_alias`` would find it.

    Raises
    ------
    NotReadable
        When this store is not read directly (use the client).
    """
    _check_settings()
    if alias.lower() == "latest":  # MLflow's built-in alias: the newest version
        raise NotReadable("the 'latest' alias is resolved by the client")
    path = _sqlite_path(uri)
    if path is not None:
        return _sqlite_alias(path, name, alias)
    if _is_http(uri):
        return _rest_alias(uri, name, alias)
    raise NotReadable(f"{uri}: read through MLflow's client")


def run_tags(uri: str, run_id: str) -> dict[str, str]:
    """The tags of an MLflow run (empty if it has none).

    Raises
    ------
    NotReadable
        When this store is not read directly (use the client).
    """
    _check_settings()
    path = _sqlite_path(uri)
    if path is not None:
        return _sqlite_run_tags(path, run_id)
    if _is_http(uri):
        return _rest_run_tags(uri, run_id)
    raise NotReadable(f"{uri}: read through MLflow's client")
