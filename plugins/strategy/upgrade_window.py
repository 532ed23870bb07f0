# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: upgrade_window
short_description: Run a rolling upgrade as a sliding window, each node starting as soon as the window has room
version_added: 0.2.0
description:
  - The strategy of the rolling upgrade's window play. It runs hosts like the C(free) strategy, each at its own
    pace, and holds every host at its C(gpuops.cluster.upgrade_slot) task (C(state=acquired)) until the window
    (the planner C(module_utils/upgrade/window_plan.py)) admits it, within these rules; at most
    C(max_unavailable) nodes out of service, at most C(per_domain) per rack or NVLink domain, every Slurm partition
    above its floor, the canary first and alone, nothing new after the first failure, and a busy node only when its
    job ends (Slurm's EndTime) within C(max_job_wait); until then it keeps running, in service.
  - When nothing is in flight and nothing else can start, the hosts still waiting for their jobs pass their slot task
    not admitted, deferred, with the job's end in the reason. A host whose release says C(deferred) (its jobs
    outlasted the wait; it is back in service) gives its slot back without counting as upgraded.
  - A host's slot comes back the moment its C(gpuops.cluster.upgrade_slot) task with C(state=released) has run (a
    skipped one gives nothing back), and the next admitted host starts at once; no host waits for an unrelated one,
    as Ansible's C(serial) batches make it wait for the slowest of its batch.
  - A host waiting for its slot holds no fork, so the window is bounded by the window's settings, not by C(forks)
    (keep C(forks) at least the window's size).
  - A host that leaves the play while holding a slot (unreachable, or failed outside a C(rescue)) counts as a
    failure and halts admission. When admission halted, or the remaining hosts cannot fit even with nothing in
    flight, the waiting hosts pass their slot task not admitted, with the reason, and end their part of the play.
  - Plays without an C(upgrade_slot) task run exactly as under C(free).
author:
  - gpuops.cluster maintainers (@gpuops)
"""

import time

from ansible.plugins.strategy.free import StrategyModule as FreeStrategyModule
from ansible.template import Templar
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_plan

SLOT_ACTIONS = frozenset({"gpuops.cluster.upgrade_slot", "upgrade_slot"})
# The host variable the strategy hands each host's slot record to the upgrade_slot action in.
SLOT_FACT = "gpuops_upgrade_slot"


def result_data(result) -> dict:
    """What a task returned (its own keys, ``skipped``), from ansible-core's result object."""
    utr = getattr(result, "utr", None)
    if utr is not None:
        return dict(utr.result_data or {}, skipped=bool(utr.skipped), failed=bool(utr.failed))
    return dict(getattr(result, "_result", None) or {})


def slot_state(task) -> str | None:
    """``acquired`` or ``released`` for an upgrade_slot task, None for any other task."""
    if task is None or task.action not in SLOT_ACTIONS:
        return None
    state = task.args.get("state", "acquired")
    return state if state in ("acquired", "released") else "acquired"


class StrategyModule(FreeStrategyModule):
    """The free strategy with a gate: hosts at an unadmitted slot are left out of the host loop."""

    def __init__(self, tqm):
        super().__init__(tqm)
        self._window = None
        self._arrived: dict = {}  # host name -> when it reached its slot task
        self._holding: set = set()  # hosts admitted and not released yet
        self._records: dict = {}  # host name -> its slot record
        self._admitted_at: dict = {}  # host name -> when the window admitted it
        self._broken = None  # why the window could not be built from the slot task's arguments

    # Host loop hook: the free strategy asks for the hosts left on every pass.

    def get_hosts_left(self, iterator):
        hosts = super().get_hosts_left(iterator)
        visible = []
        waiting = []
        for host in hosts:
            if self._blocked_hosts.get(host.name, False):
                visible.append(host)
                continue
            _state, task = iterator.get_next_task_for_host(host, peek=True)
            if slot_state(task) == "acquired":
                waiting.append((host, task))
                continue
            elif host.name in self._holding and (task is None or iterator.is_failed(host)):
                self._left(host, "left the run while out of service")
            visible.append(host)
        for name in list(self._holding):
            if name not in {host.name for host in hosts}:
                self._left(self._inventory.get_host(name), "unreachable while out of service")
        if waiting:
            visible.extend(self._admit(iterator, waiting))
        return visible

    # The window.

    def _template_args(self, iterator, host, task) -> dict:
        task_vars = self._variable_manager.get_vars(
            play=iterator._play, host=host, task=task, _hosts=self._hosts_cache, _hosts_all=self._hosts_cache_all
        )
        self.add_tqm_variables(task_vars, play=iterator._play)
        return Templar(loader=self._loader, variables=task_vars).template(task.args)

    def _hand(self, host, record: dict):
        self._variable_manager.set_nonpersistent_facts(host.name, {SLOT_FACT: record})

    def _admit(self, iterator, waiting) -> list:
        now = time.time()
        for host, _task in waiting:
            self._arrived.setdefault(host.name, now)
        if self._window is None:
            host, task = waiting[0]
            args = self._template_args(iterator, host, task)
            try:
                self._window = window_plan.Window(args.get("nodes") or [], args.get("settings") or {}, now)
            except ValueError as error:
                self._broken = str(error)
                self._window = window_plan.Window([], {}, now)
        window = self._window
        self._take_admitted(window.admit(now), now)
        if not self._holding and not window.in_flight and window.defer_waiting(now):
            # Nothing in flight and nothing started: the nodes waiting for their jobs are deferred, in
            # service; a chosen canary among them is replaced, and the next one may start now.
            self._take_admitted(window.admit(now), now)
        passing = []
        for host, _task in waiting:
            name = host.name
            if self._broken:
                self._hand(host, self._record(name, False, "the window cannot be built: %s" % self._broken))
            elif name in self._holding:
                record = self._records.get(name)
                if not record or record.get("state") != "acquired" or not record.get("admitted"):
                    self._hand(host, self._record(name, True, "admitted"))
            elif name not in window.nodes:
                self._hand(host, self._record(name, False, "not in the window's plan"))
            elif name in window.deferred:
                self._hand(host, self._record(name, False, "deferred: %s" % window.deferred[name]))
            elif window.halted:
                self._hand(host, self._record(name, False, "the run halted before this node started"))
            else:
                continue
            passing.append(host)
        if not passing and not self._holding and not window.in_flight:
            # Nothing in flight and nothing admitted: whatever still waits can never start.
            blocked = window.blocked
            for host, _task in waiting:
                why = blocked.get(host.name, "cannot leave service within the window's rules")
                self._hand(host, self._record(host.name, False, "blocked: %s" % why))
                passing.append(host)
        return passing

    def _take_admitted(self, names, now):
        for name in names:
            self._holding.add(name)
            self._admitted_at[name] = now

    def _record(self, name: str, admitted: bool, reason: str) -> dict:
        now = time.time()
        arrived = self._arrived.get(name, now)
        node = self._window.nodes.get(name)
        record = {
            "state": "acquired",
            "admitted": admitted,
            "reason": reason,
            "arrived_at": arrived,
            "admitted_at": self._admitted_at.get(name, now) if admitted else None,
            "waited": round((self._admitted_at.get(name, now) if admitted else now) - arrived, 3),
            "in_flight": sorted(self._window.in_flight),
            "canary": name in self._window.canaries,
            "released_at": None,
            # Slurm's end of the node's running job when the window was built (None: idle or unknown)
            "job_end": node.job_end if node is not None else None,
            "max_job_wait": self._window.settings.max_job_wait,
        }
        self._records[name] = record
        return record

    # Results hook: a slot comes back when its release task has run (a skipped one does not count).

    def _process_pending_results(self, iterator, one_pass=False, max_passes=None):
        results = super()._process_pending_results(iterator, one_pass=one_pass, max_passes=max_passes)
        for result in results:
            if slot_state(result.task) != "released" or result.host.name not in self._holding:
                continue
            data = result_data(result)
            release = data.get("release")
            if isinstance(release, dict) and not data.get("skipped"):
                self._release(result.host, bool(release.get("ok")), release.get("halt"), bool(release.get("deferred")))
        return results

    def _release(self, host, ok: bool, halt, deferred=False):
        name = host.name
        deferred = deferred and ok  # a deferred node is back in service; one left out is a failure
        self._finish(name, ok, None if halt is None else bool(halt), deferred)
        record = dict(self._records.get(name, {}))
        record.update(
            {
                "state": "released",
                "released_at": time.time(),
                "ok": ok,
                "deferred": deferred,
                "halted": self._window.halted,
            }
        )
        self._records[name] = record
        self._hand(host, record)

    def _left(self, host, why: str):
        self._finish(host.name, False, True)
        record = dict(self._records.get(host.name, {}))
        record.update({"state": "released", "ok": False, "reason": why, "released_at": time.time(), "halted": True})
        self._records[host.name] = record
        self._hand(host, record)

    def _finish(self, name: str, ok: bool, halt, deferred=False):
        self._holding.discard(name)
        if name in self._window.in_flight:
            self._window.finish(name, ok, halt, deferred=deferred)
