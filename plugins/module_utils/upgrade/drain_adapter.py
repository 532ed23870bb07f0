# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling upgrade's drain adapters as decisions: which module to call, with what, and what its answer means.

``gpuops.cluster.upgrade_drain`` (an action plugin) takes a node out of service and gives it
back through the scheduler's own modules: ``gpuops.cluster.slurm_drain`` for Slurm,
``kubernetes.core.k8s_info`` and ``kubernetes.core.k8s_drain`` for Kubernetes. The plugin
only runs the modules this file names, with the arguments it builds, and hands the answers
back here; everything it decides is decided here, without I/O.

The record is ``upgrade_record.drain_record``'s (what the audit report keeps under
``drain``) with every key present for every adapter::

    {adapter, state, node, action, ours, pre_existing, timed_out, reason, waited, blocking_pods, changed}

The ownership rule of the upgrade holds for every state: a node drained (or cordoned) by
someone else before the run stays drained; only a drain of ours is given back.

Kubernetes keeps no owner of a cordon, so ours is marked on the Node: the annotation
``gpuops.cluster/cordon`` (:data:`K8S_MARK`), the reason prefix and the run, written before we
cordon and removed when we uncordon. A cordoned Node without our mark is someone else's: one
cordoned before the run, or cordoned again by someone else during it after our cordon or our
mark was lifted (an operator who wants a node we cordoned kept cordoned removes the mark:
``kubectl annotate node NAME gpuops.cluster/cordon-``); it is left cordoned and reported, whatever
the drain record says. A cordon of ours left by a run that lost its controller carries the mark,
so the re-run takes it as ours: the plan's read of every Node (:func:`fleet`) resumes it (counted
out of service from the start, taken first, upgraded or, on the target already, gated and given
back), and counts a node cordoned by someone else out of service, never touched, as under Slurm.
A ``kubectl cordon`` of a node already cordoned changes nothing on the Node: that one cannot be
told from ours.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import kubernetes_node, slurm_node, upgrade_record

ADAPTERS = ("slurm", "kubernetes", "none")
STATES = ("drained", "restored", "kept")
SLURM_DRAIN = "gpuops.cluster.slurm_drain"
K8S_INFO = "kubernetes.core.k8s_info"
K8S_DRAIN = "kubernetes.core.k8s_drain"
K8S_PATCH = "kubernetes.core.k8s"
SLURM_FLEET = "gpuops.cluster.slurm_fleet"
# The Node annotation that says a cordon is ours: written before we cordon, removed when we uncordon (or find the
# cordon is not ours any more). Its value is the reason prefix and the run, such as gpuops-upgrade[20261202T1030Z].
K8S_MARK = kubernetes_node.MARK
DEFAULT_PREFIX = "gpuops-upgrade"
# Seconds one read of every Kubernetes Node may take (the plan's and each during the run; k8s_info has no bound of
# its own): an API that does not answer in that time is a failed read, which changes nothing (the plan stops).
K8S_READ_TIMEOUT = 120
# upgrade_drain's own defaults (its documentation says the same; the rolling upgrade passes its run's values).
DEFAULT_TIMEOUT = 3600
DEFAULT_POLL_INTERVAL = 10
DEFAULT_DRAIN_REASON = "upgrading the NVIDIA stack"
DEFAULT_KEPT_REASON = "kept drained; see the report of run %s"
# k8s_drain ends its wait with this warning (not a failure) when pods outlast wait_timeout.
K8S_TIMEOUT_WARNING = "timeout reached while pods were still running"
# k8s_drain failures that mean pods would not leave (a drain that cannot finish), not that the API failed:
# pods no controller manages (it never deletes those without force) and evictions refused (a PodDisruptionBudget).
K8S_BLOCKED_FAILURES = ("Pod deletion errors", "Failed to delete pod")
RECORD_KEYS = (
    "adapter",
    "state",
    "node",
    "action",
    "ours",
    "pre_existing",
    "timed_out",
    "reason",
    "waited",
    "blocking_pods",
    "changed",
)


