"""Sliding window against serial waves: a discrete-event simulation of a fleet rollout (a plain script, not a test).

    .venv/bin/python tests/benchmarks/bench_fleet_rollout.py

Simulates 1,250 nodes of 8 GPUs in 40 racks and four Slurm partitions, with job
durations from the Helios Venus trace (``shared/traces/helios_venus_gpu_jobs.csv``,
``GPUOPS_TRACES_DIR`` overrides the folder), and compares, same seed and same
fleet: serial waves of 10% (the collection's wave_plan: a canary, then waves),
a plain sliding window in random order, and the collection's window_plan
(max_unavailable 10%, at most 4 nodes per rack, partition floor 0.85). Prints
makespan against a lower bound, GPU-hours lost, the rule violations that
``window_plan.check`` finds in each timeline, whether the issue's goals are met,
and how long planning 1,250 and 10,000 nodes takes.

Derived from the SenseTime Helios traces (S-Lab-System-Group/HeliosData), CC BY 4.0.
Hu et al., "Characterization and Prediction of Deep Learning Workloads in
Large-Scale GPU Datacenters", SC '21, https://doi.org/10.1145/3458817.3476223
"""

from __future__ import annotations

import bisect
import csv
import heapq
import itertools
import os
import random
import statistics
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import wave_plan, window_plan

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
GOAL_MAKESPAN = 1.05
GOAL_IDLE_SHARE = 0.10
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

    __slots__ = ("_gap", "_rng", "_sample", "_sample_biased", "ends", "starts")

    def __init__(self, rng: random.Random, sample, sample_biased, gap_mean: float):
        self._rng = rng
        self._sample = sample
        self._sample_biased = sample_biased
        self._gap = gap_mean
        if rng.random() < IDLE_SHARE:
            start = rng.expovariate(1.0 / gap_mean)
            self.starts, self.ends = [start], [start + sample(rng)]
        else:
            self.starts, self.ends = [0.0], [sample_biased(rng) * rng.random()]

    def _grow(self, until: float):
        while self.ends[-1] <= until:
            start = self.ends[-1] + self._rng.expovariate(1.0 / self._gap)
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

    def __init__(self, durations, seed=SEED, size=NODES, racks=RACKS):
        rng = random.Random(seed)
        mean = statistics.fmean(durations)
        gap_mean = mean * IDLE_SHARE / (1 - IDLE_SHARE)
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
            self.jobs[name] = Jobs(random.Random("%d-%d-jobs" % (seed, index)), sample, sample_biased, gap_mean)
            self.steps[name] = (
                node_rng.uniform(2, 10),  # drain command
                node_rng.uniform(6, 10) * 60,  # install
                node_rng.uniform(5, 8) * 60,  # reboot
                node_rng.uniform(3, 5) * 60,  # health gate
            )
            self.fails[name] = node_rng.random() < FAIL_RATE
        self.upgradable = [name for name in self.names if self.state0[name] == "up"]
        self.max_unavailable = wave_plan.size_of(MAX_UNAVAILABLE, size, "max_unavailable")

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


def simulate_serial(fleet: Fleet) -> Result:
    """Ansible ``serial`` with the linear strategy: every task of a batch waits for every host of the batch."""
    result = Result("serial 10%")
    batches = wave_plan.plan(fleet.names, [], [1, MAX_UNAVAILABLE], MAX_UNAVAILABLE, skip=fleet_unavailable(fleet))
    now = 0.0
    for wave in batches["waves"]:
        hosts = wave["hosts"]
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


