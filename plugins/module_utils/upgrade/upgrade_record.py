# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a rolling upgrade records: the stack fact on each node, the per-node decision, the audit report.

The stack fact is ``/etc/ansible/facts.d/gpuops_stack.fact`` (JSON) on each node::

    {"schema": 1,
     "current":  {stack} or null,   # the stack gpuops last installed and gated there
     "previous": {stack} or null,   # the stack before the last change: what a rollback reinstalls
     "pending":  {run_id, target_driver_version, started_at} or null,   # an upgrade begun, not finished
     "history":  [{run_id, from, to, result, at}]}                       # the last HISTORY_LENGTH changes

A ``{stack}`` is ``{driver_version, kernel_modules, cuda_version, resolved}``, ``resolved``
being the output of ``gpuops.cluster.resolve_stack`` (what the nvidia_stack role installs),
or null when only the observed versions are known (no rollback possible then).
No I/O here: the playbook reads and writes the file, these functions compute its content.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import kubernetes_node, window_audit

SCHEMA = 1
HISTORY_LENGTH = 10
NODE_STATUSES = (
    "skipped",  # already on the target stack and healthy
    "excluded",  # unhealthy before the upgrade: reported, left out
    "upgraded",  # on the target stack, gated, back in service (or kept drained for its other owner)
    "deferred",  # its job did not end within max_job_wait: in service (resumed if drained), not upgraded
    "failed",  # a gate or a step failed: left drained
    "rolled_back",  # failed, then back on the previous stack, gated and back in service
    "rollback_failed",  # failed, and the rollback failed too: left drained
    "not_reached",  # planned, but the run halted before the window admitted it
    "unavailable",  # drained or down by someone else: not touched, counted as out of service
    "blocked",  # a rule of the window (per domain, partition floor) kept it out even with nothing in flight
    "reserved",  # in a Slurm reservation that is not ours: left alone, in service
)
# Not upgraded although the run went on (unless the node's record halted it).
NOT_UPGRADED_STATUSES = ("excluded", "deferred", "blocked", "unavailable", "reserved")
FAILED_STATUSES = frozenset({"failed", "rolled_back", "rollback_failed"})


def empty_fact() -> dict:
    return {"schema": SCHEMA, "current": None, "previous": None, "pending": None, "history": []}


def load_fact(content) -> dict:
    """The fact as Ansible's local facts give it (a dict, or {} / a string when absent or unreadable)."""
    if not isinstance(content, dict) or content.get("schema") != SCHEMA:
        return empty_fact()
    fact = empty_fact()
    fact.update({key: content.get(key) for key in fact})
    fact["history"] = list(content.get("history") or [])
    return fact


def stack_summary(resolved: dict | None) -> dict | None:
    """The ``{stack}`` entry of a resolved stack."""
    if not resolved:
        return None
    return {
        "driver_version": resolved.get("driver_version"),
        "kernel_modules": resolved.get("kernel_modules"),
        "cuda_version": resolved.get("cuda_version"),
        "resolved": resolved,
    }


def begin(fact, target: dict, run_id: str, now: str, fallback_previous: dict | None = None) -> dict:
    """The fact to write before the node's stack changes.

    ``previous`` becomes the stack that is there now: ``current`` of the fact, else
    ``fallback_previous`` (a resolved stack the operator names for nodes installed
    before gpuops recorded anything). An upgrade already pending (an aborted run)
    keeps the ``previous`` it recorded: the node may be half-way, and a rollback must
    go back to where it started. A node whose ``current`` is the target already (resumed: on the target but
    left drained by us) keeps its ``previous``.
    """
    fact = load_fact(fact)
    if fact["pending"] is None and fact["current"] is not None and fact["current"] == stack_summary(target):
        pass  # already on the target (a node resumed to be verified and given back): the rollback stays where it was
    elif fact["pending"] is None:
        fact["previous"] = fact["current"] or stack_summary(fallback_previous)
    elif fact["previous"] is None:
        fact["previous"] = stack_summary(fallback_previous)
    fact["pending"] = {
        "run_id": run_id,
        "target_driver_version": target.get("driver_version"),
        "started_at": (fact["pending"] or {}).get("started_at") or now,
    }
    return fact