# What each adapter can do for the sliding window beyond taking a node out and giving it back. Slurm and Kubernetes
# show the plan which nodes are out of service and whose drain or cordon holds them (:func:`fleet`), and the window
# reads that again during the run (:func:`fleet_read_task`, :func:`fleet_read`): Slurm's nodes and jobs, every
# Kubernetes Node's cordon and Ready condition. Only Slurm shows each node's running job and when it ends, and drains
# a node ahead of its slot (no new job; the running one finishes); Kubernetes and none do neither. Decided here,
# nowhere else.
FLEET_READERS = ("slurm", "kubernetes")
AHEAD_DRAINERS = ("slurm",)
# The window's settings that come from the run's gpuops_upgrade_* settings as they are (drain_ahead is the adapter's).
WINDOW_SETTINGS = ("max_unavailable", "per_domain", "partition_floor", "barrier", "max_job_wait")


def reads_fleet(adapter) -> bool:
    """Whether the window reads the adapter's scheduler again during the run (its nodes' states; Slurm's jobs too)."""
    return adapter in FLEET_READERS


def fleet_reader(refresh: dict) -> str:
    """The adapter whose scheduler the window's ``refresh`` reads (``adapter``; without it, ``slurm``)."""
    adapter = refresh.get("adapter") or "slurm"
    if adapter not in FLEET_READERS:
        raise ValueError("refresh.adapter is %r: set one of %s" % (adapter, ", ".join(FLEET_READERS)))
    return adapter


def fleet_read_task(refresh: dict) -> tuple[str, dict]:
    """The module and arguments of one read of the fleet during the run, from the window's ``refresh``.

    Slurm: ``gpuops.cluster.slurm_fleet`` for the run's nodes (one node query and one job query). Kubernetes:
    ``kubernetes.core.k8s_info kind=Node``, every Node in one call, as the plan reads them.
    """
    if fleet_reader(refresh) == "kubernetes":
        return K8S_INFO, dict(refresh.get("options") or {}, kind="Node")
    return SLURM_FLEET, dict(refresh.get("options") or {}, nodes=sorted(set(refresh["names"].values())))


def fleet_read(refresh: dict, result: dict) -> list:
    """What one read of the fleet during the run (:func:`fleet_read_task`) returned, as ``slurm_fleet``'s ``nodes``.

    Kubernetes: the Nodes read by ``kubernetes_node.survey`` with the run's reason prefix, as the plan reads them
    (cordoned by someone else: ``drained_by_others``; not Ready: ``down``; our cordon: ours). Raises ValueError when
    the result is no answer (no nodes, a Node of the run missing): the window then keeps its last view.
    """
    if fleet_reader(refresh) == "kubernetes":
        nodes = result.get("resources")
        if not isinstance(nodes, list):
            raise ValueError("the read returned no Nodes")
        names = [scheduler_name or host for host, scheduler_name in refresh["names"].items()]
        return kubernetes_node.survey(nodes, names, refresh.get("reason_prefix") or DEFAULT_PREFIX)
    nodes = result.get("nodes")
    if not isinstance(nodes, list):
        raise ValueError("the read returned no nodes")
    return nodes


def fleet(upgrade: dict, slurm=None, kubernetes=None, names=()) -> list | None:
    """The plan's read of the fleet as the window's nodes take it (``slurm_fleet``'s ``nodes`` shape), None without.

    ``slurm`` is what ``gpuops.cluster.slurm_fleet`` returned (taken as it is); ``kubernetes`` the Nodes
    ``kubernetes.core.k8s_info kind=Node`` returned, read by ``kubernetes_node.survey`` for ``names`` (each host's
    Node name) with the run's reason prefix: a cordon carrying our mark is ours (resumed), any other is someone
    else's (not touched), a Node not Ready is down.
    """
    adapter = upgrade.get("drain")
    if kubernetes is not None:
        if adapter != "kubernetes" or slurm is not None:
            raise ValueError("a read of Kubernetes Nodes is the kubernetes drain adapter's, got adapter %r" % adapter)
        return kubernetes_node.survey(kubernetes, list(names), upgrade.get("reason_prefix") or DEFAULT_PREFIX)
    return slurm


