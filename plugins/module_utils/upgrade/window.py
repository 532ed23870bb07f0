# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sliding window of a rolling upgrade: which node may leave service now.

Waves make every node of a wave wait for the slowest one. The window admits a
node as soon as another one is back, within these rules (who is out of service is counted against
them by :class:`window_capacity.Capacity`):

* A node (:class:`window_input.Node`) is idle, busy until its job's end, drained by others, down or
  reserved (left alone); done nodes are skipped, resume and maintenance ones taken first.
* Out of service means: admitted by the window and not finished yet (draining,
  waiting for its job, upgrading), failed (left drained), drained by others, or
  down. Every rule counts every node out of service, whoever took it out;
  ``drained_by_others`` and ``down`` nodes are never admitted.
* ``max_unavailable`` (a count, or ``"N%"`` of the whole fleet, done nodes
  included, rounded like :func:`window_input.size_of`): never more nodes out of service.
* ``per_domain`` (``{"rack": 1, "nvlink": 1}``): never more nodes out of service
  in one member of that kind of domain. A node without that kind of domain is
  not limited by it.
* ``partition_floor`` (a fraction in (0, 1], or None): in every Slurm partition,
  the GPUs of the nodes in service stay at least that share of the partition's
  GPUs. A node in several partitions must keep every one of them above its floor.
* ``max_job_wait`` (seconds, default :data:`DEFAULT_MAX_JOB_WAIT`): a busy node
  takes a slot only when its job ends (by ``job_end``) within that wait of now;
  until then it is passed over and keeps running, in service (not drained), and
  the nodes after it still get their chance. A busy node whose job end is
  unknown waits until it is idle (:meth:`Window.update`). The run waits for jobs, with every
  such node in service, until its ``deadline`` (default: the latest end of the jobs running when
  the window is built); a node whose job has no end, or ends too late for it, and every node still
  waiting once the deadline passed, is deferred (:meth:`Window.defer_waiting`), reported with its
  job end, still in service (``deadline`` 0: whenever nothing is in flight). An admitted node
  whose jobs outlast the wait after all (a time limit raised, a job that
  started after the fleet was read) is returned to service and finished as
  deferred (``Window.finish(name, ok=True, deferred=True)``).
* Order (:func:`window_order.order`): canaries first, then idle nodes, then busy nodes by
  soonest job end (ends within the same ``granularity`` seconds count as equal),
  busy nodes with an unknown end last; nodes of equal priority are interleaved
  round-robin over the ``spread_by`` domain (racks), ties by name. A busy node
  whose job end is already past counts as idle.
