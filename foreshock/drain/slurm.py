"""Slurm export: a drain script operators can read, dry-run and apply.

Slurm drains whole nodes, so units are aggregated: a node is drained when any of its units
says ``drain_now`` (``drain_at_checkpoint`` nodes are drained only with
``--at-checkpoint``, meant to be run when the job has just checkpointed).  The node's
reason lists its units, ``foreshock: drain_now gpu5 p=0.82/72h lead 9h; ...``.

The script checks every node's current state and reason with ``scontrol show node`` when it
runs, and leaves alone a node whose reason another tool set (anything not starting with
``foreshock:``), or that is down without a reason.  Without ``--apply`` it only prints
what it would do.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from foreshock.drain.actions import FORESHOCK_REASON_PREFIX, NOW_ACTIONS
from foreshock.drain.shell import APPLY_FLAGS, fill_script, id_word, one_line, text_word

SCRIPT_NAME = "slurm_drain.sh"
RESUME_SCRIPT = "slurm_resume.sh"
REASON_LIMIT = 200


def _unit_label(unit_id: str, node: str) -> str:
    """``gpu5`` for ``gpu-node003-gpu5`` on ``gpu-node003``; the full id otherwise."""
    prefix = f"{node}-"
    return unit_id.removeprefix(prefix)


def node_reasons(risk_list: pl.DataFrame, action: str) -> list[tuple[str, str]]:
    """``(node, reason)`` for every node with at least one unit at ``action``, sorted by node.

    Raises
    ------
    ValueError
        When a node or unit id is not a valid id (names the row).
    """
    rows = risk_list.with_row_index("_row").filter(pl.col("action") == action)
    by_node: dict[str, list[dict]] = {}
    for row in rows.to_dicts():
        where = f"risk list row {row['_row']}"
        id_word(row["node"], "node", where)
        id_word(row["unit_id"], "unit_id", where)
        by_node.setdefault(row["node"], []).append(row)
    out = []
    for node in sorted(by_node):
        units = sorted(by_node[node], key=lambda r: -(r.get("risk") or 0.0))
        first = units[0]
        parts = []
        for unit in units:
            lead = unit.get("expected_lead_time_h")
            lead_text = f" lead {lead:.0f}h" if lead is not None else ""
            parts.append(f"{_unit_label(unit['unit_id'], node)} p={unit['risk']:.2f}/{unit['horizon']}{lead_text}")
        model = ""
        if first.get("model_name"):
            model = f" [{first['model_name']} v{first.get('model_version') or '?'}]"
        reason = f"{FORESHOCK_REASON_PREFIX} {action} " + "; ".join(parts)
        if len(reason) + len(model) > REASON_LIMIT:
            reason = reason[: REASON_LIMIT - len(model) - 3] + "..."
        out.append((node, one_line(reason + model, REASON_LIMIT)))
    return out


# Shared by the drain and resume scripts: the caller declares `local state current`.
_READ_NODE = r"""
# Set $state and $current (the reason) of node $1 from `scontrol show node`; on failure
# count an error and return 1.
read_node() {
  local info
  if ! info=$(scontrol show node "$1" 2>&1); then
    echo "error: $1: scontrol show node failed: ${info//$'\n'/ }" >&2
    errors=$((errors + 1))
    return 1
  fi
  state=$(printf '%s\n' "$info" | sed -n 's/.*[[:space:]]State=\([^[:space:]]*\).*/\1/p' | sed -n 1p)
  current=$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*Reason=\(.*\)$/\1/p' | sed -n 1p)
}
"""

_HEADER = r"""#!/usr/bin/env bash
# foreshock Slurm drain script (risk list schema v{schema}), generated {generated}.
# Usage: {name} [--apply] [--at-checkpoint]
#   (no flag)        print what would be done; change nothing
#   --apply          drain the nodes recommended for drain_now
#   --at-checkpoint  also drain the nodes recommended for drain_at_checkpoint
#                    (run it right after the job checkpoints)
# Each node's state and reason are read with `scontrol show node` when this runs; a node
# whose drain reason another tool set (not starting with "foreshock:") is left alone.
{parse_args}

