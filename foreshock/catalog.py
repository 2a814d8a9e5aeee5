"""The metric catalog: what each telemetry metric is.

A catalog is YAML::

    metrics:
      ecc_sbe_volatile_total: {kind: counter, family: error, unit: count,
                               aliases: [DCGM_FI_DEV_ECC_SBE_VOL_TOTAL]}
      gpu_temp_c: {kind: gauge, family: thermal, unit: celsius, min: -20, max: 130}

``kind`` is ``counter`` (cumulative, may reset on driver reload or reboot: take increases)
or ``gauge`` (instantaneous).  ``family`` is one of error, thermal, power, other.
``aliases`` are the names the metric has in source formats (dcgm-exporter field names,
``nvidia-smi --query-gpu`` fields); ingest maps them to the canonical name.  ``min`` and
``max`` bound plausible values: outside them a row is quarantined as absurd.  A counter's
``max_rate`` (units per second) bounds how fast it can grow: a step from the previous
reading of the same unit that is faster is quarantined as implausible (a counter that
jumps from 10 to 5e11 in 20 minutes is a corrupt reading, not an error storm).

A user's catalog that lists a metric the built-in catalog knows overrides only the keys it
sets (the log says which it kept), and whatever a catalog says, bounds stay within what
the unit allows (:data:`PHYSICAL_BOUNDS`: celsius from -273.15, counts, watts and hours
from 0, percent within 0-100): a catalog may narrow them, never widen them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import yaml

log = logging.getLogger("foreshock.catalog")

KINDS = ("counter", "gauge")
FAMILIES = ("error", "thermal", "power", "other")


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str
    family: str
    unit: str
    aliases: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    max_rate: float | None = None
    description: str = ""

    @property
    def is_counter(self) -> bool:
        return self.kind == "counter"


@dataclass(frozen=True)
class Catalog:
    metrics: dict[str, Metric] = field(default_factory=dict)
    source: str = "<builtin>"

    def __contains__(self, name: str) -> bool:
        return name in self.metrics

    def __getitem__(self, name: str) -> Metric:
        return self.metrics[name]

    def __iter__(self):
        return iter(self.metrics.values())

    def names(self) -> list[str]:
        return sorted(self.metrics)

    def resolve(self, name: str) -> str | None:
        """Canonical metric name for a canonical name or any alias (case-sensitive), else None."""
        if name in self.metrics:
            return name
        return self._alias_index().get(name)

    def _alias_index(self) -> dict[str, str]:
        index = getattr(self, "_aliases", None)
        if index is None:
            index = {a: m.name for m in self.metrics.values() for a in m.aliases}
            object.__setattr__(self, "_aliases", index)
        return index

    def by(self, *, kind: str | None = None, family: str | None = None) -> list[Metric]:
        return [
            m
            for m in self.metrics.values()
            if (kind is None or m.kind == kind) and (family is None or m.family == family)
        ]


# Bounds no reading can cross whatever a catalog says, by unit: a catalog may narrow them
# (gpu_temp_c: min -20), never widen them (celsius below absolute zero, a negative count).
PHYSICAL_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    **dict.fromkeys(("celsius", "degc"), (-273.15, None)),
    **dict.fromkeys(("count", "counts", "pages", "rows", "sectors", "errors"), (0.0, None)),
    **dict.fromkeys(("watt", "watts", "w"), (0.0, None)),
    **dict.fromkeys(("hour", "hours", "h"), (0.0, None)),
    **dict.fromkeys(("percent", "%"), (0.0, 100.0)),
}
SPEC_KEYS = ("kind", "family", "unit", "aliases", "min", "max", "max_rate", "description")


def _number(spec: dict, key: str) -> float | None:
    return None if spec.get(key) is None else float(spec[key])


def physical_bounds(unit: str, low: float | None, high: float | None, where: str) -> tuple[float | None, float | None]:
    """``(min, max)`` within the unit's :data:`PHYSICAL_BOUNDS` (logged when the catalog
    asked for wider)."""
    floor, ceiling = PHYSICAL_BOUNDS.get(unit.strip().lower(), (None, None))
    if floor is not None and (low is None or low < floor):
        if low is not None:
            _note(f"{where}: min {low:g} is below what {unit} can be: {floor:g} applies")
        low = floor
    if ceiling is not None and (high is None or high > ceiling):
        if high is not None:
            _note(f"{where}: max {high:g} is above what {unit} can be: {ceiling:g} applies")
        high = ceiling
    return low, high


@cache
def _note(message: str) -> None:
    """Log a catalog note once per process (an ingest reads its catalog once per batch)."""
    log.info("metric catalog %s", message)


def parse_catalog(data: dict, source: str = "<dict>", known: Catalog | None = None) -> Catalog:
    """A catalog from its YAML form.  An entry for a metric ``known`` has (the built-in
    catalog, for a user's file) overrides only the keys it sets and keeps the others
    (``min``, ``max``, ``max_rate``, ``aliases``, ...): the log names which.  Bounds are
    then held within the unit's physical bounds (:func:`physical_bounds`)."""
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise ValueError(f"{source}: a metric catalog needs a top-level 'metrics:' mapping")
    metrics: dict[str, Metric] = {}
    for name, spec in data["metrics"].items():
        where = f"{source}: metric {name!r}"
        if not isinstance(spec, dict):
            raise ValueError(f"{where}: expected a mapping with kind, family, unit")
        base = known.metrics.get(str(name)) if known is not None else None
        if base is not None:
            kept = [key for key in SPEC_KEYS if key not in spec and _given(base, key)]
            spec = {**_spec_of(base), **spec}
            if kept:
                _note(f"{where} keeps {', '.join(kept)} of {known.source}")
        kind = spec.get("kind")
        family = spec.get("family", "other")
        if kind not in KINDS:
            raise ValueError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
        if family not in FAMILIES:
            raise ValueError(f"{where}: family must be one of {FAMILIES}, got {family!r}")
        aliases = spec.get("aliases", []) or []
        if isinstance(aliases, str):
            aliases = [aliases]
        unit = str(spec.get("unit", ""))
        low, high = physical_bounds(unit, _number(spec, "min"), _number(spec, "max"), where)
        metrics[str(name)] = Metric(
            name=str(name),
            kind=kind,
            family=family,
            unit=unit,
            aliases=tuple(str(a) for a in aliases),
            min=low,
            max=high,
            max_rate=_number(spec, "max_rate"),
            description=str(spec.get("description", "")),
        )
    return Catalog(metrics=metrics, source=source)


def _spec_of(metric: Metric) -> dict:
    return catalog_to_dict(Catalog({metric.name: metric}))["metrics"][metric.name]


def _given(metric: Metric, key: str) -> bool:
    return key in _spec_of(metric)


def _read_yaml(text: str):
    """``yaml.safe_load`` with libyaml's loader when PyYAML has it (ten times less CPU:
    an ingest reads the catalog once per batch)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load a catalog from ``path``, or the built-in DCGM catalog when ``path`` is None."""
    if path is None or str(path) == "":
        return _builtin_catalog()
    path = Path(path)
    try:
        data = _read_yaml(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"metric catalog not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    return parse_catalog(data, source=str(path), known=_builtin_catalog())


@cache
def _builtin_catalog() -> Catalog:
    text = resources.files("foreshock").joinpath("dcgm_catalog.yaml").read_text()
    return parse_catalog(_read_yaml(text), source="dcgm_catalog.yaml (built-in)")


def catalog_to_dict(catalog: Catalog) -> dict:
    """The YAML form :func:`parse_catalog` reads back."""
    metrics = {}
    for metric in catalog:
        spec = {"kind": metric.kind, "family": metric.family, "unit": metric.unit}
        if metric.aliases:
            spec["aliases"] = list(metric.aliases)
        for name in ("min", "max", "max_rate"):
            if getattr(metric, name) is not None:
                spec[name] = getattr(metric, name)
        if metric.description:
            spec["description"] = metric.description
        metrics[metric.name] = spec
    return {"metrics": metrics}


def merge_catalogs(base: Catalog, over: Catalog, source: str | None = None) -> Catalog:
    """``base`` with ``over``'s metrics added (``over`` wins where both define a name)."""
    return Catalog(metrics={**base.metrics, **over.metrics}, source=source or f"{base.source} + {over.source}")


# The catalog a lake was ingested with, merged across runs (see foreshock.lake).
LAKE_CATALOG = "_catalog.yaml"


def lake_catalog_path(lake_dir: str | Path) -> Path:
    return Path(lake_dir) / LAKE_CATALOG


def read_lake_catalog(lake_dir: str | Path) -> Catalog | None:
    """The catalog recorded in a lake by its ingests (None when none was recorded)."""
    path = lake_catalog_path(lake_dir)
    return load_catalog(path) if path.is_file() else None


def is_file_catalog(catalog: Catalog) -> bool:
    """True when the catalog was loaded from one file (its source can be loaded again)."""
    return Path(catalog.source).is_file()
