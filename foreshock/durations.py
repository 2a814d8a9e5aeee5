"""Durations written the way operators write them: ``5m``, ``1h``, ``1d``, ``14d``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import timedelta

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """Parse ``"90s"``, ``"5m"``, ``"1h"``, ``"1d"``, ``"2w"`` into a :class:`timedelta`.

    Raises
    ------
    ValueError
        When the text is not a positive number followed by one of s, m, h, d, w.
    """
    if isinstance(text, timedelta):
        return text
    if isinstance(text, (int, float)):
        return timedelta(seconds=float(text))
    match = _PATTERN.match(str(text))
    if not match:
        raise ValueError(
            f"invalid duration {text!r}: write a number and a unit (s, m, h, d, w), e.g. '5m', '1h', '14d'"
        )
    value = float(match.group(1)) * _UNITS[match.group(2)]
    if value <= 0:
        raise ValueError(f"invalid duration {text!r}: must be positive")
    return timedelta(seconds=value)


def format_duration(delta: timedelta) -> str:
    """Shortest exact spelling of a duration: ``timedelta(hours=24)`` -> ``"1d"``."""
    seconds = int(delta.total_seconds())
    for suffix, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0 and seconds >= size:
            if suffix == "w":  # weeks read worse than days in feature names (7d, 14d)
                return f"{seconds // 86400}d"
            return f"{seconds // size}{suffix}"
    return f"{seconds}s"


def spelled_as(wanted: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that spells the same duration as ``wanted`` (``"1d"`` among
    ``["24h", "72h"]`` is ``"24h"``); None when none does."""
    target = parse_duration(wanted)
    return next((name for name in names if parse_duration(name) == target), None)


def duration_seconds(text: str | timedelta) -> int:
    return int(parse_duration(text).total_seconds())
