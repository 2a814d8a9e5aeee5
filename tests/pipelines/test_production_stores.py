"""Production stores: an MLflow tracking server and a Prefect server on PostgreSQL.

The test starts its own PostgreSQL cluster (``initdb``/``pg_ctl`` as the ``postgres`` user,
in a temporary directory, on 127.0.0.1 and a free port) and stops it by its PID file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.pipelines.services import free_port, running, wait_http

pytestmark = pytest.mark.slow
PG_BIN = Path("/usr/lib/postgresql/15/bin")
BIN = Path(sys.executable).parent


def _skip_reason() -> str | None:
    if not (PG_BIN / "initdb").exists():
        return f"PostgreSQL 15 is not installed ({PG_BIN}/initdb; apt-get install postgresql)"
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return "starting a PostgreSQL cluster needs root to run initdb as the postgres user (runuser)"
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user"
    return None


@pytest.fixture(scope="module")
def postgres():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    import psycopg2

    root = Path(tempfile.mkdtemp(prefix="foreshock-pg-"))  # under /tmp: the postgres user can reach it
    shutil.chown(root, "postgres", "postgres")
    as_postgres = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", free_port()
    subprocess.run(
        [*as_postgres, str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = f"-k {root} -p {port} -c listen_addresses=127.0.0.1"
    subprocess.run(
        [
            *as_postgres,
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(root / "pg.log"),
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        connection = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("CREATE DATABASE mlflow")
            cursor.execute("CREATE DATABASE prefect")
        connection.close()
        yield {"host": "127.0.0.1", "port": port, "root": root}
    finally:
        pid_file = data / "postmaster.pid"
        if pid_file.exists():
            subprocess.run(
                [*as_postgres, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                capture_output=True,
                timeout=120,
            )
        shutil.rmtree(root, ignore_errors=True)


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_TRACKING_URI"))}
    env.update(
        MLFLOW_DISABLE_TELEMETRY="true", PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false", **extra
    )
    return env


def test_mlflow_server_on_postgresql_registers_and_loads_a_model(postgres, tmp_path):
    port = free_port()
    store = f"postgresql+psycopg2://postgres@{postgres['host']}:{postgres['port']}/mlflow"
    argv = [
        str(BIN / "mlflow"),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        store,
        "--artifacts-destination",
        str(tmp_path / "artifacts"),
        "--workers",
        "1",
    ]
    with running(argv, tmp_path / "mlflow.log", env=_env()) as server:
        wait_http(f"http://127.0.0.1:{port}/health", 900, server, tmp_path / "mlflow.log")
        script = textwrap.dedent(
            """
            import json, mlflow, pandas as pd
            from foreshock.models.registry.registry import alias_version
            from foreshock.models.registry.tracking import experiment_id

            class Doubler(mlflow.pyfunc.PythonModel):
                def predict(self, context, model_input, params=None):
                    return model_input["x"] * 2

            mlflow.set_experiment(experiment_id=experiment_id("foreshock-pg"))
            with mlflow.start_run() as run:
                info = mlflow.pyfunc.log_model(name="model", python_model=Doubler(), registered_model_name="pg-risk")
            client = mlflow.MlflowClient()
            client.set_registered_model_alias("pg-risk", "champion", info.registered_model_version)
            loaded = mlflow.pyfunc.load_model("models:/pg-risk@champion")
            print(json.dumps({"prediction": loaded.predict(pd.DataFrame({"x": [1.5, 2.0]})).tolist(),
                              "champion": alias_version("pg-risk", "champion").version}))
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=_env(MLFLOW_TRACKING_URI=f"http://127.0.0.1:{port}"),
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result == {"prediction": [3.0, 4.0], "champion": "1"}
    # the registry lives in PostgreSQL, the model files in the artifact destination
    import psycopg2

    with psycopg2.connect(host=postgres["host"], port=postgres["port"], user="postgres", dbname="mlflow") as connection:
        with connection.cursor() as cursor:
            cursor.execute("SELECT name, version FROM model_versions")
            assert cursor.fetchall() == [("pg-risk", 1)]
    assert any((tmp_path / "artifacts").rglob("MLmodel"))


def test_prefect_server_on_postgresql_records_flow_runs(postgres, tmp_path):
    port = free_port()
    database = f"postgresql+asyncpg://postgres@{postgres['host']}:{postgres['port']}/prefect"
    env = _env(PREFECT_HOME=str(tmp_path / "prefect-home"), PREFECT_API_DATABASE_CONNECTION_URL=database)
    argv = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with running(argv, tmp_path / "prefect.log", env=env) as server:
        api = f"http://127.0.0.1:{port}/api"
        wait_http(f"{api}/health", 600, server, tmp_path / "prefect.log")
        landing = tmp_path / "landing"
        landing.mkdir()
        (landing / "inventory.csv").write_text(
            "unit_id,node,rack,model,lot,installed_at\nn1-gpu0,n1,r1,H100,L1,2026-01-01T00:00:00Z\n"
        )
        client_env = {k: v for k, v in env.items() if k != "PREFECT_API_DATABASE_CONNECTION_URL"}
        ingest = subprocess.run(
            [
                sys.executable,
                "-m",
                "foreshock.pipelines.cli",
                "--data-dir",
                str(tmp_path / "data"),
                "ingest",
                "--path",
                str(landing),
            ],
            env={**client_env, "PREFECT_API_URL": api},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert ingest.returncode == 0, ingest.stderr[-3000:]
    import psycopg2

    with psycopg2.connect(
        host=postgres["host"], port=postgres["port"], user="postgres", dbname="prefect"
    ) as connection:
        with connection.cursor() as cursor:
            cursor.execute("SELECT f.name, r.state_type FROM flow_run r JOIN flow f ON f.id = r.flow_id")
            assert ("ingest", "COMPLETED") in cursor.fetchall()
