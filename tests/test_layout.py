"""The package reads like the pipeline: one import root, stages in data order.

core (``foreshock/*.py``, ``foreshock/simulate``) -> ingest -> features -> health -> models -> drain
-> reporting -> pipelines. A stage imports only itself and the stages before it, and no two modules
import each other, directly or through others.
"""

import ast
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "foreshock"
STAGES = ["core", "ingest", "features", "health", "models", "drain", "reporting", "pipelines"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in STAGES else "core"


def import_graph() -> dict[str, set[str]]:
    """Every foreshock module and the foreshock modules it imports (anywhere in its body)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            targets |= {n for n in names if n in modules and n != name}
        graph[name] = targets
    return graph


def test_no_upward_import_between_stages():
    upward = [
        f"{src} ({_stage(src)}) imports {dst} ({_stage(dst)})"
        for src, targets in import_graph().items()
        for dst in targets
        if STAGES.index(_stage(dst)) > STAGES.index(_stage(src))
    ]
    assert not upward, "\n".join(sorted(upward))


def test_no_import_cycle():
    graph = import_graph()
    # Packages' __init__ re-exporting their own modules is not a cycle between files.
    edges = {
        src: {d for d in dsts if not src.startswith(d + ".") and not d.startswith(src + ".")}
        for src, dsts in graph.items()
    }
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_graph_walker_sees_upward_imports(tmp_path):
    """The walker itself: a models module importing drain would be reported."""
    graph = import_graph()
    assert "foreshock.models.evaluation.metrics" in graph
    assert any(_stage(d) == "core" for d in graph["foreshock.models.evaluation.metrics"])
    assert _stage("foreshock.drain.policy") == "drain" and _stage("foreshock.config") == "core"


CARD_FOLDERS = ("pipelines", "features", "models")


def test_card_folders_hold_content_never_code():
    """The design card's pipelines/, features/ and models/ at the top hold what it promises
    (deployments, the feature dictionary, model recipes) as files a reader opens: no Python,
    so nothing imports them and `import models` is never ours (the code is `foreshock`)."""
    for name in CARD_FOLDERS:
        folder = ROOT / name
        files = [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        assert (folder / "README.md").is_file(), f"{name}/ says what it holds in a README"
        code = [str(p.relative_to(ROOT)) for p in files if p.suffix in (".py", ".pyc", ".pyx", ".so", ".pyd")]
        assert not code, f"code in a content folder: {code}"


@pytest.mark.slow
def test_wheel_has_one_top_level_package(tmp_path):
    uv = ROOT / "scripts" / "uv.sh"
    subprocess.run([str(uv), "build", "--wheel", "--out-dir", str(tmp_path)], cwd=ROOT, check=True, capture_output=True)
    (wheel,) = tmp_path.glob("foreshock-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        tops = {n.split("/")[0] for n in zf.namelist() if not n.split("/")[0].endswith(".dist-info")}
        names = zf.namelist()
    assert tops == {"foreshock"}, tops
    # Package data the stages need at run time travels with the wheel.
    assert "foreshock/foreshock.toml" in names and "foreshock/dcgm_catalog.yaml" in names
    # the model recipes of models/ (read by backtest and train) ship inside the package
    recipes = {Path(n).name for n in names if n.startswith("foreshock/recipes/")}
    assert {p.name for p in (ROOT / "models").glob("*.toml")} <= recipes