def finish(fact, target: dict, run_id: str, now: str, result: str) -> dict:
    """The fact after the node's upgrade ends with ``result`` (a node status)."""
    fact = load_fact(fact)
    if result not in NODE_STATUSES:
        raise ValueError("unknown node status %r, expected one of %s" % (result, ", ".join(NODE_STATUSES)))
    before = (fact["previous"] or {}).get("driver_version")
    if result == "upgraded":
        fact["current"] = stack_summary(target)
        fact["pending"] = None
    elif result == "rolled_back":
        fact["current"] = fact["previous"]
        fact["pending"] = None
    # failed / rollback_failed: pending stays, so a re-run knows the node is half-way and ours.
    fact["history"] = (
        fact["history"]
        + [{"run_id": run_id, "from": before, "to": target.get("driver_version"), "result": result, "at": now}]
    )[-HISTORY_LENGTH:]
    return fact


def rollback_stack(fact) -> dict | None:
    """The resolved stack a rollback reinstalls, or None when none was recorded."""
    previous = load_fact(fact)["previous"]
    return (previous or {}).get("resolved")


def on_target(stack_facts: dict) -> bool:
    """True when the node's installed packages are the requested ones and the loaded module matches them.

    ``stack_facts`` is ``ansible_facts.gpu_stack`` from ``gpuops.cluster.gpu_stack_facts``
    run with the target stack as ``requested``.
    """
    drift = (stack_facts or {}).get("drift") or {}
    if not drift or "installed_differs" not in drift:
        return False
    return not drift["installed_differs"] and not drift.get("loaded_differs") and not drift.get("reboot_required")


def kernel_move(kernel) -> dict | None:
    """What the survey's check-mode ``gpuops.cluster.kernel_package`` said about ``gpuops_kernel`` on the node.

    None when it did not run (no ``gpuops_kernel``: skipped, or no result). Else ``{moves, kernel, running,
    problem}``: ``moves`` when the node would install packages for the kernel or reboot into it; ``problem`` the
    module's message when it failed (the kernel cannot be resolved there), a check that could not run.
    """
    if not isinstance(kernel, Mapping) or not kernel or kernel.get("skipped"):
        return None
    if kernel.get("failed") or "kernel" not in kernel:
        return {
            "moves": False,
            "kernel": kernel.get("kernel"),
            "running": kernel.get("running"),
            "problem": str(kernel.get("msg") or "the kernel check returned no kernel"),
        }
    return {
        "moves": bool(kernel.get("reboot")) or bool(kernel.get("installed")),
        "kernel": kernel["kernel"],
        "running": kernel.get("running"),
        "problem": None,
    }


def decide(stack_facts: dict, health: dict, fact=None, kernel=None) -> dict:
    """Survey decision for one node before planning: ``{decision, reason}``.

    * ``upgrade`` with reason ``resume``: an upgrade of ours is pending there (an aborted
      run); finish it whatever the health says (the node is drained by us, and a
      half-upgraded node is expected to fail its health check).
    * ``exclude``: unhealthy before we touch it: reported, never upgraded silently; or
      ``gpuops_kernel`` cannot be resolved there (``kernel``, the survey's check-mode
      ``gpuops.cluster.kernel_package``): the window's move would fail on the drained node.
    * ``skip``: already on the target stack and healthy, and its kernel would not move.
    * ``upgrade``: otherwise; a node on the target stack whose kernel would move
      (``gpuops_kernel``) is upgraded too, so the move happens inside the window.
    """
    fact = load_fact(fact)
    healthy = bool((health or {}).get("healthy"))
    if fact["pending"] is not None:
        return {"decision": "upgrade", "reason": "resume: upgrade of run %s pending" % fact["pending"].get("run_id")}
    if not healthy:
        failed = ((health or {}).get("summary") or {}).get("failed") or [(health or {}).get("msg") or "no verdict"]
        return {"decision": "exclude", "reason": "unhealthy before the upgrade: %s" % "; ".join(map(str, failed))}
    move = kernel_move(kernel)
    if move is not None and move["problem"]:
        return {"decision": "exclude", "reason": "gpuops_kernel cannot be moved to here: %s" % move["problem"]}
    if on_target(stack_facts):
        if move is not None and move["moves"]:
            return {
                "decision": "upgrade",
                "reason": "kernel moves from %s to %s (gpuops_kernel); the stack is on the target"
                % (move["running"], move["kernel"]),
            }
        return {"decision": "skip", "reason": "already on the target stack and healthy"}
    return {"decision": "upgrade", "reason": "stack differs from the target"}


