# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's record in a rolling upgrade (playbooks/rolling_upgrade.yml), moved by events.

The state machine is ``module_utils/upgrade/node_record.py``. Documentation for each filter
lives in the sidecar YAML next to this file (upgrade_node.yml, upgrade_node_release.yml).
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import node_record

PREFIX = "gpuops.cluster."
_ERRORS = (AttributeError, KeyError, TypeError, ValueError)


def upgrade_node(record, event, now=None, **data):
    """The node's record after ``event`` at ``now`` (epoch seconds, default: the time now)."""
    try:
        return node_record.step(record, event, time.time() if now is None else now, **data)
    except _ERRORS as exc:
        raise AnsibleFilterError("%supgrade_node: %s" % (PREFIX, exc)) from exc


def upgrade_node_release(record):
    """``{ok, halt}`` for the node's gpuops.cluster.upgrade_slot release, from its record."""
    try:
        return node_record.slot_release(record)
    except _ERRORS as exc:
        raise AnsibleFilterError("%supgrade_node_release: %s" % (PREFIX, exc)) from exc


class FilterModule:
    """gpuops.cluster rolling-upgrade node record filters."""

    def filters(self):
        return {
            "upgrade_node": upgrade_node,
            "upgrade_node_release": upgrade_node_release,
        }
