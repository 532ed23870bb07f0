"""gpuops.cluster.upgrade_drain: the action plugin against fake module answers, and its decisions in drain_adapter.

The plugin is built as ansible-core's own unit tests build action plugins (MagicMock task,
connection, play context, loader), with ``_execute_module`` replaced by a fake that records
every module call and answers from a script. Kubernetes answers wrap the recorded-shape API
objects of tests/fixtures/kubernetes.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import MagicMock

import pytest
import yaml
from ansible.playbook.play_context import PlayContext
from ansible_collections.gpuops.cluster.plugins.action import upgrade_drain as action_plugin
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import drain_adapter, kubernetes_node
from ansible_collections.gpuops.cluster.plugins.modules import upgrade_drain as doc_stub

KUBERNETES = Path(__file__).resolve().parents[2] / "fixtures" / "kubernetes"
RUN = "r20261202-1"
KUBECONFIG = {"users": [{"name": "upgrade", "user": {"token": "s3cr3t-token"}}]}


def load(name):
    return json.loads((KUBERNETES / name).read_text())


def k8s_info(*objects):
    return {"changed": False, "api_found": True, "resources": list(objects)}


def slurm_answer(action="drain", ours=True, pre_existing=False, timed_out=False, waited=12.5, reason=None, **extra):
    reason = reason if reason is not None else "gpuops-upgrade[%s]: upgrading the NVIDIA stack" % RUN
    answer = {
        "changed": action != "none",
        "action": action,
        "ours": ours,
        "pre_existing": pre_existing,
        "timed_out": timed_out,
        "drained": not timed_out,
        "waited": waited,
        "node": {"name": "gpu-a01", "state": "idle", "drain": True, "jobs_running": timed_out, "reason": reason},
        "commands": [],
        "invocation": {"module_args": {"node": "gpu-a01"}},
    }
    answer.update(extra)
    return answer


class FakeModules:
    """Stands in for ActionBase._execute_module: records (module, args) and answers in order."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, module_name=None, module_args=None, task_vars=None, **kwargs):
        self.calls.append((module_name, dict(module_args)))
        if not self.answers:
            raise AssertionError("unexpected module call %s %r" % (module_name, module_args))
        return self.answers.pop(0)

    @property
    def names(self):
        return [call[0] for call in self.calls]


def make_action(args, *answers, check_mode=False, host="gpu-a01"):
    task = MagicMock()
    task.args = dict(args)
    task.async_val = 0
    task.check_mode = check_mode
    task.diff = False
    task.no_log = False
    task.action = "gpuops.cluster.upgrade_drain"
    connection = MagicMock()
    connection._shell.tmpdir = None
    plugin = action_plugin.ActionModule(task, connection, PlayContext(), loader=MagicMock(), templar=None)
    plugin._execute_module = FakeModules(*answers)
    ticks = iter([100.0, 142.25, 200.0, 300.0])
    plugin._clock = lambda: next(ticks)
    return plugin, {"inventory_hostname": host}


def run(args, *answers, **kwargs):
    plugin, task_vars = make_action(args, *answers, **kwargs)
    result = plugin.run(task_vars=task_vars)
    return result, plugin._execute_module


def record_of(result):
    return {key: result[key] for key in drain_adapter.RECORD_KEYS}


# ---------------------------------------------------------------- slurm


SLURM_DRAIN = {"adapter": "slurm", "state": "drained", "run_id": RUN, "timeout": 600, "poll_interval": 5}


def test_slurm_drained_ours_waits_for_the_jobs():
    result, modules = run(SLURM_DRAIN, slurm_answer(waited=42.0))
    assert modules.calls == [
        (
            "gpuops.cluster.slurm_drain",
            {
                "node": "gpu-a01",
                "reason_prefix": "gpuops-upgrade",
                "state": "drained",
                "run_id": RUN,
                "wait": True,
                "wait_timeout": 600,
                "poll_interval": 5,
            },
        )
    ]
    assert not result.get("failed")
    assert record_of(result) == {
        "adapter": "slurm",
        "state": "drained",
        "node": "gpu-a01",
        "action": "drain",
        "ours": True,
        "pre_existing": False,
        "timed_out": False,
        "reason": "gpuops-upgrade[%s]: upgrading the NVIDIA stack" % RUN,
        "waited": 42.0,
        "blocking_pods": [],
        "changed": True,
    }
    assert result["msg"] == "slurm node gpu-a01: drain (ours)"
    assert "invocation" not in result


