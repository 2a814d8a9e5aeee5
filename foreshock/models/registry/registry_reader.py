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
(:mod:`foreshock.models.registry.registry`).  Only rows and JSON are read here: nothing from the
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


# --------------------------------------------------------------------------------------
# SQLite
# --------------------------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?mode=ro", uri=True, timeout=TIMEOUT_S)


VERSION_COLUMNS = "v.name, v.version, v.run_id, v.creation_time, v.source"


def _sqlite_version(path: Path, where: str, params: tuple) -> VersionRecord | None:
    """The model version a query finds (``v`` is ``model_versions``, ``a`` its aliases)."""
    if not path.is_file():
        return None  # the client would create an empty store: there is no version in it
    try:
        with _connect(path) as db:
            row = db.execute(
                f"SELECT {VERSION_COLUMNS} FROM model_versions v "  # noqa: S608 - constant text, values bound
                "LEFT JOIN registered_model_aliases a ON a.workspace = v.workspace AND a.name = v.name "
                f"AND a.version = v.version WHERE v.workspace = ? AND v.current_stage != ? AND {where}",
                (DEFAULT_WORKSPACE, DELETED_STAGE, *params),
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


def _sqlite_alias(path: Path, name: str, alias: str) -> VersionRecord | None:
    return _sqlite_version(path, "a.name = ? AND a.alias = ?", (name, alias))


def _sqlite_artifact_location(path: Path, source: str) -> str:
    """Where a version's files are: a logged model's (``models:/m-...``) or a run's
    (``runs:/RUN/PATH``) artifact location, or the source itself."""
    try:
        with _connect(path) as db:
            if source.startswith("models:/m-") and "/" not in source[len("models:/") :]:
                row = db.execute(
                    "SELECT artifact_location FROM logged_models WHERE model_id = ?", (source[len("models:/") :],)
                ).fetchone()
                if row is None:
                    raise NotReadable(f"no logged model {source}")
                return str(row[0])
            if source.startswith("runs:/"):
                run_id, _, inner = source[len("runs:/") :].partition("/")
                row = db.execute("SELECT artifact_uri FROM runs WHERE run_uuid = ?", (run_id,)).fetchone()
                if row is None:
                    raise NotReadable(f"no run {run_id}")
                return f"{str(row[0]).rstrip('/')}/{inner}" if inner else str(row[0])
    except sqlite3.Error as exc:
        raise NotReadable(f"{path}: {exc}") from None
    return source


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
    """``GET <uri>/api/2.0/mlflow/<endpoint>``; ``None`` when the server says there is no
    such thing: 404 ``RESOURCE_DOES_NOT_EXIST`` (no model, no run) or 400
    ``INVALID_PARAMETER_VALUE`` (MLflow's answer for a model without that alias)."""
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
        if exc.code in (400, 404):
            try:
                body = json.loads(exc.read() or b"{}")
            except ValueError:
                body = {}
            if body.get("error_code") in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
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


def version_record(uri: str, name: str, version: str | int) -> VersionRecord | None:
    """A registered version by number, or ``None`` (no such model or version).

    Raises
    ------
    NotReadable
        Unless ``uri`` is the embedded SQLite store (its files are read in place, see
        :func:`local_model_dir`; a server's are downloaded by the client).
    """
    _check_settings()
    path = _sqlite_path(uri)
    if path is None:
        raise NotReadable(f"{uri}: read through MLflow's client")
    return _sqlite_version(path, "v.name = ? AND v.version = ?", (name, int(version)))


def local_model_dir(uri: str, record: VersionRecord) -> Path:
    """The directory holding a version's logged model when it is on this machine (a
    ``file:`` artifact location of the SQLite store), read in place instead of copied.

    Raises
    ------
    NotReadable
        When the files are elsewhere (a server, object storage): the client downloads them.
    """
    _check_settings()
    path = _sqlite_path(uri)
    if path is None or not record.source:
        raise NotReadable(f"{uri}: artifacts through MLflow's client")
    location = _sqlite_artifact_location(path, record.source)
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        local = Path(urllib.parse.unquote(parsed.path))
    elif parsed.scheme == "" and location.startswith("/"):
        local = Path(location)
    else:
        raise NotReadable(f"{location}: artifacts through MLflow's client")
    if not local.is_dir():
        raise NotReadable(f"{local} is not a directory")
    return local


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