def simulate_ours(fleet: Fleet) -> tuple[Result, float]:
    """window_plan.Window, told at each admission which waiting nodes are idle and when their running jobs end."""
    window = window_plan.Window(fleet.node_dicts(0.0), window_settings(), now=0)
    seen = {}
    planning = [0.0]

    def refresh(now):
        # Only worth asking the scheduler when there is room in the window.
        if window.in_flight and len(window.in_flight) + len(window.unavailable) >= fleet.max_unavailable:
            return
        for name in window.remaining:
            job_end = fleet.jobs[name].at(now)
            if seen.get(name, -1) != job_end:
                seen[name] = job_end
                window.update(name, "idle" if job_end is None else "busy", job_end)

    def admit(now):
        start = time.perf_counter()
        started = window.admit(now)
        planning[0] += time.perf_counter() - start
        return started

    def release(name):
        window.release(name)

    result = simulate_window(fleet, "ours (window_plan)", admit, window.finish, release, refresh)
    result.blocked = sorted(window.blocked)
    return result, planning[0]


def lower_bound(fleet: Fleet):
    """max(longest single node: its t=0 job end + drain + install + reboot + gate; total work / max_unavailable)."""
    single = max(fleet.jobs[name].free_at(0.0) + fleet.work(name) for name in fleet.upgradable)
    total = sum(fleet.work(name) for name in fleet.upgradable) / fleet.max_unavailable
    return max(single, total), single, total