def test_slurm_drained_keeps_the_record_of_upgrade_record():
    """The record holds drain_record's keys and values, for the audit report."""
    answer = slurm_answer(waited=3.0)
    result = run(SLURM_DRAIN, answer)[0]
    expected = drain_adapter.upgrade_record.drain_record("slurm", slurm=answer)
    assert {key: result[key] for key in expected} == expected


def test_slurm_drained_on_a_node_someone_else_drained_keeps_it():
    answer = slurm_answer(action="none", ours=False, pre_existing=True, reason="bad DIMM, ticket HW-4411")
    result, modules = run(dict(SLURM_DRAIN, node="n3", reason="rolling upgrade"), answer)
    assert modules.calls[0][1]["node"] == "n3"
    assert modules.calls[0][1]["reason"] == "rolling upgrade"
    assert (result["action"], result["ours"], result["pre_existing"], result["changed"]) == ("none", False, True, False)
    assert result["reason"] == "bad DIMM, ticket HW-4411"


def test_slurm_drain_timeout_is_not_a_failure():
    result = run(SLURM_DRAIN, slurm_answer(timed_out=True, waited=600.0))[0]
    assert not result.get("failed")
    assert (result["timed_out"], result["ours"], result["waited"]) == (True, True, 600.0)
    assert result["msg"] == "slurm node gpu-a01: drain (ours); timed out after 600.0s"


def test_slurm_module_failure_fails_the_task_with_its_message():
    failed = {
        "failed": True,
        "msg": "/usr/bin/scontrol update nodename=gpu-a01 state=drain failed: check the node name",
        "rc": 1,
        "stderr": "slurm_update error: Invalid node name specified",
        "commands": ["/usr/bin/scontrol update nodename=gpu-a01 state=drain"],
    }
    result = run(SLURM_DRAIN, failed)[0]
    assert result["failed"] is True
    assert result["msg"].startswith("gpuops.cluster.slurm_drain state=drained for node gpu-a01: /usr/bin/scontrol")
    assert (result["rc"], result["stderr"]) == (1, "slurm_update error: Invalid node name specified")
    assert result["module"] == "gpuops.cluster.slurm_drain"
    assert result["changed"] is False
    assert (result["ours"], result["pre_existing"]) == (None, None)  # not known: a rescue decides


def test_slurm_restored_ours_resumes():
    answer = slurm_answer(action="resume", reason="")
    answer["node"].update(drain=False)
    result, modules = run({"adapter": "slurm", "state": "restored", "ours": True}, answer)
    assert modules.calls == [
        ("gpuops.cluster.slurm_drain", {"node": "gpu-a01", "reason_prefix": "gpuops-upgrade", "state": "resumed"})
    ]
    assert (result["action"], result["ours"], result["changed"], result["reason"]) == ("resume", True, True, None)


def test_slurm_restored_not_back_in_service_fails_with_slurms_state():
    """slurm_drain resumed the node but its resume_wait ran out: the node is not given back as if it were."""
    answer = slurm_answer(action="resume", timed_out=True, waited=120.4, reason="Not responding")
    answer["node"].update(drain=False, state="down", state_flags=["not_responding"])
    result, _modules = run({"adapter": "slurm", "state": "restored", "ours": True}, answer)
    assert result["failed"] is True
    assert result["msg"] == (
        "gpuops.cluster.slurm_drain state=resumed for node gpu-a01: not back in service 120s after its resume: "
        "Slurm shows it down+not_responding (reason: Not responding); see slurmd on the node"
    )
    assert (result["ours"], result["changed"]) == (True, True)


def test_slurm_restored_not_ours_calls_nothing():
    result, modules = run({"adapter": "slurm", "state": "restored", "ours": False})
    assert modules.calls == []
    assert (result["action"], result["ours"], result["pre_existing"], result["changed"]) == ("none", False, True, False)


def test_slurm_restored_without_ours_lets_the_module_decide_from_the_reason():
    answer = slurm_answer(action="none", ours=False, pre_existing=True, reason="bad DIMM")
    result, modules = run({"adapter": "slurm", "state": "restored"}, answer)
    assert modules.names == ["gpuops.cluster.slurm_drain"]
    assert (result["action"], result["ours"], result["pre_existing"]) == ("none", False, True)


