"""Undrain: which nodes foreshock drained may go back to work.

A node is released when none of its units is recommended for a drain now (nor held back
from one by a guard) and either

- one of its units left the drain level in this publish because its risk fell below
  ``[policy] exit_risk`` (:attr:`~foreshock.drain.policy.Decision.released`), or
- the scheduler's node states given to the publish (``--sinfo`` / ``--node-states``) show
  it out of service with a ``foreshock:`` reason and every scored unit on it is below
  ``exit_risk`` (this also catches a release an operator missed).

Without node states only the first rule applies, so run the resume script every cycle.
The scripts (``slurm_resume.sh``, ``k8s_uncordon.sh``) check each node again when they
run and never touch a node whose reason or taint another tool set.
"""

from __future__ import annotations

import polars as pl

from foreshock.drain.actions import DRAIN_ACTIONS, FORESHOCK_REASON_PREFIX, OUT_STATES
from foreshock.drain.shell import id_word, one_line

RELEASE_LIMIT = 200


def nodes_to_release(
    risk_list: pl.DataFrame,
    released_units: list[str],
    exit_risk: float,
    node_states: pl.DataFrame | None = None,
) -> list[tuple[str, str]]:
    """``(node, message)`` for every node to resume / uncordon, sorted by node.

    Raises
    ------
    ValueError
        When a node or unit id is not a valid id.
    """
    if risk_list.height == 0:
        return []
    units = risk_list.select("unit_id", "node", "action", "guard", "risk", "horizon").filter(
        pl.col("node").is_not_null()
    )
    busy = set(units.filter(pl.col("action").is_in(DRAIN_ACTIONS) | pl.col("guard").is_not_null()).get_column("node"))
    wanted = set(units.filter(pl.col("unit_id").is_in(released_units)).get_column("node"))
    if node_states is not None and node_states.height:
        ours = {
            row["node"]
            for row in node_states.to_dicts()
            if any(word in (row.get("state") or "").lower() for word in OUT_STATES)
            and (row.get("reason") or "").strip().lower().startswith(FORESHOCK_REASON_PREFIX)
        }
        high = set(units.filter(pl.col("risk") >= exit_risk).get_column("node"))
        wanted |= ours & set(units.get_column("node")) - high
    out = []
    for node in sorted(wanted - busy):
        id_word(node, "node")
        on_node = units.filter(pl.col("node") == node).sort("risk", descending=True, nulls_last=True)
        parts = []
        for row in on_node.iter_rows(named=True):
            id_word(row["unit_id"], "unit_id")
            risk = "?" if row["risk"] is None else f"{row['risk']:.2f}"
            parts.append(f"{row['unit_id'].removeprefix(node + '-')} p={risk}/{row['horizon']}")
        message = f"{FORESHOCK_REASON_PREFIX} released (risk below {exit_risk:.2f}): " + "; ".join(parts)
        out.append((node, one_line(message, RELEASE_LIMIT)))
    return out
