"""The upgrade_window strategy and the upgrade_slot action on stand-in nodes (local connection).

Each node's "upgrade" is a wait of ``work_seconds`` on the controller
(tests/integration/playbooks/upgrade_window.yml), so what is tested is the
window itself: who starts when, from the slot record the strategy keeps for
each node (its admission and release times), shown by the playbook's last play.
Assertions are on order (admitted before or after another node was back), never
on durations; the makespans go to tests/benchmarks/bench_upgrade_window.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import run_journal, window_audit

from tests.integration.playbook_run import REPO, run_playbook

pytestmark = pytest.mark.integration

PLAYBOOK = "tests/integration/playbooks/upgrade_window.yml"
ACQUIRE = "Wait for a slot in the window"
REPORT = "Show the slot record"


def run_window(tmp_path, name, hosts: dict, nodes: list, settings: dict, refresh=None, journal=None):
    inventory = tmp_path / f"{name}.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "fleet": {
                    "hosts": hosts,
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    },
                }
            }
        )
    )
    extravars = {"window_nodes": nodes, "window_settings": settings}
    if refresh is not None:
        extravars["window_refresh"] = refresh
    if journal is not None:
        extravars["window_journal"] = journal
    run = run_playbook(PLAYBOOK, inventory, tmp_path / name, extravars=extravars)
    assert run.rc == 0, run.stdout[-3000:]
    acquired = {r.host: r.result for r in run.results_for(task=ACQUIRE)}
    records = {r.host: r.result["gpuops_upgrade_slot"] for r in run.results_for(task=REPORT)}
    released = {host: record for host, record in records.items() if record["state"] == "released"}
    return acquired, released


def spans(released: dict) -> dict:
    return {host: (slot["admitted_at"], slot["released_at"]) for host, slot in released.items()}


def most_out_at_once(released: dict) -> int:
    intervals = list(spans(released).values())
    return max(sum(1 for s, e in intervals if s <= start < e) for start, _unused in intervals)


SIX = [f"n{i}" for i in range(1, 7)]


@pytest.fixture(scope="module", name="slow_node")
def fixture_slow_node(tmp_path_factory):
    """Six nodes, n1 the canary, n2 twelve times slower than the others (room for three turns of the other slot
    even when a loaded machine adds seconds to each host); a window of two, then waves of two."""
    tmp_path = tmp_path_factory.mktemp("window")
    hosts = {name: ({"work_seconds": 12} if name == "n2" else {}) for name in SIX}
    nodes = [{"name": name, "canary": name == "n1"} for name in SIX]
    window = run_window(tmp_path, "window", hosts, nodes, {"max_unavailable": 2})
    waves = run_window(tmp_path, "waves", hosts, nodes, {"max_unavailable": 2, "barrier": True})
    return nodes, window, waves


def test_every_node_admitted_and_back(slow_node):
    _unused, (acquired, released), _unused = slow_node
    assert sorted(released) == SIX
    assert all(result["admitted"] for result in acquired.values())
    assert all(slot["ok"] and not slot["halted"] for slot in released.values())


def test_the_canary_goes_first_and_alone(slow_node):
    _unused, (_unused, released), _unused = slow_node
    assert released["n1"]["canary"]
    canary_back = released["n1"]["released_at"]
    assert all(released[name]["admitted_at"] >= canary_back for name in SIX[1:])


def test_no_more_than_the_window_out_at_once(slow_node):
    nodes, (_unused, released), (_unused, waves) = slow_node
    for run in (released, waves):
        timeline = [(host, start, end) for host, (start, end) in spans(run).items()]
        assert window_audit.check(timeline, nodes, {"max_unavailable": 2}) == []
        assert most_out_at_once(run) == 2


def test_the_window_does_not_wait_for_the_slow_node(slow_node):
    _unused, (_unused, released), _unused = slow_node
    slow_back = released["n2"]["released_at"]
    started_meanwhile = [name for name in ("n3", "n4", "n5", "n6") if released[name]["admitted_at"] < slow_back]
    # one slot is the slow node's; the other turns over while it runs
    assert len(started_meanwhile) >= 3, spans(released)


def test_waves_wait_for_the_slowest_node_of_their_wave(slow_node):
    _unused, _unused, (_unused, waves) = slow_node
    wave_of_slow = [name for name in SIX[1:] if waves[name]["admitted_at"] == waves["n2"]["admitted_at"]]
    assert len(wave_of_slow) == 2
    slow_back = waves["n2"]["released_at"]
    later = [name for name in SIX[1:] if name not in wave_of_slow]
    assert all(waves[name]["admitted_at"] >= slow_back for name in later)


def test_one_node_per_rack_two_racks_in_parallel(tmp_path):
    racks = {name: ("r1" if name in ("n1", "n2", "n3") else "r2") for name in SIX}
    nodes = [{"name": name, "domains": {"rack": racks[name]}, "canary": name == "n1"} for name in SIX]
    settings = {"max_unavailable": 3, "per_domain": {"rack": 1}}
    _unused, released = run_window(tmp_path, "racks", {name: {} for name in SIX}, nodes, settings)
    assert sorted(released) == SIX
    timeline = [(host, start, end) for host, (start, end) in spans(released).items()]
    assert window_audit.check(timeline, nodes, settings) == []
    # never two of one rack, but both racks at once
    assert most_out_at_once(released) == 2


def test_the_first_failure_admits_nothing_new(tmp_path):
    hosts = {name: ({"fail": True} if name == "n3" else {}) for name in SIX}
    nodes = [{"name": name, "canary": name == "n1"} for name in SIX]
    acquired, released = run_window(tmp_path, "halt", hosts, nodes, {"max_unavailable": 2})
    failed_back = released["n3"]["released_at"]
    assert released["n3"]["ok"] is False
    assert released["n3"]["halted"] is True
    assert all(slot["admitted_at"] < failed_back for slot in released.values())
    not_started = sorted(host for host, result in acquired.items() if not result["admitted"])
    assert not_started, "nodes after the failure must not start"
    assert not set(not_started) & set(released)
    for host in not_started:
        assert acquired[host]["slot"]["reason"] == "the run halted before this node started"


def test_a_node_rolled_back_in_its_rescue_holds_its_slot_until_it_gives_it_back(tmp_path):
    """Ansible counts a host as failed while a rescue flushes handlers (the rollback's reboot): the window must not
    take that for a host that left the run, nor give its slot back while the node is still rolling back."""
    hosts = {name: ({"rolls_back": True} if name == "n2" else {}) for name in ("n1", "n2", "n3")}
    nodes = [{"name": name, "canary": name == "n1"} for name in ("n1", "n2", "n3")]
    journal = {"path": str(tmp_path / "rollback.journal.jsonl"), "run_id": "rollback", "target": "t", "resume": "none"}
    acquired, released = run_window(tmp_path, "rollback", hosts, nodes, {"max_unavailable": 1}, journal=journal)
    slot = released["n2"]
    assert slot["ok"] is True, slot
    assert slot["halted"] is True
    assert slot.get("reason") != "left the run while out of service", slot
    assert not acquired["n3"]["admitted"]
    replayed = run_journal.replay(run_journal.read(journal["path"]))
    assert replayed["failed"] == []
    assert replayed["in_flight"] == []
    assert replayed["halted"]["node"] == "n2"


def test_nodes_that_can_never_fit_pass_not_admitted_with_the_reason(tmp_path):
    nodes = [{"name": name, "partitions": ["batch"], "gpus": 8} for name in ("n1", "n2")]
    acquired, released = run_window(
        tmp_path, "blocked", {"n1": {}, "n2": {}}, nodes, {"max_unavailable": 2, "partition_floor": 0.9}
    )
    assert released == {}
    assert {host: result["admitted"] for host, result in acquired.items()} == {"n1": False, "n2": False}
    assert all(result["slot"]["reason"].startswith("blocked: ") for result in acquired.values())
    assert any("partition_floor 0.9" in result["slot"]["reason"] for result in acquired.values())


def test_bad_window_settings_start_nothing_and_say_why(tmp_path):
    nodes = [{"name": name} for name in ("n1", "n2")]
    acquired, released = run_window(tmp_path, "bad", {"n1": {}, "n2": {}}, nodes, {"max_unavailabel": 1})
    assert released == {}
    for result in acquired.values():
        assert not result["admitted"]
        assert "unknown window setting(s) max_unavailabel" in result["slot"]["reason"]


def test_busy_nodes_wait_in_service_for_their_job_and_the_rest_goes_on(tmp_path):
    """max_job_wait 2 s: n2's job ends 10 s from now, n4's in a day; n5's jobs outlast its wait after its drain."""
    t0 = time.time()
    names = ["n1", "n2", "n3", "n4", "n5", "n6"]
    nodes = [{"name": name, "canary": name == "n1"} for name in names]
    nodes[1].update(state="busy", job_end=t0 + 10)
    nodes[3].update(state="busy", job_end=t0 + 86400)
    hosts = {name: {} for name in names}
    hosts["n3"] = {"work_seconds": 14}
    hosts["n5"] = {"jobs_outlast_wait": True}
    settings = {"max_unavailable": 2, "max_job_wait": 2, "deadline": 0}  # 0: the run waits for no job
    acquired, released = run_window(tmp_path, "jobs", hosts, nodes, settings)
    # n2 took its slot only once its job's end came within the wait, while n3 still ran
    assert released["n2"]["admitted_at"] >= t0 + 8
    assert released["n2"]["admitted_at"] < released["n3"]["released_at"]
    assert released["n2"]["job_end"] == pytest.approx(t0 + 10)
    # n4's job ends in a day: never drained, deferred with its job's end once nothing else could start
    assert acquired["n4"]["admitted"] is False
    assert acquired["n4"]["slot"]["reason"].startswith("deferred: its job ends at ")
    assert "beyond max_job_wait 2s" in acquired["n4"]["slot"]["reason"]
    assert "n4" not in released
    # n5 came back deferred: in service, its slot free for n6, the run not halted
    assert released["n5"]["deferred"] is True
    assert released["n5"]["ok"] is True
    assert not any(slot["halted"] for slot in released.values())
    assert released["n6"]["admitted_at"] >= released["n5"]["released_at"]
    timeline = [(host, start, end) for host, (start, end) in spans(released).items()]
    assert window_audit.check(timeline, nodes, settings) == []


def test_the_run_waits_in_service_for_a_job_ending_after_the_others_and_finishes_the_fleet(tmp_path):
    """The default deadline (the latest end of the jobs running now): n2's job ends 30 s from now, long after n1 and
    n3 are back (max_job_wait 2 s); nothing is in flight meanwhile, and the run waits for it, n2 in service, then
    upgrades it. n4's job has no time limit: named and deferred for a later run. (30 s: a loaded machine can take
    more than 10 s to start ansible-playbook and reach the first slot; n1 and n3 must be back before n2's wait.)"""
    t0 = time.time()
    names = ["n1", "n2", "n3", "n4"]
    nodes = [{"name": name, "canary": name == "n1"} for name in names]
    nodes[1].update(state="busy", job_end=t0 + 30)
    nodes[3].update(state="busy")
    settings = {"max_unavailable": 2, "max_job_wait": 2}
    acquired, released = run_window(tmp_path, "finish", {name: {} for name in names}, nodes, settings)
    assert set(released) == {"n1", "n2", "n3"}
    assert all(slot["ok"] and not slot["deferred"] for slot in released.values())
    # n2 waited in service until its job's end came within the wait, with nothing else in flight
    assert released["n2"]["admitted_at"] >= t0 + 28
    assert released["n2"]["admitted_at"] > max(released["n1"]["released_at"], released["n3"]["released_at"])
    assert acquired["n4"]["admitted"] is False
    assert acquired["n4"]["slot"]["reason"].startswith("deferred: its job has no known end (no time limit in Slurm)")
    timeline = [(host, start, end) for host, (start, end) in spans(released).items()]
    assert window_audit.check(timeline, nodes, settings) == []


# Fresh state: the window reads the fleet again during the run, from stand-in Slurm commands.

SCONTROL_META = {"slurm": {"release": "24.11.5"}, "plugin": {"data_parser": "data_parser/v0.0.42"}}


def stand_in_slurm(tmp_path, nodes: dict, jobs: list) -> dict:
    """scontrol and squeue that print the given fleet as Slurm 24.11 does; the slurm_fleet options reading them."""
    slurm = tmp_path / "slurm"
    slurm.mkdir()
    records = [
        {"name": name, "state": state, "reason": reason, "partitions": ["gpu"], "gres": "gpu:8"}
        for name, (state, reason) in nodes.items()
    ]
    (slurm / "nodes.json").write_text(json.dumps({"meta": SCONTROL_META, "nodes": records}))
    (slurm / "jobs.json").write_text(json.dumps({"meta": SCONTROL_META, "jobs": jobs}))
    paths = {}
    for command, data in (("scontrol", "nodes.json"), ("squeue", "jobs.json")):
        script = slurm / command
        script.write_text("#!/bin/sh\ncat '%s'\n" % (slurm / data))
        script.chmod(0o755)
        paths[command + "_path"] = str(script)
    return paths


def test_the_window_reads_the_fleet_again_and_takes_what_changed(tmp_path):
    """The plan's view: n2 busy for a day, n3 and n4 idle. Slurm, read during the run: n2's job ended early, n3
    got a job of a day, someone drained n4. n2 is upgraded, n3 deferred for its new job, n4 left alone."""
    t0 = time.time()
    names = ["n1", "n2", "n3", "n4"]
    nodes = [{"name": name, "canary": name == "n1"} for name in names]
    nodes[1].update(state="busy", job_end=t0 + 86400)
    day = {"set": True, "infinite": False, "number": int(t0 + 86400)}
    jobs = [
        {
            "job_id": 7,
            "job_state": ["RUNNING"],
            "nodes": "n3",
            "end_time": day,
            "time_limit": {"set": True, "infinite": False, "number": 1440},
        }
    ]
    options = stand_in_slurm(
        tmp_path,
        {
            "n1": (["IDLE"], ""),
            "n2": (["IDLE"], ""),
            "n3": (["ALLOCATED"], ""),
            "n4": (["IDLE", "DRAIN"], "hardware ticket 42"),
        },
        jobs,
    )
    refresh = {"delegate_to": "localhost", "names": {name: name for name in names}, "interval": 1, "options": options}
    settings = {"max_unavailable": 2, "max_job_wait": 60, "deadline": 0}  # 0: n3's day-long job is not waited for
    acquired, released = run_window(tmp_path, "refresh", {name: {} for name in names}, nodes, settings, refresh=refresh)
    assert sorted(released) == ["n1", "n2"]
    assert all(slot["ok"] for slot in released.values())
    assert acquired["n3"]["admitted"] is False
    assert acquired["n3"]["slot"]["reason"].startswith("deferred: its job ends at ")
    assert acquired["n4"]["admitted"] is False
    assert acquired["n4"]["slot"]["reason"] == (
        "unavailable: left alone: drained by someone else (hardware ticket 42): not touched; seen during the run"
    )
    reads = released["n2"]["refreshes"]
    assert reads
    assert all(read["ok"] for read in reads), reads
    changes = reads[0]["changes"]
    assert changes["jobs_ended"] == ["n2"]
    assert changes["new_jobs"] == ["n3"]
    assert changes["left"] == {"n4": "drained_by_others"}
    # n2 was admitted on the fresh view, after the read that followed the canary's release
    assert released["n2"]["admitted_at"] >= released["n1"]["released_at"]
    assert released["n2"]["admitted_at"] >= reads[0]["at"]


# A window that survives the controller: the journal, a run killed mid-way, and the re-run that continues it.


def journal_entries(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start_killable_run(tmp_path, name, hosts: dict, extravars: dict):
    """ansible-playbook in its own process group, so that the test can kill the controller and its workers."""
    inventory = tmp_path / f"{name}.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "fleet": {
                    "hosts": hosts,
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    },
                }
            }
        )
    )
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
        ANSIBLE_NOCOLOR="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inventory),
            str(REPO / PLAYBOOK),
            "-e",
            json.dumps(extravars),
        ],
        cwd=REPO,
        env=env,
        stdout=(tmp_path / f"{name}.out").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill_with_two_in_flight(run, journal, output):
    """Kill the controller (the run's process group) once the canary is back and two nodes are in flight."""
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            entries = journal_entries(journal) if journal.exists() else []
            admitted = [e["node"] for e in entries if e["event"] == "admit"]
            released = [e["node"] for e in entries if e["event"] == "release"]
            if len(admitted) >= 3 and len(set(admitted) - set(released)) == 2:
                break
            assert run.poll() is None, output.read_text()[-3000:]
            time.sleep(0.2)
        os.killpg(run.pid, signal.SIGKILL)
    finally:
        run.wait(timeout=30)


