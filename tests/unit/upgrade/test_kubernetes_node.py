"""Kubernetes adapter decisions, against recorded-shape API responses (no API server can run here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import kubernetes_node

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kubernetes"


def load(name):
    return json.loads((FIXTURES / name).read_text())


def test_schedulable_node():
    state = kubernetes_node.cordon_state(load("node-schedulable.json"))
    assert state == {"name": "gpu-a01", "cordoned": False, "taints": [], "ready": True}
    assert kubernetes_node.restore_action(state["cordoned"]) == "uncordon"


def test_node_cordoned_before_stays_cordoned():
    state = kubernetes_node.cordon_state(load("node-cordoned.json"))
    assert state["cordoned"] is True
    assert kubernetes_node.restore_action(state["cordoned"]) == "keep_cordoned"


def test_another_taint_is_not_a_cordon():
    state = kubernetes_node.cordon_state(load("node-tainted-only.json"))
    assert state["cordoned"] is False
    assert state["taints"] == ["nvidia.com/gpu-maintenance"]


def test_the_taint_alone_counts_as_cordoned():
    node = load("node-schedulable.json")
    node["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    assert kubernetes_node.cordon_state(node)["cordoned"] is True


def test_not_a_node_raises():
    with pytest.raises(ValueError, match="v1 Node"):
        kubernetes_node.cordon_state(load("pods-on-gpu-a01.json"))


def test_blocking_pods_leave_out_daemonsets_mirror_and_finished_pods():
    pods = load("pods-on-gpu-a01.json")
    assert kubernetes_node.blocking_pods(pods, "gpu-a01") == [
        {"namespace": "research", "name": "llm-train-7f9c6d-0", "gpus": 8},
        {"namespace": "research", "name": "notebook-5d8f7-qk2lm", "gpus": 1},
    ]
    # k8s_info's resources list works as well as the PodList
    assert kubernetes_node.blocking_pods(pods["items"], "gpu-a02") == [
        {"namespace": "research", "name": "llm-train-7f9c6d-1", "gpus": 8}
    ]
    assert kubernetes_node.blocking_pods(pods, "gpu-zz") == []