drained=0
left_alone=0
errors=0
{read_node}
drain_node() {
  local node=$1 reason=$2 state current
  read_node "$node" || return 0
  case "$current" in
    "{prefix}"*)
      case "$state" in
        *DRAIN*)
          echo "already drained by foreshock: $node ($current)"
          return 0 ;;
      esac ;;
    "") ;;
    *)
      echo "left alone: $node (state $state, reason set by another tool: $current)"
      left_alone=$((left_alone + 1))
      return 0 ;;
  esac
  case "$state" in
    *DOWN*|*FAIL*)
      echo "left alone: $node is $state"
      left_alone=$((left_alone + 1))
      return 0 ;;
  esac
  if [ "$apply" = 1 ]; then
    if scontrol update "NodeName=$node" State=DRAIN "Reason=$reason"; then
      echo "drained: $node ($reason)"
      drained=$((drained + 1))
    else
      echo "error: $node: scontrol update failed" >&2
      errors=$((errors + 1))
    fi
  else
    printf 'would run: scontrol update %q State=DRAIN %q\n' "NodeName=$node" "Reason=$reason"
  fi
}
"""

_FOOTER = r"""
echo "summary: drained=$drained left_alone=$left_alone errors=$errors apply=$apply at_checkpoint=$at_checkpoint"
[ "$errors" = 0 ]
"""


def now_node_reasons(risk_list: pl.DataFrame) -> list[tuple[str, str, str]]:
    """``(node, reason, action)`` of the nodes to take out at once: a unit at ``replace``
    (a repeat offender, the reason says so) or else at ``drain_now``, sorted by node."""
    out: dict[str, tuple[str, str, str]] = {}
    for action in NOW_ACTIONS:
        for node, reason in node_reasons(risk_list, action):
            out.setdefault(node, (node, reason, action))
    return [out[node] for node in sorted(out)]


def slurm_script(risk_list: pl.DataFrame, generated_at: datetime, schema_version: int = 1) -> str:
    """The Slurm drain script for a risk list (schema v1 frame)."""
    now_nodes = [(node, reason) for node, reason, _ in now_node_reasons(risk_list)]
    later = [(n, r) for n, r in node_reasons(risk_list, "drain_at_checkpoint") if n not in {x for x, _ in now_nodes}]
    header = fill_script(
        _HEADER,
        generated_at,
        parse_args=APPLY_FLAGS,
        read_node=_READ_NODE,
        schema=str(schema_version),
        name=SCRIPT_NAME,
        prefix=FORESHOCK_REASON_PREFIX,
    )
    lines = [header, f"# drain_now: {len(now_nodes)} node(s)"]
    lines += [f"drain_node {id_word(node, 'node')} {text_word(reason, REASON_LIMIT)}" for node, reason in now_nodes]
    lines.append(f"# drain_at_checkpoint: {len(later)} node(s)")
    if later:
        lines.append('if [ "$at_checkpoint" = 1 ]; then')
        lines += [f"  drain_node {id_word(node, 'node')} {text_word(reason, REASON_LIMIT)}" for node, reason in later]
        lines.append("else")
        names = " ".join(node for node, _ in later)
        lines.append(f"  echo {text_word('at the next checkpoint (run with --at-checkpoint): ' + names)}")
        lines.append("fi")
    lines.append(_FOOTER)
    return "\n".join(lines)


_RESUME_HEADER = r"""#!/usr/bin/env bash
# foreshock Slurm resume script (undrain), generated {generated}.
# Usage: {name} [--apply]
#   (no flag)        print what would be done; change nothing
#   --apply          resume the nodes foreshock drained whose risk has cleared
# Each node's state and reason are read with `scontrol show node` when this runs; only a
# node drained with a reason starting with "foreshock:" is resumed. A node whose reason
# another tool set, or that is down or failing, is left alone.
{parse_args}

resumed=0
left_alone=0
errors=0
{read_node}
resume_node() {
  local node=$1 message=$2 state current
  read_node "$node" || return 0
  case "$current" in
    "{prefix}"*) ;;
    "")
      echo "not drained by foreshock: $node (state $state, no reason)"
      return 0 ;;
    *)
      echo "left alone: $node (state $state, reason set by another tool: $current)"
      left_alone=$((left_alone + 1))
      return 0 ;;
  esac
  case "$state" in
    *DOWN*|*FAIL*)
      echo "left alone: $node is $state"
      left_alone=$((left_alone + 1))
      return 0 ;;
    *DRAIN*) ;;
    *)
      echo "not drained: $node (state $state)"
      return 0 ;;
  esac
  if [ "$apply" = 1 ]; then
    if scontrol update "NodeName=$node" State=UNDRAIN; then
      echo "resumed: $node ($message)"
      resumed=$((resumed + 1))
    else
      echo "error: $node: scontrol update failed" >&2
      errors=$((errors + 1))
    fi
  else
    printf 'would run: scontrol update %q State=UNDRAIN  # %s\n' "NodeName=$node" "$message"
  fi
}
"""


def resume_script(release: list[tuple[str, str]], generated_at: datetime) -> str:
    """The Slurm resume script for ``(node, message)`` pairs (:func:`~foreshock.drain.release.nodes_to_release`)."""
    header = fill_script(
        _RESUME_HEADER,
        generated_at,
        parse_args=APPLY_FLAGS,
        read_node=_READ_NODE,
        name=RESUME_SCRIPT,
        prefix=FORESHOCK_REASON_PREFIX,
    )
    lines = [header, f"# released: {len(release)} node(s)"]
    lines += [f"resume_node {id_word(node, 'node')} {text_word(message)}" for node, message in release]
    lines.append('echo "summary: resumed=$resumed left_alone=$left_alone errors=$errors apply=$apply"')
    lines.append('[ "$errors" = 0 ]')
    return "\n".join(lines) + "\n"


def read_sinfo(text: str) -> pl.DataFrame:
    """Parse ``sinfo --noheader --Node --format='%N|%T|%E'`` into ``node, state, reason``.

    Feed the result to :meth:`~foreshock.drain.policy.DrainPolicy.decide` as
    ``node_states`` so nodes another tool holds are left alone.
    """
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("|", 2)
        if len(parts) != 3:
            raise ValueError(f"sinfo output line {number}: expected 'node|state|reason', got {line!r}")
        node, state, reason = (p.strip() for p in parts)
        rows.append({"node": node, "state": state, "reason": None if reason in ("", "none") else reason})
    return pl.DataFrame(rows, schema={"node": pl.String, "state": pl.String, "reason": pl.String})
