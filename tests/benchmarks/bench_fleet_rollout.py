"""Sliding window against serial waves: a discrete-event simulation of a fleet rollout (a plain script, not a test).

    .venv/bin/python tests/benchmarks/bench_fleet_rollout.py

Simulates 1,250 nodes of 8 GPUs in 40 racks and four Slurm partitions, with job
durations from the Helios Venus trace (``shared/traces/helios_venus_gpu_jobs.csv``,
``GPUOPS_TRACES_DIR`` overrides the folder), and compares, same seed and same
fleet: serial waves of 10% (a canary, then waves: :func:`serial_batches`),
a plain sliding window in random order, and the product: the strategy's own
``Window`` (admission, max_job_wait and deferral, drain ahead and
its give-backs) and ``fleet_refresh.RefreshSchedule`` (when the fleet is read
again), fed only what Slurm shows at each read (idle, or busy until EndTime =
job start + time limit), for time limits 1x, 2x and 5x the jobs' real
durations and a 7-day partition maximum, with drain ahead on and off, and for a
queue that refills a node at once. Prints makespan against a lower bound,
GPU-hours lost, drained-idle GPU-hours, nodes deferred, drains ahead, reads of
the fleet, stranded nodes (drained, no job, not upgrading), the rule violations
that ``window_audit.check`` finds in each timeline (drains ahead included),
whether the issue's goals are met, and how long planning 1,250 and 10,000 nodes
takes. About 35 s of CPU.

Derived from the SenseTime Helios traces (S-Lab-System-Group/HeliosData), CC BY 4.0.
Hu et al., "Characterization and Prediction of Deep Learning Workloads in
Large-Scale GPU Datacenters", SC '21, https://doi.org/10.1145/3458817.3476223
"""

from __future__ import annotations