SURVEY_STATUSES = {"skip": "skipped", "exclude": "excluded"}


def survey(host, stack_facts: dict, health: dict, fact=None, kernel=None, domains=None, scheduler_name=None) -> dict:
    """What the survey keeps of one node: ``{decision, entry, record}``.

    ``decision`` is :func:`decide`'s; ``entry`` describes the node for the window (``host``, ``done`` when it is
    not upgraded, its failure ``domains``, its ``scheduler_name``); ``record`` is the report's record of a node
    skipped or left out (its driver before and after), None for a node to upgrade (the window's record is its).
    """
    decision = decide(stack_facts, health, fact, kernel)
    upgrade = decision["decision"] == "upgrade"
    installed = ((stack_facts or {}).get("drift") or {}).get("installed_driver_version")
    record = None
    if not upgrade:
        record = {
            "host": host,
            "status": SURVEY_STATUSES[decision["decision"]],
            "reason": decision["reason"],
            "before": {"driver_version": installed},
            "after": {"driver_version": installed},
        }
    entry = {"host": host, "done": not upgrade, "domains": domains, "scheduler_name": scheduler_name or host}
    return {"decision": decision, "entry": entry, "record": record}


def surveyed_records(nodes) -> list:
    """The survey's records (``rolling_upgrade_survey_record``) of the nodes skipped or left out, from their vars."""
    return [node["rolling_upgrade_survey_record"] for node in nodes if node.get("rolling_upgrade_survey_record")]


def plan_lines(window: dict, run_id: str, upgrade: dict, nodes, gate_problems=()) -> list:
    """What the plan prints before any node moves: the run, the window's lines, each node skipped or left out with
    why, and each node whose gate would fail for a missing tool."""
    head = "run %s, drain adapter %s, on failure %s%s" % (
        run_id,
        upgrade.get("drain"),
        upgrade.get("on_failure"),
        ", plan only: nothing moves" if upgrade.get("plan_only") else "",
    )
    left = ["%s: %s" % (record.get("host"), record.get("reason")) for record in surveyed_records(nodes)]
    return [head, *(window.get("lines") or []), *left, *("gate would fail: %s" % line for line in gate_problems)]


LOST_REASON = "its part of the run did not end (the node or the controller was lost while it held its slot)"


def report_payload(run_id: str, started_at: str, preview: dict, upgrade: dict, surveyed=()) -> dict:
    """The plan's part of the run's report, which the strategy writes in its journal's ``start``: ``run_id``,
    ``started_at``, ``plan`` (the window's preview without its nodes and lines), ``window`` (its nodes and settings,
    to check the run against every rule), ``settings`` (the run's, :func:`run_settings`) and ``survey`` (the survey's
    records of the nodes skipped or left out, from the ``surveyed`` hosts' vars)."""
    return {
        "run_id": run_id,
        "started_at": started_at,
        "plan": {key: value for key, value in preview.items() if key not in ("nodes", "lines")},
        "window": {"nodes": preview.get("nodes"), "settings": preview.get("settings")},
        "settings": run_settings(upgrade, preview),
        "survey": surveyed_records(surveyed),
    }


