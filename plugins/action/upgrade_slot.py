# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling upgrade's slot: reports what the upgrade_window strategy decided for this host.

The decision itself is taken by the strategy (plugins/strategy/upgrade_window.py) in the
controller's main process, before this task is queued; it hands the host its record in the
variable ``gpuops_upgrade_slot``. This action checks that it did and returns the record; a
release returns ``release: {ok, halt, deferred}``, which the strategy reads from the result to
give the slot back.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

SLOT_FACT = "gpuops_upgrade_slot"
STATES = ("acquired", "released")
STRATEGY = "gpuops.cluster.upgrade_window"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        ("state", "nodes", "settings", "refresh", "journal", "drain_ahead", "ok", "halt", "deferred")
    )
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        state = self._task.args.get("state", "acquired")
        if state not in STATES:
            result.update(failed=True, msg="state is %r: set acquired or released" % (state,))
            return result
        record = task_vars.get(SLOT_FACT)
        if not isinstance(record, dict) or record.get("state") not in STATES:
            result.update(
                failed=True,
                msg="no slot decision for this host: gpuops.cluster.upgrade_slot runs only in a play with "
                "'strategy: %s', which decides each host's slot before this task runs" % STRATEGY,
            )
            return result
        result.update(changed=False, slot=dict(record))
        if state == "acquired":
            if record.get("state") != "acquired":
                result.update(failed=True, msg="this host's slot was released already; acquire it once per run")
                return result
            result["admitted"] = bool(record.get("admitted"))
            return result
        if record.get("state") != "acquired" or not record.get("admitted"):
            result.update(failed=True, msg="this host holds no slot to release (%s)" % record.get("reason", "none"))
            return result
        # The strategy gives the slot back when it sees this result.
        halt = self._task.args.get("halt")
        ok = boolean(self._task.args.get("ok", False))
        deferred = boolean(self._task.args.get("deferred", False))
        if deferred and not ok:
            result.update(
                failed=True,
                msg="deferred is true but ok is false: a deferred node is back in service (ok: true); "
                "a node left out of service is not deferred",
            )
            return result
        result["release"] = {"ok": ok, "halt": None if halt is None else boolean(halt), "deferred": deferred}
        return result
