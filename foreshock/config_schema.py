"""The configuration schema: which keys exist and what type each holds.

A key is known when ``foreshock/foreshock.toml`` (the built-in defaults) sets it, or when
:data:`OPTIONAL_KEYS` declares it (keys without a default, where the code's own choice
applies).  Its type is its default's type (a string default that reads as a duration makes
the key a duration) unless :data:`REFINED` says more.  Deriving the schema from the
defaults file keeps one place for every key: a new key in foreshock.toml is validated
without a second declaration here.

Unknown sections and keys and wrong types are :class:`ConfigError` naming the key and
where it came from (the file, or the ``FORESHOCK_<SECTION>_<KEY>`` variable).
"""

from __future__ import annotations

import difflib
import os
import tomllib
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from foreshock.durations import parse_duration
from foreshock.errors import UserError

ENV_PREFIX = "FORESHOCK_"
# ``FORESHOCK_*`` variables that are not ``<SECTION>_<KEY>`` overrides.
OTHER_VARIABLES = frozenset({"FORESHOCK_DATA_DIR", "FORESHOCK_TEST_SEED"})


class ConfigError(UserError, ValueError):
    """A configuration problem, one line naming the file (or variable), section and key."""


def _duration(text: str) -> str:
    parse_duration(text)  # raises ValueError with an example of the expected spelling
    return text


Duration = Annotated[str, AfterValidator(_duration)]
Durations = Annotated[list[Duration], Field(min_length=1)]
Share = Annotated[float, Field(ge=0.0, le=1.0)]

Risk = Annotated[float, Field(gt=0.0, le=1.0)]


class ModelEntryTable(BaseModel):
    """``[policy.models.<name>]``: a model's own way into drain, any of the entry's thresholds
    and holds (:meth:`foreshock.hold.ModelEntry.with_own`); the rest of ``[policy]``, and which
    ways in there are, is every model's."""

    model_config = ConfigDict(extra="forbid", strict=True)
    enter_risk: Risk | None = None
    enter_for: Duration | None = None
    second_enter_risk: Risk | None = None
    decision_enter_risk: Risk | None = None
    decision_enter_for: Duration | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, values: Any) -> Any:
        """Name every unknown key, with the closest known one and the keys a model may set."""
        if isinstance(values, dict):
            known = list(cls.model_fields)
            unknown = [f"{key}{_suggest(key, known)}" for key in values if key not in known]
            if unknown:
                raise ValueError(f"unknown key {', '.join(unknown)}: a model's own entry sets only {', '.join(known)}")
        return values


# Keys foreshock.toml does not set: no default there, the consuming code decides.
OPTIONAL_KEYS: dict[tuple[str, str], Any] = {
    ("review", "window"): Duration,
    ("backtest", "daily_budget_share"): Annotated[float, Field(gt=0.0, le=1.0)],
    ("policy", "drain_budget_per_day"): Annotated[float, Field(gt=0)],
    ("policy", "daily_budget_share"): Annotated[float, Field(gt=0.0, le=1.0)],
    ("models", "primary"): str,
    ("policy", "models"): dict[str, ModelEntryTable],  # [policy.models.<name>]: a model's own entry
    ("models", "gbm"): dict[str, Any],
    ("models", "cox"): dict[str, Any],
}

# Keys that need more than their default's type.
REFINED: dict[tuple[str, str], Any] = {
    ("backtest", "folds"): Annotated[int, Field(ge=1)],
    ("backtest", "test_fraction"): Annotated[float, Field(gt=0.0, lt=1.0)],
    ("features", "windows"): Durations,
    ("labels", "horizons"): Durations,
    ("ingest", "violation_unit"): Literal["us", "ns"],
    ("lake", "shards"): Annotated[int, Field(ge=1)],
    ("lake", "compression_level"): Annotated[int, Field(ge=1, le=22)],
    ("backtest", "drain_budget_per_day"): Annotated[float, Field(gt=0)],
    ("backtest", "target_precision"): Share,
    ("backtest", "entry_floor"): Share,
    ("baseline", "sbe_increase_per_day"): float,
    ("health", "peer_share"): Share,
    ("health", "watch_accel"): Annotated[float, Field(ge=1.0)],
    ("health", "watch_min_increase"): Annotated[float, Field(ge=0.0)],
    # Empty lists by default: their items' type cannot be read from the default.
    ("notify", "urls"): list[str],
    ("reliability", "strata"): list[str],
    ("reliability", "numeric"): list[str],
    ("reliability", "ages"): list[Duration],
    ("policy", "chooser"): Literal["fixed", "learned"],
    ("policy", "learned_bands"): Annotated[list[Share], Field(min_length=1)],
    ("policy", "learned_min_drains"): Annotated[int, Field(ge=1)],
    ("policy", "explore_rate"): Share,
    ("policy", "explore_per_day"): Annotated[int, Field(ge=0)],
    ("policy", "max_weight"): Annotated[float, Field(ge=1.0)],
    ("policy", "bootstrap"): Annotated[int, Field(ge=10)],
    ("policy", "confidence"): Annotated[float, Field(gt=0.0, lt=1.0)],
    ("lemon", "count"): Annotated[int, Field(ge=1)],
    ("lemon", "node_count"): Annotated[int, Field(ge=1)],
}