def test_slurm_kept_ours_updates_the_reason():
    reason = "failed; see the report of run %s" % RUN
    answer = slurm_answer(action="update_reason", reason="gpuops-upgrade[%s]: %s" % (RUN, reason))
    result, modules = run({"adapter": "slurm", "state": "kept", "run_id": RUN, "reason": reason, "ours": True}, answer)
    assert modules.calls == [
        (
            "gpuops.cluster.slurm_drain",
            {
                "node": "gpu-a01",
                "reason_prefix": "gpuops-upgrade",
                "state": "drained",
                "run_id": RUN,
                "reason": reason,
                "wait": False,
            },
        )
    ]
    assert (result["action"], result["ours"], result["changed"]) == ("update_reason", True, True)
    assert result["reason"] == "gpuops-upgrade[%s]: %s" % (RUN, reason)


def test_slurm_kept_not_ours_leaves_the_reason():
    result, modules = run({"adapter": "slurm", "state": "kept", "run_id": RUN, "reason": "failed", "ours": False})
    assert modules.calls == []
    assert (result["action"], result["ours"], result["pre_existing"], result["changed"]) == ("none", False, True, False)


def test_slurm_kept_default_reason_names_the_run():
    result, modules = run({"adapter": "slurm", "state": "kept", "run_id": RUN}, slurm_answer(action="update_reason"))
    assert modules.calls[0][1]["reason"] == "kept drained; see the report of run %s" % RUN
    assert not result.get("failed")


def test_slurm_check_mode_calls_the_module_which_reports_only():
    answer = slurm_answer(waited=0.0)
    result, modules = run(SLURM_DRAIN, answer, check_mode=True)
    assert modules.names == ["gpuops.cluster.slurm_drain"]
    assert (result["action"], result["changed"]) == ("drain", True)
    assert result["msg"] == "slurm node gpu-a01: would drain (ours)"


def test_check_mode_reaches_the_module_arguments():
    """ActionBase._execute_module marks the module call with the task's check mode: it runs read-only."""
    plugin, task_vars = make_action(SLURM_DRAIN, check_mode=True)
    seen = {}

    class Stop(Exception):
        pass

    def configure(module_name, module_args, task_vars):
        seen.update(module_name=module_name, args=dict(module_args))
        raise Stop

    del plugin._execute_module  # the real one, up to the point the module would be built
    plugin._configure_module = configure
    with pytest.raises(Stop):
        plugin.run(task_vars=task_vars)
    assert seen["module_name"] == "gpuops.cluster.slurm_drain"
    assert seen["args"]["_ansible_check_mode"] is True


# ---------------------------------------------------------------- kubernetes


K8S_DRAIN = {
    "adapter": "kubernetes",
    "state": "drained",
    "run_id": RUN,
    "timeout": 900,
    "poll_interval": 5,
    "kubeconfig": KUBECONFIG,
}
DRAIN_ARGS = {
    "name": "gpu-a01",
    "state": "drain",
    "kubeconfig": KUBECONFIG,
    "delete_options": {"ignore_daemonsets": True, "delete_emptydir_data": True, "wait_timeout": 900, "wait_sleep": 5},
}


MARKED = {"changed": True, "result": {"kind": "Node"}}  # kubernetes.core.k8s patched our mark on or off


def mark_args(value, node="gpu-a01", **auth):
    return {
        "api_version": "v1",
        "kind": "Node",
        "name": node,
        "state": "patched",
        "merge_type": ["merge"],
        "definition": {"metadata": {"annotations": {drain_adapter.K8S_MARK: value}}},
        **auth,
    }


def marked(node, value="gpuops-upgrade[%s]" % RUN):
    """The Node with our mark on it (a cordon of ours)."""
    node = json.loads(json.dumps(node))
    node["metadata"].setdefault("annotations", {})[drain_adapter.K8S_MARK] = value
    return node


def pods_left(*names):
    """The fixture cluster's pods: those named, and the ones a drain leaves (DaemonSet, static, finished)."""
    kept = []
    for pod in load("pods-on-gpu-a01.json")["items"]:
        blocking = kubernetes_node.blocking_pods([pod], "gpu-a01")
        if not blocking or pod["metadata"]["name"] in names:
            kept.append(pod)
    return k8s_info(*kept)


def test_kubernetes_drained_ok():
    drained = {"changed": True, "result": "node gpu-a01 marked unschedulable. 2 Pod(s) deleted from node."}
    result, modules = run(K8S_DRAIN, k8s_info(load("node-schedulable.json")), MARKED, drained, pods_left())
    assert modules.calls == [
        ("kubernetes.core.k8s_info", {"kind": "Node", "name": "gpu-a01", "kubeconfig": KUBECONFIG}),
        # our mark before our cordon
        ("kubernetes.core.k8s", mark_args("gpuops-upgrade[%s]" % RUN, kubeconfig=KUBECONFIG)),
        ("kubernetes.core.k8s_drain", DRAIN_ARGS),
        (
            "kubernetes.core.k8s_info",
            {"kind": "Pod", "field_selectors": ["spec.nodeName=gpu-a01"], "kubeconfig": KUBECONFIG},
        ),
    ]
    assert record_of(result) == {
        "adapter": "kubernetes",
        "state": "drained",
        "node": "gpu-a01",
        "action": "drain",
        "ours": True,
        "pre_existing": False,
        "timed_out": False,
        "reason": "node gpu-a01 marked unschedulable. 2 Pod(s) deleted from node.",
        "waited": 42.25,
        "blocking_pods": [],
        "changed": True,
    }
    assert "s3cr3t-token" not in json.dumps(result)