import bisect
import csv
import heapq
import itertools
import math
import os
import random
import statistics
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import (
    fleet_refresh,
    window_audit,
    window_input,
    window_preview,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_order import order

SEED = 20240611
NODES = 1250
GPUS = 8
RACKS = 40
MAX_UNAVAILABLE = "10%"
RACK_LIMIT = 4
FLOOR = 0.85
IDLE_SHARE = 0.25  # share of nodes idle at t=0, and the long-run idle share of every node
FAIL_RATE = 0.002  # share of health gates that fail
REPAIR_S = 4 * 3600  # a node whose gate failed is out of service that long, then back (not upgraded)
DOWN, DRAINED_BY_OTHERS = 4, 3  # nodes out of service at t=0, never upgraded
GOAL_MAKESPAN = 1.10  # issue 17, item 7: with only what Slurm knows
GOAL_IDLE_FLOOR = 0.01  # drained-idle GPU-h at most 1 % of the floor (the sum of the upgrade steps)
MAX_JOB_WAIT = window_input.DEFAULT_MAX_JOB_WAIT
REFRESH_S = 60  # gpuops_upgrade_refresh_interval's default
READ_S = 2.0  # one read of the fleet (scontrol show nodes and squeue on 1,250 nodes, and its task)
DRAIN_POLL_S = 10  # gpuops_upgrade_drain_poll_interval's default: the drain looks at the node's jobs that often
DAY = 86400.0
# Slurm's time limit of a job from its real duration: EndTime = start + limit (Slurm kills the job then, so the limit
# is at or above the real duration). 7 d: every job runs at the partition's MaxTime (no --time given).
LIMITS = (
    ("1x", lambda duration: duration),
    ("2x", lambda duration: 2 * duration),
    ("5x", lambda duration: 5 * duration),
    ("7 d max", lambda duration: 7 * DAY),
)
RULES = ("max_unavailable", "per_domain", "partition_floor", "drain_ahead")
BUSY_QUEUE_IDLE = 0.002  # the sensitivity to a queue that is never empty: a node is idle 0.2 % of the time


def busy_fleet_gap(durations) -> float:
    return statistics.fmean(durations) * BUSY_QUEUE_IDLE / (1 - BUSY_QUEUE_IDLE)


TRACE = "helios_venus_gpu_jobs.csv"
HOUR = 3600.0


def traces_dir() -> Path:
    override = os.environ.get("GPUOPS_TRACES_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[3] / "shared" / "traces"


def load_durations() -> list[int]:
    path = traces_dir() / TRACE
    if not path.is_file():
        print(
            "bench_fleet_rollout: job trace %s is missing; put helios_venus_gpu_jobs.csv (duration_s,gpus,submit_s) "
            "there or point GPUOPS_TRACES_DIR at its folder" % path,
            file=sys.stderr,
        )
        sys.exit(2)
    with path.open(newline="") as handle:
        durations = [int(float(row["duration_s"])) for row in csv.DictReader(handle)]
    if not durations:
        print("bench_fleet_rollout: %s holds no jobs" % path, file=sys.stderr)
        sys.exit(2)
    return durations


class Jobs:
    """The job timeline of one node: back-to-back jobs with idle gaps, generated lazily and deterministically.

    At t=0 the node is idle (share IDLE_SHARE) or in a job whose remaining time is the
    residual life of a job seen at a random instant: a duration drawn with probability
    proportional to its length (inspection paradox), times U(0,1). Later jobs are drawn
    uniformly from the trace, after an exponential idle gap whose mean keeps the node idle
    IDLE_SHARE of the time. A drained node starts no new job.
    """

    __slots__ = ("_gap", "_rng", "_sample", "_sample_biased", "ends", "held", "starts")

    def __init__(self, rng: random.Random, sample, sample_biased, gap_mean: float, idle_share=IDLE_SHARE):
        self._rng = rng
        self._sample = sample
        self._sample_biased = sample_biased
        self._gap = gap_mean
        self.held = False  # drained: no new job starts
        if rng.random() < idle_share:
            start = rng.expovariate(1.0 / gap_mean)
            self.starts, self.ends = [start], [start + sample(rng)]
        else:
            duration = sample_biased(rng)
            end = duration * rng.random()
            # the job started before t=0: its start matters for Slurm's EndTime (start + time limit)
            self.starts, self.ends = [end - duration], [end]

    def _grow(self, until: float):
        while not self.held and self.ends[-1] <= until:
            start = self.ends[-1] + self._rng.expovariate(1.0 / self._gap)
            self.starts.append(start)
            self.ends.append(start + self._sample(self._rng))

    def view(self, now: float, limit):
        """What Slurm shows at ``now``: ``(state, EndTime)``, EndTime = start + ``limit(duration)`` , not the end."""
        self._grow(now)
        index = bisect.bisect_right(self.starts, now) - 1
        if index >= 0 and self.ends[index] > now:
            start = self.starts[index]
            return "busy", start + limit(self.ends[index] - start)
        return "idle", None

    def next_change(self, now: float) -> float:
        """When the node's Slurm view changes next after ``now`` (its job ends, or its next job starts)."""
        self._grow(now)
        index = bisect.bisect_right(self.starts, now) - 1
        if index >= 0 and self.ends[index] > now:
            return self.ends[index]
        if self.held or index + 1 >= len(self.starts):
            return float("inf")
        return self.starts[index + 1]

    def hold(self, now: float):
        """Drained at ``now``: the running job finishes, no new one starts."""
        index = bisect.bisect_right(self.starts, now)
        if index == 0:  # idle before its first job: that job never starts
            self.starts[:], self.ends[:] = [now - 1.0], [now - 1.0]
        else:
            del self.starts[index:]
            del self.ends[index:]
        self.held = True

    def release(self, now: float):
        """Back in service at ``now`` without an upgrade (a drain ahead given back): new jobs after an idle gap."""
        self.held = False
        if self.ends[-1] <= now:
            start = now + self._rng.expovariate(1.0 / self._gap)
            self.starts.append(start)
            self.ends.append(start + self._sample(self._rng))

    def at(self, now: float):
        """The end of the job running at ``now``, or None when the node is idle then."""
        self._grow(now)
        index = bisect.bisect_right(self.starts, now) - 1
        if index >= 0 and self.ends[index] > now:
            return self.ends[index]
        return None

    def free_at(self, now: float) -> float:
        """When a node drained at ``now`` has no job left."""
        end = self.at(now)
        return now if end is None else end


class Fleet:
    """Nodes, their domains and partitions, their jobs, and their upgrade steps (the same for every strategy)."""

    def __init__(self, durations, seed=SEED, size=NODES, racks=RACKS, idle_share=IDLE_SHARE):
        rng = random.Random(seed)
        mean = statistics.fmean(durations)
        gap_mean = mean * idle_share / (1 - idle_share)
        cumulative = list(itertools.accumulate(durations))

        def sample(r):
            return durations[int(r.random() * len(durations))]

        def sample_biased(r):
            return durations[bisect.bisect_right(cumulative, r.random() * cumulative[-1])]

        self.names = ["gpu%04d" % (index + 1) for index in range(size)]
        self.rack = {}
        self.partitions = {}
        for index, name in enumerate(self.names):
            rack = index * racks // size + 1
            self.rack[name] = "r%02d" % rack
            if rack <= racks * 7 // 10:
                parts = ["train"]
                if rack <= racks // 10:
                    parts.append("long")
            elif rack <= racks * 9 // 10:
                parts = ["infer"]
            else:
                parts = ["dev"]
            self.partitions[name] = parts
        out = rng.sample(self.names, DOWN + DRAINED_BY_OTHERS)
        self.state0 = {name: "up" for name in self.names}
        for position, name in enumerate(out):
            self.state0[name] = "down" if position < DOWN else "drained_by_others"
        self.jobs = {}
        self.steps = {}
        self.fails = {}
        for index, name in enumerate(self.names):
            node_rng = random.Random("%d-%d" % (seed, index))
            self.jobs[name] = Jobs(
                random.Random("%d-%d-jobs" % (seed, index)), sample, sample_biased, gap_mean, idle_share
            )
            self.steps[name] = (
                node_rng.uniform(2, 10),  # drain command
                node_rng.uniform(6, 10) * 60,  # install
                node_rng.uniform(5, 8) * 60,  # reboot
                node_rng.uniform(3, 5) * 60,  # health gate
            )
            self.fails[name] = node_rng.random() < FAIL_RATE
        self.upgradable = [name for name in self.names if self.state0[name] == "up"]
        self.max_unavailable = window_input.size_of(MAX_UNAVAILABLE, size, "max_unavailable")

    def node_dicts(self, now=0.0):
        """The planner's view of the fleet at ``now``."""
        nodes = []
        for name in self.names:
            state = self.state0[name]
            job_end = None
            if state == "up":
                job_end = self.jobs[name].at(now)
                state = "idle" if job_end is None else "busy"
            nodes.append(
                {
                    "name": name,
                    "domains": {"rack": self.rack[name]},
                    "partitions": self.partitions[name],
                    "gpus": GPUS,
                    "state": state,
                    "job_end": job_end,
                }
            )
        return nodes

    def work(self, name) -> float:
        return sum(self.steps[name])


class Result:
    def __init__(self, label):
        self.label = label
        self.timeline = []  # (name, out of service from, back in service at)
        self.makespan = 0.0
        self.idle_s = 0.0  # drained, no job left, not upgrading: GPUs idle
        self.busy_drain_s = 0.0  # drained while its last job runs: GPUs still working, no new jobs
        self.upgrade_s = 0.0  # drain command, install, reboot, gate
        self.repair_s = 0.0
        self.failed = 0
        self.upgraded = 0
        self.blocked = []
        self.deferred = self.drains_ahead = self.undrains = self.reads = 0
        self.stranded = set()
        self.stranded_seen = set()  # of them: seen idle by a read and left drained (the rest: drained when it ended)
        self.later = []  # each deferred node: its job's real end + its upgrade, the soonest a later run finishes it

    def node_done(self, fleet, name, drained_at, free, upgrade_start, back, idle_extra=0.0):
        self.busy_drain_s += free - drained_at
        self.idle_s += upgrade_start - free + idle_extra
        self.upgrade_s += fleet.work(name)
        self.makespan = max(self.makespan, back)
        if fleet.fails[name]:
            self.failed += 1
            self.repair_s += REPAIR_S
            self.timeline.append((name, drained_at, back + REPAIR_S))
        else:
            self.upgraded += 1
            self.timeline.append((name, drained_at, back))


def serial_batches(names, max_unavailable, skip=()) -> list[list[str]]:
    """The batches of Ansible's ``serial: [1, 1, max_unavailable]`` over the hosts not skipped, in inventory order:
    a canary alone, one more host alone, then batches of ``max_unavailable`` (a count or ``"N%"`` of the whole
    fleet, skipped hosts included, rounded as Ansible rounds ``serial``)."""
    limit = window_input.size_of(max_unavailable, max(len(names), 1))
    left_out = set(skip)
    pending = [name for name in names if name not in left_out]
    batches = [pending[:1], pending[1:2]] + [pending[start : start + limit] for start in range(2, len(pending), limit)]
    return [batch for batch in batches if batch]


def simulate_serial(fleet: Fleet) -> Result:
    """Ansible ``serial`` with the linear strategy: every task of a batch waits for every host of the batch."""
    result = Result("serial 10%")
    batches = serial_batches(fleet.names, MAX_UNAVAILABLE, skip=fleet_unavailable(fleet))
    now = 0.0
    for hosts in batches:
        free = {name: max(now + fleet.steps[name][0], fleet.jobs[name].free_at(now)) for name in hosts}
        install = max(free.values())
        reboot = max(install + fleet.steps[name][1] for name in hosts)
        gate = max(reboot + fleet.steps[name][2] for name in hosts)
        back = max(gate + fleet.steps[name][3] for name in hosts)
        for name in hosts:
            # Waits between the steps (for the slowest host of the batch) are drained-idle too.
            own = sum(fleet.steps[name][1:])
            result.node_done(fleet, name, now, free[name], install, back, idle_extra=(back - install) - own)
        now = back
    return result


def fleet_unavailable(fleet):
    return [name for name in fleet.names if fleet.state0[name] != "up"]


def simulate_window(fleet: Fleet, label, admit, finish, release, refresh=None) -> Result:
    """The event loop of a sliding window: admission, drain, wait for the job, upgrade, back (or failed: repair)."""
    result = Result(label)
    events = []  # (time, order, kind, name)
    counter = itertools.count()
    now = 0.0
    started = {}
    while True:
        if refresh is not None:
            refresh(now)
        for name in admit(now):
            drain_s, install_s, reboot_s, gate_s = fleet.steps[name]
            free = max(now + drain_s, fleet.jobs[name].free_at(now))
            upgrade_start = free
            back = upgrade_start + install_s + reboot_s + gate_s
            started[name] = (now, free, upgrade_start)
            heapq.heappush(events, (back, next(counter), "back", name))
        if not events:
            break
        now = events[0][0]
        while events and events[0][0] <= now:
            when, _unused, kind, name = heapq.heappop(events)
            if kind == "back":
                drained_at, free, upgrade_start = started[name]
                result.node_done(fleet, name, drained_at, free, upgrade_start, when)
                ok = not fleet.fails[name]
                finish(name, ok)
                if not ok:
                    heapq.heappush(events, (when + REPAIR_S, next(counter), "repaired", name))
            else:
                release(name)
    return result


def simulate_random_window(fleet: Fleet) -> Result:
    """A plain window: random order, at most max_unavailable of its own nodes out, no domain, floor or canary."""
    queue = list(fleet.upgradable)
    random.Random(SEED + 1).shuffle(queue)
    state = {"out": 0, "next": 0}

    def admit(_now):
        started = []
        while state["out"] < fleet.max_unavailable and state["next"] < len(queue):
            started.append(queue[state["next"]])
            state["next"] += 1
            state["out"] += 1
        return started

    def finish(_name, ok):
        if ok:
            state["out"] -= 1

    def release(_name):
        state["out"] -= 1

    return simulate_window(fleet, "random window", admit, finish, release)


def window_settings():
    return {
        "max_unavailable": MAX_UNAVAILABLE,
        "per_domain": {"rack": RACK_LIMIT},
        "partition_floor": FLOOR,
        "halt_on_failure": False,
    }


def simulate_product(
    durations, label, limit, drain_ahead, refresh_s=REFRESH_S, wait=MAX_JOB_WAIT, idle_share=IDLE_SHARE
) -> Result:
    """The rolling upgrade as the strategy runs it, on what Slurm shows: ``Window`` (the strategy's own
    admission, drain-ahead and deferral code) and ``fleet_refresh.RefreshSchedule`` (when the strategy reads the
    fleet), fed only Slurm's view at each read: idle, or busy until EndTime = job start + ``limit(duration)``.

    A fleet of its own (the same seed, so the same jobs until a drain changes them): a drained node starts no new
    job; a drain ahead given back starts new jobs again after an idle gap.
    """
    fleet = Fleet(durations, idle_share=idle_share)
    jobs = fleet.jobs
    settings = dict(window_settings(), max_job_wait=wait, drain_ahead=drain_ahead)
    nodes0 = []
    seen = {}
    for node in fleet.node_dicts(0.0):
        if node["state"] in ("idle", "busy"):
            seen[node["name"]] = jobs[node["name"]].view(0.0, limit)
            node["state"], node["job_end"] = seen[node["name"]]
        nodes0.append(node)
    window = Window(nodes0, settings, now=0)
    schedule = fleet_refresh.RefreshSchedule(refresh_s, 0.0)
    result = Result(label)
    result.nodes0, result.settings = nodes0, settings
    result.deferred = result.drains_ahead = result.undrains = result.reads = 0
    result.stranded = set()
    result.ahead = []  # (name, drained ahead at, admitted or given back at)
    waiting = set(window.remaining)
    events = []  # (time, order, kind, name)
    counter = itertools.count()
    changes = []  # (when a waiting node's Slurm view changes next, name)
    next_at = {}
    ahead_at = {}  # name -> when drained ahead
    flight = {}  # name -> (drained_at, free, upgrade_start)
    reading = [False]

    def push(when, kind, name=None):
        heapq.heappush(events, (when, next(counter), kind, name))

    def watch(name, now):
        when = jobs[name].next_change(now)
        next_at[name] = when
        if when != float("inf"):
            heapq.heappush(changes, (when, name))

    for name in waiting:
        watch(name, 0.0)
        if seen[name][0] == "busy":
            push(max(seen[name][1] - wait, 0.0), "wake")

    def read_done(now):
        result.reads += 1
        observed = []
        while changes and changes[0][0] <= now:
            when, name = heapq.heappop(changes)
            if name not in waiting or next_at.get(name) != when:
                continue
            view = jobs[name].view(now, limit)
            if view != seen[name]:
                seen[name] = view
                observed.append({"name": name, "state": view[0], "job_end": view[1]})
                if view[0] == "busy":
                    push(max(view[1] - wait, now), "wake")
            watch(name, now)
        changed = window.observe(observed, now)
        schedule.finished(now, True, changed)
        reading[0] = False

    def start_read(now):
        why = schedule.due(now)
        if why is not None and not reading[0] and waiting and not window.finished:
            schedule.started(now, why)
            reading[0] = True
            push(now + READ_S, "read")
            return True
        return False

    def undrain(name, now):
        start = ahead_at.pop(name)
        result.ahead.append((name, start, now))
        ended = jobs[name].ends[-1]
        if ended <= now:  # drained with no job from its job's end until now
            result.idle_s += now - max(ended, start)
        jobs[name].release(now)
        result.undrains += 1
        watch(name, now)

    def start_node(name, now):
        waiting.discard(name)
        if name in ahead_at:
            start = ahead_at.pop(name)
            result.ahead.append((name, start, now))
            ended = jobs[name].ends[-1]
            if ended <= now:
                result.idle_s += now - max(ended, start)
        jobs[name].hold(now)
        drain_s, install_s, reboot_s, gate_s = fleet.steps[name]
        job_end = jobs[name].free_at(now)
        if job_end - now > wait:  # its jobs outlast the wait after the drain: returned to service, deferred
            push(now + wait, "outlasted", name)
            flight[name] = (now, now + wait, None)
            return
        free = max(now + drain_s, job_end)
        looks = math.ceil((free - now - drain_s) / DRAIN_POLL_S)  # the drain looks at the node's jobs every poll
        upgrade_start = now + drain_s + looks * DRAIN_POLL_S
        flight[name] = (now, free, upgrade_start)
        push(upgrade_start + install_s + reboot_s + gate_s, "back", name)

    def decide(now):
        started = []
        if not schedule.holds(now):
            started += window.admit(now)
        else:
            started += window.admit_ahead(now)
        fresh = schedule.fresh
        if not fresh and not window.in_flight and not reading[0]:
            start_read(now)  # nothing in flight: read the fleet before deferring on the old view
        elif fresh and not window.in_flight:
            for name in window.defer_waiting(now):
                waiting.discard(name)
                result.deferred += 1
                result.later.append(jobs[name].free_at(now) + fleet.work(name))
                if name in ahead_at:
                    undrain(name, now)
            started += window.admit(now)
        for name in window.undrain_due():
            undrain(name, now)
        if not schedule.holds(now):
            for name in window.drain_ahead(now):
                ahead_at[name] = now
                jobs[name].hold(now)
                result.drains_ahead += 1
        for name in started:
            start_node(name, now)
        # the rule: a node drained ahead that the window has seen idle is admitted or given back at once
        for name in ahead_at:
            if seen[name][0] == "idle":
                result.stranded.add(name)
                result.stranded_seen.add(name)
        start_read(now)

    decide(0.0)
    push(refresh_s, "wake")
    while events:
        now, _order, kind, name = heapq.heappop(events)
        if kind == "read":
            read_done(now)
            if refresh_s:
                push(now + refresh_s, "wake")
        elif kind == "back":
            drained_at, free, upgrade_start = flight.pop(name)
            result.node_done(fleet, name, drained_at, free, upgrade_start, now)
            ok = not fleet.fails[name]
            window.finish(name, ok)
            schedule.released(now)
            if not ok:
                push(now + REPAIR_S, "repaired", name)
        elif kind == "outlasted":
            drained_at, _free, _unused = flight.pop(name)
            result.timeline.append((name, drained_at, now))
            result.busy_drain_s += now - drained_at
            window.finish(name, True, deferred=True)
            jobs[name].release(now)
            result.deferred += 1
            result.later.append(jobs[name].free_at(now) + fleet.work(name))
            schedule.released(now)
        elif kind == "repaired":
            window.release(name)
        if not window.finished or events or window.in_flight:
            decide(now)
    for name, start in ahead_at.items():  # left drained ahead when the run ended: stranded
        result.stranded.add(name)
        result.ahead.append((name, start, result.makespan))
    result.blocked = sorted(window.blocked)
    return result


def lower_bound(fleet: Fleet):
    """max(longest single node: its t=0 job end + drain + install + reboot + gate; total work / max_unavailable)."""
    single = max(fleet.jobs[name].free_at(0.0) + fleet.work(name) for name in fleet.upgradable)
    total = sum(fleet.work(name) for name in fleet.upgradable) / fleet.max_unavailable
    return max(single, total), single, total


def violations_by_rule(fleet, result):
    found = window_audit.check(
        result.timeline,
        getattr(result, "nodes0", None) or fleet.node_dicts(0.0),
        getattr(result, "settings", None) or window_settings(),
        ahead=getattr(result, "ahead", ()),
    )
    counts = dict.fromkeys(RULES, 0)
    for violation in found:
        counts[violation["rule"]] += 1
    return counts


def synthetic_fleet(size, seed=SEED):
    """A planner-only fleet (no simulation) of ``size`` nodes, 32 per rack, for the timing figures."""
    rng = random.Random(seed)
    nodes = []
    for index in range(size):
        busy = rng.random() >= IDLE_SHARE
        nodes.append(
            {
                "name": "gpu%05d" % index,
                "domains": {"rack": "r%03d" % (index // 32), "leaf": "l%02d" % (index // 256)},
                "partitions": ["p%d" % (index * 10 // size)],
                "gpus": GPUS,
                "state": "busy" if busy else "idle",
                "job_end": rng.uniform(0, 48 * HOUR) if busy and rng.random() < 0.95 else None,
            }
        )
    return nodes


def time_planning(size, repeat=3):
    """(order() s, plan() s, full admission loop s): the loop admits, finishes the oldest in flight, admits again."""
    nodes = synthetic_fleet(size)
    timings = {"order": [], "plan": [], "loop": []}
    for _unused in range(repeat):
        start = time.perf_counter()
        order(nodes, 0)
        timings["order"].append(time.perf_counter() - start)
        start = time.perf_counter()
        window_preview.plan(Window(nodes, window_settings(), 0), 0)
        timings["plan"].append(time.perf_counter() - start)
        start = time.perf_counter()
        window = Window(nodes, window_settings(), 0)
        in_flight = list(window.admit(0))
        step = 0
        while in_flight:
            step += 1
            window.finish(in_flight.pop(0), True)
            in_flight.extend(window.admit(step))
            if not in_flight and window.defer_waiting(step):  # as the strategy: a job past the deadline is deferred
                in_flight.extend(window.admit(step))
            wake = window.next_change(step) if not in_flight else None
            if wake is not None:  # nothing runs: the window waits, in service, for the next job to near its end
                step = wake
                in_flight.extend(window.admit(step))
        timings["loop"].append(time.perf_counter() - start)
        counted = len(window.done) + len(window.blocked) + len(window.deferred)
        assert counted == size, (len(window.done), len(window.blocked), len(window.deferred))
    return {key: min(values) for key, values in timings.items()}


def say(text):
    print(textwrap.fill(text, width=118, subsequent_indent="    "))


def main():
    started = time.perf_counter()
    durations = load_durations()
    fleet = Fleet(durations)
    bound, single, total = lower_bound(fleet)
    serial = simulate_serial(fleet)
    plain = simulate_random_window(fleet)
    ahead_n = fleet.max_unavailable
    ours = [simulate_product(durations, "ours %s" % name, limit, ahead_n) for name, limit in LIMITS]
    ours_off = [simulate_product(durations, "ahead 0, %s" % name, limit, 0) for name, limit in LIMITS]
    results = [serial, plain, *ours]
    checks = {result.label: violations_by_rule(fleet, result) for result in results + ours_off}
    busy0 = sum(1 for name in fleet.upgradable if fleet.jobs[name].at(0.0) is not None)
    floor_gpu_h = sum(fleet.work(name) for name in fleet.upgradable) * GPUS / HOUR

    print("Fleet rollout simulation (seed %d)" % SEED)
    say(
        "  fleet: %d nodes x %d GPUs, %d racks, partitions train/long/infer/dev; %d down and %d drained by others at"
        " t=0 (never upgraded, out of service throughout); %d to upgrade, %d of them busy at t=0"
        % (NODES, GPUS, RACKS, DOWN, DRAINED_BY_OTHERS, len(fleet.upgradable), busy0)
    )
    say(
        "  jobs: %d Helios Venus durations from %s (capped at 48 h). Assumed: one job at a time per node; at t=0 a"
        " node is idle (%.0f%%) or its job has a residual life of a length-biased duration x U(0,1); after a job, an"
        " exponential idle gap (mean %.0f min, keeps the idle share) then a new job drawn from the trace; a drained"
        " node starts no new job; a drain ahead given back starts new jobs again after an idle gap."
        % (
            len(durations),
            TRACE,
            IDLE_SHARE * 100,
            statistics.fmean(durations) * IDLE_SHARE / (1 - IDLE_SHARE) / 60,
        )
    )
    say(
        "  per node: drain U(2,10) s, then wait for its job (the drain looks every %d s), install U(6,10) min, reboot"
        " U(5,8) min, gate U(3,5) min (pre-stage happens before, outside the window); %.1f%% of gates fail: the node"
        " stays drained %.0f h for repair (counted out of service), then returns un-upgraded; the run does NOT halt."
        % (DRAIN_POLL_S, FAIL_RATE * 100, REPAIR_S / HOUR)
    )
    say(
        "  serial = serial_batches [1, 1, 10%%] (canary, then %d-node batches, inventory order), linear strategy: each"
        " step waits for the batch's slowest host; random window = %d of its own nodes out, random order, blind to"
        " others' drains, domains, floors, no canary (both told the true job ends). ours = the product: the strategy's"
        " own Window (max_unavailable 10%%, per_domain rack %d, partition_floor %.2f, max_job_wait %d s,"
        " drain_ahead %d, canary alone first) and fleet_refresh.RefreshSchedule (a read of the fleet after each"
        " release and every %d s while nodes wait, %.0f s each, admission waits for the read after a release), fed"
        " ONLY what Slurm shows at each read: idle, or busy until EndTime = job start + time limit, the limit %s of"
        " the job's real duration; the run waits for jobs in service until its deadline (the latest EndTime at t=0, the"
        " default) and defers a node whose job has no end or ends later, as the strategy does."
        % (
            fleet.max_unavailable,
            fleet.max_unavailable,
            RACK_LIMIT,
            FLOOR,
            MAX_JOB_WAIT,
            ahead_n,
            REFRESH_S,
            READ_S,
            ", ".join(name for name, _limit in LIMITS),
        )
    )
    say(
        "  lower bound = max(longest single node: its t=0 job end (the real one) + drain + install + reboot + gate ="
        " %.2f h; total drain+install+reboot+gate / max_unavailable %d = %.2f h) = %.2f h"
        % (single / HOUR, fleet.max_unavailable, total / HOUR, bound / HOUR)
    )
    say(
        "  drained-idle GPU-h = GPUs of a drained node whose job has ended and which is not upgrading (waiting for its"
        " turn, for the batch's slowest host, for the drain's next look, or drained ahead until the next read sees its"
        " job ended); a drained node still running its last job is NOT idle (drain-busy). floor = the sum of the"
        " upgrade steps. stranded = a node drained ahead that the window saw idle and neither admitted nor gave back"
        " at once, or left drained when the run ended. deferred = passed over for its job when nothing else could"
        " start (in service, not upgraded: a later run's); all done at best = when a later run started the moment"
        " each deferred node's job really ended would have it back (the soonest the fleet is all upgraded)."
    )
    print()
    row = "%-30s" + " %13s" * len(results)
    print(row % ("", *(result.label for result in results)))

    def line(label, values, table=results):
        print(("%-30s" + " %13s" * len(table)) % (label, *values))

    def table(rows, columns):
        line("makespan (h)", ["%.2f" % (r.makespan / HOUR) for r in columns], columns)
        line("makespan / lower bound", ["%.3f" % (r.makespan / bound) for r in columns], columns)
        for label, value in rows:
            line(label, [value(r) for r in columns], columns)

    common = [
        ("drained-idle GPU-h", lambda r: "%.1f" % (r.idle_s * GPUS / HOUR)),
        ("drained-idle / floor", lambda r: "%.2f%%" % (r.idle_s * GPUS / HOUR / floor_gpu_h * 100)),
    ]
    line("lower bound (h)", ["%.2f" % (bound / HOUR)] * len(results))
    table(
        common
        + [
            ("upgrading GPU-h", lambda r: "%.0f" % (r.upgrade_s * GPUS / HOUR)),
            ("lost = idle + upgrading GPU-h", lambda r: "%.0f" % ((r.idle_s + r.upgrade_s) * GPUS / HOUR)),
            ("floor GPU-h (sum of steps)", lambda r: "%.0f" % floor_gpu_h),
            ("lost / floor", lambda r: "%.2f" % ((r.idle_s + r.upgrade_s) * GPUS / HOUR / floor_gpu_h)),
            ("drain-busy GPU-h (not lost)", lambda r: "%.0f" % (r.busy_drain_s * GPUS / HOUR)),
            ("failed gates (repair GPU-h)", lambda r: "%d (%.0f)" % (r.failed, r.repair_s * GPUS / HOUR)),
            ("upgraded / deferred / blocked", lambda r: "%d/%d/%d" % (r.upgraded, r.deferred, len(r.blocked))),
            ("all done at best (h)", lambda r: "%.2f" % (max([r.makespan, *r.later]) / HOUR)),
            ("all done at best / bound", lambda r: "%.3f" % (max([r.makespan, *r.later]) / bound)),
            ("drains ahead / given back", lambda r: "%d / %d" % (r.drains_ahead, r.undrains) if r.reads else "-"),
            ("reads of the fleet", lambda r: str(r.reads) if r.reads else "-"),
            ("stranded nodes", lambda r: str(len(r.stranded)) if r.reads else "-"),
        ]
        + [("violations: %s" % rule, lambda r, rule=rule: str(checks[r.label][rule])) for rule in RULES],
        results,
    )
    print()
    print("drain_ahead 0 (the default), same fleet and limits:")
    line("", [r.label for r in ours_off], ours_off)
    table(
        [
            *common,
            ("upgraded / deferred / blocked", lambda r: "%d/%d/%d" % (r.upgraded, r.deferred, len(r.blocked))),
            ("all done at best / bound", lambda r: "%.3f" % (max([r.makespan, *r.later]) / bound)),
            ("reads of the fleet", lambda r: str(r.reads)),
            ("stranded nodes", lambda r: str(len(r.stranded))),
            ("violations (all rules)", lambda r: str(sum(checks[r.label].values()))),
        ],
        ours_off,
    )
    print()
    busy_fleet = Fleet(durations, idle_share=BUSY_QUEUE_IDLE)
    busy_bound = lower_bound(busy_fleet)[0]
    busy_floor = sum(busy_fleet.work(name) for name in busy_fleet.upgradable) * GPUS / HOUR
    limit_5x = dict(LIMITS)["5x"]
    busy = [
        simulate_product(durations, "ahead %d, 5x" % ahead, limit_5x, ahead, idle_share=BUSY_QUEUE_IDLE)
        for ahead in (0, ahead_n)
    ]
    say(
        "a queue that refills a node at once (idle share %.1f%%: idle gaps of %.0f s on average), limits 5x,"
        " lower bound %.2f h:" % (BUSY_QUEUE_IDLE * 100, busy_fleet_gap(durations), busy_bound / HOUR)
    )
    line("", [r.label for r in busy], busy)
    for label, value in (
        ("makespan / lower bound", lambda r: "%.3f" % (r.makespan / busy_bound)),
        ("all done at best / bound", lambda r: "%.3f" % (max([r.makespan, *r.later]) / busy_bound)),
        ("upgraded / deferred / blocked", lambda r: "%d/%d/%d" % (r.upgraded, r.deferred, len(r.blocked))),
        ("drained-idle / floor", lambda r: "%.2f%%" % (r.idle_s * GPUS / HOUR / busy_floor * 100)),
        ("drains ahead / given back", lambda r: "%d / %d" % (r.drains_ahead, r.undrains)),
        ("stranded nodes", lambda r: str(len(r.stranded))),
        ("violations (all rules)", lambda r: str(sum(violations_by_rule(busy_fleet, r).values()))),
    ):
        line(label, [value(r) for r in busy], busy)
    print()
    for name in ("2x", "5x"):
        fast = simulate_product(durations, "refresh 15 s", dict(LIMITS)[name], ahead_n, refresh_s=15)
        print(
            "refresh_interval 15 s, drain ahead %d, limits %s: drained-idle %.2f%% of the floor, all done at best"
            " %.3f x bound, %d reads, %d stranded, %d violations"
            % (
                ahead_n,
                name,
                fast.idle_s * GPUS / HOUR / floor_gpu_h * 100,
                max([fast.makespan, *fast.later]) / bound,
                fast.reads,
                len(fast.stranded),
                sum(violations_by_rule(fleet, fast).values()),
            )
        )
    print()
    for result in ours + ours_off:
        ratio = max([result.makespan, *result.later]) / bound  # every node, the deferred ones by a later run
        idle = result.idle_s * GPUS / HOUR / floor_gpu_h
        broken = sum(checks[result.label].values())
        goals = [
            ("all done at best <= %.2f x bound: %.3f" % (GOAL_MAKESPAN, ratio), ratio <= GOAL_MAKESPAN),
            ("drained-idle <= %d%% of floor: %.2f%%" % (GOAL_IDLE_FLOOR * 100, idle * 100), idle <= GOAL_IDLE_FLOOR),
            ("violations: %d" % broken, broken == 0),
            ("stranded: %d" % len(result.stranded), not result.stranded),
        ]
        print(
            "goals, %-15s %s"
            % (result.label + ":", "; ".join("%s %s" % (text, "met" if met else "NOT MET") for text, met in goals))
        )
    print()

    small = time_planning(1250)
    large = time_planning(10000, repeat=1)
    print("planning time (synthetic fleets, 32 nodes per rack, rack limit %d, floor %.2f):" % (RACK_LIMIT, FLOOR))
    for key, what in (
        ("order", "order()"),
        ("plan", "plan() preview"),
        ("loop", "Window: every node admitted and finished"),
    ):
        print(
            "  %-42s 1,250 nodes %8.1f ms   10,000 nodes %9.1f ms   growth x%.1f (8x nodes)"
            % (what, small[key] * 1000, large[key] * 1000, large[key] / small[key])
        )
    plan_goal = small["order"] + small["loop"]
    print(
        "goal: planning 1,250 nodes (order + full admission loop) under 1 s: %.3f s %s"
        % (plan_goal, "met" if plan_goal < 1 else "NOT MET")
    )
    print("benchmark wall time: %.1f s" % (time.perf_counter() - started))


if __name__ == "__main__":
    main()
