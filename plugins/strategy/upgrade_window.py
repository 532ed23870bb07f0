# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: upgrade_window
short_description: Run a rolling upgrade as a sliding window, each node starting as soon as the window has room
version_added: 0.2.0
description:
  - The strategy of the rolling upgrade's window play. It runs hosts like the C(free) strategy, each at its own pace,
    and holds every host at its C(gpuops.cluster.upgrade_slot) task (C(state=acquired)) until the window (the planner
    C(module_utils/upgrade/window.py)) admits it, within these rules; at most C(max_unavailable) nodes out of
    service, at most C(per_domain) per rack or NVLink domain, every Slurm partition above its floor, the canary first
    and alone, nothing new after the first failure, and a busy node only when its job ends (Slurm's EndTime) within
    C(max_job_wait); until then it keeps running, in service.
  - "The window is the play's. The strategy opens it once, when the first host reaches its slot task, from the play
    variable C(gpuops_upgrade_window) (set in the play's C(vars), templated once for no host in particular) - C(nodes)
    the whole fleet, each a mapping C(name), C(domains) (such as C(rack=r01)), C(partitions), C(gpus), C(state)
    (V(idle), V(busy), V(drained_by_others), V(down), V(reserved)), C(job_end) (epoch seconds or null), C(canary),
    C(done); C(settings) the window's settings (C(max_unavailable), C(per_domain), C(partition_floor), C(spread_by),
    C(granularity), C(halt_on_failure), C(barrier), C(max_job_wait), C(drain_ahead), C(deadline);
    C(module_utils/upgrade/window_input.py)); and C(refresh), C(journal), C(drain_ahead) and C(report) as below (each
    optional). It opens it as the rolling upgrade's plan previewed it, by the same function
    (C(module_utils/upgrade/window_open.py)). A
    window that cannot be built (the variable unset or wrong, a bad setting) admits no host; each passes its slot task
    not admitted, saying why."
  - The run finishes the fleet. A host waiting for its job stays in service and waits at its slot, the window reading
    the fleet at its C(refresh) interval, and is admitted as its job nears its end; the run stops waiting at the
    window's C(deadline) setting (epoch seconds; unset, the latest EndTime of the jobs running when the window is
    built; 0, whenever nothing is in flight). When nothing is in flight and nothing else can start, a host whose job
    has no known end or ends after the deadline, and every host still waiting once it passed, passes its slot task not
    admitted, deferred, with the job's end in the reason. A re-run continuing the run (C(journal)) keeps its deadline.
    A host whose release says C(deferred) (its jobs outlasted the wait; it is back in service) gives its slot back
    without counting as upgraded.
  - Progress. Each admission and release prints one line (nodes done, in flight, waiting, deferred, and until when the
    run waits for jobs), and the journal's C(admit) and C(release) entries carry the same (C(progress)).
  - A host's slot comes back the moment its C(gpuops.cluster.upgrade_slot) task with C(state=released) has run (a
    skipped one gives nothing back), and the next admitted host starts at once; no host waits for an unrelated one, as
    Ansible's C(serial) batches make it wait for the slowest of its batch.
  - A host waiting for its slot holds no fork, so the window is bounded by the window's settings, not by C(forks) (keep
    C(forks) at least the window's size).
  - A host that leaves the play while holding a slot (unreachable, or failed outside a C(rescue)) counts as a failure
    and halts admission. When admission halted, or the remaining hosts cannot fit even with nothing in flight, the
    waiting hosts pass their slot task not admitted, with the reason, and end their part of the play.
  - Fresh state. With the window's C(refresh) (C(delegate_to) the Slurm controller host, C(names) each inventory host's
    Slurm node name, C(interval) in seconds, C(options) more options of C(gpuops.cluster.slurm_fleet), C(become)), the
    window reads the fleet again (C(gpuops.cluster.slurm_fleet), one node query and one job query, delegated to the
    Slurm controller) after each release and, while nodes wait, whenever its last read is C(interval) seconds old; one
    read at a time, run as a task of a waiting host (which holds no other fork) and only when a fork is free. With
    C(adapter=kubernetes) (and C(reason_prefix)) the read is C(kubernetes.core.k8s_info) C(kind=Node) (C(options) its
    options, such as C(kubeconfig)), delegated to the Kubernetes API client; which module reads and what its answer
    means is the drain adapter's (C(module_utils/upgrade/drain_adapter.py)). A waiting
    node that gained a job waits for it, one whose job ended early goes sooner, one drained, downed or reserved by
    someone else leaves the plan (drained or down, it counts as out of service). The nodes still waiting for their jobs
    are deferred only on a read newer than the last release. A failed read is retried at the next occasion; the window
    keeps its last view meanwhile. Every read (when, how long, what changed) is in the slot records' C(refreshes).
  - A window that survives the controller. With the window's C(journal) (C(path), C(run_id), C(target), C(resume)),
    every admission, release, deferral, pass, halt and read of the fleet is appended to the journal on the controller
    the moment it is decided (one JSON line each, fsync'd; C(module_utils/upgrade/run_journal.py)), and C(end) when the
    play ends. The journal is never opened through a symbolic link; one the run creates has mode 0644, one that exists
    keeps its mode; a torn last line (a controller killed mid-write) is cut off before the run's first entry (its
    C(start) says how many bytes, C(torn)). A re-run reads the journal of the run it continues (C(resume); by default
    its own journal when it exists with the same C(target), as with a fixed C(gpuops_upgrade_journal_path) or a reused
    run id, the run appending to it; else the newest journal beside its own with the same C(target)); the nodes that
    run admitted and never released, or released failed, are taken first and count as out of service from the start,
    so the window never takes more than C(max_unavailable) across both runs. The journal is the run's one record - its
    C(start) carries the plan's part of the report (the window's C(report)), each release and each node not admitted
    (C(not_admitted)) the node's record and its slot, and the run's report is built from it alone (filter
    C(gpuops.cluster.upgrade_run_report)).
  - Drain ahead. With the window's C(drain_ahead) (C(delegate_to) the Slurm controller host, C(names) the hosts' Slurm
    names, C(reason_prefix), C(run_id), C(become), C(options) more options of C(gpuops.cluster.slurm_drain)) and the
    window's C(drain_ahead) setting above 0, the busy nodes next in line are drained in Slurm ahead of their slot
    (C(gpuops.cluster.slurm_drain), no wait, the reason the prefix and the run id, then C(drained ahead of its upgrade
    slot)) when the window has room it cannot fill, each as a task of its own waiting host, delegated to the Slurm
    controller. Such a node takes its slot first when its job ends; one whose job ended with no slot free, and one that
    passes its slot not admitted (deferred, halted, blocked, left out), is resumed first (only a drain of ours); such a
    host waits at its slot until its give-back has run, however long no worker is free for it. Every drain ahead and
    every resume is in the journal (C(drain_ahead), C(undrain)).
  - Plays without an C(upgrade_slot) task run exactly as under C(free).
