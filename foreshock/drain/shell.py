"""Turning values into shell words safely.

Ids (node, unit) must match :data:`foreshock.contract.ID_PATTERN` and are quoted anyway;
free text (reasons, messages) is reduced to printable ASCII on one line and quoted with
:func:`shlex.quote`.  Nothing from the data reaches a generated script any other way.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime

from foreshock.contract import is_valid_id

_NOT_PRINTABLE = re.compile(r"[^\x20-\x7e]")

# The flags every generated action script takes: a dry run unless --apply, and
# --at-checkpoint to include the units recommended for the next checkpoint.  The
# script's usage text is its lines 2-9.
APPLY_FLAGS = r"""set -euo pipefail

apply=0
at_checkpoint=0
for arg in "$@"; do
  case "$arg" in
    --apply) apply=1 ;;
    --at-checkpoint) at_checkpoint=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done
"""


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


def fill_script(template: str, generated_at: datetime, **values: str) -> str:
    """A script template with ``{generated}`` (UTC time) and each ``{key}`` of ``values``
    filled, in the order given (a value may bring placeholders a later key fills).
    ``str.format`` would trip on the braces of the bash code around them."""
    values = {**values, "generated": generated_at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template
