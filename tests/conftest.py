"""Shared fixtures: one Prefect test server and one MLflow store per test session.

``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadfile``): each
worker is a session of its own (its Prefect server, its MLflow store), a test file's tests
run on one worker (its module fixtures are built once), the files that use a session
service started for a few of them (the Dask cluster, the MLflow tracking server, the demo
fleet) run together on one worker (:func:`pytest_xdist_make_scheduler`), and the demo
fleet is built once for both (``demo_fleet.SharedBuild``).  The Dask cluster and the
tracking server stop after the last test that uses them (their idle processes cost CPU
the other tests need).  Plain ``pytest`` (no ``-n``) runs everything in one process."""

from __future__ import annotations

import contextlib
import os
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
import foreshock.pipelines.runtime  # noqa: E402,F401  (Prefect environment defaults)

# The session services whose tests run on one worker under xdist (a file is grouped with the
# first it names).
SHARED_SERVICES = ("demo_data_dir", "dask_cluster", "mlflow_server")


def _xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def service_groups(root: Path) -> dict[str, str]:
    """``{test file's node id: service}`` for the test files under ``root/tests`` that name a
    session service of :data:`SHARED_SERVICES` (read as text: a file that names one is
    grouped whole)."""
    pattern = re.compile(r"\b(" + "|".join(SHARED_SERVICES) + r")\b")
    groups = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        found = set(pattern.findall(path.read_text(errors="replace")))
        if found:
            groups[path.relative_to(root).as_posix()] = next(s for s in SHARED_SERVICES if s in found)
    return groups


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (``make test``): a file's tests go to one worker (its module fixtures
    are built once), and so do all the files that use one session service (the Dask
    cluster, the tracking server, the demo fleet's readers, which write beside each other),
    handed out in the order they are collected, the demo's readers once its build is done."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    groups = service_groups(config.rootpath)

    from demo_fleet import shared_build_done

    root = config._tmp_path_factory.getbasetemp()  # the workers' base directories' parent (as xdist finds it)

    class ServiceFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return groups.get(scope, scope)

        def _assign_work_unit(self, node) -> None:
            """The demo's readers (first in the queue) wait there while its build runs: a
            worker handed them would only wait for it."""
            demo = "demo_data_dir"
            if demo not in self.workqueue or len(self.workqueue) == 1 or shared_build_done(root):
                return super()._assign_work_unit(node)
            readers = self.workqueue.pop(demo)
            try:
                super()._assign_work_unit(node)
            finally:
                self.workqueue[demo] = readers
                self.workqueue.move_to_end(demo, last=False)

    config.option.loadscopereorder = False  # the collection's order (files by stage)
    return ServiceFileScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under xdist, the files of the session services first (in the order of
    :data:`SHARED_SERVICES`; xdist hands out files in the order collected): the demo's
    readers wait for its build on one worker while the other worker runs the rest, and the
    long groups do not end the run on one worker while the other has nothing left."""
    if not _xdist_worker(config):
        return
    groups = service_groups(config.rootpath)
    rank = {service: i for i, service in enumerate(SHARED_SERVICES)}
    items.sort(key=lambda item: rank.get(groups.get(item.nodeid.split("::")[0], ""), len(rank)))


_finished: set[str] = set()  # the tests of this session (worker) that have run
_stops: dict[str, tuple[set[str], Callable[[], None]]] = {}


def _stop_after_last_user(request, fixture: str, stop: Callable[[], None]) -> None:
    """Call ``stop`` once every test of this session that uses ``fixture`` has run (under
    xdist a worker runs all of them or none: they are one group)."""
    users = {item.nodeid for item in request.session.items if fixture in getattr(item, "fixturenames", ())}
    _stops[fixture] = (users - _finished, stop)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    _finished.add(item.nodeid)
    for fixture, (pending, stop) in list(_stops.items()):
        pending.discard(item.nodeid)
        if not pending:
            del _stops[fixture]
            stop()


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
    uses it (its migrations run beside the first tests); yields the wait for it, or None.
    Under xdist it is started by the worker its tests run on (:func:`mlflow_server`)."""
    if not _read_by_a_test(request, "mlflow_server") or _xdist_worker(request.config):
        yield None
        return
    from tests.pipelines.services import mlflow_server_starting

    with contextlib.ExitStack() as stack:
        ready = stack.enter_context(mlflow_server_starting(mlflow_server_root))
        _stop_after_last_user(request, "mlflow_server", stack.close)
        yield ready


@pytest.fixture(scope="session")
def mlflow_server(request, _mlflow_server_starting, mlflow_server_root):
    """A real ``mlflow server`` on 127.0.0.1 for the session (its own SQLite store and
    artifact root), stopped by its process group. Yields its URL; tests that use it set
    ``MLFLOW_TRACKING_URI`` themselves (and use their own model names).  Started once, at the
    session's start: a server's migrations and start take 15-20 s idle, about a minute on
    two busy cores (under xdist: at its first test, the other worker busy meanwhile);
    stopped after its last test."""
    if _mlflow_server_starting is not None:
        yield _mlflow_server_starting()
        return
    from tests.pipelines.services import mlflow_server_starting

    with contextlib.ExitStack() as stack:
        ready = stack.enter_context(mlflow_server_starting(mlflow_server_root))
        _stop_after_last_user(request, "mlflow_server", stack.close)
        yield ready()


@pytest.fixture(scope="session")
def dask_cluster(request, tmp_path_factory):
    """A real Dask scheduler and two single-threaded worker processes on 127.0.0.1 for the
    session (``tests/dask_cluster.py``); yields the scheduler's address.  Started once: the
    processes' start and their first import of foreshock cost seconds each time; stopped
    after its last test (idle, its three processes take a seventh of a core).  A test
    that checks what ran on it compares the scheduler's counts before and after its run."""
    pytest.importorskip("prefect_dask", reason="the dask extra is not installed (make setup installs it)")
    from dask_cluster import DASK, dask_cluster

    if not DASK.exists():
        pytest.skip(f"no dask command next to {DASK.parent}")
    with contextlib.ExitStack() as stack:
        address = stack.enter_context(dask_cluster(tmp_path_factory.mktemp("dask-logs")))
        _stop_after_last_user(request, "dask_cluster", stack.close)
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
    session's start when a collected test reads it; None otherwise.  Under xdist, one build
    in the run's base directory, shared by the workers."""
    if not _read_by_a_test(request, "demo_data_dir"):
        yield None
        return
    from demo_fleet import DemoBuild, SharedBuild

    if _xdist_worker(request.config):
        build = SharedBuild(tmp_path_factory.getbasetemp().parent)
    else:
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