def test_a_run_killed_mid_way_is_continued_by_the_re_run_within_max_unavailable(tmp_path):
    names = [f"n{i}" for i in range(1, 9)]
    nodes = [{"name": name, "canary": name == "n1"} for name in names]
    settings = {"max_unavailable": 2}
    hosts = {name: {"work_seconds": 4} for name in names}
    first = tmp_path / "gpuops-upgrade-run1.journal.jsonl"
    journal = {"path": str(first), "run_id": "run1", "target": "gpu_nodes 580.95.05", "resume": "auto"}
    run = start_killable_run(
        tmp_path, "crashed", hosts, {"window_nodes": nodes, "window_settings": settings, "window_journal": journal}
    )
    kill_with_two_in_flight(run, first, tmp_path / "crashed.out")
    crashed = run_journal.replay(run_journal.read(str(first)))
    assert crashed["ended_at"] is None
    assert len(crashed["in_flight"]) == 2
    assert oct(first.stat().st_mode & 0o777) == "0o644"

    # The re-run: the survey skips what the first run finished (the stack fact on the node).
    again = [dict(node, done=node["name"] in crashed["done"]) for node in nodes]
    second = tmp_path / "gpuops-upgrade-run2.journal.jsonl"
    journal2 = dict(journal, path=str(second), run_id="run2")
    _acquired, released = run_window(tmp_path, "rerun", hosts, again, settings, journal=journal2)
    rerun = run_journal.replay(run_journal.read(str(second)))
    assert rerun["resumed_from"] == str(first)
    assert sorted(rerun["resumed"]) == sorted(crashed["in_flight"])
    # the nodes left mid-upgrade went first, then the rest; every node is upgraded across both runs
    admitted = [e["node"] for e in journal_entries(second) if e["event"] == "admit"]
    assert sorted(admitted[:2]) == sorted(crashed["in_flight"])
    assert sorted(set(crashed["done"]) | set(rerun["done"])) == names
    assert rerun["ended_at"] is not None
    assert all(slot["ok"] for slot in released.values())
    # never more than max_unavailable out across both runs: a node in flight at the crash stays out until the
    # re-run releases it
    back = {node: end for node, _start, end in rerun["timeline"]}
    timeline = [(node, start, end if end is not None else back[node]) for node, start, end in crashed["timeline"]]
    timeline += [(node, start, end) for node, start, end in rerun["timeline"] if node not in crashed["in_flight"]]
    assert window_audit.check(timeline, nodes, settings) == []
    assert most_out_at_once({node: {"admitted_at": s, "released_at": e} for node, s, e in timeline}) <= 2


