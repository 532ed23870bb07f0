# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The order in which the window (:class:`window.Window`) admits the nodes of a rolling upgrade.

Nodes to resume first, then canaries, then idle nodes, then busy nodes by soonest job end (ends within the same
``granularity`` seconds count as equal), busy nodes with an unknown end last; nodes of equal priority are
interleaved round-robin over the ``spread_by`` domain (racks), ties by name. A busy node whose job end is already
past counts as idle.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_input import (
    ADMISSIBLE_STATES,
    Node,
    nodes_of,
)


def _priority(node: Node, now, granularity) -> tuple:
    if node.state == "idle" or (node.job_end is not None and node.job_end <= now):
        return (0, 0, 0.0)
    if node.job_end is None:
        return (2, 0, 0.0)
    return (1, int((node.job_end - now) // granularity), float(node.job_end))


def order(nodes, now, spread_by: str = "rack", granularity=600) -> list[str]:
    """The admission order of the nodes that can be admitted (names).

    Nodes to resume first, then canaries, then idle nodes, then busy nodes by soonest job end (within
    ``granularity`` seconds counts as equal), unknown ends last; within equal
    priority, round-robin over the ``spread_by`` domain, ties by name. Done,
    drained-by-others and down nodes are left out.
    """
    candidates = [node for node in nodes_of(nodes) if not node.done and node.state in ADMISSIBLE_STATES]
    keyed = []
    for node in candidates:
        priority = _priority(node, now, granularity)
        keyed.append(((not node.resume, not node.canary, priority[0], priority[1]), priority[2], node))
    keyed.sort(key=lambda item: (item[0], item[1], item[2].name))
    # Rank of each node inside its (priority class, domain member): the round-robin turn.
    turns: dict = {}
    ranked = []
    for group, end, node in keyed:
        member = node.domains.get(spread_by, "")
        turn = turns.get((group, member), 0)
        turns[(group, member)] = turn + 1
        ranked.append((group, turn, member, end, node.name))
    ranked.sort()
    return [item[4] for item in ranked]
