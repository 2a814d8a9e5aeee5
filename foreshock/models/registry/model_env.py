"""The Python environment a logged model needs: foreshock itself and pinned dependencies.

The registered bundle is a pyfunc whose code is foreshock (``mlflow_pyfunc.py`` imports
:class:`~foreshock.models.estimators.bundle.RiskBundle`), so a model is only loadable where the same
foreshock is installed.  When foreshock runs from its source tree (a checkout, editable
install) the wheel of that exact tree is built with ``uv build --wheel`` and logged with
the model; the model's ``requirements.txt`` names it by its path inside the model
directory (``artifacts/foreshock-<version>-py3-none-any.whl``, where MLflow installs
requirements from) followed by every dependency of foreshock pinned to the version
installed here.  A wheel is built once per state of the source tree and kept in
``$XDG_CACHE_HOME/foreshock/wheels/<fingerprint>/`` (``~/.cache`` by default).  When
foreshock was installed from a package index instead, the requirement is
``foreshock==<version>``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

PROJECT = "foreshock"
WHEEL_ARTIFACT = "foreshock_wheel"  # name of the wheel among the pyfunc's artifacts
# Imported by the logged models (the LightGBM boosters and the bundle) whatever foreshock
# declares; listing requirements skips MLflow's inference, which re-imports the model in a
# subprocess (seconds per model).
MODEL_PACKAGES = ("mlflow", "lightgbm", "lifelines", "polars", "pandas", "numpy", "scikit-learn", "pyarrow")


def _pinned(package: str) -> str:
    try:
        return f"{package}=={version(package)}"
    except PackageNotFoundError:
        return package


def _requirement_name(spec: str) -> str | None:
    """Distribution name of a ``Requires-Dist`` entry; ``None`` for an optional extra."""
    if ";" in spec and "extra" in spec.split(";", 1)[1]:
        return None
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    return match.group(1) if match else None


def pinned_requirements() -> list[str]:
    """``package==version`` of :data:`MODEL_PACKAGES` and of every (non-optional)
    dependency foreshock declares, as installed here, in that order."""
    names = list(MODEL_PACKAGES)
    try:
        declared = requires(PROJECT) or []
    except PackageNotFoundError:
        declared = []
    seen = {n.lower() for n in names}
    for spec in declared:
        name = _requirement_name(spec)
        if name and name.lower() not in seen:
            seen.add(name.lower())
            names.append(name)
    return [_pinned(name) for name in names]


def source_tree() -> Path | None:
    """The project directory foreshock is imported from, or ``None`` when it is installed
    from a built distribution (no ``pyproject.toml`` beside the package)."""
    root = Path(__file__).resolve().parents[3]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and (root / PROJECT / "__init__.py").is_file():
        if re.search(rf'^name\s*=\s*"{PROJECT}"', pyproject.read_text(), re.M):
            return root
    return None


def source_fingerprint(root: Path) -> str:
    """A hash of everything that goes into the wheel: ``pyproject.toml``, the README it
    embeds and every file of the package (byte caches excluded)."""
    digest = hashlib.sha256()
    files = [root / "pyproject.toml", root / "README.md"]
    files += [p for p in (root / PROJECT).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for path in sorted(p for p in files if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def wheel_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / PROJECT / "wheels"


def _uv(root: Path) -> list[str]:
    script = root / "scripts" / "uv.sh"
    if script.is_file():
        return [str(script)]
    if found := shutil.which("uv"):
        return [found]
    return [sys.executable, "-m", "uv"]


def build_wheel(root: Path) -> Path:
    """The wheel of the source tree at ``root``, built with ``uv build --wheel`` unless a
    wheel of the same source state is already cached.

    Raises
    ------
    RuntimeError
        When the build fails (its output is in the message).
    """
    target = wheel_cache() / source_fingerprint(root)
    if built := sorted(target.glob(f"{PROJECT}-*.whl")):
        return built[0]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        result = subprocess.run(
            [*_uv(root), "build", "--wheel", "--out-dir", tmp, str(root)],
            cwd=root,
            capture_output=True,
            text=True,
        )
        wheels = sorted(Path(tmp).glob(f"{PROJECT}-*.whl"))
        if result.returncode != 0 or not wheels:
            raise RuntimeError(f"could not build the foreshock wheel in {root}:\n{result.stdout}\n{result.stderr}")
        target.mkdir(parents=True, exist_ok=True)
        os.replace(wheels[0], target / wheels[0].name)  # atomic: a concurrent build lands the same bytes
    return target / wheels[0].name


def foreshock_wheel() -> Path | None:
    """The wheel to log with a model: built from the source tree, ``None`` when foreshock
    is installed from a package index (then it is required by version)."""
    root = source_tree()
    return build_wheel(root) if root is not None else None


def bundle_requirements(wheel: Path | None) -> list[str]:
    """``requirements.txt`` of the logged bundle: foreshock first (the logged wheel by its
    path inside the model directory, or ``foreshock==<version>``), then the pins."""
    own = f"artifacts/{wheel.name}" if wheel is not None else _pinned(PROJECT)
    return [own, *pinned_requirements()]
