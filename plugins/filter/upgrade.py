# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the rolling upgrade (playbooks/rolling_upgrade.yml).

Documentation for each filter lives in the sidecar YAML next to this file
(upgrade_window.yml, upgrade_window_run.yml, upgrade_plan.yml, upgrade_decision.yml, upgrade_survey.yml,
upgrade_plan_lines.yml, upgrade_run_report.yml, upgrade_stack_fact.yml, upgrade_report.yml, upgrade_drain_record.yml).
"""

from __future__ import annotations

import datetime
import os
import time

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import (
    drain_adapter,
    fleet_nodes,
    run_journal,
    upgrade_record,
    upgrade_settings,
    window_open,
    window_preview,
)

PREFIX = "gpuops.cluster."


def upgrade_window(
    hosts,
    settings=None,
    slurm=None,
    canary=None,
    now=None,
    maintenance=None,
    upgrade=None,
    kubernetes=None,
    journal=None,
):
    """The window's nodes and its preview for the plan-only run, with ``lines`` describing it for the operator.

    The preview is of the Window the strategy opens (``window_open.window``): with ``journal`` (the run's, as the
    strategy gets it), the nodes a previous run left mid-upgrade are marked from its journal, and a run lost mid-way
    is continued with its deadline.

    ``upgrade`` (the run's gpuops_upgrade_* settings) gives the window's settings through its drain adapter
    (``drain_adapter.window_settings``), instead of ``settings``, and the maintenance reservation unless given.
    ``kubernetes`` (the Nodes k8s_info returned, with ``upgrade``) is read by the adapter as Slurm's fleet is.
    """
    try:
        now = time.time() if now is None else now
        if kubernetes is not None and upgrade is None:
            raise ValueError("kubernetes needs upgrade (the run's settings: the drain adapter and the reason prefix)")
        if upgrade is not None:
            if settings:
                raise ValueError("set settings or upgrade, not both")
            settings = drain_adapter.window_settings(dict(upgrade))
            settings["deadline"] = upgrade_settings.deadline_at(upgrade.get("deadline"), now)
            maintenance = upgrade.get("maintenance_reservation") if maintenance is None else maintenance
            names = [host.get("scheduler_name") or host.get("host") for host in hosts if isinstance(host, dict)]
            slurm = drain_adapter.fleet(dict(upgrade), slurm, kubernetes, names)
            if kubernetes is not None:
                maintenance = None  # a Slurm reservation: Kubernetes has none (ignored there, as before the read)
        nodes = fleet_nodes.window_nodes(list(hosts), slurm, canary or (), maintenance or None)
        # the settings carry drain ahead only where the adapter drains ahead (drain_adapter.window_settings)
        window, continues = window_open.window({"nodes": nodes, "settings": settings, "journal": journal}, now, True)
        preview = window_preview.plan(window, now, continues)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("%supgrade_window: %s" % (PREFIX, exc)) from exc
    by_scheduler = {host.get("scheduler_name") or host.get("host"): host.get("host") for host in hosts}
    preview["lines"] = window_preview.describe(preview) + drain_adapter.fleet_lines(slurm, by_scheduler)
    preview["nodes"] = nodes
    preview["unavailable_reasons"] = {
        by_scheduler.get(name, name): why for name, why in fleet_nodes.unavailable_reasons(slurm).items()
    }
    reserved = fleet_nodes.reserved_reasons(slurm, maintenance or None)
    preview["reserved_reasons"] = {by_scheduler.get(name, name): why for name, why in reserved.items()}
    return preview


def upgrade_window_run(window, upgrade, delegate_to, names, run_id, journal, kubeconfig=None):
    """What the strategy builds its one window from: the plan's nodes and settings, and the adapter's reads of the
    fleet (with ``kubeconfig`` for the Kubernetes API) and drains ahead."""
    try:
        return drain_adapter.window_run(
            dict(window), dict(upgrade), delegate_to, dict(names), run_id, dict(journal), kubeconfig
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%supgrade_window_run: %s" % (PREFIX, exc)) from exc


def upgrade_plan(
    hosts,
    upgrade,
    slurm=None,
    kubernetes=None,
    canary=None,
    delegate_to="localhost",
    names=None,
    run_id=None,
    report_path=None,
    journal_path=None,
    cwd=".",
    journal_target=None,
    kubeconfig=None,
    now=None,
    surveyed=None,
):
    """The run's plan, made once: its id and start, the window (``upgrade_window``), what the strategy builds its
    window from (``upgrade_window_run``), and where the report and the journal go.

    ``run_id`` defaults to the start's UTC time (``%Y%m%dT%H%M%SZ``); ``report_path`` to
    ``gpuops-upgrade-<run id>.json`` in ``cwd``; ``journal_path`` to ``gpuops-upgrade-<run id>.journal.jsonl``
    beside the report. ``kubeconfig`` is the Kubernetes adapter's, for its reads of the fleet during the run.
    ``surveyed``, the surveyed hosts' vars, gives the survey's records of the nodes skipped or left out to the report's
    part of the plan (``report``), which the strategy writes in the journal's ``start``.
    """
    now = time.time() if now is None else now
    run_id = str(run_id) if run_id else time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    report_path = report_path or os.path.join(cwd or ".", "gpuops-upgrade-%s.json" % run_id)
    journal_name = "gpuops-upgrade-%s.journal.jsonl" % run_id
    journal_path = journal_path or os.path.join(os.path.dirname(report_path), journal_name)
    for path, setting in ((journal_path, "gpuops_upgrade_journal_path"), (report_path, "gpuops_upgrade_report_path")):
        why = run_journal.unwritable(path)
        if why is not None:  # the window would admit no node, or the run would end without its report
            raise AnsibleFilterError(
                "%supgrade_plan: the run cannot write %s: set %s to a file it can write" % (PREFIX, why, setting)
            )
    journal = {
        "path": journal_path,
        "run_id": run_id,
        "target": journal_target,
        "resume": (upgrade or {}).get("resume_journal"),
    }
    # the preview of the Window the strategy opens from the same value: the same journal continued
    window = upgrade_window(
        hosts, slurm=slurm, canary=canary, now=now, upgrade=upgrade, kubernetes=kubernetes, journal=journal
    )
    started_at = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat()
    try:
        report = upgrade_record.report_payload(run_id, started_at, window, dict(upgrade or {}), list(surveyed or []))
    except (AttributeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%supgrade_plan: %s" % (PREFIX, exc)) from exc
    run = upgrade_window_run(window, upgrade, delegate_to, names or {}, run_id, journal, kubeconfig)
    return {
        "run_id": run_id,
        "started_at": started_at,
        "window": window,
        "run": dict(run, report=report),  # the report's part the strategy writes in the journal's start
        "report_path": report_path,
        "journal_path": journal_path,
    }


def upgrade_decision(stack_facts, health=None, fact=None, kernel=None):
    """Survey decision for one node: ``{decision: upgrade|skip|exclude, reason}``."""
    if not isinstance(stack_facts, dict):
        raise AnsibleFilterError("%supgrade_decision: input must be ansible_facts.gpu_stack (a dict)" % PREFIX)
    return upgrade_record.decide(stack_facts, health or {}, fact, kernel)


def upgrade_survey(stack_facts, host, health=None, fact=None, kernel=None, domains=None, scheduler_name=None):
    """What the survey keeps of one node: ``{decision, entry, record}``."""
    if not isinstance(stack_facts, dict):
        raise AnsibleFilterError("%supgrade_survey: input must be ansible_facts.gpu_stack (a dict)" % PREFIX)
    return upgrade_record.survey(host, stack_facts, health or {}, fact, kernel, domains, scheduler_name)


def upgrade_plan_lines(window, run_id, upgrade, nodes, gate_problems=None):
    """The lines the plan prints before any node moves."""
    try:
        return upgrade_record.plan_lines(dict(window), run_id, dict(upgrade), list(nodes), list(gate_problems or ()))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%supgrade_plan_lines: %s" % (PREFIX, exc)) from exc


def upgrade_run_report(plan, finished_at, journal=None, journal_path=None):
    """The run's audit report, with ``summary``, from its journal's text alone; ``plan`` is the plan's part of it (the
    plan's ``report``), which the journal's ``start`` carries: a journal whose last run is not this plan's (none of
    its nodes reached the window, with a journal path an earlier run wrote) is not this run's, and the report is then
    the plan's alone."""
    try:
        payload = dict(plan)
        replayed = None if journal is None else upgrade_journal(journal, journal_path)
        own = (replayed or {}).get("report") or {}
        if own.get("run_id") == payload.get("run_id") and own.get("started_at") == payload.get("started_at"):
            payload = own
        else:
            replayed = None
        audit = upgrade_record.journal_report(payload, finished_at, replayed)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%supgrade_run_report: %s" % (PREFIX, exc)) from exc
    audit["summary"] = upgrade_record.summary_lines(audit)
    return audit