def test_kubernetes_drain_failed_names_the_blocking_pods_and_cordons_again():
    failed = {"failed": True, "msg": "Pod deletion errors: cannot delete Pods not managed by ReplicationController..."}
    result, modules = run(
        K8S_DRAIN,
        k8s_info(load("node-schedulable.json")),
        MARKED,
        failed,
        pods_left("notebook-5d8f7-qk2lm"),
        {"changed": True, "result": "node gpu-a01 marked unschedulable."},
    )
    assert modules.names == [
        "kubernetes.core.k8s_info",
        "kubernetes.core.k8s",
        "kubernetes.core.k8s_drain",
        "kubernetes.core.k8s_info",
        "kubernetes.core.k8s_drain",
    ]
    assert modules.calls[4][1] == {"name": "gpu-a01", "state": "cordon", "kubeconfig": KUBECONFIG}
    assert not result.get("failed")
    assert (result["timed_out"], result["ours"], result["changed"]) == (True, True, True)
    assert result["blocking_pods"] == ["research/notebook-5d8f7-qk2lm"]
    assert result["reason"].startswith("Pod deletion errors")
    assert result["msg"].endswith("blocking: research/notebook-5d8f7-qk2lm")


def test_kubernetes_drain_timeout_warning_is_a_timeout():
    """k8s_drain does not fail when pods outlast wait_timeout: it warns. The pods read back say which."""
    timed_out = {
        "changed": True,
        "result": "node gpu-a01 marked unschedulable. 2 Pod(s) deleted from node.",
        "warnings": ["timeout reached while pods were still running."],
    }
    result, modules = run(
        K8S_DRAIN, k8s_info(load("node-schedulable.json")), MARKED, timed_out, pods_left("llm-train-7f9c6d-0")
    )
    assert len(modules.calls) == 4  # still cordoned: no second cordon
    assert (result["timed_out"], result["blocking_pods"]) == (True, ["research/llm-train-7f9c6d-0"])
    assert result["reason"] == "timeout reached while pods were still running."


def test_kubernetes_pods_still_there_after_a_quiet_drain_is_a_timeout():
    quiet = {"changed": True, "result": "node gpu-a01 marked unschedulable. 1 Pod(s) deleted from node."}
    result = run(K8S_DRAIN, k8s_info(load("node-schedulable.json")), MARKED, quiet, pods_left("llm-train-7f9c6d-0"))[0]
    assert result["timed_out"] is True
    assert result["reason"] == "pods still on the node after the drain"


def test_kubernetes_drained_on_a_node_cordoned_before_is_not_ours():
    drained = {"changed": False, "result": "node gpu-a02 already marked unschedulable."}
    result, modules = run(dict(K8S_DRAIN, node="gpu-a02"), k8s_info(load("node-cordoned.json")), drained, k8s_info())
    assert modules.calls[1][1]["name"] == "gpu-a02"
    assert (result["ours"], result["pre_existing"], result["timed_out"], result["changed"]) == (
        False,
        True,
        False,
        False,
    )


def test_kubernetes_api_error_fails_the_task_without_the_kubeconfig():
    error = {
        "failed": True,
        "msg": "Failed to retrieve node 'gpu-a01' due to: Unauthorized",
        "invocation": {"module_args": {"kubeconfig": KUBECONFIG}},
    }
    result, modules = run(K8S_DRAIN, k8s_info(load("node-schedulable.json")), MARKED, error)
    assert modules.names == ["kubernetes.core.k8s_info", "kubernetes.core.k8s", "kubernetes.core.k8s_drain"]
    assert result["failed"] is True
    assert result["msg"] == (
        "kubernetes.core.k8s_drain state=drain for node gpu-a01: Failed to retrieve node 'gpu-a01' due to: Unauthorized"
    )
    assert result["ours"] is True  # known before the drain: what a rescue needs
    assert result["waited"] == 42.25
    assert "s3cr3t-token" not in json.dumps(result)


