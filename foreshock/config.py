"""One place for configuration: paths, metric catalog, windows, horizons, budgets.

Loaded once (:func:`load_config`) and passed down.  The built-in defaults live in
``foreshock/foreshock.toml``; a user file overrides them key by key, and
``FORESHOCK_<SECTION>_<KEY>`` environment variables override the file.  Every key is
checked against the schema in :mod:`foreshock.config_schema`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import timedelta
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from foreshock.catalog import Catalog, is_file_catalog, load_catalog, merge_catalogs, read_lake_catalog
from foreshock.config_schema import (
    ConfigError,
    check_shape,
    check_types,
    env_name,
    environment_overrides,
    section_models,
)
from foreshock.durations import parse_duration
from foreshock.redaction import hold_secrets, release_secrets

DEFAULT_CONFIG_NAME = "foreshock.toml"


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def default_settings() -> dict[str, Any]:
    text = resources.files("foreshock").joinpath(DEFAULT_CONFIG_NAME).read_text()
    return tomllib.loads(text)


@cache
def _builtin() -> dict[str, Any]:
    return default_settings()


def builtin_default(section: str, key: str) -> Any:
    """One key of the built-in ``foreshock.toml``: the default a dataclass built in code
    (a test, a notebook) takes, so no default is written twice."""
    return _builtin()[section][key]


def builtin_field(section: str, key: str, kind: Callable[[Any], Any] = str) -> Any:
    """A dataclass field whose default is ``[section] key`` of the built-in file, converted
    by ``kind`` (``timedelta``: parsed as a duration).  The field remembers its section, key
    and conversion, so :func:`section_values` reads a user's section the same way."""
    convert = parse_duration if kind is timedelta else kind
    return field(
        default_factory=lambda: convert(builtin_default(section, key)),
        metadata={"section": section, "key": key, "convert": convert},
    )


