# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling upgrade's slot: reports what the upgrade_window strategy decided for this host.

The decision itself is taken by the strategy (plugins/strategy/upgrade_window.py) in the
controller's main process, before this task is queued; it hands the host its record in the
variable ``gpuops_upgrade_slot``. This action checks that it did and returns the record; a
release returns ``release: {ok, halt, deferred}``, which the strategy reads from the result to
give the slot back. The contract both sides keep: ``module_utils/upgrade/window_slot.py``.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_slot


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(window_slot.ARGS)
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        result.update(window_slot.answer(args.get("state", "acquired"), task_vars.get(window_slot.SLOT_FACT), args))
        return result