* ``drain_ahead`` (a count, default 0: off): the busy nodes next in line may be drained in Slurm
  ahead of their slot (no new jobs; the running one finishes) without holding a slot, at most that
  many at once (:meth:`Window.drain_ahead`), and only when the window has room it cannot fill (every
  node that could take a slot now has taken it), never during the canary phase, in waves or after a
  halt. A drained-ahead node takes no new job, so its GPUs count against ``partition_floor`` from its
  drain; it does not count against ``max_unavailable`` or ``per_domain`` until it takes its slot. It
  takes its slot before any other node (:meth:`Window.admit`) as soon as it may: its job ended, or its
  job's end came within ``max_job_wait``. One whose job ended while no slot is free for it is given
  back to its scheduler at once (:meth:`Window.undrain_due`), never left drained with no job; one
  deferred, halted or left out is given back by its host. A node Slurm shows drained ahead by us
  (``drained_ahead``: a crashed run's) starts drained ahead.
* Fresh state (:meth:`Window.observe`): the scheduler's view read again during
  the run. A waiting node that gained a job waits for it (``max_job_wait``),
  one whose job ended early is admitted sooner, one drained or downed by
  someone else or put in a reservation leaves the plan (:attr:`Window.gone`)
  and, drained or down, counts as out of service; a node of the fleet that is
  back in service stops counting.
* The canaries (``canary`` nodes) go first and alone, one at a time: nothing
  else is admitted until every canary finished ok. When no node is a canary,
  the first node of the order that is not blocked is the canary.
* The first failed node halts admission (``halt_on_failure``, the default):
  nodes in flight may finish, nothing else starts. Without it, a failed node
  stays out of service until :meth:`Window.release`.
* ``barrier`` (false by default) turns the window into waves, as Ansible's
  ``serial`` runs them: nothing is admitted while a node is in flight, then up
  to ``max_unavailable`` at once. For sites whose change process signs off
  wave by wave, and as the baseline the window is measured against.
* Admission is greedy in order: a node that does not fit now (its rack is full)
  does not hold back the nodes after it.
* A node that cannot be admitted even with nothing else of the window out of
  service is blocked (a partition whose floor allows no node out, a domain
  already full of down nodes, a blocked canary before it): the window reports
  it (:attr:`Window.blocked`) instead of waiting for it forever.
"""

from __future__ import annotations

import heapq

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_capacity import Capacity
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_input import (
    ADMISSIBLE_STATES,
    OUT_OF_SERVICE_STATES,
    STATES,
    Node,
    Settings,
    auto_deadline,
    deadline_reason,
    job_wait_reason,
    nodes_of,
    ready,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_order import order


class Window:
    """The admission state machine of a sliding-window rollout.

    ``admit(now)`` returns the nodes that may leave service now, ``finish(name, ok)``
    reports one back. ``in_flight``, ``remaining`` (not admitted yet, in order),
    ``done``, ``failed``, ``deferred`` (name -> why: still running a job, in
    service, not upgraded), ``reserved`` (left alone), ``resumed`` (left out of
    service by an earlier run, admitted first), ``gone`` (name -> why: left the
    plan during the run, seen by :meth:`observe`), ``halted`` and ``blocked``
    tell where it stands.
    """

    def __init__(self, nodes, settings=None, now=0):
        self.nodes = {node.name: node for node in nodes_of(nodes)}
        self.settings = Settings(settings, len(self.nodes))
        self.now = now
        self._wait = self.settings.max_job_wait
        given = self.settings.deadline
        self.deadline = auto_deadline(self.nodes.values(), now) if given is None else given
        self._per_domain = self.settings.per_domain
        self._ahead_limit = self.settings.drain_ahead
        self._ahead: dict = {}  # name -> when drained ahead of its slot (waiting, counted on its partitions)
        self._undrain: list = []  # drained-ahead nodes to give back to their scheduler now
        self._ahead_scan = True  # whether drain_ahead() may find a node it did not find before
        self._capacity = Capacity(self.nodes.values(), self.settings)  # who is out of service, against the rules
        self.unavailable = sorted(name for name, node in self.nodes.items() if node.state in OUT_OF_SERVICE_STATES)
        for name in self.unavailable:
            self._take(self.nodes[name])
        self.reserved = sorted(name for name, node in self.nodes.items() if node.state == "reserved")
        self.deferred: dict = {}
        self.gone: dict = {}
        self.resumed = sorted(name for name, node in self.nodes.items() if node.resume)
        for name in self.resumed:
            self._take(self.nodes[name])
        for name in sorted(name for name, node in self.nodes.items() if node.drained_ahead):
            self._ahead[name] = now
            self._capacity.take_floor(self.nodes[name])
        self.skipped = sorted(
            name for name, node in self.nodes.items() if node.done and node.state in ADMISSIBLE_STATES
        )
        self._in_flight: dict = {}
        self.done: list[str] = []
        self.failed: list[str] = []
        self.halted = False
        self._waiting = set()
        self._reorder(list(self.nodes.values()), now)
        queue = [name for name in self.remaining if not self.nodes[name].resume]
        canaries = [name for name in self.remaining if self.nodes[name].canary]
        self._named_canaries = bool(canaries)
        if not canaries and queue:
            canaries = [self._pick_canary(queue, now)]
        self.canaries = canaries
        self._canaries_left = set(canaries)

    def _pick_canary(self, queue, now) -> str:
        """The first node of ``queue`` that can leave service now, its job's end included (else the first that
        fits, else the first one)."""
        fitting = [name for name in queue if self._misfit(self.nodes[name]) is None]
        now_ready = (name for name in fitting if ready(self.nodes[name], now, self._wait))
        return next(now_ready, fitting[0] if fitting else queue[0])

    def _canary_deferred(self, name: str, now):
        """A canary did not pass: deferred. A chosen one is replaced by the next node; a named one holds the rest."""
        if name not in self._canaries_left or self._named_canaries:
            return
        self._canaries_left.discard(name)
        self.canaries = [canary for canary in self.canaries if canary != name]
        queue = [name for name in self.remaining if not self.nodes[name].resume]
        if queue and not any(canary in self._waiting for canary in self.canaries):
            canary = self._pick_canary(queue, now)
            self.canaries.append(canary)
            self._canaries_left.add(canary)

    # Bookkeeping of who is out of service: the counts are the Capacity's (window_capacity.py).

    def _take(self, node: Node):
        # a node drained ahead counts on its partitions already
        self._capacity.take(node, partitions=self._ahead.pop(node.name, None) is None)

    def _undo_ahead(self, name: str) -> bool:
        """A node drained ahead is not any more (back in service, or never drained): True when it was."""
        if self._ahead.pop(name, None) is None:
            return False
        self._capacity.give_floor(self.nodes[name])
        self._ahead_scan = True
        self._wake(self.nodes[name])
        return True

    def _give_back(self, node: Node):
        self._capacity.give_back(node)

    def _misfit(self, node: Node, counts=None):
        """What keeps ``node`` from leaving service now (:meth:`window_capacity.Capacity.misfit`), None when it can
        leave; a node drained ahead counts on its partitions already in the window's own counts."""
        return self._capacity.misfit(node, counts, node.name in self._ahead)

    def _counts_without_in_flight(self):
        """The counts as if every node in flight were back and none drained ahead: only down, drained by others and
        failed nodes out."""
        nodes = self.nodes
        return self._capacity.counts_without(
            [nodes[name] for name in self._in_flight], [nodes[name] for name in self._ahead]
        )

    # What the caller sees.

    @property
    def in_flight(self) -> list[str]:
        return list(self._in_flight)

    @property
    def remaining(self) -> list[str]:
        """Nodes not admitted yet, in admission order (blocked ones included)."""
        return sorted(self._waiting, key=self._rank.__getitem__)

    @property
    def drained_ahead(self) -> list[str]:
        """Nodes drained ahead of their slot, waiting for it (in admission order)."""
        return sorted(self._ahead, key=self._rank.__getitem__)

    @property
    def canary_phase(self) -> bool:
        """True until every canary finished ok."""
        return bool(self._canaries_left)

    @property
    def blocked(self) -> dict:
        """Remaining nodes that could not be admitted even with nothing of the window in flight: name -> why."""
        counts = self._counts_without_in_flight()
        remaining = self.remaining
        reasons = {}
        if self._canaries_left:
            # Canaries go one by one, each alone: the first blocked one blocks every node after it.
            passed = set()
            deferred = next((name for name in self.canaries if name in self.deferred), None)
            if deferred is not None:
                return {
                    name: "waits for the canary %s, which is deferred (%s)" % (deferred, self.deferred[deferred])
                    for name in remaining
                }
            gone = next((name for name in self.canaries if name in self.gone), None)
            if gone is not None:
                return {
                    name: "waits for the canary %s, which left the plan (%s)" % (gone, self.gone[gone])
                    for name in remaining
                }
            for canary in (name for name in self.canaries if name in self._waiting):
                key = self._misfit(self.nodes[canary], counts)
                if key is not None:
                    reasons[canary] = self._capacity.explain(self.nodes[canary], key, counts)
                    for name in remaining:
                        if name != canary and name not in passed and not self.nodes[name].resume:
                            reasons[name] = "waits for the canary %s, which is blocked" % canary
                    return reasons
                passed.add(canary)
        for name in remaining:
            if self.nodes[name].resume:
                continue  # out of service already: admitted whatever the rules
            key = self._misfit(self.nodes[name], counts)
            if key is not None:
                reasons[name] = self._capacity.explain(self.nodes[name], key, counts)
        return reasons

    @property
    def finished(self) -> bool:
        """Nothing in flight and nothing more can start: halted, all admitted, or the rest blocked."""
        if self._in_flight:
            return False
        if self.halted or not self.remaining:
            return True
        return len(self.blocked) == len(self.remaining)

    def update(self, name: str, state: str, job_end=None):
        """Scheduler news about a node not admitted yet: ``idle``, or ``busy`` with its job end (None: unknown)."""
        node = self.nodes.get(name)
        if node is None or name not in self._waiting:
            raise ValueError("update: %s is not a node waiting for the window" % name)
        if state not in ADMISSIBLE_STATES:
            raise ValueError("update: the state of %s must be idle or busy, got %r" % (name, state))
        if job_end is not None and (isinstance(job_end, bool) or not isinstance(job_end, (int, float))):
            raise ValueError("update: job_end of %s must be epoch seconds or None, got %r" % (name, job_end))
        job_end = job_end if state == "busy" else None
        if node.state != state or node.job_end != job_end:
            node.state = state
            node.job_end = job_end
            self._dirty = True

    def observe(self, nodes, now, reasons=None) -> dict:
        """The scheduler's view read again during the run; returns what changed, by kind.

        ``nodes`` are ``{name, state, job_end}`` (names of this window; others are ignored),
        ``reasons`` why a node is out of service or reserved, by name. Nodes in flight and
        failed nodes are ours and not judged here, nor a node to resume (drained by us) until it is admitted. A
        waiting node that is idle or busy is updated (:meth:`update`): a new job makes it wait
        for the job within ``max_job_wait``, a job ended early lets it in sooner. A waiting
        node drained or downed by someone else leaves the plan and counts as out of service;
        one now in a reservation leaves the plan, in service. Any other node of the fleet
        (done, skipped, deferred) drained or downed by someone else counts as out of service;
        a node counted so that is back in service stops counting. A canary that left the
        plan is replaced when the window chose it, and holds the rest when it was named.

        Returns ``{new_jobs, jobs_ended, job_end_moved, left, back}``: lists of names, and
        ``left`` name -> the state it left for.
        """
        reasons = reasons or {}
        changes = {"new_jobs": [], "jobs_ended": [], "job_end_moved": [], "left": {}, "back": []}
        for value in nodes:
            name = value.get("name") if isinstance(value, dict) else None
            node = self.nodes.get(name)
            if (
                node is None
                or name in self._in_flight
                or name in self.failed
                or (node.resume and name in self._waiting)
            ):
                continue
            state = value.get("state")
            if state not in STATES:
                raise ValueError(
                    "observe: the state of %s must be one of %s, got %r" % (name, ", ".join(STATES), state)
                )
            job_end = value.get("job_end") if state == "busy" else None
            if name in self._waiting:
                if state in ADMISSIBLE_STATES:
                    if node.state == "idle" and state == "busy":
                        changes["new_jobs"].append(name)
                    elif node.state == "busy" and state == "idle":
                        changes["jobs_ended"].append(name)
                    elif node.job_end != job_end:
                        changes["job_end_moved"].append(name)
                    self.update(name, state, job_end)
                    continue
                self._waiting.discard(name)
                self._dirty = True
                self._leave(node, state, reasons.get(name))
                changes["left"][name] = state
                self._canary_deferred(name, now)
            elif name in self.unavailable and state not in OUT_OF_SERVICE_STATES:
                self.unavailable.remove(name)
                node.state, node.job_end = state, job_end
                self._give_back(node)
                self._wake(node)
                changes["back"].append(name)
            elif state in OUT_OF_SERVICE_STATES and name not in self._capacity.out:
                self._leave(node, state, reasons.get(name))
                changes["left"][name] = state
        return changes

    def _leave(self, node: Node, state: str, why=None):
        """A node not in flight left service (drained or down by someone else) or went into a reservation."""
        node.state, node.job_end = state, None
        if state not in OUT_OF_SERVICE_STATES:
            self._undo_ahead(node.name)  # in service for the reservation's users
        if state in OUT_OF_SERVICE_STATES:
            self.unavailable.append(node.name)
            self._take(node)
            default = "drained by someone else" if state == "drained_by_others" else "down"
        else:
            if node.name not in self.reserved:
                self.reserved.append(node.name)
            default = "in a Slurm reservation that is not ours"
        if node.name not in self.done and node.name not in self.skipped and node.name not in self.deferred:
            self.gone[node.name] = (why or default) + "; seen during the run"

    def _reorder(self, nodes, now):
        """Order the waiting nodes again: a heap by rank, nothing parked."""
        names = order(nodes, now, self.settings.spread_by, self.settings.granularity)
        self._waiting = set(names)
        self._rank = {name: rank for rank, name in enumerate(names)}
        self._heap = list(enumerate(names))  # sorted, so already a heap
        self._parked: dict = {}
        # Busy nodes passed over for their job: a heap by when they may start (job end - max_job_wait),
        # back in the admission heap once that time came (an unknown end waits for update()).
        self._later: list = []
        self._dirty = False
        self._ahead_scan = True

    def _wake(self, node: Node):
        """Node is back: the nodes parked behind its domains and partitions may fit again."""
        for kind, member in node.domains.items():
            if kind in self._per_domain:
                for item in self._parked.pop(("domain", kind, member), ()):
                    heapq.heappush(self._heap, item)
        for partition in node.partitions:
            for item in self._parked.pop(("partition", partition), ()):
                heapq.heappush(self._heap, item)

    def _start(self, name: str, now):
        self._ahead_scan = True
        self._waiting.discard(name)
        if name not in self._capacity.out:  # a node to resume is counted out of service from the start
            self._take(self.nodes[name])
        self._in_flight[name] = now

    def admit(self, now) -> list[str]:
        """The nodes that may leave service now; they are in flight from now on.

        Greedy in order: a node that does not fit waits (parked behind what keeps it
        out, woken when a node of that domain or partition is back), the nodes after
        it still get their chance.
        """
        self.now = now
        if self.halted:
            return []
        if self._dirty:
            self._reorder([self.nodes[name] for name in self._waiting], now)
        resuming = sorted((name for name in self.resumed if name in self._waiting), key=self._rank.__getitem__)
        for name in resuming:  # out of service already: first, whatever the rules and the canary phase
            self._start(name, now)
        if resuming:
            return resuming
        later = self._later
        while later and later[0][0] <= now:
            _when, rank, name = heapq.heappop(later)
            heapq.heappush(self._heap, (rank, name))
        # Nodes drained ahead first (their job ended, or ends within the wait), outside the canary phase.
        started = self._admit_ahead(now, not (self._canaries_left or (self.settings.barrier and self._in_flight)))
        if self._canaries_left:
            if self._in_flight:
                return []
            canary = next((name for name in self.canaries if name in self._waiting), None)
            if (
                canary is None
                or self._misfit(self.nodes[canary]) is not None
                or not ready(self.nodes[canary], now, self._wait)
            ):
                return []
            self._start(canary, now)
            return [canary]
        if self.settings.barrier and self._in_flight:
            return started
        heap = self._heap
        while heap and not self._capacity.full:
            rank, name = heapq.heappop(heap)
            if name not in self._waiting:
                continue
            if not ready(self.nodes[name], now, self._wait):
                job_end = self.nodes[name].job_end
                ready_at = float("inf") if job_end is None else job_end - self._wait
                heapq.heappush(self._later, (ready_at, rank, name))
                continue
            key = self._misfit(self.nodes[name])
            if key is None:
                self._start(name, now)
                started.append(name)
            else:
                self._parked.setdefault(key, []).append((rank, name))
        return started

    def admit_ahead(self, now) -> list[str]:
        """Only the nodes drained ahead, while admission otherwise waits for a fresh read: each whose job ended takes
        its slot (if it fits) or is given back (:meth:`undrain_due`) now. Safe on the last read's view: a node
        drained ahead starts no new job, so its job's end is not news a later read could undo."""
        self.now = now
        if self.halted:
            return []
        if self._dirty:
            self._reorder([self.nodes[name] for name in self._waiting], now)
        return self._admit_ahead(now, not (self._canaries_left or (self.settings.barrier and self._in_flight)))

    def _admit_ahead(self, now, may_admit: bool) -> list[str]:
        """Nodes drained ahead first: each takes its slot as soon as it may (its job ended, or its end came within
        ``max_job_wait``) and fits; one whose job ended and cannot take a slot now is given back to its scheduler."""
        started = []
        if not self._ahead:
            return started
        for name in sorted(self._ahead, key=self._rank.__getitem__):
            node = self.nodes[name]
            if not ready(node, now, self._wait):
                continue
            if may_admit and not self._capacity.full and self._misfit(node) is None:
                self._start(name, now)
                started.append(name)
            elif node.state == "idle":
                self._undo_ahead(name)
                self._undrain.append(name)
        return started

    def drain_ahead(self, now) -> list[str]:
        """The busy nodes next in line to drain ahead of their slot now; they count as drained ahead from now.

        Only when the window has room it could not fill (:meth:`admit` ran first), outside the canary phase and
        waves, before any halt; at most ``drain_ahead`` at once, each keeping its partitions above the floor with
        every node out of service and every node drained ahead counted. The caller drains them (our reason,
        :data:`DRAIN_AHEAD_REASON`) and calls :meth:`drain_ahead_failed` for a drain that did not happen.
        """
        if (
            not self._ahead_limit
            or len(self._ahead) >= self._ahead_limit
            or not self._ahead_scan
            or self.halted
            or self._canaries_left
            or self.settings.barrier
            or self._capacity.full
        ):
            return []
        self._ahead_scan = False
        if self._dirty:
            self._reorder([self.nodes[name] for name in self._waiting], now)
            self._ahead_scan = False
        chosen = []
        for name in self.remaining:
            node = self.nodes[name]
            if node.state != "busy" or name in self._ahead or node.resume or node.canary:
                continue
            if not self._capacity.keeps_floor(node):
                continue
            self._ahead[name] = now
            self._capacity.take_floor(node)
            chosen.append(name)
            if len(self._ahead) >= self._ahead_limit:
                break
        return chosen

    def drain_ahead_failed(self, name: str):
        """The drain ahead of ``name`` did not happen (the scheduler refused it): it waits in service again."""
        self._undo_ahead(name)

    def undrain_due(self) -> list[str]:
        """Nodes drained ahead to give back to their scheduler now (their job ended with no slot free for them); each
        is an ordinary node waiting in service from now on. Returns each once."""
        found, self._undrain = self._undrain, []
        return found

    def waiting_for_jobs(self, now) -> dict:
        """Remaining nodes that do not take a slot now for their running job: name -> why."""
        return {
            name: job_wait_reason(self.nodes[name], now, self._wait)
            for name in self.remaining
            if not ready(self.nodes[name], now, self._wait)
        }

    def next_change(self, now):
        """When, with nothing in flight, the window may next admit or defer a node by the clock alone: the first time
        a waiting node's job comes within ``max_job_wait`` of its end, or the deadline; None when nothing waits."""
        ends = [self.nodes[name].job_end for name in self.waiting_for_jobs(now)]
        times = [end - self._wait for end in ends if end is not None and end - self._wait > now]
        times += [self.deadline] if ends and self.deadline > now else []
        return min(times) if times else None

    def defer_waiting(self, now) -> dict:
        """With nothing in flight, defer the nodes waiting for jobs that cannot end in time; name -> why.

        Called when nothing else can start (nothing in flight, :meth:`admit` gave nothing): a node
        whose job has no end, or ends after the deadline (less ``max_job_wait``), or every waiting node
        once the deadline passed (:func:`window_input.deadline_reason`). The others keep waiting, in
        service, for their jobs. Each deferred node is still running its job, in service, not upgraded.
        Nothing is deferred while a node is in flight or after a halt.
        """
        if self._in_flight or self.halted:
            return {}
        found = {}
        for name in self.waiting_for_jobs(now):
            why = deadline_reason(self.nodes[name], now, self._wait, self.deadline)
            if why is not None:
                found[name] = why
        for name, why in found.items():
            self._waiting.discard(name)
            self._undo_ahead(name)  # its host gives the drain back when it passes its slot
            self.deferred[name] = why
        for name in found:
            self._canary_deferred(name, now)
        return found

    def finish(self, name: str, ok: bool, halt=None, deferred=False):
        """Node ``name`` is back: upgraded and in service (``ok``), or failed and left out of service.

        ``halt`` (default: ``not ok`` under ``halt_on_failure``) stops admission: a node
        rolled back and in service again still halts the run (``ok=True, halt=True``), a
        node left drained by policy need not (``ok=False, halt=False``). ``deferred``: the
        node's jobs outlasted its wait, it is back in service, not upgraded (``ok`` must be
        true: a deferred node is never left out of service).
        """
        if deferred and not ok:
            raise ValueError("finish: %s is deferred, so it is back in service: ok must be true" % name)
        if name not in self._in_flight:
            raise ValueError(
                "finish: %s is not in flight (in flight: %s)" % (name, ", ".join(self._in_flight) or "none")
            )
        del self._in_flight[name]
        if deferred:
            self._canary_deferred(name, self.now)  # a deferred canary did not pass
        else:
            self._canaries_left.discard(name)
        if halt is None:
            halt = not ok and self.settings.halt_on_failure
        if halt:
            self.halted = True
        self._ahead_scan = True
        if ok:
            if deferred:
                self.deferred[name] = "its jobs outlasted max_job_wait %ds; returned to service, not upgraded" % (
                    self._wait
                )
            else:
                self.done.append(name)
            self._give_back(self.nodes[name])
            self._wake(self.nodes[name])
            return
        self.failed.append(name)

    def release(self, name: str):
        """A failed node is back in service (repaired, not upgraded): it stops counting as out."""
        if name not in self.failed or name not in self._capacity.out:
            raise ValueError("release: %s is not a failed node still out of service" % name)
        self._ahead_scan = True
        self._give_back(self.nodes[name])
        self._wake(self.nodes[name])
