"""Kubernetes exports: a cordon + taint script and a node-problem-detector check.

``k8s_cordon.sh`` cordons each node with a unit at ``drain_now`` (``--at-checkpoint`` adds
the ``drain_at_checkpoint`` nodes), taints it ``foreshock.io/failure-risk=<action>:NoSchedule``
(running pods keep running, like a Slurm drain) and annotates the reason.  A node that is
already cordoned without foreshock's taint was cordoned by someone else and is left alone.
Dry run unless ``--apply``.

``npd_foreshock_check.sh`` is a node-problem-detector custom plugin: NPD runs it on every
node and maps its exit code to a node condition (``GPUFailureRisk``):

====  ==========  =======================================================================
exit  meaning     when
====  ==========  =======================================================================
0     OK          this node has no unit recommended for a drain
1     problem     a unit on this node is recommended for drain_now / drain_at_checkpoint
2     unknown     the node name is unknown, or the scores behind the embedded list are
                  older than max age (``[policy] export_max_age``)
====  ==========  =======================================================================

Its first output line (at most ``max_output_length`` = 80 characters) becomes the
condition's message.  ``npd_foreshock.json`` is the matching plugin configuration.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import polars as pl

from foreshock.drain.actions import DRAIN_ACTIONS
from foreshock.drain.shell import APPLY_FLAGS, fill_script, id_word, one_line, text_word
from foreshock.drain.slurm import node_reasons, now_node_reasons

CORDON_SCRIPT = "k8s_cordon.sh"
UNCORDON_SCRIPT = "k8s_uncordon.sh"
NPD_SCRIPT = "npd_foreshock_check.sh"
NPD_CONFIG = "npd_foreshock.json"
TAINT_KEY = "foreshock.io/failure-risk"
REASON_ANNOTATION = "foreshock.io/reason"
NPD_CONDITION = "GPUFailureRisk"
NPD_MESSAGE_LIMIT = 80

# Shared by the cordon and uncordon scripts: the caller declares `local unschedulable ours`.
_HELPERS = r"""run() {
  if [ "$apply" = 1 ]; then
    "$@" || { echo "error: $*" >&2; errors=$((errors + 1)); }
  else
    printf 'would run:'; printf ' %q' "$@"; printf '\n'
  fi
}