def test_kubernetes_unknown_node_fails_and_says_what_to_set():
    result, modules = run(dict(K8S_DRAIN, node="gpu-zz"), k8s_info())
    assert modules.names == ["kubernetes.core.k8s_info"]
    assert result["failed"] is True
    assert "Kubernetes node 'gpu-zz' not found: set node" in result["msg"]


def test_kubernetes_unreadable_node_fails():
    result = run(K8S_DRAIN, {"failed": True, "msg": "Failed to import the required Python library (kubernetes)"})[0]
    assert result["failed"] is True
    assert result["msg"].startswith("kubernetes.core.k8s_info could not read the Node for node gpu-a01: Failed")


def test_kubernetes_restored_ours_uncordons_and_takes_our_mark_off():
    result, modules = run(
        {"adapter": "kubernetes", "state": "restored", "ours": True},
        k8s_info(marked(load("node-cordoned.json"))),
        {"changed": True, "result": "node gpu-a01 marked schedulable."},
        MARKED,
    )
    assert modules.calls[1] == ("kubernetes.core.k8s_drain", {"name": "gpu-a01", "state": "uncordon"})
    assert modules.calls[2] == ("kubernetes.core.k8s", mark_args(None))
    assert (result["action"], result["ours"], result["changed"]) == ("uncordon", True, True)


def test_kubernetes_restored_leaves_a_node_someone_else_cordoned_during_the_run_and_says_so():
    """Our drain was ours (the record says so), but the cordon on the Node now does not carry our mark: someone else
    cordoned it during the run (after ours was lifted, or took our mark off to keep it). Kept cordoned, reported."""
    plugin, task_vars = make_action(
        {"adapter": "kubernetes", "state": "restored", "ours": True}, k8s_info(load("node-cordoned.json"))
    )
    plugin._display = MagicMock()
    result = plugin.run(task_vars=task_vars)
    assert plugin._execute_module.names == ["kubernetes.core.k8s_info"]
    assert (result["action"], result["ours"], result["pre_existing"], result["changed"]) == ("none", False, True, False)
    assert "cordoned by someone else during the run" in plugin._display.warning.call_args[0][0]
    assert result["msg"] == "kubernetes node gpu-a01: none (not ours)"


def test_kubernetes_drained_takes_a_cordon_of_ours_left_by_a_lost_controller_as_ours():
    """The re-run of a run that lost its controller finds the node cordoned with our mark: ours, given back later."""
    drained = {"changed": False, "result": "node gpu-a02 already marked unschedulable."}
    result, modules = run(
        dict(K8S_DRAIN, node="gpu-a02"),
        k8s_info(marked(load("node-cordoned.json"), "gpuops-upgrade[crashed-run]")),
        MARKED,
        drained,
        k8s_info(),
    )
    assert modules.calls[1] == (
        "kubernetes.core.k8s",
        mark_args("gpuops-upgrade[%s]" % RUN, node="gpu-a02", kubeconfig=KUBECONFIG),
    )
    assert (result["ours"], result["pre_existing"], result["timed_out"]) == (True, False, False)


def test_kubernetes_restored_when_cordoned_before_does_not_uncordon():
    result, modules = run({"adapter": "kubernetes", "state": "restored", "ours": False, "node": "gpu-a02"})
    assert modules.calls == []
    assert (result["action"], result["ours"], result["pre_existing"], result["changed"]) == ("none", False, True, False)


def test_kubernetes_restored_without_ours_keeps_a_cordon_and_warns():
    plugin, task_vars = make_action(
        {"adapter": "kubernetes", "state": "restored"}, k8s_info(load("node-cordoned.json"))
    )
    plugin._display = MagicMock()
    result = plugin.run(task_vars=task_vars)
    assert plugin._execute_module.names == ["kubernetes.core.k8s_info"]
    assert (result["action"], result["ours"], result["changed"]) == ("none", None, False)
    assert "nothing says the cordon is ours" in plugin._display.warning.call_args[0][0]


def test_kubernetes_restored_node_already_schedulable_does_nothing():
    result, modules = run(
        {"adapter": "kubernetes", "state": "restored", "ours": True}, k8s_info(load("node-schedulable.json"))
    )
    assert modules.names == ["kubernetes.core.k8s_info"]
    assert (result["action"], result["changed"]) == ("none", False)