def violations_by_rule(fleet, result):
    found = window_plan.check(result.timeline, fleet.node_dicts(0.0), window_settings())
    counts = {"max_unavailable": 0, "per_domain": 0, "partition_floor": 0}
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
        window_plan.order(nodes, 0)
        timings["order"].append(time.perf_counter() - start)
        start = time.perf_counter()
        window_plan.plan(nodes, window_settings(), 0)
        timings["plan"].append(time.perf_counter() - start)
        start = time.perf_counter()
        window = window_plan.Window(nodes, window_settings(), 0)
        in_flight = list(window.admit(0))
        step = 0
        while in_flight:
            step += 1
            window.finish(in_flight.pop(0), True)
            in_flight.extend(window.admit(step))
        timings["loop"].append(time.perf_counter() - start)
        assert len(window.done) + len(window.blocked) == size, (len(window.done), len(window.blocked))
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
    ours, ours_planning_s = simulate_ours(fleet)
    results = [serial, plain, ours]
    checks = {result.label: violations_by_rule(fleet, result) for result in results}
    busy0 = sum(1 for name in fleet.upgradable if fleet.jobs[name].at(0.0) is not None)

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
        " node starts no new job; window_plan is told each waiting node's true job end at each admission"
        " (Slurm only knows time limits: real ordering is noisier)."
        % (
            len(durations),
            traces_dir() / TRACE,
            IDLE_SHARE * 100,
            statistics.fmean(durations) * IDLE_SHARE / (1 - IDLE_SHARE) / 60,
        )
    )
    say(
        "  per node: drain U(2,10) s, then wait for its job, install U(6,10) min, reboot U(5,8) min, gate U(3,5) min"
        " (pre-stage happens before, outside the window); %.1f%% of gates fail: the node stays drained %.0f h for"
        " repair (counted out of service), then returns un-upgraded; the run does NOT halt (all three strategies)."
        % (FAIL_RATE * 100, REPAIR_S / HOUR)
    )
    say(
        "  strategies: serial = wave_plan waves [1, 10%%] (canary, then %d-node batches, inventory order), linear"
        " strategy: each step waits for the batch's slowest host; random window = %d of its own nodes out, random"
        " order, blind to others' drains, domains, floors, no canary; ours = window_plan: max_unavailable 10%%,"
        " per_domain rack %d, partition_floor %.2f, canary alone first, idle nodes then soonest job end, racks"
        " interleaved." % (fleet.max_unavailable, fleet.max_unavailable, RACK_LIMIT, FLOOR)
    )
    say(
        "  lower bound = max(longest single node: its t=0 job end + drain + install + reboot + gate = %.2f h;"
        " total drain+install+reboot+gate / max_unavailable %d = %.2f h) = %.2f h"
        % (single / HOUR, fleet.max_unavailable, total / HOUR, bound / HOUR)
    )
    say(
        "  drained-idle GPU-h = GPUs of a drained node whose job has ended and which is not upgrading (waiting for"
        " its turn, or for the batch's slowest host between steps); a drained node still running its last job is"
        " NOT idle (shown apart as drain-busy); a sliding window installs the moment the job ends, so its"
        " drained-idle is 0 by construction here (the drain poll interval, seconds, is not modelled)."
        " upgrading GPU-h = drain + install + reboot + gate; floor = the"
        " sum of those; makespan = until the last node is back (upgraded or failed)."
    )
    print()
    row = "%-34s" + " %20s" * len(results)
    print(row % ("", *(result.label for result in results)))
    floor_gpu_h = sum(fleet.work(name) for name in fleet.upgradable) * GPUS / HOUR

    def line(label, values):
        print(row % (label, *values))

    line("makespan (h)", ["%.2f" % (r.makespan / HOUR) for r in results])
    line("lower bound (h)", ["%.2f" % (bound / HOUR)] * len(results))
    line("makespan / lower bound", ["%.3f" % (r.makespan / bound) for r in results])
    line("drained-idle GPU-h", ["%.0f" % (r.idle_s * GPUS / HOUR) for r in results])
    line("upgrading GPU-h", ["%.0f" % (r.upgrade_s * GPUS / HOUR) for r in results])
    line("lost = idle + upgrading GPU-h", ["%.0f" % ((r.idle_s + r.upgrade_s) * GPUS / HOUR) for r in results])
    line("floor GPU-h (sum of steps)", ["%.0f" % floor_gpu_h] * len(results))
    line("lost / floor", ["%.2f" % ((r.idle_s + r.upgrade_s) * GPUS / HOUR / floor_gpu_h) for r in results])
    line("drain-busy GPU-h (not lost)", ["%.0f" % (r.busy_drain_s * GPUS / HOUR) for r in results])
    line("failed gates (repair GPU-h)", ["%d (%.0f)" % (r.failed, r.repair_s * GPUS / HOUR) for r in results])
    line("upgraded / blocked", ["%d / %d" % (r.upgraded, len(r.blocked)) for r in results])
    for rule in ("max_unavailable", "per_domain", "partition_floor"):
        line("violations: %s" % rule, [str(checks[r.label][rule]) for r in results])
    print()

    serial_idle = serial.idle_s
    ratio = ours.makespan / bound
    goals = []
    goals.append(
        (
            "makespan within %d%% of the lower bound: %.3f" % ((GOAL_MAKESPAN - 1) * 100, ratio),
            ratio <= GOAL_MAKESPAN,
        )
    )
    share = ours.idle_s / serial_idle if serial_idle else 0.0
    goals.append(
        (
            "drained-idle GPU-h at most %d%% of serial's: %.2f%%" % (GOAL_IDLE_SHARE * 100, share * 100),
            share <= GOAL_IDLE_SHARE,
        )
    )
    ours_violations = sum(checks[ours.label].values())
    goals.append(("zero rule violations (window_plan.check): %d" % ours_violations, ours_violations == 0))
    for text, met in goals:
        print("goal, ours: %-62s %s" % (text, "met" if met else "NOT MET"))
    if ratio > GOAL_MAKESPAN:
        late = sorted(ours.timeline, key=lambda entry: entry[2])[-1]
        print(
            "  why not: the last node back is %s, admitted at %.2f h; its job then ran until %.2f h (a job it started"
            " after t=0, which the t=0 bound cannot see, or one that held it while the window was full)"
            % (late[0], late[1] / HOUR, (late[2] - fleet.work(late[0])) / HOUR)
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
    print("  (ours in the simulation: %.2f s in Window.admit, re-ordering at each admission)" % ours_planning_s)
    print("benchmark wall time: %.1f s" % (time.perf_counter() - started))


if __name__ == "__main__":
    main()