author:
  - gpuops.cluster maintainers (@gpuops)
"""

import time

from ansible.errors import AnsibleError
from ansible.executor.play_iterator import IteratingStates
from ansible.playbook.task import Task
from ansible.plugins.strategy.free import StrategyModule as FreeStrategyModule
from ansible.template import Templar
from ansible.utils.display import Display
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import upgrade_settings, window_input, window_slot
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.run_state import RunState

# Seconds a read of the fleet waits for a worker when nothing is in flight (the last workers are ending).
FORK_WAIT = 5
# s between looks while nothing runs and the window waits for jobs to end (before its deadline)
JOB_WAIT_POLL = 1.0
display = Display()
REFRESH_TASK = "Read the fleet again for the window (%s)"  # the drain adapter's module
DRAIN_AHEAD_TASK = "Drain the node ahead of its slot (gpuops.cluster.slurm_drain)"
UNDRAIN_TASK = "Give the node drained ahead back to its scheduler (gpuops.cluster.slurm_drain)"


def result_data(result) -> dict:
    """What a task returned (its own keys, ``skipped``), from ansible-core's result object."""
    utr = getattr(result, "utr", None)
    if utr is not None:
        return dict(utr.result_data or {}, skipped=bool(utr.skipped), failed=bool(utr.failed))
    return dict(getattr(result, "_result", None) or {})


