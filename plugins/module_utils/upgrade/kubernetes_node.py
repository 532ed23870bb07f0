# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Kubernetes node as the rolling upgrade sees it: cordoned or not, by whom, what still runs on it.

Takes v1 ``Node`` and ``PodList`` objects as the API server returns them (what
``kubernetes.core.k8s_info`` gives in ``resources``, or ``kubectl get nodes -o json``'s
``items``) and decides; no API calls here. The rule the upgrade keeps: a node that was
cordoned before the upgrade (by an operator, a remediation controller) is cordoned again
afterwards; only a node we cordoned is uncordoned.

Kubernetes keeps no owner of a cordon: ``spec.unschedulable`` is a bare boolean ("Unschedulable
controls node schedulability of new pods", NodeSpec, Kubernetes API reference, Node v1:
https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/). So the upgrade
marks its own cordon with a Node annotation, :data:`MARK` (``metadata.annotations``: "an
unstructured key value map stored with a resource that may be set by external tools to store and
retrieve arbitrary metadata", ObjectMeta:
https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/object-meta/). Its value is
the reason prefix and the run (``gpuops-upgrade[20261202T1030Z]``); ``drain_adapter`` writes it
before it cordons and removes it when it uncordons.

:func:`survey` reads every Node once at the plan (one ``k8s_info kind=Node``) as the window
reads Slurm's fleet: a node cordoned by us (an earlier run that crashed or halted) is ours to
finish, one cordoned by someone else is out of service and not touched, one whose kubelet is not
Ready is down.
"""

from __future__ import annotations

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# The Node annotation that says a cordon is ours (see the module's docstring).
MARK = "gpuops.cluster/cordon"
# The fleet word of the scheduler, in the reasons the plan and the report print ("down in Kubernetes (...)").
SCHEDULER = "Kubernetes"


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


def marked(node: dict, prefix: str) -> bool:
    """Whether the Node carries our mark: of any run with our reason ``prefix`` (``prefix`` or ``prefix[run]``)."""
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(MARK)
    return isinstance(value, str) and (value == prefix or value.startswith(prefix + "["))


def cordon_owner(node: dict, prefix: str) -> str:
    """Who holds the Node's cordon: ``none`` (not cordoned), ``ours`` (cordoned, our mark on it) or ``other``."""
    if not cordon_state(node)["cordoned"]:
        return "none"
    return "ours" if marked(node, prefix) else "other"


def _ready(node: dict) -> dict:
    """The Node's ``Ready`` condition (``{}`` when the Node has none: a kubelet that never registered)."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), {})


def _nodes_of(nodes) -> list[dict]:
    """The Node objects of a ``k8s_info`` result (``resources``), a ``NodeList``/``List`` (``items``) or a list."""
    if isinstance(nodes, dict):
        nodes = nodes.get("resources", nodes.get("items"))
    if not isinstance(nodes, list):
        raise ValueError(
            "expected the Nodes kubernetes.core.k8s_info returned (resources) or kubectl get nodes -o json's items, "
            "got %r" % (type(nodes).__name__,)
        )
    return nodes


def survey(nodes, names, prefix: str) -> list[dict]:
    """The Nodes ``names`` as the window reads them, in the order given, each once (the shape of ``slurm_fleet``).

    Each is ``{name, state, job_end, owner, reason, scheduler, stale_mark}``. ``owner`` is :func:`cordon_owner`'s;
    ``stale_mark`` says the Node carries our mark without a cordon (uncordoned by someone else since). ``state``:

    * ``down``: the Node's ``Ready`` condition is not ``True`` (``Unknown``: the node controller no longer hears
      the kubelet; ``False``: the kubelet says it is not ready), whoever cordoned it; as Slurm's not responding.
    * ``drained_by_others``: cordoned without our mark (an operator, a remediation controller): not touched.
    * ``idle`` otherwise, a cordon of ours included: a node an earlier run of ours left cordoned is one the run
      takes (``fleet_nodes`` resumes it). Kubernetes shows no job end, so no node is ``busy``.

    Names without a Node raise ``ValueError`` naming them and what to set.
    """
    by_name = {}
    for node in _nodes_of(nodes):
        state = cordon_state(node)  # raises on an object that is not a v1 Node
        by_name[state["name"]] = node
    missing = [name for name in dict.fromkeys(names) if name not in by_name]
    if missing:
        raise ValueError(
            "Kubernetes has no Node named %s: set gpuops_upgrade_kubernetes_node_name of the inventory host to the "
            "node's name in kubectl get nodes" % ", ".join(missing)
        )
    fleet = []
    for name in dict.fromkeys(names):
        node = by_name[name]
        owner = cordon_owner(node, prefix)
        mark = ((node.get("metadata") or {}).get("annotations") or {}).get(MARK)
        ready = _ready(node)
        if ready.get("status") != "True":
            state = "down"
            reason = "not Ready: %s" % (
                "%s, %s" % (ready.get("status"), ready.get("reason") or "no reason") if ready else "no Ready condition"
            )
            if owner == "ours":
                reason += "; cordoned by %s" % mark
        elif owner == "other":
            state = "drained_by_others"
            reason = "cordoned without the %s annotation of this upgrade" % MARK
        else:
            state = "idle"
            reason = "cordoned by %s" % mark if owner == "ours" else None
        entry = {"name": name, "state": state, "job_end": None, "owner": owner, "reason": reason}
        # our mark with no cordon (someone uncordoned the node): a later cordon of someone else's would pass for ours
        entry.update(scheduler=SCHEDULER, stale_mark=owner == "none" and marked(node, prefix))
        fleet.append(entry)
    return fleet


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