def test_a_re_run_with_the_same_journal_path_continues_it_within_max_unavailable(tmp_path):
    """A fixed gpuops_upgrade_journal_path: the controller is killed with two nodes in flight (and, as if mid-write,
    a torn last line); the same command again continues that journal: the two go first, the journal reads back
    whole, and its one timeline (both runs) keeps max_unavailable."""
    names = [f"n{i}" for i in range(1, 7)]
    nodes = [{"name": name, "canary": name == "n1"} for name in names]
    settings = {"max_unavailable": 2}
    hosts = {name: {"work_seconds": 4} for name in names}
    path = tmp_path / "gpuops-upgrade.journal.jsonl"
    journal = {"path": str(path), "run_id": "fixed", "target": "gpu_nodes 580.95.05", "resume": "auto"}
    run = start_killable_run(
        tmp_path, "crashed", hosts, {"window_nodes": nodes, "window_settings": settings, "window_journal": journal}
    )
    kill_with_two_in_flight(run, path, tmp_path / "crashed.out")
    crashed = run_journal.replay(run_journal.read(str(path)))
    assert len(crashed["in_flight"]) == 2
    with path.open("a") as handle:
        handle.write('{"at":1,"event":"rele')  # the entry being written when the controller died
    path.chmod(0o600)

    again = [dict(node, done=node["name"] in crashed["done"]) for node in nodes]
    _acquired, released = run_window(tmp_path, "rerun", hosts, again, settings, journal=journal)
    entries = run_journal.read(str(path))  # parses: the torn line was cut, not glued to the re-run's start
    starts = [index for index, item in enumerate(entries) if item["event"] == "start"]
    assert len(starts) == 2
    assert entries[starts[1]]["resumed_from"] == str(path)
    assert entries[starts[1]]["torn"] == len('{"at":1,"event":"rele')
    assert sorted(entries[starts[1]]["resumed"]) == sorted(crashed["in_flight"])
    readmitted = [item["node"] for item in entries[starts[1] :] if item["event"] == "admit"]
    assert sorted(readmitted[:2]) == sorted(crashed["in_flight"])
    replayed = run_journal.replay(entries)
    assert replayed["in_flight"] == []
    assert replayed["failed"] == []
    assert replayed["done"] == names
    assert all(slot["ok"] for slot in released.values())
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # not the writer's to change
    # one timeline for the operation: the nodes in flight at the crash are out until the re-run released them
    assert window_audit.check(replayed["timeline"], nodes, settings) == []