def fleet_lines(fleet, hosts: dict) -> list[str]:
    """What the plan says about the fleet read beyond the window's lines (``hosts``: scheduler name -> host).

    Kubernetes: Nodes in service that still carry our mark (someone uncordoned them after a run of ours). The run
    does not take the mark off a node it does not upgrade: a cordon put there later by someone else would pass for
    ours, so the plan names them and how to remove it.
    """
    stale = [entry["name"] for entry in fleet or [] if entry.get("stale_mark")]
    if not stale:
        return []
    return [
        "in service with our %s annotation left on (uncordoned by someone): %s; remove it (kubectl annotate node "
        "NAME %s-), or a later cordon by someone else would pass for ours"
        % (K8S_MARK, ", ".join("%s (Node %s)" % (hosts.get(name, name), name) for name in stale), K8S_MARK)
    ]


def drains_ahead(adapter) -> bool:
    """Whether the adapter can drain a node ahead of its slot (no new job while the running one finishes)."""
    return adapter in AHEAD_DRAINERS


def window_settings(upgrade: dict) -> dict:
    """The window's settings from the run's upgrade settings (``upgrade_settings.settings``): ``drain_ahead`` only
    where the adapter drains ahead (0 otherwise; the validation play refuses it above 0 without Slurm)."""
    window = {name: upgrade.get(name) for name in WINDOW_SETTINGS}
    window["drain_ahead"] = upgrade.get("drain_ahead") if drains_ahead(upgrade.get("drain")) else 0
    return window


def window_run(
    preview: dict, upgrade: dict, delegate_to: str, names: dict, run_id: str, journal: dict, kubeconfig=None
) -> dict:
    """What the strategy gpuops.cluster.upgrade_window builds its one window from (``window_slot.WINDOW_KEYS``).

    ``preview`` is the plan's (``window_preview.plan`` with ``nodes``), ``upgrade`` the run's settings, ``delegate_to``
    the host that runs the adapter's commands (the Slurm controller, the Kubernetes API client), ``names`` each
    inventory host's scheduler name, ``kubeconfig`` the Kubernetes reads' (``gpuops_upgrade_kubeconfig``; None: the
    module's default). With an adapter that reads the fleet the window reads it again during the run (``refresh``);
    with one that drains ahead and ``drain_ahead`` above 0, it drains the nodes next in line ahead of their slot
    (``drain_ahead``).
    """
    adapter, prefix = upgrade.get("drain"), upgrade.get("reason_prefix") or DEFAULT_PREFIX
    refresh = None
    if reads_fleet(adapter):
        refresh = {
            "delegate_to": delegate_to,
            "names": dict(names),
            "interval": int(upgrade.get("refresh_interval")),
            "options": {"reason_prefix": prefix},
        }
        if adapter == "kubernetes":
            # k8s_info kind=Node takes no reason prefix: the survey of its answer does (fleet_read)
            options = {"kubeconfig": kubeconfig} if kubeconfig else {}
            refresh.update(adapter=adapter, reason_prefix=prefix, options=options, timeout=K8S_READ_TIMEOUT)
    ahead = None
    if drains_ahead(adapter) and int(upgrade.get("drain_ahead") or 0) > 0:
        ahead = {
            "delegate_to": delegate_to,
            "names": dict(names),
            "run_id": run_id,
            "reason_prefix": prefix,
            "become": True,
        }
    return {
        "nodes": preview["nodes"],
        "settings": preview["settings"],
        "refresh": refresh,
        "drain_ahead": ahead,
        "journal": journal,
    }