def test_kubernetes_kept_cordons_a_node_back_in_service():
    result, modules = run(
        {"adapter": "kubernetes", "state": "kept"},
        k8s_info(load("node-schedulable.json")),
        MARKED,
        {"changed": True, "result": "node gpu-a01 marked unschedulable."},
    )
    assert modules.calls[1] == ("kubernetes.core.k8s", mark_args("gpuops-upgrade"))
    assert modules.calls[2] == ("kubernetes.core.k8s_drain", {"name": "gpu-a01", "state": "cordon"})
    assert (result["action"], result["ours"], result["changed"]) == ("cordon", True, True)


def test_kubernetes_kept_cordoned_node_is_left():
    result, modules = run(
        {"adapter": "kubernetes", "state": "kept", "ours": True}, k8s_info(marked(load("node-cordoned.json")))
    )
    assert modules.names == ["kubernetes.core.k8s_info"]
    assert (result["action"], result["ours"], result["changed"]) == ("none", True, False)
    # cordoned without our mark: someone else's cordon now
    result = run({"adapter": "kubernetes", "state": "kept", "ours": True}, k8s_info(load("node-cordoned.json")))[0]
    assert (result["action"], result["ours"], result["changed"]) == ("none", False, False)


def test_kubernetes_check_mode_passes_through_and_reads_no_pods_back():
    """kubernetes.core's k8s_drain runs in check mode (evicts nothing); no pod is read back, nothing timed out."""
    would = {"changed": True, "result": "node gpu-a01 marked unschedulable. Would have deleted 2 Pod(s) from node..."}
    result, modules = run(K8S_DRAIN, k8s_info(load("node-schedulable.json")), would, check_mode=True)
    assert modules.calls[1] == ("kubernetes.core.k8s_drain", DRAIN_ARGS)
    assert len(modules.calls) == 2
    assert (result["action"], result["ours"], result["changed"], result["timed_out"]) == ("drain", True, True, False)
    assert result["reason"] == would["result"]
    assert result["msg"] == "kubernetes node gpu-a01: would drain (ours)"


def test_kubernetes_check_mode_with_a_k8s_drain_without_check_mode_predicts_from_the_node():
    skipped = {"skipped": True, "msg": "remote module (kubernetes.core.k8s_drain) does not support check mode"}
    result, modules = run(
        {"adapter": "kubernetes", "state": "restored", "ours": True},
        k8s_info(marked(load("node-cordoned.json"))),
        skipped,
        check_mode=True,
    )
    assert modules.names == ["kubernetes.core.k8s_info", "kubernetes.core.k8s_drain"]
    assert not result.get("failed")
    assert (result["action"], result["changed"]) == ("uncordon", True)


def test_kubernetes_skipped_outside_check_mode_is_a_failure():
    skipped = {"skipped": True, "msg": "no"}
    result = run({"adapter": "kubernetes", "state": "kept"}, k8s_info(load("node-schedulable.json")), MARKED, skipped)[
        0
    ]
    assert result["failed"] is True
    assert result["msg"] == "kubernetes.core.k8s_drain state=cordon for node gpu-a01: skipped: no"


# ---------------------------------------------------------------- none and bad input


@pytest.mark.parametrize("state", ["drained", "restored", "kept"])
def test_none_adapter_calls_nothing(state):
    result, modules = run({"adapter": "none", "state": state})
    assert modules.calls == []
    assert record_of(result) == {
        "adapter": "none",
        "state": state,
        "node": "gpu-a01",
        "action": "none",
        "ours": False,
        "pre_existing": False,
        "timed_out": False,
        "reason": None,
        "waited": 0.0,
        "blocking_pods": [],
        "changed": False,
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"adapter": "slrum", "state": "drained"}, "adapter must be one of: slurm, kubernetes, none, got: slrum"),
        ({"adapter": "slurm", "state": "drain", "run_id": RUN}, "state must be one of: drained, restored, kept"),
        ({"state": "drained"}, "missing required arguments: adapter"),
        ({"adapter": "slurm", "state": "drained"}, "run_id is required with adapter=slurm and state=drained"),
        ({"adapter": "slurm", "state": "drained", "run_id": "r 1"}, "run id 'r 1' may hold only"),
        ({"adapter": "slurm", "state": "drained", "run_id": RUN, "ours": True}, "ours is for state=restored or kept"),
        ({"adapter": "kubernetes", "state": "drained", "timeout": -1}, "timeout must be >= 0"),
        ({"adapter": "none", "state": "drained", "wait": True}, "wait"),
    ],
)
def test_bad_arguments_fail_with_a_message(args, message):
    result, modules = run(args)
    assert result["failed"] is True
    assert message in result["msg"]
    assert result["msg"].startswith("gpuops.cluster.upgrade_drain: ")
    assert modules.calls == []