# Drain ahead: the busy nodes next in line drained in (stand-in) Slurm without a slot, first when their job ends.

STATEFUL_SLURM = r'''#!%(python)s
"""Stand-in Slurm: scontrol (show nodes --json, update drain or resume), squeue --json, sinfo text."""
import fcntl, json, os, sys, time
STATE = %(state)r
command = sys.argv[0].rsplit("/", 1)[-1]
args = sys.argv[1:]
# one command at a time over the state (the window drains two nodes at once: two read-modify-writes must not race)
lock = open(STATE + ".lock", "w")
fcntl.flock(lock, fcntl.LOCK_EX)
with open(STATE) as handle:
    state = json.load(handle)
now = time.time()
jobs = [job for job in state["jobs"] if job["real_end"] is None or job["real_end"] > now]
busy = {job["nodes"] for job in jobs}
def flags(name):
    node = state["nodes"][name]
    return (["ALLOCATED"] if name in busy else ["IDLE"]) + (["DRAIN"] if node["drain"] else [])
meta = {"slurm": {"release": "24.11.5"}, "plugin": {"data_parser": "data_parser/v0.0.42"}}
if command == "scontrol" and args[:1] == ["update"]:
    fields = dict(arg.split("=", 1) for arg in args[1:])
    node = state["nodes"][fields["nodename"]]
    if fields["state"] == "drain":
        node.update(drain=True, reason=fields["reason"])
        # jobs that end a set time after the run's first drain, not at a wall-clock time a loaded machine may
        # reach before the window has drained anything
        for job in state["jobs"]:
            if job["real_end"] is None and job.get("after_drain") is not None:
                job["real_end"] = now + job["after_drain"]
    elif fields["state"] == "resume":
        node.update(drain=False, reason="")
    state["log"].append([now, fields["nodename"], fields["state"], fields.get("reason", "")])
    with open(STATE + ".new", "w") as handle:
        json.dump(state, handle)
    os.replace(STATE + ".new", STATE)  # a reader never sees half a file
elif command == "scontrol":
    records = [
        {
            "name": name,
            "state": flags(name),
            "reason": node["reason"],
            "partitions": ["gpu"],
            "gres": node.get("gres", "gpu:8"),
        }
        for name, node in state["nodes"].items()
    ]
    print(json.dumps({"meta": meta, "nodes": records}))
elif command == "squeue":
    listed = [
        {
            "job_id": job["job_id"],
            "job_state": ["RUNNING"],
            "nodes": job["nodes"],
            "end_time": {"set": True, "infinite": False, "number": int(job["end"])},
            "time_limit": {"set": True, "infinite": False, "number": 2880},
        }
        for job in jobs
    ]
    print(json.dumps({"meta": meta, "jobs": listed}))
elif "--json" in args:
    sys.exit(1)  # sinfo --json: the text fallback reads the node
else:
    name = args[args.index("-n") + 1]
    print("%%-20s%%-30s%%s" %% (name, "+".join(flags(name)).lower(), state["nodes"][name]["reason"]))
'''


