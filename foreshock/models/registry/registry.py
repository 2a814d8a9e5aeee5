"""The model registry: register a version, move aliases, load a version.

A training run (:func:`foreshock.models.registry.tracking.log_training`) registers its bundle
under ``[models] name``; the new version gets the alias ``challenger`` and, when the
model has no champion yet, also ``champion`` (:func:`register_version`).  Scoring loads
``models:/<name>@champion`` (:func:`load_champion`); promotion by review, approval by
hand and rollback are all the same move of that alias (:func:`set_champion`), recorded
as tags on the version.  Which store the client talks to is decided by
:func:`foreshock.models.registry.tracking.tracking_uri`.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from foreshock.models.registry.trusted_bundle import TRUSTED_SOURCE, check_version, load_trusted_bundle, read_bundle

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

    from foreshock.models.estimators.bundle import RiskBundle
    from foreshock.models.registry.registry_reader import VersionRecord

CHAMPION = "champion"
CHALLENGER = "challenger"


# --------------------------------------------------------------------------------------
# Aliases: challenger, champion, approval, rollback
# --------------------------------------------------------------------------------------


def _client(client: MlflowClient | None = None) -> MlflowClient:
    import mlflow

    return client or mlflow.MlflowClient()


def alias_version(name: str, alias: str, *, client: MlflowClient | None = None) -> ModelVersion | None:
    """The version an alias points at, or ``None`` (no such model or alias)."""
    from mlflow.exceptions import MlflowException

    try:
        return _client(client).get_model_version_by_alias(name, alias)
    except MlflowException:
        return None


def find_alias(name: str, alias: str) -> ModelVersion | VersionRecord | None:
    """:func:`alias_version` for a command of a second's work: read straight from the store
    where it can be (:mod:`.registry_reader`, no MLflow import), else through the client."""
    from foreshock.models.registry import registry_reader

    try:
        return registry_reader.alias_record(registry_reader.tracking_uri(), name, alias)
    except registry_reader.NotReadable:
        return alias_version(name, alias)


def _run_tags(run_id: str | None) -> dict[str, str]:
    """A run's tags, read like :func:`find_alias` (empty without a run)."""
    from foreshock.models.registry import registry_reader

    if not run_id:
        return {}
    try:
        return registry_reader.run_tags(registry_reader.tracking_uri(), run_id)
    except registry_reader.NotReadable:
        return _client().get_run(run_id).data.tags


def versions(name: str, *, client: MlflowClient | None = None) -> list[ModelVersion]:
    """Every version of a registered model, oldest first."""
    found = _client(client).search_model_versions(f"name = '{name}'")
    return sorted(found, key=lambda v: int(v.version))


def aliases(name: str, *, client: MlflowClient | None = None) -> dict[str, str]:
    """``{alias: version}`` of a registered model (empty if it does not exist)."""
    from mlflow.exceptions import MlflowException

    try:
        return {alias: str(v) for alias, v in _client(client).get_registered_model(name).aliases.items()}
    except MlflowException:
        return {}


def promotion_tags(action: str, *, by: str, reason: str) -> dict[str, str]:
    """Version tags recording who moved ``champion`` to a version, how and why."""
    return {
        "foreshock.promotion": action,
        "foreshock.promoted_by": by,
        "foreshock.promotion_reason": reason,
        "foreshock.promoted_at": datetime.now(UTC).isoformat(),
    }


def set_champion(
    name: str,
    version: str | int,
    *,
    action: str,
    by: str | None = None,
    reason: str = "",
    client: MlflowClient | None = None,
) -> str | None:
    """Point ``champion`` at ``version``, recording who did it and why as version tags.

    Used for promotion by review, for promotion by hand (``action="approved"``) and for
    rollback (``action="rollback"``): in the registry they are all the same move of one
    alias.  Returns the version that was champion before (``None`` if there was none).

    Raises
    ------
    ValueError
        When the model or the version does not exist.
    """
    from mlflow.exceptions import MlflowException

    client = _client(client)
    version = str(version)
    try:
        client.get_model_version(name, version)
    except MlflowException:
        known = ", ".join(str(v.version) for v in versions(name, client=client)) or "none"
        raise ValueError(f"model {name!r} has no version {version} (versions: {known})") from None
    previous = alias_version(name, CHAMPION, client=client)
    client.set_registered_model_alias(name, CHAMPION, version)
    by = by or getpass.getuser()
    tag_version(name, version, promotion_tags(action, by=by, reason=reason), client=client)
    if previous is not None and str(previous.version) != version:
        client.set_model_version_tag(name, version, "foreshock.previous_champion", str(previous.version))
    return str(previous.version) if previous is not None else None