def state_key(state) -> tuple | None:
    """What of a host's iterator state the host loop changes in place, None when its next task must be looked up.

    A host's next task changes when its state is replaced (every advance, failure or include replaces the
    state object) or when a meta task changes its run or fail state in place (end_host, end_play,
    clear_host_errors, flush_handlers). A state running handlers (or one level of it) is never cached:
    its next handler depends on the handlers' notified hosts, outside the state.
    """
    if state.run_state is IteratingStates.HANDLERS:
        return None
    key = (state.run_state, state.fail_state, state.pre_flushing_run_state, state.did_rescue)
    children = (state.tasks_child_state, state.rescue_child_state, state.always_child_state)
    if children == (None, None, None):
        return key  # the common case, outside any block's rescue or always
    keys = [key]
    for child in children:
        if child is not None:
            child_key = state_key(child)
            if child_key is None:
                return None
            keys.append(child_key)
    return tuple(keys)


def slot_state(task) -> str | None:
    """``acquired`` or ``released`` for an upgrade_slot task, None for any other task."""
    return None if task is None else window_slot.state_of(task.action, task.args)


class StrategyModule(FreeStrategyModule):
    """The free strategy with a gate: hosts at an unadmitted slot are left out of the host loop.

    What the gate decides with (the one Window, the slots and their records, the reads of the fleet, the drains
    ahead, the journal) is the run's state (``module_utils/upgrade/run_state.py``); this class is its Ansible side:
    the host loop, the window's own tasks, their results, and the records handed to the hosts.
    """

    def __init__(self, tqm):
        super().__init__(tqm)
        self._run = RunState(display.display)
        self._refresh_task = None  # the read in flight (a Task), None when none runs
        self._refresh_host = None  # the waiting host the read runs as
        self._ahead_todo: list = []  # (host name, "drain" or "resume") decided, not queued yet (no fork, host busy)
        self._ahead_tasks: dict = {}  # task uuid -> (host name, "drain" or "resume") running
        self._giving_back: set = set()  # hosts held at their slot until their drain ahead is given back
        self._slot_task = None  # the first slot task reached: where the window's own tasks take their place
        self._play_context = None
        # host name -> (its iterator state, state_key, the next task, its slot_state): the last look at the host's
        # next task, valid while the host's state is the same object with the same key (see _next_task)
        self._next_tasks: dict = {}
        self._sleeper = None  # the host shown blocked while the window waits for jobs, with nothing running

    def run(self, iterator, play_context):
        self._play_context = play_context
        try:
            return super().run(iterator, play_context)
        finally:
            self._run.end()

    # Host loop hook: the free strategy asks for the hosts left on every pass.

    def get_hosts_left(self, iterator):
        """The hosts the free strategy's loop looks at on this pass.

        Called on every pass of the loop, so its cost is per pass: one look-up per host (a host's next
        task is looked up again only when its state changed, :meth:`_next_task`), nothing per pair of hosts.
        Hidden: the hosts waiting for their slot, and the hosts done with the play (the loop would only find
        no task for them; one stays, so that the loop still ends the play as it would).
        """
        if self._sleeper is not None:  # shown blocked on the last pass while the window waited for jobs
            self._blocked_hosts[self._sleeper] = False
            self._sleeper = None
        hosts = super().get_hosts_left(iterator)
        holding = self._run.holding
        visible = []
        waiting = []
        still = []
        ended = None  # a host done with the play
        blocked = self._blocked_hosts
        for host in hosts:
            if blocked.get(host.name, False):
                visible.append(host)
                continue
            task, slot = self._next_task(iterator, host)
            if task is None:
                if host.name in holding:
                    self._left(host, "left the run while out of service")
                if ended is None:
                    ended = host
                continue
            if slot == "acquired":
                waiting.append((host, task))
                continue
            # A host holding a slot has left the run only when it has no task left (above). Not when Ansible
            # counts it failed: it does so while a rescue flushes handlers (the rollback's reboot), while the
            # node is still out of service; a host that failed for good has no task left.
            visible.append(host)
        if holding:
            left = {host.name for host in hosts}
            for name in [name for name in holding if name not in left]:
                self._left(self._inventory.get_host(name), "unreachable while out of service")
        if waiting:
            passing = self._admit(iterator, waiting)
            visible.extend(passing)
            passed = {host.name for host in passing}
            still = [host for host, _task in waiting if host.name not in passed]
            if still:
                self._start_refresh(iterator, still)
        reader = self._refresh_host
        if reader is not None and all(host.name != reader.name for host in visible):
            visible.append(reader)  # blocked by the read: the loop waits for it and gives it no task
        if self._ahead_tasks:  # blocked by a drain ahead or its give-back, queued by _admit on this pass
            shown = {host.name for host in visible}
            for name in {name for name, _action in self._ahead_tasks.values()} - shown:
                visible.append(self._inventory.get_host(name))
        window = self._run.window
        if not visible and still and window is not None and window.waiting_for_jobs(time.time()):
            # Nothing runs and the window waits for jobs to end (before its deadline): one waiting host is shown
            # blocked, with no task, so the loop goes on; it looks again after a pause (nothing can change sooner
            # than a job's end or the next read of the fleet).
            self._sleeper = still[0].name
            self._blocked_hosts[self._sleeper] = True
            visible.append(still[0])
            time.sleep(JOB_WAIT_POLL)
        if not visible and ended is not None:
            visible.append(ended)  # nothing else to look at: the loop finds no work and ends the play
        return visible

    def _next_task(self, iterator, host) -> tuple:
        """The host's next task (a peek) and its :func:`slot_state`, looked up again only when the host's iterator
        state changed."""
        try:
            state = iterator.get_state_for_host(host.name)
        except KeyError:
            task = iterator.get_next_task_for_host(host, peek=True)[1]
            return task, slot_state(task)
        key = state_key(state)
        known = self._next_tasks.get(host.name)
        if known is not None and known[0] is state and known[1] == key:
            return known[2], known[3]
        task = iterator.get_next_task_for_host(host, peek=True)[1]
        slot = slot_state(task)
        if key is None:
            self._next_tasks.pop(host.name, None)
        else:
            self._next_tasks[host.name] = (state, key, task, slot)
        return task, slot

    # The window.

    def _play_window(self, iterator) -> dict:
        """The play's window (the play variable ``gpuops_upgrade_window``), templated once, for no host."""
        play_vars = self._variable_manager.get_vars(
            play=iterator._play, _hosts=self._hosts_cache, _hosts_all=self._hosts_cache_all
        )
        self.add_tqm_variables(play_vars, play=iterator._play)
        if window_slot.WINDOW_VAR not in play_vars:
            return window_slot.window_of(None)
        try:
            value = Templar(loader=self._loader, variables=play_vars).template(play_vars[window_slot.WINDOW_VAR])
        except AnsibleError as error:
            raise ValueError("%s cannot be templated: %s" % (window_slot.WINDOW_VAR, error)) from error
        return window_slot.window_of(value)

    def _hand(self, host, record: dict):
        self._variable_manager.set_nonpersistent_facts(host.name, {window_slot.SLOT_FACT: record})

    def _admit(self, iterator, waiting) -> list:
        now = time.time()
        run = self._run
        for host, _task in waiting:
            run.arrived.setdefault(host.name, now)
        if run.window is None:
            # where the window's own tasks take their place, also when the window cannot be built: a node a crashed
            # run drained ahead (found before the error) is still given back as its host passes
            self._slot_task = waiting[0][1]
            try:
                run.open(self._play_window(iterator), now)
            except ValueError as error:  # the play's window cannot be templated or is not a window
                run.fail(str(error), now)
        window = run.window
        schedule = run.schedule
        if schedule is None or not schedule.holds(now):
            run.take_admitted(window.admit(now), now)
        elif run.ahead is not None:
            run.take_admitted(window.admit_ahead(now), now)  # a node drained ahead whose job ended: not held
        fresh = schedule is None or schedule.fresh
        if not fresh and not run.holding and not window.in_flight and not window.halted:
            # Nothing in flight: read the fleet before deferring or blocking on the old view.
            if self._refresh_task is not None or self._start_refresh(iterator, [host for host, _task in waiting]):
                return []
            fresh = True  # the read could not start: decide on the last view
        deferring = {}
        if not run.holding and not window.in_flight and fresh:
            deferring = window.defer_waiting(now)
            for name, why in deferring.items():
                run.write("defer", node=name, why=why)
        if deferring:
            # Nothing in flight and nothing started: the nodes waiting for their jobs are deferred, in
            # service; a chosen canary among them is replaced, and the next one may start now.
            run.take_admitted(window.admit(now), now)
        if run.ahead is not None and not run.broken:
            # drains ahead are decided on the view admission uses: not while it waits for the read after a release
            self._drain_ahead(iterator, waiting, now, schedule is None or not schedule.holds(now))
        passing = []
        for host, _task in waiting:
            passes, record = run.verdict(host.name)
            if not passes:
                continue
            if record is not None:
                self._hand(host, record)
            run.write_pass(host.name)
            passing.append(host)
        if not passing and not run.holding and not window.in_flight and fresh and not window.waiting_for_jobs(now):
            # Nothing in flight, nothing admitted and no job to wait for: whatever still waits can never start.
            blocked = window.blocked
            for host, _task in waiting:
                why = blocked.get(host.name, "cannot leave service within the window's rules")
                self._hand(host, run.record(host.name, False, "blocked: %s" % why))
                run.write_pass(host.name)
                passing.append(host)
        return self._hold_drained_ahead(iterator, passing)

    # Results hook: a slot comes back when its release task has run (a skipped one does not count).

    def _process_pending_results(self, iterator, one_pass=False, max_passes=None):
        results = super()._process_pending_results(iterator, one_pass=one_pass, max_passes=max_passes)
        for result in results:
            ahead = self._ahead_tasks.pop(result.task._uuid, None) if self._ahead_tasks else None
            if ahead is not None:
                self._run.ahead_done(ahead[0], ahead[1], result_data(result))
                continue
            if self._refresh_task is not None and result.task._uuid == self._refresh_task._uuid:
                self._refresh_task = None
                self._refresh_host = None
                self._run.refreshed(result_data(result))
                continue
            if slot_state(result.task) == "acquired" and result.host.name not in self._run.holding:
                data = result_data(result) or {}
                if data.get("admitted") is False:  # its record, as the slot task built it, goes in the journal
                    self._run.not_admitted(result.host.name, data.get("node"), data.get("slot"))
                continue
            if slot_state(result.task) != "released" or result.host.name not in self._run.holding:
                continue
            release = window_slot.released(result_data(result))
            if release is not None:
                host = result.host
                # the node's record its release built (module_utils/upgrade/node_record.py build) goes in the journal
                record = (result_data(result) or {}).get("node")
                self._hand(
                    host, self._run.release(host.name, release["ok"], release["halt"], release["deferred"], record)
                )
        return results

    def _left(self, host, why: str):
        self._hand(host, self._run.left(host.name, why))

    # Fresh state: the fleet read again, as a task of a waiting host delegated to the Slurm controller.

    def _start_refresh(self, iterator, waiting_hosts) -> bool:
        """Start a read of the fleet when one is due, as a task of the first waiting host; True when started."""
        run = self._run
        schedule = run.schedule
        if schedule is None or self._refresh_task is not None or run.window.halted or run.broken:
            return False
        now = time.time()
        why = schedule.due(now)
        if why is None or not self._a_fork_is_free(wait=not run.holding):
            return False
        free = [host for host in waiting_hosts if not self._blocked_hosts.get(host.name, False)]
        if not free:
            return False  # every waiting host runs a drain ahead or its give-back: the read waits for one
        host = free[0]
        schedule.started(now, why)
        action, args = run.refresh_task()
        self._refresh_task = self._queue_own_task(iterator, host, REFRESH_TASK % action, action, args, run.refresh)
        self._refresh_host = host
        return True

    def _queue_own_task(self, iterator, host, name: str, action: str, args: dict, where: dict):
        """Queue a task the window makes itself (a read of the fleet, a drain ahead or its give-back) for ``host``,
        delegated to ``where["delegate_to"]``, errors kept in its result; the host is blocked until it is back."""
        task = Task.load(
            {
                "name": name,
                "action": action,
                "args": args,
                "delegate_to": where["delegate_to"],
                "become": bool(where.get("become", False)),
                "ignore_errors": True,
                "ignore_unreachable": True,
                "check_mode": False,
                # bounded where the adapter bounds it (a Kubernetes read); a task past it fails, as any failed read
                "timeout": int(where.get("timeout") or 0),
            },
            block=self._slot_task._parent,
            role=self._slot_task._role,
            variable_manager=self._variable_manager,
            loader=self._loader,
        )
        task_vars = self._variable_manager.get_vars(
            play=iterator._play, host=host, task=task, _hosts=self._hosts_cache, _hosts_all=self._hosts_cache_all
        )
        self.add_tqm_variables(task_vars, play=iterator._play)
        self._blocked_hosts[host.name] = True
        self._tqm.send_callback("v2_playbook_on_task_start", task, is_conditional=False)
        self._queue_task(host, task, task_vars, self._play_context)
        return task

    def _a_fork_is_free(self, wait=False) -> bool:
        """Whether a worker is free (queueing a task with none free would stall the whole loop).

        With ``wait`` (nothing in flight: the busy workers are ending), for a few seconds at most.
        """
        deadline = time.time() + (FORK_WAIT if wait else 0)
        while True:
            if any(worker is None or not worker.is_alive() for worker in self._workers):
                return True
            if time.time() >= deadline:
                return False
            time.sleep(0.01)

    # Drain ahead: busy nodes next in line drained in Slurm without a slot, as tasks of their own waiting hosts.

    def _drain_ahead(self, iterator, waiting, now, decide=True):
        """Take the window's give-backs and (``decide``) drains ahead; queue what a free fork and a free host allow."""
        window = self._run.window
        for name in window.undrain_due():
            self._ahead_todo.append((name, "resume"))
        if decide and not window.halted:
            self._ahead_todo.extend((name, "drain") for name in window.drain_ahead(now))
        if not self._ahead_todo:
            return
        hosts = {host.name: host for host, _task in waiting}
        ahead = set(window.drained_ahead)
        todo = []
        for name, action in self._ahead_todo:
            if action == "drain" and (name not in ahead or window.halted):
                continue  # admitted, deferred or given back before its drain started, or the run halted
            if action == "resume" and name in self._run.holding:
                continue  # admitted before its give-back started: its drain is its upgrade's now
            host = hosts.get(name)
            if host is None or not self._queue_ahead(iterator, host, action):
                todo.append((name, action))
        self._ahead_todo = todo

    def _hold_drained_ahead(self, iterator, passing) -> list:
        """Hosts passing their slot not admitted while drained ahead are given back to their scheduler first.

        Such a host passes only once its give-back has run: with no worker free for it now, it keeps waiting at its
        slot (the busy workers' hosts keep the loop going) and its give-back is queued on a later pass, never
        dropped, so neither the run nor the host moves on with the node drained.
        """
        drained_ahead = self._run.drained_ahead
        if not drained_ahead:
            return passing
        kept = []
        for host in passing:
            name = host.name
            if name in drained_ahead and name not in self._run.holding:
                # a few seconds for a worker the first time; on later passes only a worker free now
                first = name not in self._giving_back
                self._giving_back.add(name)
                self._queue_ahead(iterator, host, "resume", wait=first)
                continue  # passes once its give-back is done
            self._giving_back.discard(name)
            kept.append(host)
        return kept

    def _queue_ahead(self, iterator, host, action: str, wait=False) -> bool:
        """Queue a drain ahead (``drain``) or its give-back (``resume``) as a task of ``host``; True when queued."""
        if self._blocked_hosts.get(host.name, False) or not self._a_fork_is_free(wait=wait):
            return False
        ahead = self._run.ahead
        args = dict(
            ahead["options"],
            node=ahead["names"].get(host.name) or host.name,
            reason_prefix=ahead.get("reason_prefix") or upgrade_settings.DEFAULTS["reason_prefix"],
        )
        if action == "drain":
            args.update(state="drained", run_id=ahead["run_id"], reason=window_input.DRAIN_AHEAD_REASON, wait=False)
        else:
            args["state"] = "resumed"
        name = DRAIN_AHEAD_TASK if action == "drain" else UNDRAIN_TASK
        task = self._queue_own_task(iterator, host, name, "gpuops.cluster.slurm_drain", args, ahead)
        self._ahead_tasks[task._uuid] = (host.name, action)
        return True
