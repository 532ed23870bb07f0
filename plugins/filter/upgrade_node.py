# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's record in a rolling upgrade (playbooks/rolling_upgrade.yml), built from its registered results.

The record and its state machine are ``module_utils/upgrade/node_record.py``. Documentation lives in the sidecar
YAML next to this file (upgrade_node.yml).
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import node_record

PREFIX = "gpuops.cluster."
_ERRORS = (AttributeError, KeyError, TypeError, ValueError)


def upgrade_node(node, now=None):
    """The node's record from its start and registered steps, at ``now`` (epoch seconds, default: the time now)."""
    try:
        return node_record.build(node, time.time() if now is None else now)
    except _ERRORS as exc:
        raise AnsibleFilterError("%supgrade_node: %s" % (PREFIX, exc)) from exc


class FilterModule:
    """gpuops.cluster rolling-upgrade node record filter."""

    def filters(self):
        return {"upgrade_node": upgrade_node}