def register_version(name: str, model_uri: str, tags: Mapping[str, str], *, client: MlflowClient | None = None) -> str:
    """Register a logged model as a new version of ``name`` with the alias ``challenger``.

    The first version of a model (no ``champion`` yet) becomes ``champion`` too, tagged
    as a promotion with reason "no champion yet".  Returns the new version number (a
    string, as MLflow spells it).
    """
    import mlflow

    client = _client(client)
    first = alias_version(name, CHAMPION, client=client) is None
    tags = dict(tags)
    if first:
        tags.update(promotion_tags("first version", by="foreshock train", reason="no champion yet"))
    version = str(mlflow.register_model(model_uri, name, tags=tags).version)
    client.set_registered_model_alias(name, CHALLENGER, version)
    if first:
        client.set_registered_model_alias(name, CHAMPION, version)
    return version


def tag_version(name: str, version: str, tags: Mapping[str, str], *, client: MlflowClient | None = None) -> None:
    """Set tags on a registered version (e.g. the outcome of its review)."""
    client = _client(client)
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedBundle:
    """A bundle loaded from the registry and where it came from."""

    bundle: RiskBundle
    model_name: str
    version: str
    run_id: str

    def __iter__(self) -> Iterator[Any]:  # (bundle, version, run_id), as load_champion returns
        return iter((self.bundle, self.version, self.run_id))


def load_version(
    name: str, version: str | int, *, trusted_runs_only: bool = False, trusted_source: str = TRUSTED_SOURCE
) -> LoadedBundle:
    """Load a registered version's bundle as data, never running its pyfunc
    (:mod:`foreshock.models.registry.trusted_bundle`: a version foreshock did not log is refused)."""
    local = _load_in_place(name, version, trusted_runs_only=trusted_runs_only, trusted_source=trusted_source)
    if local is not None:
        return local
    client = _client()
    model_version = client.get_model_version(name, str(version))
    bundle = load_trusted_bundle(
        client, name, model_version.version, trusted_runs_only=trusted_runs_only, trusted_source=trusted_source
    )
    return LoadedBundle(bundle, name, str(model_version.version), model_version.run_id or "")


def _load_in_place(name: str, version: str | int, **trust) -> LoadedBundle | None:
    """:func:`load_version` without MLflow's client where the store and its files are on
    this machine (the embedded SQLite store): the same checks, the files read where they
    are. ``None`` where the client is needed (it also reports a missing version)."""
    from foreshock.models.registry import registry_reader

    try:
        uri = registry_reader.tracking_uri()
        record = registry_reader.version_record(uri, name, version)
        if record is None:
            return None
        model_dir = registry_reader.local_model_dir(uri, record)
        run_tags = registry_reader.run_tags(uri, record.run_id) if record.run_id else {}
    except registry_reader.NotReadable:
        return None
    check_version(record, run_tags, **trust)
    bundle = read_bundle(model_dir, f"models:/{name}/{record.version}")
    return LoadedBundle(bundle, name, record.version, record.run_id or "")


def load_alias(name: str, alias: str, **trust) -> LoadedBundle:
    """Load the version an alias points at.

    The alias is resolved once and that exact version is loaded, so a promotion that
    happens meanwhile cannot give a bundle of one version labelled with another.

    Raises
    ------
    LookupError
        When the model has no such alias (e.g. nothing trained yet).
    """
    model_version = find_alias(name, alias)
    if model_version is None:
        raise LookupError(f"registered model {name!r} has no version with alias {alias!r}: run `foreshock train` first")
    return load_version(name, model_version.version, **trust)


def check_champion(name: str, *, trusted_runs_only: bool = False, trusted_source: str = TRUSTED_SOURCE) -> str:
    """The champion's version after the cheap checks (alias, tags, run tag), without
    downloading it: a CLI calls this before a flow run so a user error stays one line.

    Raises
    ------
    MissingInputError
        No champion yet.
    UntrustedModelError
        The champion was not registered by foreshock (see :mod:`.trusted_bundle`).
    """
    from foreshock.errors import MissingInputError

    model_version = find_alias(name, CHAMPION)
    if model_version is None:
        raise MissingInputError(f"registered model {name!r} has no champion: run `foreshock train` first")
    run_tags = _run_tags(model_version.run_id)
    check_version(model_version, run_tags, trusted_runs_only=trusted_runs_only, trusted_source=trusted_source)
    return str(model_version.version)


def load_champion(name: str, **trust) -> LoadedBundle:
    """Load ``models:/<name>@champion``: unpack as ``bundle, version, run_id``.

    ``trust``: ``trusted_runs_only`` and ``trusted_source`` (``[registry]``), see
    :func:`load_version`."""
    return load_alias(name, CHAMPION, **trust)
