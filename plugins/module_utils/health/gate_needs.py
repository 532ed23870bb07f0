# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a health check at each level needs installed on the node, and what a node lacks.

The gate fails closed: a level that runs ``dcgmi diag`` on a node without ``dcgmi``, or ``all_reduce_perf``
on a node without nccl-tests, fails the node. A rolling upgrade asks before anything moves (the survey's
``gpu_health`` with ``gate_needs``), so a node that its gate would fail for a missing tool is named before the
canary is drained, not after it is upgraded.

``tools(level, skip)``: the tools a level runs, in order. ``lacking(levels, skip, found, provided)``: per level,
a message with the fix for each tool the node lacks; ``provided`` names the tools the upgrade itself installs
(``dcgmi`` where the target stack carries DCGM). ``problems(nodes, ...)``: the lines a rolling upgrade's plan
prints and stops on, one per node.
"""

from __future__ import annotations

LEVELS = ("quick", "standard", "extended")

# tool: (first level that runs it, the check that runs it (skip_checks), the fix)
TOOLS = {
    "dcgmi": (
        "standard",
        "dcgm_diag",
        "install DCGM (datacenter-gpu-manager-4-cuda<N>, which brings dcgmi in datacenter-gpu-manager-4-core) "
        "and start nvidia-dcgm, or add dcgm to the stack",
    ),
    "all_reduce_perf": (
        "extended",
        "nccl_busbw",
        "build nccl-tests into /opt/nccl-tests/build (or set gpuops_health_all_reduce_perf_path)",
    ),
}


def tools(level: str, skip=()) -> list:
    """The tools a check at ``level`` runs, less those whose check is skipped."""
    if level not in LEVELS:
        raise ValueError("gate level %r: expected one of %s" % (level, ", ".join(LEVELS)))
    rank = LEVELS.index(level)
    return [name for name, (first, check, _fix) in TOOLS.items() if rank >= LEVELS.index(first) and check not in skip]


def lacking(levels, skip=(), found=None, provided=()) -> dict:
    """``{level: [message, ...]}`` for each level: the tools it runs that ``found`` has no path for.

    ``found``: ``{tool: path or None}`` as read on the node. A tool in ``provided`` is installed by the run
    itself and never lacking.
    """
    found = found or {}
    result = {}
    for level in levels:
        result[level] = [
            "%s not installed, a gate at level=%s runs it: %s, or skip %s"
            % (name, level, TOOLS[name][2], TOOLS[name][1])
            for name in tools(level, skip)
            if not found.get(name) and name not in provided
        ]
    return result


def node_level(name: str, canaries, gate_level: str, canary_gate_level: str) -> str:
    """The gate level a node can be judged at: the canary's where it is a named canary, or where no canary is
    named (the window then picks the first node it can, and replaces a deferred canary with the next), else the
    gate level."""
    return canary_gate_level if (not canaries or name in canaries) else gate_level


def problems(nodes, canaries, gate_level: str, canary_gate_level: str) -> list:
    """One line per node whose gate would fail for a missing tool.

    ``nodes``: ``[{host, gate_needs}]`` where ``gate_needs`` is the survey's ``{level: [message]}`` (absent or
    None: the survey could not say, which is itself a problem: fail closed).
    """
    for level in (gate_level, canary_gate_level):
        if level not in LEVELS:
            raise ValueError("gate level %r: expected one of %s" % (level, ", ".join(LEVELS)))
    # a named canary already done (skipped) is no canary of this run: then the window picks one among the rest
    named = [name for name in canaries if name in {node["host"] for node in nodes}]
    lines = []
    for node in nodes:
        level = node_level(node["host"], named, gate_level, canary_gate_level)
        needs = node.get("gate_needs")
        if not isinstance(needs, dict) or level not in needs:
            lines.append("%s: the survey did not say what the gate at level=%s needs on it" % (node["host"], level))
        elif needs[level]:
            canary = " (a canary)" if level == canary_gate_level and level != gate_level else ""
            lines.append("%s%s: %s" % (node["host"], canary, "; ".join(needs[level])))
    return lines