def stateful_slurm(tmp_path, nodes: dict, jobs: list, text: str = STATEFUL_SLURM) -> tuple[dict, Path]:
    """Stand-in scontrol, squeue and sinfo over one state file (drains and resumes change it); their paths.
    ``text``: the stand-in's script (a variant of STATEFUL_SLURM)."""
    slurm = tmp_path / "slurm"
    slurm.mkdir()
    state = slurm / "state.json"
    state.write_text(json.dumps({"nodes": nodes, "jobs": jobs, "log": []}))
    script = slurm / "slurm.py"
    script.write_text(text % {"python": sys.executable, "state": str(state)})
    script.chmod(0o755)
    for command in ("scontrol", "squeue", "sinfo"):
        (slurm / command).symlink_to(script)
    return {command: str(slurm / command) for command in ("scontrol", "squeue", "sinfo")}, state


def test_busy_nodes_next_in_line_are_drained_ahead_and_take_their_slot_when_their_job_ends(tmp_path):
    """n2 and n4 run jobs Slurm ends in a day that really end 15 s after the first drain ahead, n3 one of two
    days that goes on; n5 is idle and its upgrade long; two slots, two drains ahead. After the canary, n5 takes a
    slot and, with room no node can fill, n2 and n4 are drained ahead; when their jobs end, n2 takes the last slot
    and n4, with no slot free, is resumed at once (never drained with no job), then upgraded in service; n3,
    drained ahead once there is room again, is deferred for its job when nothing else is in flight, and resumed
    before it passes."""
    t0 = time.time()
    names = ["n1", "n2", "n3", "n4", "n5"]
    ends = {"n2": t0 + 86400, "n3": t0 + 2 * 86400, "n4": t0 + 86400}
    # None: the stand-in Slurm ends the job ``after_drain`` seconds after the first drain it is asked for
    real = {"n2": None, "n3": t0 + 2 * 86400, "n4": None}
    after_drain = {"n2": 15, "n4": 15}
    nodes = [{"name": name, "canary": name == "n1", "partitions": ["gpu"], "gpus": 8} for name in names]
    for entry in nodes:
        if entry["name"] in ends:
            entry.update(state="busy", job_end=ends[entry["name"]])
    jobs = [
        {
            "job_id": 10 + index,
            "nodes": name,
            "end": ends[name],
            "real_end": real[name],
            "after_drain": after_drain.get(name),
        }
        for index, name in enumerate(sorted(ends))
    ]
    paths, state = stateful_slurm(tmp_path, {name: {"drain": False, "reason": ""} for name in names}, jobs)
    names_map = {name: name for name in names}
    refresh = {
        "delegate_to": "localhost",
        "names": names_map,
        "interval": 1,
        "options": {"scontrol_path": paths["scontrol"], "squeue_path": paths["squeue"]},
    }
    ahead = {
        "delegate_to": "localhost",
        "names": names_map,
        "run_id": "run1",
        "reason_prefix": "gpuops-upgrade",
        "become": False,
        "options": {"scontrol_path": paths["scontrol"], "sinfo_path": paths["sinfo"]},
    }
    journal_path = tmp_path / "gpuops-upgrade-run1.journal.jsonl"
    journal = {"path": str(journal_path), "run_id": "run1", "target": "t", "resume": "none"}
    # deadline 0: n3's two-day job is not waited for
    settings = {"max_unavailable": 2, "max_job_wait": 2, "drain_ahead": 2, "partition_floor": 0.25, "deadline": 0}
    inventory = tmp_path / "ahead.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "fleet": {
                    "hosts": {name: {"work_seconds": {"n5": 45, "n2": 5}.get(name, 1)} for name in names},
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    },
                }
            }
        )
    )
    extravars = {
        "window_nodes": nodes,
        "window_settings": settings,
        "window_refresh": refresh,
        "window_journal": journal,
        "window_drain_ahead": ahead,
    }
    run = run_playbook(PLAYBOOK, inventory, tmp_path / "ahead", extravars=extravars)
    assert run.rc == 0, run.stdout[-3000:]
    acquired = {r.host: r.result for r in run.results_for(task=ACQUIRE)}
    released = {
        r.host: r.result["gpuops_upgrade_slot"]
        for r in run.results_for(task=REPORT)
        if r.result["gpuops_upgrade_slot"]["state"] == "released"
    }
    log = [(node, what, reason) for _at, node, what, reason in json.loads(state.read_text())["log"]]
    reason = "gpuops-upgrade[run1]: drained ahead of its upgrade slot"
    # n2 and n4 drained at once (two tasks, in either order)
    assert sorted(log[:2]) == [("n2", "drain", reason), ("n4", "drain", reason)], log
    assert log[2:] == [
        ("n4", "resume", ""),
        ("n3", "drain", reason),
        ("n3", "resume", ""),
    ], log
    assert sorted(released) == ["n1", "n2", "n4", "n5"]
    # n2 took its slot when its job ended, far before its EndTime came within max_job_wait
    real_end = {job["nodes"]: job["real_end"] for job in json.loads(state.read_text())["jobs"]}
    assert real_end["n2"] - 1 <= released["n2"]["admitted_at"] < t0 + 86400 - 2
    # n4 was resumed (its job ended, no slot free) and upgraded after n2, in service meanwhile
    assert released["n4"]["admitted_at"] >= released["n2"]["released_at"]
    # n3: deferred for its job and given back to Slurm before it passed; nothing stays drained ahead
    assert acquired["n3"]["admitted"] is False
    assert acquired["n3"]["slot"]["reason"].startswith("deferred: its job ends at ")
    assert acquired["n3"]["slot"]["drained_ahead"] is False
    assert json.loads(state.read_text())["nodes"]["n3"] == {"drain": False, "reason": ""}
    entries = journal_entries(journal_path)
    events = [(e["event"], e.get("node")) for e in entries if e["event"] in ("drain_ahead", "undrain", "admit")]
    assert sorted(events[2:4]) == [("drain_ahead", "n2"), ("drain_ahead", "n4")], events
    assert events[:2] + events[4:] == [
        ("admit", "n1"),
        ("admit", "n5"),
        ("admit", "n2"),
        ("undrain", "n4"),
        ("admit", "n4"),
        ("drain_ahead", "n3"),
        ("undrain", "n3"),
    ], events
    replayed = run_journal.replay(entries)
    assert replayed["drained_ahead"] == []
    assert entries[-1]["event"] == "end"
    assert entries[-1]["drained_ahead"] == []
    # the floor counted the drains ahead: 5 nodes, floor 0.25 allows three out or drained at once
    ahead_spans = []
    opened = {}
    for e in entries:
        if e["event"] == "drain_ahead" and e["ok"]:
            opened[e["node"]] = e["at"]
        elif e["event"] in ("undrain", "admit") and e["node"] in opened:
            ahead_spans.append((e["node"], opened.pop(e["node"]), e["at"]))
    # both from the journal (its times are rounded to the millisecond): a node's drain ahead ends as its slot starts
    assert window_audit.check(replayed["timeline"], nodes, settings, ahead=ahead_spans) == []