def _is_duration(value: object) -> bool:
    try:
        parse_duration(value)  # type: ignore[arg-type]
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def _type_of(default: object) -> Any:
    """The type a key holds, read from its default value."""
    if isinstance(default, bool):
        return bool
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return float
    if isinstance(default, str):
        return Duration if default and _is_duration(default) else str
    if isinstance(default, list):
        return list[_type_of(default[0])] if default else list[Any]
    if isinstance(default, dict):
        return dict[str, Any]
    return Any


@cache
def section_models(defaults_text: str) -> dict[str, type]:
    """One strict pydantic model per section (extra keys forbidden)."""
    defaults = tomllib.loads(defaults_text)
    fields: dict[str, dict[str, tuple[Any, Any]]] = {}
    for section, values in defaults.items():
        for key, value in values.items():
            fields.setdefault(section, {})[key] = (REFINED.get((section, key), _type_of(value)), ...)
    for (section, key), kind in OPTIONAL_KEYS.items():
        fields.setdefault(section, {})[key] = (kind | None, None)
    strict = ConfigDict(extra="forbid", strict=True)
    return {name: create_model(f"{name}_section", __config__=strict, **spec) for name, spec in fields.items()}


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def check_shape(user: dict[str, Any], models: dict[str, type], where: str) -> None:
    """Unknown sections and keys in one file's settings, named with the file."""
    problems = []
    for section, values in user.items():
        if section not in models:
            problems.append(f"unknown section [{section}]{_suggest(section, sorted(models))}")
        elif not isinstance(values, dict):
            problems.append(f"{section} must be a [{section}] section, not a value")
        else:
            known = sorted(models[section].model_fields)
            problems += [f"[{section}] {key}: unknown key{_suggest(key, known)}" for key in values if key not in known]
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))


def _env_value(text: str) -> Any:
    """A variable's value read as a TOML value (``0.6``, ``["24h"]``, ``true``), else as text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def environment_overrides(models: dict[str, type], environ: os._Environ | dict | None = None) -> dict[str, dict]:
    """``FORESHOCK_<SECTION>_<KEY>=VALUE`` for every known section, as settings.

    Every ``FORESHOCK_*`` variable but :data:`OTHER_VARIABLES` is an override: one naming
    no known section or key (``FORESHOCK_POLCY_ENTER_RISK``) is an error naming the
    variable and the closest known one, never silently ignored.
    """
    environ = os.environ if environ is None else environ
    overrides: dict[str, dict] = {}
    known = sorted(env_name(section, key) for section, model in models.items() for key in model.model_fields)
    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX) or name in OTHER_VARIABLES:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section = next((s for s in sorted(models, key=len, reverse=True) if rest.startswith(f"{s}_")), None)
        if section is None:
            raise ConfigError(
                f"{name}: no configuration section {rest.split('_', 1)[0]!r}{_suggest(name.upper(), known)} "
                f"(FORESHOCK_<SECTION>_<KEY>; sections: {', '.join(sorted(models))})"
            )
        key = rest[len(section) + 1 :]
        if key not in models[section].model_fields:
            raise ConfigError(
                f"{name}: [{section}] {key}: unknown key{_suggest(key, sorted(models[section].model_fields))}"
            )
        overrides.setdefault(section, {})[key] = _env_value(text)
    return overrides


def env_name(section: str, key: str) -> str:
    return f"{ENV_PREFIX}{section.upper()}_{key.upper()}"


def check_types(settings: dict[str, Any], models: dict[str, type], origin) -> None:
    """Validate every section's values; ``origin(section, key)`` names where a value came from."""
    problems: dict[str, list[str]] = {}
    for section, model in models.items():
        try:
            model.model_validate(settings.get(section, {}))
        except ValidationError as exc:
            for error in exc.errors():
                key = str(error["loc"][0]) if error["loc"] else ""
                name = f"[{section}] {key}" + "".join(f"[{part}]" for part in error["loc"][1:])
                if len(error["loc"]) > 1 and isinstance(settings.get(section, {}).get(key), dict):
                    # a table of tables, named as TOML writes it: [policy.models.cox] enter_risk
                    name = " ".join([f"[{section}.{key}.{error['loc'][1]}]", *map(str, error["loc"][2:])])
                message = error["msg"].removeprefix("Value error, ")
                if error["type"] == "missing":
                    message = "missing (foreshock.toml sets every key)"
                problems.setdefault(origin(section, key), []).append(f"{name}: {message}")
    if problems:
        raise ConfigError("; ".join(f"{where}: " + "; ".join(lines) for where, lines in problems.items()))
