"""Notebooks are thin clients of the package and must run top to bottom, each saving its
plots under ``data/reports/notebooks/``.

A notebook whose metadata says ``foreshock.data = "own"`` builds its own data (1.0
simulates a fleet); the others read the session's demo data directory (one small demo
fleet through the whole pipeline, ``tests/demo_fleet.py``).
"""

import ast
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from foreshock.features.build import spec_feature_columns
from foreshock.features.dictionary import builtin_config
from foreshock.features.spec import feature_spec

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


def _run(path: Path, data_dir: Path, workdir: Path, monkeypatch) -> list[Path]:
    monkeypatch.setenv("FORESHOCK_DATA_DIR", str(data_dir))
    started = time.time()
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    number = path.name.split("-", 1)[0]
    saved = list((data_dir / "reports" / "notebooks").glob(f"{number}-*.png"))
    return [p for p in saved if p.stat().st_mtime >= started - 1 and p.stat().st_size > 5000]


def test_notebooks_are_saved_without_outputs():
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        assert code and not any(c.outputs or c.execution_count for c in code), path.name
        assert notebook.metadata.get("foreshock", {}).get("data") in ("own", "demo"), path.name


def test_notebooks_ask_only_for_features_that_exist():
    """A string in a notebook's code that ends like a windowed feature (``_1d``) names a
    column the built-in configuration writes: a misspelt feature is caught here, before
    the slow run (where ``scan_features(columns=...)`` would stop the notebook)."""
    spec = feature_spec(builtin_config())
    columns = set(spec_feature_columns(spec))
    suffixes = tuple(f"_{spec.name(w)}" for w in spec.windows)
    asked = {
        node.value
        for path in NOTEBOOKS
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "code"
        for node in ast.walk(ast.parse(cell.source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(suffixes)
    }
    assert asked, "no notebook asks for a windowed feature: the check checks nothing"
    assert not sorted(asked - columns), f"features no configuration of the notebooks writes: {sorted(asked - columns)}"


OWN = [p for p in NOTEBOOKS if nbformat.read(p, as_version=4).metadata.get("foreshock", {}).get("data") == "own"]
DEMO = [p for p in NOTEBOOKS if p not in OWN]


@pytest.mark.parametrize("path", OWN, ids=[p.name for p in OWN])
def test_notebook_on_its_own_data(path, tmp_path, monkeypatch):
    saved = _run(path, tmp_path / "data", tmp_path, monkeypatch)
    assert (tmp_path / "data" / "lake" / "samples").is_dir()
    assert saved, "the notebook saved no plot"


@pytest.mark.slow
@pytest.mark.parametrize("path", DEMO, ids=[p.name for p in DEMO])
def test_notebook_on_the_demo_data(path, demo_data_dir, tmp_path, monkeypatch):
    # run beside the demo's foreshock.toml (its registered model name), with the registry
    # in its data directory, as a user would after `make demo`
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    saved = _run(path, demo_data_dir, demo_data_dir.parent, monkeypatch)
    assert saved, "the notebook saved no plot"