def request(args: dict, inventory_hostname: str | None = None) -> dict:
    """The checked request from the task's arguments (already through the argument spec).

    ``node`` defaults to ``inventory_hostname``. Raises ValueError saying what to set.
    """
    adapter, state = args.get("adapter"), args.get("state")
    if adapter not in ADAPTERS:
        raise ValueError("adapter is %r: set one of %s" % (adapter, ", ".join(ADAPTERS)))
    if state not in STATES:
        raise ValueError("state is %r: set one of %s" % (state, ", ".join(STATES)))
    node = args.get("node") or inventory_hostname
    if adapter != "none" and not node:
        raise ValueError("node is not set: set it to the node's name in %s" % adapter)
    timeout = int(args.get("timeout", DEFAULT_TIMEOUT))
    poll_interval = int(args.get("poll_interval", DEFAULT_POLL_INTERVAL))
    if timeout < 0 or poll_interval < 1:
        raise ValueError(
            "timeout must be >= 0 and poll_interval >= 1 (seconds), got %s and %s" % (timeout, poll_interval)
        )
    ours = args.get("ours")
    if state == "drained" and ours is not None:
        raise ValueError("ours is for state=restored or kept (what the drain recorded); state=drained finds it out")
    prefix = args.get("reason_prefix") or DEFAULT_PREFIX
    run_id = args.get("run_id")
    reason = args.get("reason")
    if state == "kept" and not reason and run_id:
        reason = DEFAULT_KEPT_REASON % run_id
    if adapter == "slurm" and state in ("drained", "kept"):
        if not run_id:
            raise ValueError(
                "run_id is required with adapter=slurm and state=%s: the drain reason names the run" % state
            )
        slurm_node.make_reason(prefix, run_id, reason or DEFAULT_DRAIN_REASON)  # a reason Slurm would refuse fails here
    return {
        "adapter": adapter,
        "state": state,
        "node": node,
        "run_id": run_id,
        "reason_prefix": prefix,
        "reason": reason,
        "timeout": timeout,
        "poll_interval": poll_interval,
        "kubeconfig": args.get("kubeconfig"),
        "ours": ours,
    }


def record(req: dict, **values) -> dict:
    """A record with every key; ``values`` override the defaults (nothing done, nothing owned)."""
    base = {
        "adapter": req["adapter"],
        "state": req["state"],
        "node": req["node"],
        "action": "none",
        "ours": False,
        "pre_existing": False,
        "timed_out": False,
        "reason": None,
        "waited": 0.0,
        "blocking_pods": [],
        "changed": False,
    }
    base.update(values)
    return base


def none_record(req: dict) -> dict:
    """adapter=none: nothing is drained, nothing given back."""
    return record(req, **upgrade_record.drain_record("none"))


def module_failure(result) -> str | None:
    """Why a module's registered result is not an answer (failed, skipped, empty), or None when it is."""
    if not isinstance(result, dict) or not result:
        return "no result"
    if result.get("failed"):
        return str(result.get("msg") or "failed without a message")
    if result.get("skipped"):
        return "skipped: %s" % (result.get("msg") or "no reason given")
    return None


def failure(req: dict, module: str, doing: str, why: str, result=None, **known) -> dict:
    """A failed task result: what failed, for which node, and what the module said (never its arguments)."""
    out = {
        "failed": True,
        "msg": "%s %s for node %s: %s" % (module, doing, req["node"], why),
        "module": module,
    }
    for key in ("rc", "stdout", "stderr", "commands", "status"):
        if isinstance(result, dict) and result.get(key) not in (None, ""):
            out[key] = result[key]
    # what is not known when the task fails is null: a rescue must not take "not ours" for a fact
    out.update(record(req, **dict({"ours": None, "pre_existing": None}, **known)))
    out["changed"] = bool(known.get("changed"))
    return out


# Slurm ---------------------------------------------------------------------------------------


def slurm_args(req: dict) -> dict | None:
    """The arguments of gpuops.cluster.slurm_drain for the request, or None when nothing is to be called.

    * drained: drain (ours, reason naming the run) and wait for the jobs, bounded by ``timeout``.
    * restored: resume; the module resumes only a drain whose reason is ours.
    * kept: keep drained with ``reason``: the module updates the reason of a drain of ours, drains a
      node that is not drained (a failure before the drain) and leaves someone else's drain alone.

    With ``ours`` false (recorded at drain time) restored and kept call nothing: the drain is not ours.
    """
    if req["state"] != "drained" and req["ours"] is False:
        return None
    args = {"node": req["node"], "reason_prefix": req["reason_prefix"]}
    if req["state"] == "restored":
        args["state"] = "resumed"
        return args
    args.update(state="drained", run_id=req["run_id"])
    if req["reason"]:
        args["reason"] = req["reason"]
    if req["state"] == "drained":
        args.update(wait=True, wait_timeout=req["timeout"], poll_interval=req["poll_interval"])
    else:
        args["wait"] = False
    return args