# Set $unschedulable and $ours (the value of foreshock's taint, empty when absent) of
# node $1; on failure count an error and return 1.
read_node() {
  local spec
  if ! spec=$(kubectl get node "$1" -o 'jsonpath={.spec.unschedulable}|{.spec.taints[?(@.key=="{taint}")].value}' 2>&1); then
    echo "error: $1: kubectl get node failed: ${spec//$'\n'/ }" >&2
    errors=$((errors + 1))
    return 1
  fi
  unschedulable=${spec%%|*}
  ours=${spec#*|}
}
"""

_CORDON_HEADER = r"""#!/usr/bin/env bash
# foreshock Kubernetes cordon script, generated {generated}.
# Usage: {name} [--apply] [--at-checkpoint]
#   (no flag)        print the kubectl commands; change nothing
#   --apply          cordon + taint the nodes recommended for drain_now
#   --at-checkpoint  also the nodes recommended for drain_at_checkpoint
# A node already cordoned without the {taint} taint was cordoned by someone
# else and is left alone.
{parse_args}

errors=0

{helpers}
cordon_node() {
  local node=$1 action=$2 reason=$3 unschedulable ours
  read_node "$node" || return 0
  if [ "$unschedulable" = "true" ] && [ -z "$ours" ]; then
    echo "left alone: $node is cordoned by someone else"
    return 0
  fi
  run kubectl cordon "$node"
  run kubectl taint nodes "$node" "{taint}=$action:NoSchedule" --overwrite
  run kubectl annotate node "$node" "{annotation}=$reason" --overwrite
}
"""


def cordon_script(risk_list: pl.DataFrame, generated_at: datetime) -> str:
    """The ``kubectl cordon`` + ``taint`` script for a risk list (schema v1 frame)."""
    header = fill_script(
        _CORDON_HEADER,
        generated_at,
        parse_args=APPLY_FLAGS,
        helpers=_HELPERS,
        name=CORDON_SCRIPT,
        taint=TAINT_KEY,
        annotation=REASON_ANNOTATION,
    )
    now_nodes = now_node_reasons(risk_list)
    taken = {node for node, _, _ in now_nodes}
    later = [(n, r) for n, r in node_reasons(risk_list, "drain_at_checkpoint") if n not in taken]
    lines = [header, f"# drain_now: {len(now_nodes)} node(s)"]
    lines += [f"cordon_node {id_word(n, 'node')} {a} {text_word(r)}" for n, r, a in now_nodes]
    lines.append(f"# drain_at_checkpoint: {len(later)} node(s)")
    if later:
        lines.append('if [ "$at_checkpoint" = 1 ]; then')
        lines += [f"  cordon_node {id_word(n, 'node')} drain_at_checkpoint {text_word(r)}" for n, r in later]
        lines.append("fi")
    lines.append('echo "summary: errors=$errors apply=$apply at_checkpoint=$at_checkpoint"')
    lines.append('[ "$errors" = 0 ]')
    return "\n".join(lines) + "\n"


_UNCORDON_HEADER = r"""#!/usr/bin/env bash
# foreshock Kubernetes uncordon script (undrain), generated {generated}.
# Usage: {name} [--apply]
#   (no flag)        print the kubectl commands; change nothing
#   --apply          remove the {taint} taint and uncordon the nodes
#                    foreshock cordoned whose risk has cleared
# Only a node that carries the {taint} taint is touched; a node cordoned
# without it was cordoned by someone else and is left alone.
{parse_args}

errors=0

{helpers}
uncordon_node() {
  local node=$1 message=$2 unschedulable ours
  read_node "$node" || return 0
  if [ -z "$ours" ]; then
    if [ "$unschedulable" = "true" ]; then
      echo "left alone: $node is cordoned by someone else"
    else
      echo "not cordoned by foreshock: $node"
    fi
    return 0
  fi
  echo "release: $node ($message)"
  run kubectl taint nodes "$node" "{taint}-"
  run kubectl annotate node "$node" "{annotation}-"
  run kubectl uncordon "$node"
}
"""


def uncordon_script(release: list[tuple[str, str]], generated_at: datetime) -> str:
    """The ``kubectl uncordon`` script for ``(node, message)`` pairs
    (:func:`~foreshock.drain.release.nodes_to_release`)."""
    header = fill_script(
        _UNCORDON_HEADER,
        generated_at,
        parse_args=APPLY_FLAGS,
        helpers=_HELPERS,
        name=UNCORDON_SCRIPT,
        taint=TAINT_KEY,
        annotation=REASON_ANNOTATION,
    )
    lines = [header, f"# released: {len(release)} node(s)"]
    lines += [f"uncordon_node {id_word(node, 'node')} {text_word(message)}" for node, message in release]
    lines.append('echo "summary: errors=$errors apply=$apply"')
    lines.append('[ "$errors" = 0 ]')
    return "\n".join(lines) + "\n"


_NPD_HEADER = r"""#!/usr/bin/env bash
# foreshock node-problem-detector custom plugin check, generated {generated}.
# Exit codes (NPD plugin contract): 0 OK, 1 problem (drain recommended), 2 unknown.
# Usage: {name} [NODE]   (default: $NODE_NAME, else the short hostname)
scores_epoch={epoch}
max_age_seconds={max_age}

node=${1:-${NODE_NAME:-$(hostname -s 2>/dev/null || true)}}
if [ -z "$node" ]; then
  echo "foreshock: node name unknown"
  exit 2
fi
if ! now=$(date +%s) || [ $((now - scores_epoch)) -gt "$max_age_seconds" ]; then
  echo "foreshock: scores are stale; rescore and republish"
  exit 2
fi
case "$node" in
"""


def npd_check_script(risk_list: pl.DataFrame, generated_at: datetime, scores_at: datetime, max_age: timedelta) -> str:
    """The NPD custom-plugin check script with the drain recommendations embedded.

    It answers "unknown" once the scores behind the list (their newest snapshot,
    ``scores_at``) are older than ``max_age``: a list republished from old scores is no
    fresher than they are.
    """
    header = fill_script(
        _NPD_HEADER,
        generated_at,
        name=NPD_SCRIPT,
        epoch=str(int(scores_at.timestamp())),
        max_age=str(int(max_age.total_seconds())),
    )
    lines = [header.rstrip("\n")]
    seen: set[str] = set()
    for action in DRAIN_ACTIONS:  # replace, then drain_now: the most urgent wins for a node
        for node, reason in node_reasons(risk_list, action):
            if node in seen:
                continue
            seen.add(node)
            message = one_line(reason, NPD_MESSAGE_LIMIT)
            lines.append(f"  {id_word(node, 'node')}) echo {text_word(message, NPD_MESSAGE_LIMIT)}; exit 1 ;;")
    lines.append('  *) echo "foreshock: no drain recommended"; exit 0 ;;')
    lines.append("esac")
    return "\n".join(lines) + "\n"


def npd_plugin_config(script_path: str, invoke_interval: str = "5m") -> str:
    """node-problem-detector ``custom`` plugin configuration (JSON) for the check script."""
    config = {
        "plugin": "custom",
        "pluginConfig": {
            "invoke_interval": invoke_interval,
            "timeout": "30s",
            "max_output_length": NPD_MESSAGE_LIMIT,
            "concurrency": 1,
        },
        "source": "foreshock",
        "conditions": [
            {"type": NPD_CONDITION, "reason": "NoGPUFailureRisk", "message": "no drain recommended by foreshock"}
        ],
        "rules": [
            {
                "type": "permanent",
                "condition": NPD_CONDITION,
                "reason": "GPUFailureRiskHigh",
                "path": script_path,
                "timeout": "10s",
            }
        ],
    }
    return json.dumps(config, indent=2) + "\n"