def journal_records(payload: dict, replayed=None) -> tuple[list, dict]:
    """``(records, slots)`` of the report from the journal replayed (``run_journal.replay``): each node's record as
    its last release built it (across the operation: a run continuing one whose controller was lost reports the nodes
    that run released as it released them), else as the last run's slot task built it when its window did not admit
    it, else ``failed`` when the last run admitted it and it never came back with a record (the node or the controller
    lost), else the survey's (``payload``: skipped, left out). Without a journal (no node reached the window), the
    survey's records alone."""
    records = {record["host"]: record for record in payload.get("survey") or [] if isinstance(record, dict)}
    if not replayed:
        return list(records.values()), {}
    for host, why in (replayed.get("lost") or {}).items():
        records[host] = {"host": host, "status": "failed", "halt": True, "reason": why or LOST_REASON}
    records.update(replayed.get("not_admitted") or {})
    records.update(replayed.get("records") or {})
    return [dict(record, host=host) for host, record in records.items()], dict(replayed.get("slots") or {})


def journal_report(payload: dict, finished_at: str, replayed=None) -> dict:
    """The run's audit report from its journal alone (``replayed``; :func:`journal_records`), with the plan's part
    (``payload``, :func:`report_payload`) its ``start`` carries; without a journal (no node reached the window), from
    the plan's part alone."""
    records, slots = journal_records(payload, replayed)
    return report(
        payload.get("run_id"),
        dict(payload.get("plan") or {}),
        records,
        payload.get("started_at"),
        finished_at,
        payload.get("settings"),
        payload.get("window"),
        slots,
        replayed,
    )


def run_settings(upgrade: dict, window: dict) -> dict:
    """The run's settings as the report shows them."""
    return {
        "drain": upgrade.get("drain"),
        "on_failure": upgrade.get("on_failure"),
        "on_drain_timeout": upgrade.get("on_drain_timeout"),
        "max_job_wait": int(upgrade.get("max_job_wait") or 0),
        "window": window.get("settings"),
    }


def drain_record(adapter: str, slurm=None, k8s_node=None, k8s_drain=None, k8s_pods=None, node_name=None) -> dict:
    """The ``drain`` entry of a node's record from what its drain adapter returned.

    * ``slurm``: the registered result of ``gpuops.cluster.slurm_drain``.
    * ``kubernetes``: ``k8s_node``, ``kubernetes.core.k8s_info`` of the Node read before the
      drain (was it cordoned already?); ``k8s_drain``, the result of ``k8s_drain``; and
      ``k8s_pods``, ``k8s_info`` of the node's pods, read when the drain failed.
    * ``none``: nothing is drained.

    ``ours`` says whether the upgrade may undo the drain afterwards: a node drained or
    cordoned by someone else before the run stays that way.
    """
    if adapter == "slurm":
        result = slurm or {}
        if "ours" not in result:
            why = result.get("msg") or "the drain did not run"
            raise ValueError("no result of gpuops.cluster.slurm_drain: %s" % why)
        return {
            "adapter": "slurm",
            "ours": bool(result["ours"]),
            "pre_existing": bool(result.get("pre_existing")),
            "timed_out": bool(result.get("timed_out")),
            "reason": (result.get("node") or {}).get("reason"),
            "waited": result.get("waited"),
        }
    if adapter == "kubernetes":
        resources = (k8s_node or {}).get("resources") or []
        if not resources:
            raise ValueError(
                "Kubernetes node %r not found (%s): set gpuops_upgrade_kubernetes_node_name to its name in the cluster"
                % (node_name, (k8s_node or {}).get("msg") or "no such Node")
            )
        cordoned_before = kubernetes_node.cordon_state(resources[0])["cordoned"]
        drain = k8s_drain or {}
        failed = bool(drain.get("failed"))
        pods = (k8s_pods or {}).get("resources") or []
        return {
            "adapter": "kubernetes",
            "ours": not cordoned_before,
            "pre_existing": cordoned_before,
            "timed_out": failed,
            "reason": drain.get("msg") or "",
            "blocking_pods": [
                "%s/%s" % (pod["namespace"], pod["name"])
                for pod in (kubernetes_node.blocking_pods(pods, node_name) if failed else [])
            ],
        }
    if adapter == "none":
        return {"adapter": "none", "ours": False, "pre_existing": False, "timed_out": False}
    raise ValueError("unknown drain adapter %r, expected slurm, kubernetes or none" % (adapter,))