def slurm_not_back(result: dict) -> str | None:
    """Why a node slurm_drain resumed is not back in service (its ``resume_wait`` ran out), None when it is.

    A node that does not come back after its upgrade is not given back as if it had: the task fails, the node is
    recorded failed with Slurm's state and reason, and the window halts.
    """
    if result.get("action") != "resume" or not result.get("timed_out"):
        return None
    node = result.get("node") or {}
    state = "+".join([str(node.get("state") or "unknown"), *[str(flag) for flag in node.get("state_flags") or []]])
    return "not back in service %ss after its resume: Slurm shows it %s (reason: %s); see slurmd on the node" % (
        int(result.get("waited") or 0),
        state,
        node.get("reason") or "none",
    )


def slurm_record(req: dict, result: dict | None) -> dict:
    """The record from slurm_drain's result (None when ``slurm_args`` called nothing)."""
    if result is None:
        return record(req, ours=False, pre_existing=True)
    changed = bool(result.get("changed"))
    if req["state"] == "drained":
        drain = upgrade_record.drain_record("slurm", slurm=result)
        return record(req, action=result.get("action", "none"), changed=changed, **drain)
    return record(
        req,
        action=result.get("action", "none"),
        ours=bool(result.get("ours")),
        pre_existing=bool(result.get("pre_existing")),
        reason=(result.get("node") or {}).get("reason") or None,
        changed=changed,
    )


# Kubernetes ----------------------------------------------------------------------------------


def _auth(req: dict) -> dict:
    return {"kubeconfig": req["kubeconfig"]} if req["kubeconfig"] else {}


def k8s_node_args(req: dict) -> dict:
    """kubernetes.core.k8s_info arguments that read the Node."""
    return dict(kind="Node", name=req["node"], **_auth(req))


def k8s_pods_args(req: dict) -> dict:
    """kubernetes.core.k8s_info arguments that list the pods on the node, in every namespace."""
    return dict(kind="Pod", field_selectors=["spec.nodeName=%s" % req["node"]], **_auth(req))


def k8s_drain_args(req: dict, action: str) -> dict:
    """kubernetes.core.k8s_drain arguments for ``action`` (drain, cordon, uncordon).

    A drain leaves DaemonSet pods (the device plugin, the DCGM exporter), deletes emptyDir data
    and waits up to ``timeout`` seconds, polling every ``poll_interval``; k8s_drain reads a
    wait_timeout of 0 as "forever", so ``timeout=0`` waits the shortest it can, 1 s.
    """
    args = dict(name=req["node"], state=action, **_auth(req))
    if action == "drain":
        args["delete_options"] = {
            "ignore_daemonsets": True,
            "delete_emptydir_data": True,
            "wait_timeout": max(req["timeout"], 1),
            "wait_sleep": req["poll_interval"],
        }
    return args


def k8s_node_of(req: dict, node_result: dict) -> dict:
    """The v1 Node k8s_info read (raises ValueError naming what to set when there is none)."""
    resources = (node_result or {}).get("resources") or []
    if not resources:
        raise ValueError(
            "Kubernetes node %r not found: set node to the node's name in the cluster (kubectl get nodes)" % req["node"]
        )
    return resources[0]


def k8s_cordoned(req: dict, node_result: dict) -> bool:
    """Whether the Node k8s_info read is cordoned (``spec.unschedulable`` or the unschedulable taint)."""
    return kubernetes_node.cordon_state(k8s_node_of(req, node_result))["cordoned"]


