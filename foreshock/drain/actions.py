"""The drain policy's vocabulary: its actions from least to most severe, the node states
that mean "not taking work", the prefix of the reasons foreshock sets, and how a lead time and
a unit's top signals are shown (the terminal, the notifications and the fleet page alike)."""

from __future__ import annotations

import math
from typing import Any

# ``replace`` (hardware replacement / RMA of a repeat offender, foreshock.drain.lemons) takes
# the unit out like ``drain_now`` and for good: the most severe.
ACTIONS = ("none", "watch", "run_diagnostics", "drain_at_checkpoint", "drain_now", "replace")
SEVERITY = {action: rank for rank, action in enumerate(ACTIONS)}
DRAIN_ACTIONS = ("replace", "drain_now", "drain_at_checkpoint")  # most urgent first
DIAGNOSTICS_COMMAND = "dcgmi diag -r 3"
NOW_ACTIONS = ("replace", "drain_now")  # out at once: the scripts drain these without --at-checkpoint

# Slurm/Kubernetes node states that mean "not taking work" (sinfo %T spelling, lower case).
OUT_STATES = ("drain", "drained", "draining", "down", "fail", "failing", "maint", "reboot", "cordoned")
FORESHOCK_REASON_PREFIX = "foreshock:"


def format_hours(hours: float | None) -> str:
    if hours is None or not math.isfinite(hours):
        return "n/a"
    if hours >= 24 * 365:  # a hazard this low says "not soon", not a date
        return ">1y"
    if hours >= 48:
        return f"{hours / 24:.0f}d"
    if hours >= 1:
        return f"{hours:.0f}h"
    return f"{hours * 60:.0f}m"


def signals_text(top_signals: Any, limit: int = 3) -> str:
    if not top_signals:
        return ""
    parts = []
    for item in list(top_signals)[:limit]:
        value = item.get("value")
        shown = f"{value:.3g}" if isinstance(value, (int, float)) and value is not None else "?"
        parts.append(f"{item.get('signal')}={shown}")
    return ", ".join(parts)