def _duration(timings: dict, start: str, end: str):
    if timings.get(start) is None or timings.get(end) is None:
        return None
    return round(float(timings[end]) - float(timings[start]), 3)


def node_entry(record: dict) -> dict:
    """A node's audit entry, with durations in seconds computed from its epoch timings."""
    timings = dict(record.get("timings") or {})
    entry = dict(record)
    entry["durations"] = {
        "drain": _duration(timings, "drain_started", "drained"),
        "upgrade": _duration(timings, "drained", "upgraded"),
        "gate": _duration(timings, "upgraded", "gated"),
        "total": _duration(timings, "started", "finished"),
    }
    return entry


def window_timeline(nodes: list) -> list:
    """``(host, admitted_at, released_at)`` of every node that held a slot (released at its finish when unknown)."""
    timeline = []
    for node in nodes:
        slot = node.get("slot") or {}
        start = slot.get("admitted_at")
        if start is None:
            continue
        end = slot.get("released_at") or (node.get("timings") or {}).get("finished") or start
        timeline.append((node["host"], float(start), float(end)))
    return timeline


def report(
    run_id: str,
    plan: dict,
    records: list,
    started_at: str,
    finished_at: str,
    settings=None,
    window=None,
    slots=None,
    journal=None,
) -> dict:
    """The audit report of a run: plan, per node before/after, timings, gate verdicts, what halted.

    ``plan`` is the window's preview (``window_preview.plan``); ``window`` the window's nodes and
    settings (``{nodes, settings}``), to check the run's timeline against every rule; ``slots``
    the strategy's record of each host's slot (``{host: {admitted_at, released_at, ...}}``);
    ``journal`` the run's journal replayed (``run_journal.replay``): when given, the window's
    timeline and the reads of the fleet come from it, and the report says which run it continued.
    """
    slots = slots or {}
    by_host = {}
    for record in records:
        slot = slots.get(record["host"])
        by_host[record["host"]] = dict(record, slot=slot) if slot else record
    canaries = set(plan.get("canary", []))
    nodes = []
    for host in plan.get("order", []):
        record = by_host.pop(host, None) or {"host": host, "status": "not_reached"}
        nodes.append(node_entry(dict(record, canary=host in canaries)))
    reasons = plan.get("unavailable_reasons") or {}
    for host in plan.get("unavailable", []):
        if host not in by_host:
            by_host[host] = {"host": host, "status": "unavailable", "reason": reasons.get(host, "out of service")}
    reserved = plan.get("reserved_reasons") or {}
    for host in plan.get("reserved", []):
        if host not in by_host:
            by_host[host] = {
                "host": host,
                "status": "reserved",
                "reason": reserved.get(host, "in a Slurm reservation that is not ours: left alone"),
            }
    for host in sorted(by_host):  # skipped, excluded, unavailable and reserved nodes, outside the window
        nodes.append(node_entry(dict(by_host[host], canary=False)))
    halted = [node for node in nodes if node.get("status") in FAILED_STATUSES or node.get("halt")]
    # not upgraded although the run went on: left out unhealthy, deferred for its job, kept out by a
    # rule of the window, out of service by someone else, or in someone else's reservation
    not_upgraded = [
        {"host": node["host"], "status": node["status"], "reason": node.get("reason")}
        for node in nodes
        if node.get("status") in NOT_UPGRADED_STATUSES and not node.get("halt")
    ]
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node.get("status", "unknown")] = counts.get(node.get("status", "unknown"), 0) + 1
    if halted:
        result = "halted"
    elif not_upgraded:
        result = "partial"
    elif not plan.get("order"):
        result = "nothing_to_do"
    else:
        result = "completed"
    timeline = window_timeline(nodes)
    if journal:
        # the journal's timeline: every admission and release as written when it happened
        timeline = [
            (node, float(start), float(end)) for node, start, end in journal.get("timeline") or [] if end is not None
        ]
    # nodes drained ahead of their slot (journal only): from the drain until admitted or given back; one still
    # drained when the journal ends counts to its end
    ahead = [
        (node, float(start), float(end if end is not None else journal.get("ended_at") or start))
        for node, start, end in (journal or {}).get("ahead_spans") or []
    ]
    window_report = {
        "timeline": [list(entry) for entry in timeline],
        "drained_ahead": [list(entry) for entry in (journal or {}).get("ahead_spans") or []],
        "violations": [],
        "makespan": None,
    }
    if timeline:
        window_report["makespan"] = round(max(end for _h, _s, end in timeline) - min(s for _h, s, _e in timeline), 3)
    if window and (timeline or ahead):
        window_report["violations"] = window_audit.check(
            timeline, window.get("nodes") or [], window.get("settings"), ahead=ahead
        )
    refreshes = refresh_summary(
        journal.get("refreshes")
        if journal
        else max(
            (list(slot.get("refreshes") or []) for slot in slots.values() if isinstance(slot, dict)),
            key=len,
            default=[],
        )
    )
    return {
        "run_id": run_id,
        "started_at": started_at,
        "finished_at": finished_at,
        "result": result,
        "halted_by": (
            {"host": halted[0]["host"], "status": halted[0].get("status"), "reason": halted[0].get("reason")}
            if halted
            else None
        ),
        "not_upgraded": not_upgraded,
        "settings": settings or {},
        "plan": {key: value for key, value in plan.items() if key not in ("nodes", "lines")},
        "window": window_report,
        # the reads of the fleet during the run (fresh state), from the slot records
        "refreshes": refreshes,
        "counts": counts,
        "nodes": nodes,
        "journal": (
            {
                key: journal.get(key)
                for key in ("path", "run_id", "resumed_from", "resumed", "events", "in_flight", "halted", "ended_at")
            }
            if journal
            else None
        ),
    }