def k8s_mark(req: dict) -> str:
    """The value of our mark on a Node we cordon: the reason prefix and the run."""
    return "%s[%s]" % (req["reason_prefix"], req["run_id"]) if req["run_id"] else req["reason_prefix"]


def k8s_marked(req: dict, node: dict) -> bool:
    """Whether the Node carries our mark (of any run with our reason prefix)."""
    return kubernetes_node.marked(node, req["reason_prefix"])


def k8s_cordon_owner(req: dict, node_result: dict) -> str:
    """Who holds the Node's cordon now: ``none`` (not cordoned), ``ours`` (cordoned, our mark on it) or ``other``."""
    return kubernetes_node.cordon_owner(k8s_node_of(req, node_result), req["reason_prefix"])


def k8s_mark_args(req: dict, mark: bool) -> dict:
    """kubernetes.core.k8s arguments that put our mark on the Node (``mark``) or take it off (a merge patch)."""
    value = k8s_mark(req) if mark else None
    return dict(
        api_version="v1",
        kind="Node",
        name=req["node"],
        state="patched",
        merge_type=["merge"],
        definition={"metadata": {"annotations": {K8S_MARK: value}}},
        **_auth(req),
    )


def k8s_needs_node(req: dict) -> bool:
    """Whether the Node must be read: not for restored/kept of a drain recorded as someone else's."""
    return req["state"] == "drained" or req["ours"] is not False


def k8s_plan(req: dict, owner: str | None) -> dict:
    """What to do on the node: ``{action, ours, pre_existing, warning, mark}``; ``action`` is a k8s_drain state or
    none, ``mark`` True to put our mark on the Node before the action, False to take it off after, None to leave it.

    ``owner`` is :func:`k8s_cordon_owner` of the Node now (None when not read: ``k8s_needs_node`` said no).

    * drained: drain. The drain is ours unless the node was cordoned by someone else already (by an
      operator, a remediation controller), which it then stays after the upgrade; a cordon of ours (a
      run that lost its controller) is ours again.
    * restored: uncordon a cordon that carries our mark, whatever the record says. A cordon without it
      is someone else's: kept, and the plan warns (cordoned by someone else during the run, when the
      record says the drain was ours).
    * kept: a node that is not cordoned any more (a failure before the drain, a drain that gave up) is
      cordoned again, and that cordon is ours.
    """
    state, ours = req["state"], req["ours"]
    if state == "drained":
        if owner == "other":
            return {"action": "drain", "ours": False, "pre_existing": True, "warning": None, "mark": None}
        return {"action": "drain", "ours": True, "pre_existing": False, "warning": None, "mark": True}
    if ours is False:
        return {"action": "none", "ours": False, "pre_existing": True, "warning": None, "mark": None}
    if state == "restored":
        if owner == "none":
            return {"action": "none", "ours": bool(ours), "pre_existing": False, "warning": None, "mark": False}
        if owner == "ours":
            return {"action": "uncordon", "ours": True, "pre_existing": False, "warning": None, "mark": False}
        if ours:
            warning = (
                "Kubernetes node %s was cordoned by someone else during the run (the cordon does not carry our %s "
                "annotation): kept cordoned" % (req["node"], K8S_MARK)
            )
            return {"action": "none", "ours": False, "pre_existing": True, "warning": warning, "mark": None}
        return {
            "action": "none",
            "ours": None,
            "pre_existing": None,
            "warning": "Kubernetes node %s is cordoned and nothing says the cordon is ours (no %s annotation): kept "
            "cordoned" % (req["node"], K8S_MARK),
            "mark": None,
        }
    if owner == "ours":
        return {"action": "none", "ours": True, "pre_existing": False, "warning": None, "mark": None}
    if owner == "other":
        return {"action": "none", "ours": False, "pre_existing": True, "warning": None, "mark": None}
    return {"action": "cordon", "ours": True, "pre_existing": False, "warning": None, "mark": True}


