# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Kubernetes node as the rolling upgrade sees it: cordoned or not, what still runs on it.

Takes v1 ``Node`` and ``PodList`` objects as the API server returns them (what
``kubernetes.core.k8s_info`` gives in ``resources``) and decides; no API calls here.
The rule the upgrade keeps: a node that was cordoned before the upgrade (by an
operator, a remediation controller) is cordoned again afterwards; only a node we
cordoned is uncordoned.
"""

from __future__ import annotations

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def cordon_state(node: dict) -> dict:
    """``{name, cordoned, taints, ready}`` of a v1 Node object."""
    if not isinstance(node, dict) or node.get("kind", "Node") != "Node":
        raise ValueError("expected a v1 Node object, got %r" % (node.get("kind") if isinstance(node, dict) else node,))
    spec = node.get("spec") or {}
    taints = spec.get("taints") or []
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") == "True" for c in conditions if c.get("type") == "Ready"), False)
    cordoned = bool(spec.get("unschedulable")) or any(t.get("key") == UNSCHEDULABLE_TAINT for t in taints)
    return {
        "name": (node.get("metadata") or {}).get("name"),
        "cordoned": cordoned,
        "taints": [t.get("key") for t in taints],
        "ready": ready,
    }


def restore_action(cordoned_before: bool) -> str:
    """After a successful upgrade: ``uncordon`` a node we cordoned, ``keep_cordoned`` one that was cordoned already."""
    return "keep_cordoned" if cordoned_before else "uncordon"


def _owner_kinds(pod: dict) -> set[str]:
    return {ref.get("kind") for ref in (pod.get("metadata") or {}).get("ownerReferences") or []}


def blocking_pods(pods: dict | list, node_name: str) -> list[dict]:
    """Pods on ``node_name`` that a drain must evict before the GPU stack can change.

    Leaves out what a drain leaves in place: DaemonSet pods (they come back at
    once; the NVIDIA device plugin and DCGM exporter are DaemonSets), mirror
    (static) pods and finished pods. Returns ``[{namespace, name, gpus}]`` where
    ``gpus`` is the number of ``nvidia.com/gpu`` the pod's containers request.
    """
    items = pods.get("items", []) if isinstance(pods, dict) else list(pods)
    blocking = []
    for pod in items:
        spec = pod.get("spec") or {}
        meta = pod.get("metadata") or {}
        if spec.get("nodeName") != node_name:
            continue
        if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
            continue
        if "DaemonSet" in _owner_kinds(pod) or MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            continue
        gpus = 0
        for container in spec.get("containers") or []:
            limits = (container.get("resources") or {}).get("limits") or {}
            gpus += int(limits.get("nvidia.com/gpu", 0) or 0)
        blocking.append({"namespace": meta.get("namespace"), "name": meta.get("name"), "gpus": gpus})
    return sorted(blocking, key=lambda pod: (pod["namespace"] or "", pod["name"] or ""))
