"""A registered model loads anywhere: its requirements are foreshock's own wheel (logged
with the model) and pinned dependencies, and nothing else from this checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_registry_fleet import SBE, TEMP, fast_config, synthetic_fleet, train_and_register

from foreshock.models.registry import model_env

ROOT = Path(__file__).resolve().parents[2]
NAME = "fresh-env-test"

LOAD_AND_PREDICT = """
import sys

import mlflow
import polars as pl

import foreshock

tracking_uri, model_uri, example, out = sys.argv[1:]
mlflow.set_tracking_uri(tracking_uri)
model = mlflow.pyfunc.load_model(model_uri)
pl.from_pandas(model.predict(pl.read_parquet(example).to_pandas())).write_parquet(out)
print(foreshock.__file__)
"""


def test_requirements_pin_what_is_installed_here():
    pins = dict(line.split("==", 1) for line in model_env.pinned_requirements())
    from importlib.metadata import version

    # Every declared dependency of foreshock, at the installed version.
    for package in ("polars", "lightgbm", "lifelines", "mlflow", "prefect", "pyyaml"):
        assert pins[package] == version(package)
    wheel = Path("/somewhere/foreshock-0.1.0-py3-none-any.whl")
    assert model_env.bundle_requirements(wheel)[0] == "artifacts/foreshock-0.1.0-py3-none-any.whl"


def test_wheel_is_built_once_per_source_state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = model_env.source_tree()
    assert root == ROOT
    fingerprint = model_env.source_fingerprint(root)
    target = model_env.wheel_cache() / fingerprint
    target.mkdir(parents=True)
    cached = target / "foreshock-0.1.0-py3-none-any.whl"
    cached.write_bytes(b"not rebuilt")
    assert model_env.build_wheel(root) == cached  # same source: the cached wheel, no build


@pytest.mark.slow
def test_champion_loads_in_a_fresh_environment_with_only_its_requirements(mlflow_uri, tmp_path):
    config = fast_config(tmp_path / "data", NAME)
    features, failures = synthetic_fleet(seed=21)
    train_and_register(config, features, failures)  # the first version is champion
    model_uri = f"models:/{NAME}@champion"
    example = features.tail(6).select("unit_id", "ts", SBE, TEMP).with_columns(pl.col("ts").dt.replace_time_zone(None))
    example.write_parquet(tmp_path / "example.parquet")
    here = pl.from_pandas(mlflow.pyfunc.load_model(model_uri).predict(example.to_pandas()))

    model_dir = Path(mlflow.artifacts.download_artifacts(model_uri, dst_path=str(tmp_path / "model")))
    requirements = (model_dir / "requirements.txt").read_text().split()
    wheel = model_dir / requirements[0]
    assert wheel.is_file() and wheel.name.startswith("foreshock-") and wheel.suffix == ".whl"
    assert all("==" in line for line in requirements[1:]), requirements

    uv = shutil.which("uv") or str(ROOT / "scripts" / "uv.sh")
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["UV_PYTHON_DOWNLOADS"] = "never"

    def run(*args: str | Path, cwd: Path) -> str:
        done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    run(uv, "venv", "--python", sys.executable, venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    # MLflow installs a model's requirements from its directory (relative wheel path).
    run(uv, "pip", "install", "--python", python, "-r", "requirements.txt", cwd=model_dir)
    imported_from = run(
        python,
        "-c",
        LOAD_AND_PREDICT,
        mlflow_uri,
        model_uri,
        tmp_path / "example.parquet",
        tmp_path / "out.parquet",
        cwd=tmp_path,
    )
    # foreshock came from the logged wheel in the new environment, not from this checkout.
    assert Path(imported_from.strip()).is_relative_to(venv), imported_from
    there = pl.read_parquet(tmp_path / "out.parquet")
    key = ["model", "horizon", "unit_id", "ts"]
    assert there.height == 6 * 3 * 2
    assert_frame_equal(there.sort(key), here.sort(key))