def refresh_summary(reads) -> dict:
    """The reads of the fleet during the run, for the report: ``{count, failed, at, reads}``."""
    reads = [read for read in reads or [] if isinstance(read, dict)]
    return {
        "count": len(reads),
        "failed": sum(1 for read in reads if not read.get("ok")),
        "at": [read.get("at") for read in reads],
        "reads": reads,
    }


def summary_lines(audit: dict) -> list[str]:
    """The human summary printed at the end of a run."""
    counts = ", ".join("%s %d" % (status, count) for status, count in sorted(audit["counts"].items()))
    lines = ["run %s: %s (%s)" % (audit["run_id"], audit["result"], counts or "no nodes")]
    for node in audit["nodes"]:
        before = (node.get("before") or {}).get("driver_version") or "?"
        after = (node.get("after") or {}).get("driver_version") or "?"
        total = node["durations"]["total"]
        lines.append(
            "%-9s %-16s %-18s %s -> %s%s%s"
            % (
                "canary" if node.get("canary") else "-",
                node["host"],
                node.get("status", "unknown"),
                before,
                after,
                " in %ss" % total if total is not None else "",
                ": %s" % node["reason"] if node.get("reason") else "",
            )
        )
    if (audit.get("journal") or {}).get("resumed_from"):
        lines.append(
            "continued the run of journal %s: %s taken first"
            % (audit["journal"]["resumed_from"], ", ".join(audit["journal"]["resumed"]) or "no node")
        )
    refreshes = audit.get("refreshes") or {}
    if refreshes.get("count"):
        lines.append(
            "fleet read again %d time(s) during the run%s"
            % (refreshes["count"], ", %d failed" % refreshes["failed"] if refreshes.get("failed") else "")
        )
    if audit.get("not_upgraded") and not audit["halted_by"]:
        lines.append(
            "NOT UPGRADED: %s; see their reasons above"
            % ", ".join("%s (%s)" % (node["host"], node["status"]) for node in audit["not_upgraded"])
        )
    if audit["halted_by"]:
        lines.append(
            "HALTED at %s (%s): no further node was touched"
            % (audit["halted_by"]["host"], audit["halted_by"]["status"])
        )
    return lines
