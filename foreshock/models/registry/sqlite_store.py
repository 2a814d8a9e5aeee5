"""MLflow's embedded SQLite store, created whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

from foreshock.lake.atomic import process_alive


def create_sqlite_store(uri: str, artifact_root: str | None) -> None:
    """Create the SQLite store ``uri`` names, if it is missing, whole or not at all, with
    ``artifact_root`` as its default artifact location (the caller's choice).

    MLflow creates a new store by running its schema migrations one by one, which takes tens
    of seconds on a busy machine; a process killed meanwhile left a half-migrated store that
    every later run refused ("table ... already exists", "out-of-date database schema").  The
    migrations run on a temp file (``.mlflow.db.tmp-<pid>``, removed by the next command if
    left) that is linked into place only when complete.
    """
    if not uri.startswith("sqlite:///"):
        return
    db = Path(unquote(uri[len("sqlite:///") :]))
    if db.exists():
        return
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    db.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_creations(db)
    temp = db.with_name(f".{db.name}.tmp-{os.getpid()}")
    temp.unlink(missing_ok=True)
    SqlAlchemyStore(f"sqlite:///{temp}", artifact_root).engine.dispose()
    with open(temp, "rb+") as handle:
        os.fsync(handle.fileno())
    try:
        os.link(temp, db)  # fails if another process created the store meanwhile: theirs stays
    except FileExistsError:
        pass
    finally:
        temp.unlink()


def _remove_dead_creations(db: Path) -> None:
    """Remove the temp stores (and their SQLite journals) of creators that were killed."""
    for path in db.parent.glob(f".{db.name}.tmp-*"):
        pid = path.name.removeprefix(f".{db.name}.tmp-").split("-")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            path.unlink(missing_ok=True)
