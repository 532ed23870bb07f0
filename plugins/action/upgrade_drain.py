# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take a node out of service for the rolling upgrade and give it back, for Slurm, Kubernetes or nothing.

A thin shell: it runs the scheduler's modules (on the task's host, the delegate when the task
has ``delegate_to``) and leaves every decision to ``module_utils/upgrade/drain_adapter.py``.
Documentation: ``plugins/modules/upgrade_drain.py``.
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import drain_adapter

ARGUMENT_SPEC = {
    "adapter": {"type": "str", "required": True, "choices": list(drain_adapter.ADAPTERS)},
    "state": {"type": "str", "required": True, "choices": list(drain_adapter.STATES)},
    "node": {"type": "str"},
    "run_id": {"type": "str"},
    "reason_prefix": {"type": "str", "default": drain_adapter.DEFAULT_PREFIX},
    "reason": {"type": "str"},
    "timeout": {"type": "int", "default": drain_adapter.DEFAULT_TIMEOUT},
    "poll_interval": {"type": "int", "default": drain_adapter.DEFAULT_POLL_INTERVAL},
    "kubeconfig": {"type": "raw"},
    "ours": {"type": "bool"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _supports_check_mode = True
    _supports_async = False

    # seconds, for the time a Kubernetes drain took (tests replace it)
    _clock = staticmethod(time.monotonic)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        try:
            result = super().run(tmp, task_vars)
            args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        except AnsibleActionFail as exc:
            return {"failed": True, "msg": "gpuops.cluster.upgrade_drain: %s" % exc.message}
        del tmp
        try:
            req = drain_adapter.request(args, task_vars.get("inventory_hostname"))
        except ValueError as exc:
            result.update(failed=True, msg="gpuops.cluster.upgrade_drain: %s" % exc)
            return result

        started_at = time.time()  # the controller's clock: the node's record times its drain by these
        if req["adapter"] == "slurm":
            out = self._slurm(req, task_vars)
        elif req["adapter"] == "kubernetes":
            out = self._kubernetes(req, task_vars)
        else:
            out = drain_adapter.none_record(req)
        result.update(out, started_at=started_at, ended_at=time.time())
        if not result.get("failed"):
            result["msg"] = drain_adapter.summary(result, self._task.check_mode)
        return result

    def _module(self, name, module_args, task_vars):
        """Run one module (check mode passes through); its result without the arguments it echoes."""
        answer = self._execute_module(module_name=name, module_args=module_args, task_vars=task_vars)
        answer = dict(answer or {})
        answer.pop("invocation", None)  # would carry the kubeconfig
        return answer

    def _slurm(self, req, task_vars):
        module_args = drain_adapter.slurm_args(req)
        if module_args is None:
            return drain_adapter.slurm_record(req, None)
        answer = self._module(drain_adapter.SLURM_DRAIN, module_args, task_vars)
        why = drain_adapter.module_failure(answer)
        if why is not None:
            return drain_adapter.failure(req, drain_adapter.SLURM_DRAIN, "state=%s" % module_args["state"], why, answer)
        why = drain_adapter.slurm_not_back(answer)
        if why is not None:
            return drain_adapter.failure(
                req, drain_adapter.SLURM_DRAIN, "state=resumed", why, answer, ours=True, changed=True
            )
        return drain_adapter.slurm_record(req, answer)

    def _kubernetes(self, req, task_vars):
        owner = None
        node = None
        if drain_adapter.k8s_needs_node(req):
            node_answer = self._module(drain_adapter.K8S_INFO, drain_adapter.k8s_node_args(req), task_vars)
            why = drain_adapter.module_failure(node_answer)
            if why is not None:
                return drain_adapter.failure(req, drain_adapter.K8S_INFO, "could not read the Node", why, node_answer)
            try:
                owner = drain_adapter.k8s_cordon_owner(req, node_answer)
                node = drain_adapter.k8s_node_of(req, node_answer)
            except ValueError as exc:
                return drain_adapter.failure(req, drain_adapter.K8S_INFO, "found no Node", str(exc))
        plan = drain_adapter.k8s_plan(req, owner)
        if plan["warning"]:
            self._display.warning(plan["warning"])
        known = {"action": plan["action"], "ours": plan["ours"], "pre_existing": plan["pre_existing"]}

        # our mark goes on before our cordon (a controller lost in between leaves a cordon that says it is ours)
        if plan["mark"] and not self._task.check_mode:
            failed = self._mark(req, True, task_vars, known)
            if failed:
                return failed
        if plan["action"] == "none":
            out = drain_adapter.k8s_record(req, plan, changed=False)
        else:
            out = self._k8s_act(req, plan, known, owner, node, task_vars)
        # and comes off after our uncordon, or when the cordon is not there any more
        if (
            plan["mark"] is False
            and not out.get("failed")
            and not self._task.check_mode
            and drain_adapter.k8s_marked(req, node or {})
        ):
            failed = self._mark(req, False, task_vars, known)
            if failed:
                return failed
            out["changed"] = True
        return out

    def _mark(self, req, mark, task_vars, known):
        """Put our mark on the Node or take it off; a failed task result, or None."""
        answer = self._module(drain_adapter.K8S_PATCH, drain_adapter.k8s_mark_args(req, mark), task_vars)
        why = drain_adapter.module_failure(answer)
        if why is None:
            return None
        doing = "could not %s the %s annotation" % ("set" if mark else "remove", drain_adapter.K8S_MARK)
        return drain_adapter.failure(req, drain_adapter.K8S_PATCH, doing, why, answer, **known)

    def _k8s_act(self, req, plan, known, owner, node, task_vars):
        started = self._clock()
        answer = self._module(drain_adapter.K8S_DRAIN, drain_adapter.k8s_drain_args(req, plan["action"]), task_vars)
        waited = self._clock() - started
        if drain_adapter.k8s_check_mode_unsupported(self._task.check_mode, answer):
            return drain_adapter.k8s_record(req, plan, changed=True)  # what it would do, from the Node read
        outcome = drain_adapter.k8s_drain_outcome(answer)
        if outcome["outcome"] == "error":
            return drain_adapter.failure(
                req,
                drain_adapter.K8S_DRAIN,
                "state=%s" % plan["action"],
                outcome["reason"],
                answer,
                waited=round(waited, 3),
                **known,
            )
        if plan["action"] != "drain" or self._task.check_mode:  # nothing was evicted in check mode: no read-back
            return drain_adapter.k8s_record(req, plan, changed=answer.get("changed"), reason=answer.get("result"))

        drain = answer
        pods = self._module(drain_adapter.K8S_INFO, drain_adapter.k8s_pods_args(req), task_vars)
        why = drain_adapter.module_failure(pods)
        if why is not None:
            return drain_adapter.failure(
                req, drain_adapter.K8S_INFO, "could not list the pods left after the drain", why, pods, **known
            )
        out = drain_adapter.k8s_drained_record(req, {"resources": [node]}, drain, pods, waited)
        if plan["ours"]:
            out.update(ours=True, pre_existing=False)  # a cordon of ours left by an earlier run is ours again
        if drain_adapter.k8s_recordon_needed(owner != "none", drain, outcome):
            again = self._module(drain_adapter.K8S_DRAIN, drain_adapter.k8s_drain_args(req, "cordon"), task_vars)
            why = drain_adapter.module_failure(again)
            if why is not None:
                return drain_adapter.failure(
                    req, drain_adapter.K8S_DRAIN, "state=cordon (after a drain that gave up)", why, again, **known
                )
            out["changed"] = out["changed"] or bool(again.get("changed"))
        return out
