"""Loading a registered risk bundle without running code from the registry.

A registered MLflow pyfunc is code: ``mlflow.pyfunc.load_model`` imports the logged Python
file (models-from-code) or unpickles an object, so anyone who can write to the tracking
store could run code on the host that scores and writes drain scripts.  Scoring therefore
never loads the pyfunc.  It reads the bundle foreshock itself wrote next to it — JSON and
LightGBM model text (:meth:`~foreshock.models.estimators.bundle.RiskBundle.load`) — after checking
that the version is one foreshock logged:

* the version carries ``foreshock.logged_by = foreshock`` and the bundle format it was
  written in (``foreshock.bundle_format``), which this code must read;
* the logged model has the layout foreshock writes: an ``MLmodel`` whose
  ``python_function`` flavor declares the ``bundle`` artifact at ``artifacts/bundle``,
  holding ``bundle.json`` of that format;
* with ``[registry] trusted_runs_only``, the run that logged it carries
  ``foreshock.source`` equal to ``[registry] trusted_source`` (set by ``foreshock train``).

Anything else is refused with a message that says which check failed.  The pyfunc stays in
the registry for MLflow serving (``mlflow models serve``), where running it is the point.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import yaml

from foreshock.errors import UserError

LOGGED_BY_TAG = "foreshock.logged_by"
LOGGED_BY = "foreshock"
FORMAT_TAG = "foreshock.bundle_format"
SOURCE_TAG = "foreshock.source"
TRUSTED_SOURCE = "foreshock train"  # SOURCE_TAG of the runs `foreshock train` logs
BUNDLE_ARTIFACT = "bundle"
BUNDLE_PATH = "artifacts/bundle"


class UntrustedModelError(UserError):
    """A registered version foreshock did not log (or cannot read): refused, never run."""


def _bundle_format() -> int:
    from foreshock.models.estimators.bundle import BUNDLE_FORMAT  # LightGBM loads with it: only when needed

    return BUNDLE_FORMAT


def version_tags() -> dict[str, str]:
    """Tags ``foreshock train`` puts on every version it registers."""
    BUNDLE_FORMAT = _bundle_format()
    return {LOGGED_BY_TAG: LOGGED_BY, FORMAT_TAG: str(BUNDLE_FORMAT)}


def check_version(model_version, run_tags: dict[str, str], *, trusted_runs_only: bool, trusted_source: str) -> None:
    """Refuse a version foreshock did not register (see module notes)."""
    BUNDLE_FORMAT = _bundle_format()
    label = f"models:/{model_version.name}/{model_version.version}"
    tags = dict(model_version.tags or {})
    if tags.get(LOGGED_BY_TAG) != LOGGED_BY:
        raise UntrustedModelError(
            f"{label} was not registered by foreshock (no {LOGGED_BY_TAG}={LOGGED_BY} tag): refusing to load it; "
            "register a model with `foreshock train`"
        )
    if tags.get(FORMAT_TAG) != str(BUNDLE_FORMAT):
        raise UntrustedModelError(
            f"{label} declares bundle format {tags.get(FORMAT_TAG)!r}; this foreshock reads format {BUNDLE_FORMAT}"
        )
    if trusted_runs_only and run_tags.get(SOURCE_TAG) != trusted_source:
        raise UntrustedModelError(
            f"{label} comes from run {model_version.run_id} whose {SOURCE_TAG} tag is "
            f"{run_tags.get(SOURCE_TAG)!r}, not {trusted_source!r} ([registry] trusted_runs_only)"
        )


def check_layout(model_dir: Path, label: str) -> Path:
    """The bundle directory inside a downloaded logged model, after checking its layout."""
    BUNDLE_FORMAT = _bundle_format()
    mlmodel = model_dir / "MLmodel"
    if not mlmodel.is_file():
        raise UntrustedModelError(f"{label}: no MLmodel file: not the layout foreshock writes")
    try:
        spec = yaml.safe_load(mlmodel.read_text()) or {}
    except yaml.YAMLError:
        raise UntrustedModelError(f"{label}: MLmodel is not valid YAML") from None
    flavor = (spec.get("flavors") or {}).get("python_function") or {}
    declared = (flavor.get("artifacts") or {}).get(BUNDLE_ARTIFACT) or {}
    if declared.get("path") != BUNDLE_PATH:
        raise UntrustedModelError(f"{label}: no '{BUNDLE_ARTIFACT}' artifact at {BUNDLE_PATH}: not a foreshock bundle")
    bundle_dir = model_dir / BUNDLE_PATH
    meta = bundle_dir / "bundle.json"
    if not meta.is_file() or bundle_dir.is_symlink():
        raise UntrustedModelError(f"{label}: {BUNDLE_PATH}/bundle.json is missing: not a foreshock bundle")
    try:
        declared_format = json.loads(meta.read_text()).get("format")
    except (json.JSONDecodeError, AttributeError):
        raise UntrustedModelError(f"{label}: bundle.json is not a JSON object") from None
    if declared_format != BUNDLE_FORMAT:
        raise UntrustedModelError(f"{label}: bundle format {declared_format!r}, expected {BUNDLE_FORMAT}")
    return bundle_dir


def load_trusted_bundle(client, name: str, version: str, *, trusted_runs_only: bool, trusted_source: str):
    """The risk bundle of a registered version, read as data (JSON + LightGBM text).

    Raises
    ------
    UntrustedModelError
        When the version was not logged by foreshock, has another layout or format, or
        (``trusted_runs_only``) its run lacks the expected source tag.
    """
    import mlflow

    model_version = client.get_model_version(name, str(version))
    run_tags = client.get_run(model_version.run_id).data.tags if model_version.run_id else {}
    check_version(model_version, run_tags, trusted_runs_only=trusted_runs_only, trusted_source=trusted_source)
    label = f"models:/{name}/{model_version.version}"
    with tempfile.TemporaryDirectory(prefix="foreshock-champion-") as tmp:
        # Downloading files runs nothing; only MLmodel (YAML) and the bundle are read.
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_version.source, dst_path=tmp))
        return read_bundle(local, label)


def read_bundle(model_dir: Path, label: str):
    """The risk bundle in a logged model's directory, after checking its layout: only
    MLmodel (YAML), bundle.json and LightGBM model text are read."""
    from foreshock.models.estimators.bundle import RiskBundle

    bundle_dir = check_layout(model_dir, label)
    try:
        return RiskBundle.load(bundle_dir)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UntrustedModelError(f"{label}: the bundle does not read: {exc}") from None