def _warning_texts(result: dict) -> list[str]:
    texts = []
    for warning in result.get("warnings") or []:
        if isinstance(warning, str):
            texts.append(warning)
        elif isinstance(warning, dict):
            texts.append(str(warning.get("msg") or warning))
        else:  # ansible-core's WarningSummary
            texts.append(str(getattr(getattr(warning, "event", None), "msg", None) or warning))
    return texts


def k8s_drain_outcome(result: dict) -> dict:
    """What k8s_drain's result means: ``{outcome, reason}``.

    ``outcome`` is ``drained``; ``timed_out`` (pods outlasted wait_timeout, or would not leave:
    no controller owns them, an eviction was refused); or ``error`` (the API, the credentials,
    the module itself: a failure of the task).
    """
    why = module_failure(result)
    if why is None:
        timeout = next((text for text in _warning_texts(result) if K8S_TIMEOUT_WARNING in text), None)
        if timeout:
            return {"outcome": "timed_out", "reason": timeout}
        return {"outcome": "drained", "reason": str(result.get("result") or "")}
    if result.get("failed") and any(str(result.get("msg") or "").startswith(b) for b in K8S_BLOCKED_FAILURES):
        return {"outcome": "timed_out", "reason": why}
    return {"outcome": "error", "reason": why}


def k8s_check_mode_unsupported(check_mode: bool, result: dict) -> bool:
    """Whether k8s_drain skipped a check-mode run (kubernetes.core releases without its check mode).

    The plan, from the Node read, then says what would be done.
    """
    return bool(check_mode and isinstance(result, dict) and result.get("skipped") and not result.get("failed"))


def k8s_recordon_needed(cordoned_before: bool, drain_result: dict, outcome: dict) -> bool:
    """After a drain that could not finish, whether to cordon the node again.

    k8s_drain uncordons a node it cordoned when it refuses to evict (pods no controller owns):
    the node would be back in service with the upgrade not done. It is cordoned again so a
    drain that timed out leaves the node out of service on every adapter, as Slurm's does.
    """
    return outcome["outcome"] == "timed_out" and bool(drain_result.get("failed")) and not cordoned_before


def k8s_drained_record(req: dict, node_result: dict, drain_result: dict, pods_result: dict, waited: float) -> dict:
    """The record of a Kubernetes drain that ran (outcome drained or timed_out).

    The drain timed out when k8s_drain says so, or when pods a drain must evict are still on
    the node afterwards (read back, whatever k8s_drain said): they are named in ``blocking_pods``.
    """
    outcome = k8s_drain_outcome(drain_result)
    pods = (pods_result or {}).get("resources") or []
    still_there = kubernetes_node.blocking_pods(pods, req["node"])
    timed_out = outcome["outcome"] == "timed_out" or bool(still_there)
    reason = outcome["reason"]
    if timed_out and outcome["outcome"] == "drained":
        reason = "pods still on the node after the drain"
    drain = upgrade_record.drain_record(
        "kubernetes",
        k8s_node=node_result,
        k8s_drain={"failed": timed_out, "msg": reason},
        k8s_pods={"resources": pods},
        node_name=req["node"],
    )
    return record(
        req, action="drain", waited=round(float(waited), 3), changed=bool(drain_result.get("changed")), **drain
    )


def k8s_record(req: dict, plan: dict, changed: bool, reason: str | None = None) -> dict:
    """The record of a Kubernetes restored or kept, or of a drain in check mode (``reason``: what k8s_drain said)."""
    return record(
        req,
        action=plan["action"],
        ours=plan["ours"],
        pre_existing=plan["pre_existing"],
        reason=reason or None,
        changed=bool(changed),
    )


def summary(rec: dict, check_mode: bool = False) -> str:
    """One line for the task's ``msg``."""
    would = "would " if check_mode else ""
    owner = {True: "ours", False: "not ours", None: "owner unknown"}[rec["ours"]]
    text = "%s node %s: %s%s (%s)" % (rec["adapter"], rec["node"], would, rec["action"], owner)
    if rec["timed_out"]:
        text += "; timed out after %ss%s" % (
            rec["waited"],
            ", blocking: " + ", ".join(rec["blocking_pods"]) if rec["blocking_pods"] else "",
        )
    return text