def test_the_documentation_matches_the_argument_spec():
    options = yaml.safe_load(doc_stub.DOCUMENTATION)["options"]
    assert set(options) == set(action_plugin.ARGUMENT_SPEC)
    for name, spec in action_plugin.ARGUMENT_SPEC.items():
        doc = options[name]
        assert doc["type"] == spec["type"], name
        assert doc.get("default") == spec.get("default"), name
        assert doc.get("choices") == spec.get("choices"), name
        assert bool(doc.get("required")) == bool(spec.get("required")), name
    returned = set(yaml.safe_load(doc_stub.RETURN))
    assert set(drain_adapter.RECORD_KEYS) <= returned


# ---------------------------------------------------------------- drain_adapter, pure


def req(**args):
    return drain_adapter.request(args, "gpu-a01")


def test_request_defaults_and_node_from_the_inventory():
    assert req(adapter="kubernetes", state="drained") == {
        "adapter": "kubernetes",
        "state": "drained",
        "node": "gpu-a01",
        "run_id": None,
        "reason_prefix": "gpuops-upgrade",
        "reason": None,
        "timeout": 3600,
        "poll_interval": 10,
        "kubeconfig": None,
        "ours": None,
    }
    assert req(adapter="slurm", state="restored", node="n7")["node"] == "n7"


def test_request_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="node is not set"):
        drain_adapter.request({"adapter": "slurm", "state": "restored"})
    with pytest.raises(ValueError, match="poll_interval >= 1"):
        req(adapter="slurm", state="restored", poll_interval=0)
    with pytest.raises(ValueError, match="must not hold double quotes"):
        req(adapter="slurm", state="kept", run_id=RUN, reason='say "no"')
    with pytest.raises(ValueError, match="reason prefix"):
        req(adapter="slurm", state="drained", run_id=RUN, reason_prefix="bad[prefix")
    assert drain_adapter.request({"adapter": "none", "state": "kept"})["node"] is None


def test_slurm_args_per_state():
    assert drain_adapter.slurm_args(req(adapter="slurm", state="drained", run_id=RUN, reason="x", timeout=0)) == {
        "node": "gpu-a01",
        "reason_prefix": "gpuops-upgrade",
        "state": "drained",
        "run_id": RUN,
        "reason": "x",
        "wait": True,
        "wait_timeout": 0,
        "poll_interval": 10,
    }
    assert drain_adapter.slurm_args(req(adapter="slurm", state="restored"))["state"] == "resumed"
    assert drain_adapter.slurm_args(req(adapter="slurm", state="restored", ours=False)) is None
    assert drain_adapter.slurm_args(req(adapter="slurm", state="kept", run_id=RUN, ours=False)) is None
    kept = drain_adapter.slurm_args(req(adapter="slurm", state="kept", run_id=RUN))
    assert (kept["state"], kept["wait"], kept["reason"]) == (
        "drained",
        False,
        "kept drained; see the report of run " + RUN,
    )


def test_slurm_record_without_a_drain_result_fails_like_drain_record():
    with pytest.raises(ValueError, match=r"no result of gpuops\.cluster\.slurm_drain"):
        drain_adapter.slurm_record(req(adapter="slurm", state="drained", run_id=RUN), {"changed": False})


def test_k8s_drain_args_never_wait_forever():
    args = drain_adapter.k8s_drain_args(req(adapter="kubernetes", state="drained", timeout=0), "drain")
    assert args["delete_options"]["wait_timeout"] == 1
    assert "kubeconfig" not in args
    assert drain_adapter.k8s_drain_args(req(adapter="kubernetes", state="kept"), "cordon") == {
        "name": "gpu-a01",
        "state": "cordon",
    }


@pytest.mark.parametrize(
    ("state", "ours", "cordon", "action", "owner", "warns", "mark"),
    [
        ("drained", None, "none", "drain", True, False, True),
        ("drained", None, "other", "drain", False, False, None),
        ("drained", None, "ours", "drain", True, False, True),
        ("restored", True, "ours", "uncordon", True, False, False),
        ("restored", True, "other", "none", False, True, None),  # cordoned by someone else during the run
        ("restored", True, "none", "none", True, False, False),
        ("restored", False, None, "none", False, False, None),
        ("restored", None, "other", "none", None, True, None),
        ("restored", None, "ours", "uncordon", True, False, False),
        ("restored", None, "none", "none", False, False, False),
        ("kept", True, "ours", "none", True, False, None),
        ("kept", True, "other", "none", False, False, None),
        ("kept", None, "none", "cordon", True, False, True),
        ("kept", False, None, "none", False, False, None),
    ],
)
def test_k8s_plan(state, ours, cordon, action, owner, warns, mark):
    """``mark``: our mark goes on before a cordon of ours (True), comes off when the node is given back (False)."""
    request = req(adapter="kubernetes", state=state, ours=ours)
    assert drain_adapter.k8s_needs_node(request) is (cordon is not None)
    plan = drain_adapter.k8s_plan(request, cordon)
    assert (plan["action"], plan["ours"], plan["mark"]) == (action, owner, mark)
    assert bool(plan["warning"]) is warns