def upgrade_stack_fact(fact, target, step, run_id, now, result=None, fallback_previous=None):
    """The content of the gpuops_stack local fact before (``begin``) or after (``finish``) a node's change.

    ``now`` is an ISO 8601 time, or epoch seconds (written as ISO 8601, UTC)."""
    try:
        if isinstance(now, (int, float)) and not isinstance(now, bool):
            now = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat()
        if step == "begin":
            return upgrade_record.begin(fact, target or {}, run_id, now, fallback_previous)
        if step == "finish":
            return upgrade_record.finish(fact, target or {}, run_id, now, result)
    except ValueError as exc:
        raise AnsibleFilterError("%supgrade_stack_fact: %s" % (PREFIX, exc)) from exc
    raise AnsibleFilterError("%supgrade_stack_fact: step must be begin or finish, got %r" % (PREFIX, step))


def upgrade_report(
    records, run_id, plan, started_at, finished_at, settings=None, window=None, slots=None, journal=None
):
    """The audit report of a run, with ``summary`` (the human lines)."""
    try:
        audit = upgrade_record.report(
            run_id, plan or {}, list(records or []), started_at, finished_at, settings, window, slots, journal
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%supgrade_report: %s" % (PREFIX, exc)) from exc
    audit["summary"] = upgrade_record.summary_lines(audit)
    return audit


def upgrade_journal(text, path=None):
    """The run's journal (its text) replayed: where the run stood at each node, its reads of the fleet."""
    if not isinstance(text, str):
        raise AnsibleFilterError("%supgrade_journal: input must be the journal's text, got %r" % (PREFIX, type(text)))
    try:
        replayed = run_journal.replay(run_journal.parse(text, path or "the journal"))
    except ValueError as exc:
        raise AnsibleFilterError("%supgrade_journal: %s" % (PREFIX, exc)) from exc
    replayed["path"] = path
    replayed["timeline"] = [list(span) for span in replayed["timeline"]]
    return replayed


def upgrade_drain_record(adapter, slurm=None, k8s_node=None, k8s_drain=None, k8s_pods=None, node_name=None):
    """The ``drain`` entry of a node's record from what its drain adapter returned."""
    try:
        return upgrade_record.drain_record(adapter, slurm, k8s_node, k8s_drain, k8s_pods, node_name)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%supgrade_drain_record: %s" % (PREFIX, exc)) from exc


class FilterModule:
    """gpuops.cluster rolling-upgrade filters."""

    def filters(self):
        return {
            "upgrade_window": upgrade_window,
            "upgrade_window_run": upgrade_window_run,
            "upgrade_plan": upgrade_plan,
            "upgrade_decision": upgrade_decision,
            "upgrade_survey": upgrade_survey,
            "upgrade_plan_lines": upgrade_plan_lines,
            "upgrade_run_report": upgrade_run_report,
            "upgrade_stack_fact": upgrade_stack_fact,
            "upgrade_report": upgrade_report,
            "upgrade_drain_record": upgrade_drain_record,
            "upgrade_journal": upgrade_journal,
        }
