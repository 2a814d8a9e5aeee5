"""Shared fixtures: one Prefect test server and one MLflow store per test session."""

from __future__ import annotations

import os
import random

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
import foreshock.pipelines.runtime  # noqa: E402,F401  (Prefect environment defaults)


@pytest.fixture(scope="session")
def prefect_server():
    """A real (ephemeral) Prefect API for the whole session: flows run against it."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory):
    """One SQLite MLflow store per session (a fresh store runs migrations: seconds)."""
    store = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{store / 'mlflow.db'}"
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    import mlflow

    mlflow.set_tracking_uri(uri)
    yield uri
    if old is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = old


@pytest.fixture(scope="session")
def mlflow_server_root(tmp_path_factory):
    """The session tracking server's directory: its SQLite store and, under ``artifacts/``,
    the artifact root it proxies."""
    return tmp_path_factory.mktemp("mlflow-server")


def _read_by_a_test(request, fixture: str) -> bool:
    """Whether a collected test of this session uses ``fixture``."""
    return any(fixture in getattr(item, "fixturenames", ()) for item in request.session.items)


@pytest.fixture(scope="session", autouse=True)
def _mlflow_server_starting(request, mlflow_server_root):
    """The session's ``mlflow server`` started at the session's start when a collected test
    uses it (its migrations run beside the first tests); yields the wait for it, or None."""
    if not _read_by_a_test(request, "mlflow_server"):
        yield None
        return
    from tests.pipelines.services import mlflow_server_starting

    with mlflow_server_starting(mlflow_server_root) as ready:
        yield ready


@pytest.fixture(scope="session")
def mlflow_server(_mlflow_server_starting):
    """A real ``mlflow server`` on 127.0.0.1 for the session (its own SQLite store and
    artifact root), stopped by its process group. Yields its URL; tests that use it set
    ``MLFLOW_TRACKING_URI`` themselves (and use their own model names).  Started once, at the
    session's start: a server's migrations and start take 15-20 s idle, about a minute on
    two busy cores."""
    return _mlflow_server_starting()


@pytest.fixture(scope="session")
def dask_cluster(tmp_path_factory):
    """A real Dask scheduler and two single-threaded worker processes on 127.0.0.1 for the
    session (``tests/dask_cluster.py``); yields the scheduler's address.  Started once: the
    processes' start and their first import of foreshock cost seconds each time.  A test
    that checks what ran on it compares the scheduler's counts before and after its run."""
    pytest.importorskip("prefect_dask", reason="the dask extra is not installed (make setup installs it)")
    from dask_cluster import DASK, dask_cluster

    if not DASK.exists():
        pytest.skip(f"no dask command next to {DASK.parent}")
    with dask_cluster(tmp_path_factory.mktemp("dask-logs")) as address:
        yield address


DEFAULT_SEED = 20261202


@pytest.fixture
def seed(request) -> int:
    """A seeded random state, printed so a failure reproduces.

    Fixed by default so CI is repeatable; ``FORESHOCK_TEST_SEED=N`` picks another and
    ``FORESHOCK_TEST_SEED=random`` draws one (to hunt for seed-dependent failures).
    """
    chosen = os.environ.get("FORESHOCK_TEST_SEED", str(DEFAULT_SEED))
    value = random.randrange(2**31) if chosen == "random" else int(chosen)
    print(f"seed={value}")
    return value


@pytest.fixture(scope="session", autouse=True)
def _demo_build(request, tmp_path_factory):
    """The session's demo fleet (``tests/demo_fleet.py``), started in the background at the
    session's start when a collected test reads it; None otherwise."""
    if not _read_by_a_test(request, "demo_data_dir"):
        yield None
        return
    from demo_fleet import DemoBuild

    build = DemoBuild(tmp_path_factory.mktemp("demo") / "data")
    try:
        yield build
    finally:
        build.stop()


@pytest.fixture(scope="session")
def demo_data_dir(_demo_build):
    """One small demo fleet through the whole pipeline, built once per session by
    ``foreshock demo`` (``tests/demo_fleet.py``): the notebooks, the fleet report page, serve
    and the kill tests read it.  Its registry is its own (``use_registry``)."""
    return _demo_build.wait()


@pytest.fixture
def use_registry(mlflow_uri, monkeypatch):
    """``use_registry(uri)`` points this process's MLflow at another registry (a demo data
    directory's own, ``demo_fleet.demo_tracking_uri``) for one test: the environment, which
    the commands read, and MLflow's own setting; the session's store is back after it."""
    import mlflow

    def use(uri: str) -> str:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        mlflow.set_tracking_uri(uri)
        return uri

    yield use
    mlflow.set_tracking_uri(mlflow_uri)