def test_k8s_cordon_owner_reads_our_mark():
    request = req(adapter="kubernetes", state="restored", reason_prefix="gpuops-upgrade")
    cordoned = load("node-cordoned.json")
    assert drain_adapter.k8s_cordon_owner(request, k8s_info(load("node-schedulable.json"))) == "none"
    assert drain_adapter.k8s_cordon_owner(request, k8s_info(cordoned)) == "other"
    assert drain_adapter.k8s_cordon_owner(request, k8s_info(marked(cordoned))) == "ours"
    assert drain_adapter.k8s_cordon_owner(request, k8s_info(marked(cordoned, "gpuops-upgrade"))) == "ours"
    assert drain_adapter.k8s_cordon_owner(request, k8s_info(marked(cordoned, "gpuops-upgrade-other[x]"))) == "other"
    assert drain_adapter.k8s_mark(req(adapter="kubernetes", state="drained", run_id="r1")) == "gpuops-upgrade[r1]"


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ({"changed": True, "result": "node x marked unschedulable."}, "drained"),
        ({"changed": True, "warnings": ["timeout reached while pods were still running."]}, "timed_out"),
        ({"changed": True, "warnings": [{"msg": "timeout reached while pods were still running."}]}, "timed_out"),
        ({"failed": True, "msg": "Pod deletion errors: cannot delete Pods with local storage"}, "timed_out"),
        ({"failed": True, "msg": "Failed to delete pod research/a due to: Too Many Requests"}, "timed_out"),
        ({"failed": True, "msg": "Failed to patch node due to: Forbidden"}, "error"),
        ({"failed": True, "msg": "Node gpu-a01 not found."}, "error"),
        ({"skipped": True, "msg": "remote module (k8s_drain) does not support check mode"}, "error"),
        ({}, "error"),
    ],
)
def test_k8s_drain_outcome(answer, outcome):
    assert drain_adapter.k8s_drain_outcome(answer)["outcome"] == outcome


def test_k8s_warning_objects_are_read_by_their_message():
    class Event:
        msg = "timeout reached while pods were still running."

    class Summary:
        event = Event()

    assert drain_adapter.k8s_drain_outcome({"warnings": [Summary()]})["outcome"] == "timed_out"


def test_k8s_recordon_only_after_a_failed_drain_of_a_node_that_was_in_service():
    failed = {"failed": True, "msg": "Pod deletion errors: x"}
    timed_out = drain_adapter.k8s_drain_outcome(failed)
    assert drain_adapter.k8s_recordon_needed(False, failed, timed_out) is True
    assert drain_adapter.k8s_recordon_needed(True, failed, timed_out) is False
    warned = {"warnings": ["timeout reached while pods were still running."]}
    assert drain_adapter.k8s_recordon_needed(False, warned, drain_adapter.k8s_drain_outcome(warned)) is False


def test_k8s_cordoned_unknown_node():
    with pytest.raises(ValueError, match="not found"):
        drain_adapter.k8s_cordoned(req(adapter="kubernetes", state="drained"), {"resources": []})
    assert drain_adapter.k8s_cordoned(req(adapter="kubernetes", state="drained"), k8s_info(load("node-cordoned.json")))


def test_module_failure():
    assert drain_adapter.module_failure({"changed": False}) is None
    assert drain_adapter.module_failure({"failed": True}) == "failed without a message"
    assert drain_adapter.module_failure(None) == "no result"
    assert drain_adapter.module_failure({"skipped": True, "msg": "no"}) == "skipped: no"
    assert drain_adapter.k8s_check_mode_unsupported(True, {"skipped": True}) is True
    assert drain_adapter.k8s_check_mode_unsupported(False, {"skipped": True}) is False
    assert drain_adapter.k8s_check_mode_unsupported(True, {"changed": True}) is False


def test_summary_of_an_unknown_owner():
    rec = drain_adapter.record(req(adapter="kubernetes", state="restored"), ours=None)
    assert drain_adapter.summary(rec) == "kubernetes node gpu-a01: none (owner unknown)"