def section_values(cls: type, section: str, values: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``cls`` for its :func:`builtin_field` fields of ``[section]``,
    read from ``values`` (a whole section: the built-in file supplies every key a user left
    out) with each field's own conversion."""
    return {
        f.name: f.metadata["convert"](values[f.metadata["key"]])
        for f in fields(cls)
        if f.metadata.get("section") == section
    }


def mlflow_tracking_uri(store: Path) -> str:
    """The MLflow tracking URI: ``MLFLOW_TRACKING_URI`` when set (a tracking server, a
    PostgreSQL store), else the embedded SQLite store ``<store>/mlflow.db`` (``store`` is
    ``Config.mlflow_dir``; created here)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    store = Path(store).resolve()
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store / 'mlflow.db'}"


@dataclass
class Config:
    """Resolved configuration.  ``settings`` holds every section as plain dicts."""

    settings: dict[str, Any]
    data_dir: Path
    catalog: Catalog
    source: str = "<defaults>"
    _cache: dict = field(default_factory=dict, repr=False)

    def section(self, name: str) -> dict[str, Any]:
        return dict(self.settings.get(name, {}))

    def duration(self, section: str, key: str) -> timedelta:
        return parse_duration(self.settings[section][key])

    # Frequently used values, typed.
    @property
    def snapshot_every(self) -> timedelta:
        return self.duration("features", "snapshot_every")

    @property
    def windows(self) -> list[timedelta]:
        return [parse_duration(w) for w in self.settings["features"]["windows"]]

    @property
    def horizons(self) -> list[timedelta]:
        return [parse_duration(h) for h in self.settings["labels"]["horizons"]]

    @property
    def fault_domains(self) -> list[str]:
        return list(self.settings["fleet"]["fault_domains"])

    @property
    def shards(self) -> int:
        return int(self.settings["lake"]["shards"])

    @property
    def local_workers(self) -> int:
        """``[runner] local_workers``: threads (or local Dask processes) for partitioned work."""
        return max(1, int(self.settings["runner"]["local_workers"]))

    @property
    def model_name(self) -> str:
        return str(self.settings["models"]["name"])

    # Directories of the local lake.
    @property
    def raw_dir(self) -> Path:
        return self.data_dir / "raw"

    @property
    def lake_dir(self) -> Path:
        return self.data_dir / "lake"

    @property
    def quarantine_dir(self) -> Path:
        return self.data_dir / "quarantine"

    @property
    def features_dir(self) -> Path:
        return self.data_dir / "features"

    @property
    def backtest_dir(self) -> Path:
        return self.data_dir / "backtest"

    @property
    def outbox_dir(self) -> Path:
        return self.data_dir / "outbox"

    @property
    def reports_dir(self) -> Path:
        return self.data_dir / "reports"

    @property
    def mlflow_dir(self) -> Path:
        return self.data_dir / "mlflow"

    @property
    def models_dir(self) -> Path:
        """Bundles and backtests of training runs (``train-<timestamp>/``)."""
        return self.data_dir / "models"

    @property
    def scores_dir(self) -> Path:
        """Live scores, one file per scoring run and the newest (``models.registry.score_files``)."""
        return self.data_dir / "scores"

    @property
    def ingest_runs_dir(self) -> Path:
        """One JSON report per ingest run."""
        return self.data_dir / "ingest_runs"

    @property
    def pull_dir(self) -> Path:
        """``foreshock pull``: fetched responses (``<run>/``) and the per-series resume state."""
        return self.data_dir / "pull"

    @property
    def staging_dir(self) -> Path:
        """Rows handed between the tasks of a run (``ingest/``: a batch's shard groups while
        the lake lock is held; emptied by the run, the folder stays)."""
        return self.data_dir / "staging"

    @property
    def simulated_dir(self) -> Path:
        """Where ``simulate`` and ``demo`` write a simulated fleet's raw files."""
        return self.raw_dir / "sim"

    def generated_dirs(self) -> list[Path]:
        """Every folder foreshock writes under the data directory (``make clean`` removes them)."""
        return [
            self.raw_dir,
            self.lake_dir,
            self.quarantine_dir,
            self.features_dir,
            self.backtest_dir,
            self.models_dir,
            self.scores_dir,
            self.outbox_dir,
            self.reports_dir,
            self.mlflow_dir,
            self.ingest_runs_dir,
            self.pull_dir,
            self.staging_dir,
        ]

    def to_settings(self, config_file: str | None = None) -> dict[str, Any]:
        """Plain, JSON-ready settings a Prefect task rebuilds this configuration from
        (:meth:`from_settings`): tasks take values, not objects.  Every section travels,
        so overrides made in code (tests, notebooks) reach the tasks too."""
        overrides = {name: value for name, value in self.settings.items() if name != "paths"}
        if is_file_catalog(self.catalog):  # else the default, which from_settings finds again
            overrides["paths"] = {"catalog": self.catalog.source}
        # Prefect stores a flow run's parameters: secrets travel as references (redaction.py)
        overrides = hold_secrets(overrides)
        return {"config_file": config_file, "data_dir": str(self.data_dir), "overrides": overrides}

    @staticmethod
    def from_settings(settings: dict[str, Any]) -> Config:
        config = load_config(settings.get("config_file"), data_dir=settings["data_dir"])
        overrides = release_secrets(settings.get("overrides") or {})
        return config.with_overrides(overrides) if overrides else config

    def with_overrides(self, overrides: dict[str, Any]) -> Config:
        """A copy with some settings replaced (``{"features": {"snapshot_every": "1d"}}``)."""
        settings = _merge(self.settings, overrides)
        catalog = self.catalog
        if "paths" in overrides and "catalog" in overrides["paths"]:
            catalog = load_catalog(settings["paths"]["catalog"] or None)
        data_dir = self.data_dir
        if "paths" in overrides and "data_dir" in overrides["paths"]:
            data_dir = Path(settings["paths"]["data_dir"]).resolve()
            if not is_file_catalog(catalog) and "catalog" not in overrides["paths"]:
                catalog = default_catalog(data_dir / "lake")
        return Config(settings=settings, data_dir=data_dir, catalog=catalog, source=self.source)


def load_config(
    path: str | Path | None = None,
    *,
    data_dir: str | Path | None = None,
    catalog: str | Path | None = None,
) -> Config:
    """Load and validate configuration.

    Precedence: explicit arguments > ``FORESHOCK_DATA_DIR`` > ``FORESHOCK_<SECTION>_<KEY>``
    variables > the file (``path``, else ``./foreshock.toml`` if present) > built-in
    defaults.  Relative paths in the file are resolved against the file's directory.
    Unknown sections or keys and wrong types raise :class:`ConfigError` naming the key and
    the file or variable (:mod:`foreshock.config_schema`).
    """
    defaults_text = resources.files("foreshock").joinpath(DEFAULT_CONFIG_NAME).read_text()
    models = section_models(defaults_text)
    settings = tomllib.loads(defaults_text)
    source = "<defaults>"
    base = Path.cwd()
    if path is None and Path(DEFAULT_CONFIG_NAME).is_file():
        path = DEFAULT_CONFIG_NAME
    user: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        try:
            user = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"config file not found: {path}") from None
        except IsADirectoryError:
            raise ConfigError(f"--config {path}: is a directory, not a configuration file (foreshock.toml)") from None
        except (PermissionError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--config {path}: cannot be read: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        source = str(path)
        check_shape(user, models, source)
        settings = _merge(settings, user)
        base = path.resolve().parent
    env = environment_overrides(models)
    settings = _merge(settings, env)

    def origin(section: str, key: str) -> str:
        if key in env.get(section, {}):
            return env_name(section, key)
        return source if key in user.get(section, {}) else f"{DEFAULT_CONFIG_NAME} (built-in)"

    check_types(settings, models, origin)
    chosen_dir = data_dir or os.environ.get("FORESHOCK_DATA_DIR") or settings["paths"]["data_dir"]
    chosen_dir = Path(chosen_dir)
    if not chosen_dir.is_absolute():
        from_cwd = data_dir or os.environ.get("FORESHOCK_DATA_DIR") or "data_dir" in env.get("paths", {})
        chosen_dir = (Path.cwd() if from_cwd else base) / chosen_dir
    catalog_path = catalog or settings["paths"].get("catalog") or None
    if catalog_path and not Path(catalog_path).is_absolute() and not catalog:
        catalog_path = base / catalog_path
    settings["paths"]["data_dir"] = str(chosen_dir)
    return Config(
        settings=settings,
        data_dir=chosen_dir.resolve(),
        catalog=load_catalog(catalog_path) if catalog_path else default_catalog(chosen_dir.resolve() / "lake"),
        source=source,
    )


def default_catalog(lake_dir: Path) -> Catalog:
    """The built-in catalog with the catalog the lake was ingested with over it: a lake
    ingested with ``--catalog FILE`` keeps its metrics for every later stage."""
    builtin = load_catalog(None)
    recorded = read_lake_catalog(lake_dir)
    if recorded is None:
        return builtin
    return merge_catalogs(builtin, recorded, source=f"{recorded.source} (the lake's, over the built-in catalog)")


if __name__ == "__main__":  # `python -m foreshock.config generated-dirs [DATA_DIR]`: used by `make clean`
    import sys

    if sys.argv[1:2] != ["generated-dirs"]:
        sys.exit("usage: python -m foreshock.config generated-dirs [DATA_DIR]")
    config = load_config(data_dir=sys.argv[2] if len(sys.argv) > 2 else None)
    print("\n".join(str(path) for path in config.generated_dirs()))
