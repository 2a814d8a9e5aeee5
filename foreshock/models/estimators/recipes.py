"""Model recipes: each model's parameters in one TOML file, read by backtest and train.

The built-in recipes are the files of ``models/`` at the top of the source tree
(``lightgbm.toml``, ``cox.toml``, ``rules.toml``), shipped inside the wheel as
``foreshock/recipes/``.  A site points ``[models] recipes`` at a directory of its own: a
file there overrides the built-in one key by key (a table one level down), a file it does
not have is the built-in one, and a key the built-in recipe does not know is an error
naming the file and the closest key.  ``[models] gbm = {...}`` and ``cox = {...}`` override
arguments on top the same way (a table key by key; an unknown key is an error).

The dataclass defaults of the estimators are the built-in recipe's values
(:func:`recipe_default`), so a model built in code (a test, a notebook) and one built
from configuration start from the same numbers, written once.
"""

from __future__ import annotations

import copy
import difflib
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import Field, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from foreshock.config import Config

# model name in the bundle -> its recipe file
RECIPE_FILES: dict[str, str] = {"gbm": "lightgbm.toml", "cox": "cox.toml", "baseline": "rules.toml"}
PACKAGED_DIR = "recipes"  # where the wheel carries models/ (pyproject.toml, force-include)


def builtin_recipes_dir() -> Path:
    """The built-in recipes: the wheel's ``foreshock/recipes``, else the source tree's ``models/``."""
    packaged = resources.files("foreshock").joinpath(PACKAGED_DIR)
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "models"


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None


@cache
def _builtin(model: str) -> dict[str, Any]:
    if model not in RECIPE_FILES:
        raise ValueError(f"no recipe for model {model!r}; known: {', '.join(RECIPE_FILES)}")
    return _read(builtin_recipes_dir() / RECIPE_FILES[model])


def builtin_recipe(model: str) -> dict[str, Any]:
    """The built-in recipe of ``model`` (``gbm``, ``cox`` or ``baseline``), a fresh copy."""
    return copy.deepcopy(_builtin(model))


def recipe_default(model: str, key: str) -> Field:
    """A dataclass field whose default is one key of the built-in recipe."""
    return field(default_factory=lambda: copy.deepcopy(_builtin(model)[key]))


def merged(
    base: dict[str, Any], over: Mapping[str, Any], source: str | Path, also: Collection[str] = ()
) -> dict[str, Any]:
    """``over`` on top of ``base``, a table one level down key by key (``lightgbm = {num_leaves
    = 63}`` keeps the recipe's other LightGBM parameters).

    Raises
    ------
    ValueError
        For a key neither ``base`` nor ``also`` (further arguments of the model) knows, naming
        ``source`` and the closest key.
    """
    out = copy.deepcopy(base)
    known = [*base, *(k for k in also if k not in base)]
    for key, value in over.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{source}: unknown key {key!r}{hint}; known: {', '.join(known)}")
        if isinstance(base.get(key), dict) and isinstance(value, dict):
            out[key] = {**base[key], **value}
        else:
            out[key] = value
    return out


def load_recipe(model: str, directory: str | Path | None = None) -> dict[str, Any]:
    """The recipe of ``model``: the built-in one, with ``directory``'s file over it.

    Raises
    ------
    ValueError
        For a model without a recipe, a file that is not TOML, or a key the built-in recipe
        does not have.
    """
    recipe = builtin_recipe(model)
    if directory:
        path = Path(directory) / RECIPE_FILES[model]
        if path.is_file():
            recipe = merged(recipe, _read(path), path)
    return recipe


def config_recipes_dir(config: Config) -> Path | None:
    """``[models] recipes`` of a configuration (relative to its file), or None for the built-in."""
    value = str(config.section("models").get("recipes") or "")
    if not value:
        return None
    path = Path(value)
    if not path.is_absolute() and Path(config.source).is_file():
        path = Path(config.source).resolve().parent / path
    if not path.is_dir():
        raise FileNotFoundError(f"[models] recipes: no directory {path}")
    return path
