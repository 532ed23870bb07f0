# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the rolling upgrade's plan: the nodes whose health gate would fail for a missing tool.

Documentation in the sidecar upgrade_gate_needs.yml; the rule in module_utils/health/gate_needs.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils.health import gate_needs


def upgrade_gate_needs(surveyed, canaries=None, gate_level="standard", canary_gate_level="extended"):
    """One line per node to upgrade whose gate would lack a tool, from the survey's variables of each node."""
    if not isinstance(surveyed, (list, tuple)):
        raise AnsibleFilterError("gpuops.cluster.upgrade_gate_needs: expected the surveyed nodes' variables as a list")
    nodes = [
        {
            "host": node.get("inventory_hostname"),
            "gate_needs": (node.get("rolling_upgrade_survey_health") or {}).get("gate_needs"),
        }
        for node in surveyed
        if (node.get("rolling_upgrade_decision") or {}).get("decision") == "upgrade"
    ]
    try:
        return gate_needs.problems(nodes, list(canaries or ()), gate_level, canary_gate_level)
    except ValueError as exc:
        raise AnsibleFilterError("gpuops.cluster.upgrade_gate_needs: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"upgrade_gate_needs": upgrade_gate_needs}
