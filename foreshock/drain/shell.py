"""Turning values into shell words safely.

Ids (node, unit) must match :data:`foreshock.contract.ID_PATTERN` and are quoted anyway;
free text (reasons, messages) is reduced to printable ASCII on one line and quoted with
:func:`shlex.quote`.  Nothing from the data reaches a generated script any other way.
"""

from __future__ import annotations

import re
import shlex

from foreshock.contract import is_valid_id

_NOT_PRINTABLE = re.compile(r"[^\x20-\x7e]")


def id_word(value: object, field: str, where: str = "") -> str:
    """Quote a validated id for a shell command.

    Raises
    ------
    ValueError
        When ``value`` is not a valid id (message names ``where`` and ``field``).
    """
    if not is_valid_id(value):
        prefix = f"{where}: " if where else ""
        raise ValueError(f"{prefix}{field} {value!r} is not a valid id (letters, digits, . _ : -); refused")
    return shlex.quote(str(value))


def one_line(text: object, limit: int = 200) -> str:
    """Printable ASCII on a single line, at most ``limit`` characters."""
    flat = _NOT_PRINTABLE.sub(" ", str(text))
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def text_word(text: object, limit: int = 200) -> str:
    """Quote free text as one shell word (after :func:`one_line`)."""
    return shlex.quote(one_line(text, limit))
