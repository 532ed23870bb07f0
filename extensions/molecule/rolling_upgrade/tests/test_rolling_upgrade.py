"""playbooks/rolling_upgrade.yml on the lab with a real Slurm 24.11 (molecule verify).

The scenario converged four L40S lab nodes (ru-gpu1 the canary) on driver 550.127.05 with slurmd,
and a controller ru-ctl. The cases run in file order, each on the state the one before left:

1. healthy rollout to 550.127.08 in a window of two, with a real job on the canary and ru-gpu3
   drained by someone else: the canary first and alone, ru-gpu3 not touched and counted as out of
   service (so one more node at a time), every other node on the new packages and resumed, the job
   completed, the foreign drain and its reason kept, the report partial naming ru-gpu3;
2. unhealthy canary on the way to the R580 branch (580.65.06): a fault injected through the
   simulator's ``gpuops-lab-fault`` right after the canary's packages change (an apt hook keyed to
   the driver version) fails its gate: the run halts, the canary stays drained with a reason naming
   the run, no other node is touched;
3. abort mid-run, then re-run (to 580.65.06, a window of two, one node per rack: ru-gpu1 and
   ru-gpu2 in rack r1, ru-gpu3 and ru-gpu4 in r2): the canary's fault is cleared and the next run
   finishes its pending upgrade from case 2 first; ru-gpu2 and ru-gpu4 (idle, one per rack) go
   together, ru-gpu3 (a job without a time limit running) last; its job has no known end, so it is
   never drained: deferred, in service, once the others are done, the run ``partial``; never two
   nodes of one rack out at once (the report's timeline); once the job is gone the re-run finishes
   ru-gpu3 without touching the others again.

4. failure in a later wave with ``gpuops_upgrade_on_failure: rollback``: the fleet, now on R580, is
   moved back to 550.127.08 one node at a time; ru-gpu2's gate fails on a fault injected the same way
   (keyed to 550.127.08): the run rolls it back to the stack its fact recorded (580.65.06, CUDA
   13.0, NCCL 2.27.7), gates it clean, returns it to service and halts; ru-gpu3 and ru-gpu4 are
   not touched;
5. a job without a time limit on ru-gpu2 with ``gpuops_upgrade_on_drain_timeout: continue`` (to
   550.127.08, the canary already there, so the first node of the window's order, idle ru-gpu3, is
   the canary): ru-gpu2 is never drained, it is deferred in service and not upgraded; the run goes
   on and ends ``partial``, naming ru-gpu2;
6. a job with a 10-minute time limit that ends after 60 s on ru-gpu4, ``max_job_wait`` 300 s (to
   580.65.06): Slurm's EndTime is beyond the wait, so the node keeps its job, in service; it is
   admitted once the job has ended (the window's fresh reads see it), not before and not only at
   EndTime - max_job_wait (a 60 s canary soak keeps work in flight past the job's end; reads every 10 s);
   with ``drain_ahead`` 1 and a partition floor of 0.5, ru-gpu3, busy with a job of the same time limit that
   ends only when released, is drained ahead once the canary is done (DRAIN in Slurm while its job runs, one
   slot still free, half the partition's GPUs schedulable): its job is released then, and it takes its slot
   when the job has ended; the report shows the drain ahead and checks it against the floor;
7. a job admitted within the wait (a 3-minute limit, ``max_job_wait`` 150 s) whose time limit is raised
   to an hour while its node drains (to 550.127.08): the wait runs out, the node is resumed and
   reported deferred (its job still running on a node in service, never drained and idle), the run
   finishes the other nodes and ends ``partial``; ru-gpu4, idle, is drained by someone else while the
   canary upgrades: the window's next read sees it, and it is left alone, drained with its owner's
   reason, reported ``unavailable``;
8. the gate's needs before anything moves: ``dcgmi`` removed from the canary (the stand-in of
   extensions/molecule/lab/gpu_tools.yml; the target carries no DCGM that would bring it), the run to
   580.65.06 names the canary and the missing tool in its plan and stops: nothing drained or changed;
9. a plan-only run (``-e``-style string) with ``all_reduce_perf`` removed from the canary and from a node
   gated at ``standard`` names the canary only, and nothing moves;
10. one run finishes the fleet: a job of 4 minutes (limit 5) on ru-gpu4, ``max_job_wait`` 60 s (to 550.127.08,
   which ru-gpu1 and ru-gpu2 run): ru-gpu3 is upgraded first, then the run waits, nothing in flight and
   ru-gpu4 in service, until the job nears its end, and upgrades it; the journal (deadline, progress) and the
   report agree.
11. a controller lost between a node's upgrade and its give-back (issue 28 item 5), to 580.65.06 on the canary
   ru-gpu1 and ru-gpu3 (``gpuops_target_hosts``; the canary group must be in the run) with ``max_unavailable`` 1: the
   controller's ``scontrol`` holds ru-gpu1's resume (a lab wrapper on ru-ctl) and the test kills the controller
   (SIGKILL to ansible-playbook's process group) the moment it is asked: ru-gpu1 is left on the new packages, drained
   with our reason, its stack fact not finished. The same command again: the plan names ru-gpu1 resumed first, out
   of service already; it is gated and given back before ru-gpu3 is taken out (never two out at once across both
   runs), and the run ends completed with both upgraded and in service.
12. Slurm 24.11 sees a MIG layout (issue 29 item 4; runs last, as it leaves ru-gpu2 split): the node, in service
   with a job running, is given MIG-capable simulated GPUs (four H100 SXM) and playbooks/mig_layout.yml applies GPU 0
   split, the others whole: the run drains it with our reason, waits for the job, writes gres.conf's
   ``Name=gpu Type=<profile> MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/...`` lines from the capability minors,
   restarts slurmd, and keeps the node drained, failing, naming the Gres= slurm.conf must give it; once slurm.conf
   gives it (scontrol reconfigure), slurmd -G reads every line, ``scontrol show node`` reports the layout's Gres=,
   a second run changes nothing and resumes the node, and a job asking for two 1g.10gb devices runs on it.

Every run goes through tests/integration/playbook_run.run_playbook (ansible-runner) with the
scenario's inventory; assertions read the run's audit report (statuses, drain records, gates, the
window's timeline and its rule check) and the nodes (dpkg-query, scontrol show nodes --json, and
``scontrol show node -o``; sinfo --json on Slurm 22.05, where the same tests run in slurm_22_05). Nothing
asserts on durations; wall times, module calls per node and the time from the canary's failed gate
to the halt are written to ``.lab/rolling_upgrade_measures.json`` for the issue's note.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(REPO / ".collections") not in sys.path:
    sys.path.insert(0, str(REPO / ".collections"))
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import run_journal

from tests.integration.playbook_run import PlaybookRun, run_playbook

with open(os.environ["MOLECULE_INVENTORY_FILE"], encoding="utf-8") as _handle:
    _INVENTORY = yaml.safe_load(_handle)
INVENTORY_DIR = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
NODES = sorted(_INVENTORY["gpu_nodes"]["hosts"])
CANARY = sorted(_INVENTORY["canary"]["hosts"])[0]
CONTROLLER = sorted(_INVENTORY["slurm_controller"]["hosts"])[0]
# in the lab's git-ignored state folder: molecule's ephemeral folder goes with `destroy`
MEASURES = REPO / ".lab" / "rolling_upgrade_measures.json"

OLD, NEW, BRANCH = "550.127.05", "550.127.08", "580.65.06"
STACK = {
    OLD: {"driver": OLD, "cuda": "12.4", "nccl": "2.21.5"},
    NEW: {"driver": NEW, "cuda": "12.4", "nccl": "2.21.5"},
    BRANCH: {"driver": BRANCH, "cuda": "13.0", "nccl": "2.27.7"},
}
# s: a podman exec of the tests' own (a read, a file written, a signal) that has not answered by then is a stuck lab,
# failed here instead of holding the scenario until the CI's bound
PODMAN_TIMEOUT = 120
DRIVER_PACKAGES = ["nvidia-driver", "libnvidia-ml1", "nvidia-smi", "libcuda1"]
SURVEY_DECISION = "Decide whether the node is upgraded, skipped or left out"
PLAY = "Upgrade in a sliding window"
FOREIGN_NODE = NODES[2]
PRESTAGE_TASK = "Download the resolved packages and their missing dependencies into the apt cache"
PRESTAGE_MOVING_TASK = "Download them with the superseded packages as removals and what moves with the driver"
PRESTAGE_NAMED_TASK = "Download exactly the resolved packages when their dependencies cannot be resolved"
FOREIGN_REASON = "LAB-42 fan replacement, do not resume"
MIDRUN_REASON = "LAB-43 PSU swap, drained during the rollout"
FAULT_HOOK = "/etc/apt/apt.conf.d/99gpuops-lab-fault"
# A job that runs until this file appears on its node: it is running whenever the drain starts, on
# a fast or a slow machine, and ends (COMPLETED) soon after, so the drain's wait is real and short.
RELEASE = "/var/tmp/gpuops-lab-job-release"
UNTIL_RELEASED = f"while [ ! -e {RELEASE} ]; do sleep 1; done"
# After every dpkg run: an uncorrectable ECC error on GPU 0 while the faulty driver is installed,
# no fault otherwise (so a rollback to the other driver gates clean).
FAULT_HOOK_TEXT = (
    'DPkg::Post-Invoke {"if grep -qF %s /usr/share/gpuops-lab/driver.json; '
    'then gpuops-lab-fault ecc --gpu 0 >/dev/null; else gpuops-lab-fault clear >/dev/null; fi || true";};\n'
)


def sh(node: str, *argv: str, check: bool = True) -> str:
    done = subprocess.run(
        ["podman", "exec", node, *argv], capture_output=True, text=True, check=False, timeout=PODMAN_TIMEOUT
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{node}: {' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return done.stdout


def installed(node: str) -> dict[str, str]:
    fmt = "${Package} ${Version} ${db:Status-Abbrev}\\n"
    out = sh(node, "dpkg-query", "-W", "-f", fmt, *DRIVER_PACKAGES, check=False)
    rows = [line.split() for line in out.splitlines()]
    return {row[0]: row[1] for row in rows if len(row) == 3 and row[2][1:2] == "i"}  # ii or hi (held)


def slurm_nodes() -> dict[str, dict]:
    """Each node as ``{name, state (base state, lower case), flags (upper case), reason, raw}``.

    Slurm 23.02+: ``scontrol show nodes --json`` (one record per node, ``state`` a list such as
    ``["IDLE", "DRAIN"]``); Slurm 22.05 has no ``scontrol --json``: ``sinfo --json`` (``state`` one
    word, ``state_flags``), as tests/fixtures/slurm/README.md shows for both.
    """
    done = subprocess.run(
        ["podman", "exec", CONTROLLER, "scontrol", "show", "nodes", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=PODMAN_TIMEOUT,
    )
    if done.returncode == 0:
        nodes = {}
        for node in json.loads(done.stdout)["nodes"]:
            words = [word.upper() for word in node["state"]]
            nodes[node["name"]] = {"state": words[0].lower(), "flags": set(words[1:]), "reason": node["reason"]}
        return {name: dict(node, name=name) for name, node in nodes.items()}
    data = json.loads(sh(CONTROLLER, "sinfo", "--json"))
    return {
        n["name"]: {
            "name": n["name"],
            "state": n["state"].lower(),
            "flags": {flag.upper() for flag in n.get("state_flags") or []},
            "reason": n["reason"],
        }
        for n in data["nodes"]
    }


def scontrol_node(name: str) -> str:
    """``scontrol show node -o NAME``: the one line an operator reads."""
    return sh(CONTROLLER, "scontrol", "show", "node", "-o", name).strip()


def drained(node: dict) -> bool:
    return "DRAIN" in node["flags"]


def wait_for(what, predicate, timeout: float = 120.0):
    """Poll until ``predicate()`` is truthy (a state wait, never an assertion on time)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            assert value, f"still waiting for {what}"
            return value
        time.sleep(2)


def submit_job(node: str, command: str, minutes: int | None = None) -> str:
    """A job on ``node``; ``minutes``: its time limit (Slurm's EndTime), none (unknown end) by default."""
    limit = [f"--time={minutes}"] if minutes else []
    job = sh(CONTROLLER, "sbatch", "--parsable", f"--nodelist={node}", *limit, "--wrap", command).strip()
    wait_for(f"job {job} running", lambda: sh(CONTROLLER, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING")
    return job


def release_when_draining(node: str, seen: dict | None = None) -> threading.Thread:
    """Let the job of ``until_released`` on ``node`` end a few seconds after its drain starts.

    ``seen`` receives what Slurm showed when the drain was first seen: the node's line and its jobs' states.
    """

    def release():
        try:
            wait_for(f"{node} draining", lambda: drained(slurm_nodes()[node]), timeout=600)
            if seen is not None:
                seen["line"] = scontrol_node(node)
                seen["jobs"] = sh(CONTROLLER, "squeue", "-h", "-w", node, "-o", "%i %T").split()
            time.sleep(3)
        finally:
            sh(node, "touch", RELEASE, check=False)

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    return thread


def job_state(job: str) -> str:
    out = sh(CONTROLLER, "scontrol", "show", "job", job)
    return out.split("JobState=", 1)[1].split()[0]


def settled_job_state(job: str) -> str:
    """The job's state once it has left RUNNING/COMPLETING (its epilog may still run when the rollout ends)."""
    wait_for(f"job {job} settled", lambda: job_state(job) not in ("PENDING", "RUNNING", "COMPLETING"), timeout=120)
    return job_state(job)


def upgrade(workdir: Path, name: str, target: str, **settings) -> tuple[PlaybookRun, dict, float]:
    report = workdir / f"{name}.json"
    extravars = {
        "gpuops_stack": STACK[target],
        "gpuops_upgrade_report_path": str(report),
        "gpuops_upgrade_run_id": f"{name}-{datetime.datetime.now(datetime.timezone.utc):%H%M%S}",
        **settings,
    }
    start = time.monotonic()
    run = run_playbook("rolling_upgrade.yml", INVENTORY_DIR, workdir / name, extravars=extravars)
    wall = round(time.monotonic() - start, 1)
    audit = json.loads(report.read_text()) if report.exists() else {}
    return run, audit, wall


def touched(audit: dict) -> set[str]:
    """The nodes the run took out of service (admitted by the window), from the report's timeline."""
    return {host for host, _start, _end in audit["window"]["timeline"]}


def statuses(audit: dict) -> dict[str, str]:
    return {node["host"]: node["status"] for node in audit["nodes"]}


def node_of(audit: dict, host: str) -> dict:
    return next(node for node in audit["nodes"] if node["host"] == host)


def overlapping(audit: dict, first: str, second: str) -> bool:
    spans = {host: (start, end) for host, start, end in audit["window"]["timeline"]}
    return spans[first][0] < spans[second][1] and spans[second][0] < spans[first][1]


def record(key: str, value, path: Path = MEASURES) -> None:
    """Add one figure to a measures file (this scenario's by default), under a lock: slurm_22_05 (another lane of CI)
    writes to this one too, and to its own (tests/rollout_helpers.py)."""
    with open(path.with_suffix(".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        measures = json.loads(path.read_text()) if path.exists() else {}
        measures[key] = value
        path.write_text(json.dumps(measures, indent=2, sort_keys=True) + "\n")


def event_time(run: PlaybookRun, task: str, host: str) -> datetime.datetime:
    """When a task's result arrived (for the measures only, never asserted on)."""
    for event in run.events:
        data = event.get("event_data", {})
        if event.get("event", "").startswith("runner_on_") and data.get("task") == task and data.get("host") == host:
            return datetime.datetime.fromisoformat(event["created"])
    raise AssertionError(f"no result of {task!r} on {host}")


@pytest.fixture(scope="module", name="workdir")
def fixture_workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("rolling_upgrade")


@pytest.fixture(scope="module", name="healthy")
def fixture_healthy(workdir):
    """Case 1 (and the foreign drain): one healthy rollout OLD -> NEW in a window of two."""
    assert all(installed(node)["nvidia-driver"].startswith(OLD) for node in NODES), "converge must leave OLD"
    sh(CONTROLLER, "scontrol", "update", f"nodename={FOREIGN_NODE}", "state=drain", f"reason={FOREIGN_REASON}")
    sh(CANARY, "rm", "-f", RELEASE)
    # a 5-minute time limit: its EndTime is within max_job_wait, so the canary takes its slot at once
    job = submit_job(CANARY, UNTIL_RELEASED, minutes=5)
    release = release_when_draining(CANARY)
    # the wait only bounds a broken release: the job ends seconds after the drain starts
    run, audit, wall = upgrade(
        workdir,
        "healthy",
        NEW,
        gpuops_upgrade_max_unavailable=2,
        gpuops_upgrade_max_job_wait=600,
    )
    release.join(timeout=30)
    sh(CANARY, "rm", "-f", RELEASE)
    state = {"job": job, "job_state": settled_job_state(job), "slurm": slurm_nodes()}
    state["installed"] = {n: installed(n) for n in NODES}
    record("healthy_rollout_window_2_wall_s", wall)
    record("tasks_run_per_node_healthy", run.tasks_run(PLAY))
    record("module_calls_per_node_healthy", run.module_calls(PLAY))
    # its owner is done with it: back in service for the next cases
    sh(CONTROLLER, "scontrol", "update", f"nodename={FOREIGN_NODE}", "state=resume", check=False)
    return run, audit, state


def test_healthy_rollout_upgrades_every_node_but_the_one_drained_by_someone_else(healthy):
    run, audit, _unused = healthy
    assert run.rc == 0, run.stdout[-4000:]
    assert audit["result"] == "partial"
    others = [node for node in NODES if node != FOREIGN_NODE]
    assert statuses(audit) == {**dict.fromkeys(others, "upgraded"), FOREIGN_NODE: "unavailable"}
    assert audit["not_upgraded"][0]["host"] == FOREIGN_NODE
    assert FOREIGN_REASON in audit["not_upgraded"][0]["reason"]
    assert audit["plan"]["unavailable"] == [FOREIGN_NODE]


def test_canary_goes_first_alone(healthy):
    _unused, audit, _unused = healthy
    assert audit["plan"]["canary"] == [CANARY]
    assert audit["plan"]["first_window"] == [CANARY]
    spans = {host: (start, end) for host, start, end in audit["window"]["timeline"]}
    assert set(spans) == set(NODES) - {FOREIGN_NODE}
    for node in spans:
        if node != CANARY:
            assert spans[node][0] >= spans[CANARY][1]


def test_the_foreign_drain_counts_against_max_unavailable(healthy):
    _unused, audit, _unused = healthy
    # max_unavailable 2 with ru-gpu3 out already: one node of ours at a time, checked against every rule
    assert audit["window"]["violations"] == []
    assert not overlapping(audit, NODES[1], NODES[3])
    assert audit["settings"]["window"]["max_unavailable"] == 2


def test_the_canary_is_gated_at_extended_the_others_at_standard(healthy):
    _unused, audit, _unused = healthy
    levels = {node["host"]: [gate["level"] for gate in node["gates"]] for node in audit["nodes"] if "gates" in node}
    assert levels == {CANARY: ["extended"], NODES[1]: ["standard"], NODES[3]: ["standard"]}


def test_every_node_on_the_new_stack_and_loaded(healthy):
    _unused, audit, state = healthy
    for node in NODES:
        expected = OLD if node == FOREIGN_NODE else NEW
        assert {p: v.split("-")[0] for p, v in state["installed"][node].items()} == dict.fromkeys(
            DRIVER_PACKAGES, expected
        )
        assert expected in sh(node, "cat", "/run/gpuops-lab/nvidia-version")
    loaded = {node["host"]: node["after"]["loaded_version"] for node in audit["nodes"] if node["status"] == "upgraded"}
    assert loaded == {CANARY: NEW, NODES[1]: NEW, NODES[3]: NEW}


def test_the_survey_pre_staged_the_target_with_a_dependency_it_does_not_name(healthy):
    """Outside the window, each node to upgrade downloaded the target's packages and nvidia-driver-cuda, which
    cuda-drivers-<branch> depends on (>=) but the resolved stack does not list, at the target's version."""
    run, _unused, _unused = healthy
    fetched = {result.host: result.result.get("stdout", "") for result in run.results_for(task=PRESTAGE_TASK)}
    # every node the survey decided to upgrade, the one drained by someone else included (Slurm is read later)
    assert sorted(fetched) == sorted(NODES)
    for node in NODES:
        assert f"nvidia-driver-cuda {NEW}-1" in fetched[node], fetched[node][-2000:]
        assert f"nvidia-driver {NEW}-1" in fetched[node]


def test_the_canary_drain_waited_for_the_job_which_completed(healthy):
    _unused, audit, state = healthy
    drain = node_of(audit, CANARY)["drain"]
    assert drain["action"] == "drain"
    assert drain["ours"]
    assert drain["waited"] > 0, "the job was running when the drain started: the module must have waited"
    assert not drain["timed_out"]
    assert state["job_state"] == "COMPLETED"


def test_nodes_resumed_and_the_foreign_drain_kept(healthy):
    _unused, _unused, state = healthy
    for name in NODES:
        node = state["slurm"][name]
        if name == FOREIGN_NODE:
            assert drained(node)
            assert node["reason"] == FOREIGN_REASON
        else:
            assert not drained(node), node
            assert node["state"] in {"idle", "mixed", "allocated"}, node


@pytest.fixture(scope="module", name="unhealthy_canary")
def fixture_unhealthy_canary(workdir, healthy):
    """Case 2: to the R580 branch; the canary's gate fails on an ECC fault injected after its packages change."""
    assert healthy[0].rc == 0
    sh(CANARY, "sh", "-c", f"printf '%s' {shell_quote(FAULT_HOOK_TEXT % BRANCH)} > {FAULT_HOOK}")
    before = {n: installed(n) for n in NODES}
    try:
        run, audit, wall = upgrade(workdir, "canary_fault", BRANCH, gpuops_upgrade_max_unavailable=2)
        state = {"before": before, "after": {n: installed(n) for n in NODES}, "slurm": slurm_nodes()}
    finally:
        sh(CANARY, "rm", "-f", FAULT_HOOK)
        sh(CANARY, "gpuops-lab-fault", "clear")
    record("canary_fault_run_wall_s", wall)
    gate = event_time(run, "Health gate", CANARY)
    halt = event_time(run, "Fail the run when it halted", "localhost")
    record("canary_failed_gate_to_halt_s", round((halt - gate).total_seconds(), 2))
    return run, audit, state


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_unhealthy_canary_halts_the_run(unhealthy_canary):
    run, audit, _unused = unhealthy_canary
    assert run.rc != 0
    assert audit["result"] == "halted"
    assert audit["halted_by"]["host"] == CANARY
    assert "health gate" in audit["halted_by"]["reason"]
    assert "ecc" in audit["halted_by"]["reason"].lower()


def test_no_other_node_touched_after_the_canary_failed(unhealthy_canary):
    _unused, audit, state = unhealthy_canary
    assert touched(audit) == {CANARY}
    assert statuses(audit) == {CANARY: "failed", **dict.fromkeys(NODES[1:], "not_reached")}
    for node in NODES:
        if node != CANARY:
            assert state["after"][node] == state["before"][node]
            assert not drained(state["slurm"][node])
    assert state["after"][CANARY]["nvidia-driver"].startswith(BRANCH)


def test_a_branch_change_pre_stages_the_target_with_its_dependencies_too(unhealthy_canary):
    """R550 -> R580: apt cannot resolve the target beside the running, held stack; the survey resolves it again
    with the superseded packages as removals (cuda-drivers-550 ...), so nvidia-driver-cuda, which no package list
    of ours names, is in the cache before the window, and the fallback to the named packages alone never runs."""
    run = unhealthy_canary[0]

    def ran(task):
        results = run.results_for(task=task)
        return {r.host: r.result.get("stdout", "") for r in results if r.event != "runner_on_skipped"}

    first, moving = ran(PRESTAGE_TASK), ran(PRESTAGE_MOVING_TASK)
    assert sorted(first) == sorted(NODES)
    for node in NODES:
        assert f"nvidia-driver-cuda {BRANCH}-1" in first[node] + moving.get(node, ""), moving.get(node, first[node])
    assert ran(PRESTAGE_NAMED_TASK) == {}


def test_failed_canary_stays_drained_with_the_run_in_its_reason(unhealthy_canary):
    _unused, audit, state = unhealthy_canary
    node = state["slurm"][CANARY]
    assert drained(node)
    assert node["reason"].startswith(f"gpuops-upgrade[{audit['run_id']}]: failed")


@pytest.fixture(scope="module", name="aborted")
def fixture_aborted(workdir, unhealthy_canary):
    """Case 3: to the R580 branch, a window of two, one node per rack; a job without an end defers ru-gpu3."""
    assert unhealthy_canary[1]["result"] == "halted"
    # the canary's operator cleared its fault (fixture above) and returns it to service
    sh(CONTROLLER, "scontrol", "update", f"nodename={CANARY}", "state=resume")
    wait_for(f"{CANARY} back in service", lambda: not drained(slurm_nodes()[CANARY]))
    blocked = NODES[2]
    job = submit_job(blocked, "sleep 3600")
    settings = {
        "gpuops_upgrade_max_unavailable": 2,
        "gpuops_upgrade_per_domain": {"rack": 1},
        "gpuops_upgrade_max_job_wait": 10,
        "gpuops_upgrade_on_drain_timeout": "halt",
    }
    first, first_audit, _unused = upgrade(workdir, "aborted", BRANCH, **settings)
    state = {"slurm": slurm_nodes(), "installed": {n: installed(n) for n in NODES}}
    sh(CONTROLLER, "scancel", job)
    wait_for(f"job {job} gone from {blocked}", lambda: slurm_nodes()[blocked]["state"] != "allocated")
    # the others are on the target already: ru-gpu3 alone is left, and it is its own canary
    rerun, rerun_audit, wall = upgrade(workdir, "rerun", BRANCH, **settings)
    record("rerun_one_node_wall_s", wall)
    record("module_calls_per_node_rerun", rerun.module_calls(PLAY))
    after = {"slurm": slurm_nodes(), "installed": {n: installed(n) for n in NODES}}
    return blocked, (first, first_audit, state), (rerun, rerun_audit, after)


def test_a_node_whose_job_has_no_end_is_deferred_in_service(aborted):
    blocked, (run, audit, state), _unused = aborted
    assert run.rc == 0, run.stdout[-4000:]
    assert audit["result"] == "partial"
    assert audit["halted_by"] is None
    # the canary's upgrade of case 2 was pending (it failed its gate): this run finished it first
    assert statuses(audit) == {CANARY: "upgraded", NODES[1]: "upgraded", blocked: "deferred", NODES[3]: "upgraded"}
    decision = run.results_for(play="Survey the fleet before the rolling upgrade", task=SURVEY_DECISION, host=CANARY)
    assert decision[0].result["ansible_facts"]["rolling_upgrade_decision"]["reason"].startswith("resume: ")
    for name in (CANARY, NODES[1], NODES[3]):
        assert state["installed"][name]["nvidia-driver"].startswith(BRANCH)
    assert not state["installed"][blocked]["nvidia-driver"].startswith(BRANCH)
    # never drained: its job kept running, the node in service
    assert not drained(state["slurm"][blocked]), state["slurm"][blocked]
    entry = next(node for node in audit["nodes"] if node["host"] == blocked)
    assert entry["reason"].startswith("deferred: its job has no known end")


def test_idle_nodes_go_before_the_node_running_a_job(aborted):
    blocked, (_unused, audit, _unused), _unused = aborted
    assert audit["plan"]["order"] == [CANARY, NODES[1], NODES[3], blocked]
    assert audit["plan"]["after_canary"] == [NODES[1], NODES[3]]


def test_one_node_per_rack_and_both_racks_at_once(aborted):
    _unused, (_unused, audit, _unused), _unused = aborted
    assert audit["settings"]["window"]["per_domain"] == {"rack": 1}
    assert audit["window"]["violations"] == []
    racks = {CANARY: "r1", NODES[1]: "r1", NODES[2]: "r2", NODES[3]: "r2"}
    timeline = audit["window"]["timeline"]
    for host, start, end in timeline:
        for other, other_start, other_end in timeline:
            if other != host and racks[other] == racks[host]:
                assert not (start < other_end and other_start < end), (host, other, timeline)
    assert overlapping(audit, NODES[1], NODES[3])


def test_rerun_finishes_without_touching_finished_nodes(aborted):
    blocked, _unused, (run, audit, after) = aborted
    assert run.rc == 0, run.stdout[-4000:]
    assert audit["result"] == "completed"
    assert statuses(audit) == {CANARY: "skipped", NODES[1]: "skipped", blocked: "upgraded", NODES[3]: "skipped"}
    assert touched(audit) == {blocked}
    for name in NODES:
        assert after["installed"][name]["nvidia-driver"].startswith(BRANCH)
        assert not drained(after["slurm"][name]), after["slurm"][name]


@pytest.fixture(scope="module", name="rolled_back")
def fixture_rolled_back(workdir, aborted):
    """Case 4: BRANCH -> NEW one node at a time, rollback on failure; NODES[1] fails its gate on NEW."""
    assert aborted[2][0].rc == 0
    failing = NODES[1]
    sh(failing, "sh", "-c", f"printf '%s' {shell_quote(FAULT_HOOK_TEXT % NEW)} > {FAULT_HOOK}")
    before = {n: installed(n) for n in NODES}
    try:
        run, audit, wall = upgrade(
            workdir,
            "rollback",
            NEW,
            gpuops_upgrade_max_unavailable=1,
            gpuops_upgrade_on_failure="rollback",
        )
        state = {
            "before": before,
            "after": {n: installed(n) for n in NODES},
            "slurm": slurm_nodes(),
            "loaded": sh(failing, "cat", "/run/gpuops-lab/nvidia-version"),
            "fact": json.loads(sh(failing, "cat", "/etc/ansible/facts.d/gpuops_stack.fact")),
        }
    finally:
        sh(failing, "rm", "-f", FAULT_HOOK)
        sh(failing, "gpuops-lab-fault", "clear")
    record("rollback_run_wall_s", wall)
    return failing, run, audit, state


def test_rollback_halts_the_run_at_the_failed_node(rolled_back):
    failing, run, audit, _unused = rolled_back
    assert run.rc != 0
    assert audit["result"] == "halted"
    assert audit["halted_by"]["host"] == failing
    assert audit["halted_by"]["status"] == "rolled_back"
    assert statuses(audit) == {
        CANARY: "upgraded",
        failing: "rolled_back",
        NODES[2]: "not_reached",
        NODES[3]: "not_reached",
    }


def test_rollback_returns_the_node_to_the_previous_stack_gated(rolled_back):
    failing, _unused, audit, state = rolled_back
    assert state["before"][failing]["nvidia-driver"].startswith(BRANCH)
    assert {p: v.split("-")[0] for p, v in state["after"][failing].items()} == dict.fromkeys(DRIVER_PACKAGES, BRANCH)
    assert BRANCH in state["loaded"]
    node = next(node for node in audit["nodes"] if node["host"] == failing)
    assert node["after"] == {"driver_version": BRANCH, "loaded_version": BRANCH}
    assert [(gate["phase"], gate["healthy"]) for gate in node["gates"]] == [("gate", False), ("rollback_gate", True)]
    assert any("ecc" in failure.lower() for failure in node["gates"][0]["failed"])
    fact = state["fact"]
    assert fact["pending"] is None
    assert fact["current"]["driver_version"] == BRANCH
    assert fact["current"]["resolved"]["cuda_version"] == STACK[BRANCH]["cuda"]
    assert fact["history"][-1]["result"] == "rolled_back"


def test_rolled_back_node_back_in_service_and_the_rest_untouched(rolled_back):
    failing, _unused, audit, state = rolled_back
    assert not drained(state["slurm"][failing]), state["slurm"][failing]
    assert touched(audit) == {CANARY, failing}
    assert state["after"][CANARY]["nvidia-driver"].startswith(NEW)
    for name in NODES[2:]:
        assert state["after"][name] == state["before"][name]
        assert not drained(state["slurm"][name])


@pytest.fixture(scope="module", name="continued")
def fixture_continued(workdir, rolled_back):
    """Case 5: on_drain_timeout=continue; a job without a time limit keeps ru-gpu2 busy."""
    failing, _unused, audit, _unused = rolled_back
    assert audit["result"] == "halted"
    blocked = failing  # back in service on BRANCH after its rollback
    job = submit_job(blocked, "sleep 3600")
    try:
        run, audit, wall = upgrade(
            workdir,
            "continue",
            NEW,
            gpuops_upgrade_max_unavailable=2,
            gpuops_upgrade_max_job_wait=10,
            gpuops_upgrade_on_drain_timeout="continue",
        )
        state = {"slurm": slurm_nodes(), "installed": {n: installed(n) for n in NODES}}
    finally:
        sh(CONTROLLER, "scancel", job, check=False)
    record("continue_run_wall_s", wall)
    return blocked, run, audit, state


def test_continue_defers_the_busy_node_in_service_and_goes_on(continued):
    blocked, run, audit, state = continued
    assert run.rc == 0, run.stdout[-4000:]
    # the canary group's node is done: the first node of the order (idle) is the canary, the busy one last
    assert audit["plan"]["canary"] == [NODES[2]]
    assert audit["plan"]["order"][-1] == blocked
    assert statuses(audit) == {CANARY: "skipped", blocked: "deferred", NODES[2]: "upgraded", NODES[3]: "upgraded"}
    assert state["installed"][blocked]["nvidia-driver"].startswith(BRANCH)
    for name in NODES[2:]:
        assert state["installed"][name]["nvidia-driver"].startswith(NEW)
        assert not drained(state["slurm"][name])
    assert not drained(state["slurm"][blocked]), state["slurm"][blocked]
    entry = next(node for node in audit["nodes"] if node["host"] == blocked)
    assert entry["reason"].startswith("deferred: its job has no known end")


def test_continue_ends_partial_and_names_the_node(continued):
    blocked, run, audit, _unused = continued
    assert audit["result"] == "partial"
    assert audit["halted_by"] is None
    assert [node["host"] for node in audit["not_upgraded"]] == [blocked]
    summary = run.results_for(play="Report the rolling upgrade", task="Print the summary")[0].result["msg"]
    assert f"NOT UPGRADED: {blocked} (deferred); see their reasons above" in summary


def job_times(job: str) -> dict[str, datetime.datetime]:
    """The job's StartTime and EndTime from ``scontrol show job -o`` (UTC: the lab nodes have no time zone)."""
    line = sh(CONTROLLER, "scontrol", "show", "job", "-o", job)
    fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
    return {
        key: datetime.datetime.fromisoformat(fields[name]).replace(tzinfo=datetime.timezone.utc)
        for key, name in (("start", "StartTime"), ("end", "EndTime"))
    }


def admitted_at(audit: dict, host: str) -> datetime.datetime:
    start = next(start for name, start, _end in audit["window"]["timeline"] if name == host)
    return datetime.datetime.fromtimestamp(start, tz=datetime.timezone.utc)


@pytest.fixture(scope="module", name="ended_early")
def fixture_ended_early(workdir, continued):
    """Case 6: a job with a 10-minute time limit that ends after 60 s; max_job_wait 300 s (below 10 min)."""
    assert continued[1].rc == 0
    busy = NODES[3]
    job = submit_job(busy, "sleep 60", minutes=10)
    submitted = job_times(job)
    ahead = NODES[2]
    sh(ahead, "rm", "-f", RELEASE)
    ahead_job = submit_job(ahead, UNTIL_RELEASED, minutes=10)
    seen: dict = {}
    watch = release_when_draining(ahead, seen)
    try:
        run, audit, wall = upgrade(
            workdir,
            "ended_early",
            BRANCH,
            gpuops_upgrade_max_unavailable=2,
            gpuops_upgrade_max_job_wait=300,
            gpuops_upgrade_refresh_interval=10,
            # the canary (first and alone) holds the window past the job's real end, so the run has work in
            # flight when the job ends: what the window does then is the case (not a deferral for want of work)
            gpuops_upgrade_canary_soak_seconds=60,
            gpuops_upgrade_drain_ahead=1,
            gpuops_upgrade_partition_floor=0.5,
        )
        watch.join(timeout=30)
    finally:
        sh(ahead, "touch", RELEASE, check=False)
        sh(CONTROLLER, "scancel", ahead_job, check=False)
    state = {
        "job_state": settled_job_state(job),
        "times": job_times(job),
        "planned_end": submitted["end"],
        "ahead": {"seen": seen, "job_state": settled_job_state(ahead_job), "times": job_times(ahead_job)},
        "slurm": slurm_nodes(),
        "installed": {n: installed(n) for n in NODES},
    }
    sh(ahead, "rm", "-f", RELEASE)
    record("ended_early_run_wall_s", wall)
    if busy in touched(audit):
        record(
            "ended_early_job_end_to_admission_s",
            round((admitted_at(audit, busy) - state["times"]["end"]).total_seconds(), 1),
        )
    return busy, run, audit, state


def test_a_job_ending_early_admits_its_node_when_it_ends_not_before(ended_early):
    busy, run, audit, state = ended_early
    assert run.rc == 0, run.stdout[-4000:]
    assert state["job_state"] == "COMPLETED"
    # Slurm knew only the time limit: EndTime 10 minutes after the start, beyond the 300 s wait
    assert (state["planned_end"] - state["times"]["start"]).total_seconds() == 600
    assert node_of(audit, busy)["status"] == "upgraded", node_of(audit, busy)
    admitted = admitted_at(audit, busy)
    # not before: the node kept its job, in service, until the job ended (it was never drained under it)
    assert admitted >= state["times"]["end"] - datetime.timedelta(seconds=1), (admitted, state["times"])
    assert node_of(audit, busy)["drain"]["waited"] < 5
    # when the job ends: well before the time the plan alone allowed (EndTime - max_job_wait)
    assert admitted < state["planned_end"] - datetime.timedelta(seconds=300), (admitted, state["planned_end"])
    assert state["installed"][busy]["nvidia-driver"].startswith(BRANCH)
    assert not drained(state["slurm"][busy]), scontrol_node(busy)
    assert audit["window"]["violations"] == []


def test_drain_ahead_stops_new_jobs_on_the_next_node_while_its_job_runs(ended_early):
    _unused, run, audit, state = ended_early
    assert run.rc == 0, run.stdout[-4000:]
    ahead = NODES[2]
    seen = state["ahead"]["seen"]
    # drained in Slurm while its job ran, with the run's drain-ahead reason, before its slot
    assert seen, "the node was never seen drained"
    assert "DRAIN" in seen["line"].split("State=", 1)[1].split()[0], seen["line"]
    assert f"Reason=gpuops-upgrade[{audit['run_id']}]: drained ahead of its upgrade slot" in seen["line"]
    assert seen["jobs"][1::2] == ["RUNNING"], seen
    assert state["ahead"]["job_state"] == "COMPLETED"
    # one drain ahead, ended by its admission, which came when the job had ended
    spans = audit["window"]["drained_ahead"]
    admitted = admitted_at(audit, ahead)
    assert [span[0] for span in spans] == [ahead], spans
    assert abs(spans[0][2] - admitted.timestamp()) < 0.01, (spans, admitted)
    assert admitted >= state["ahead"]["times"]["end"] - datetime.timedelta(seconds=1)
    assert node_of(audit, ahead)["status"] == "upgraded"
    assert state["installed"][ahead]["nvidia-driver"].startswith(BRANCH)
    assert not drained(state["slurm"][ahead]), scontrol_node(ahead)
    # checked with the floor of half the partition's GPUs and one drain ahead at a time
    assert audit["settings"]["window"]["partition_floor"] == 0.5
    assert audit["window"]["violations"] == []


def extend_when_draining(node: str, job: str, minutes: int) -> threading.Thread:
    """Once ``node`` is draining under ``job``, raise the job's time limit (a user's extension, granted by an admin)."""

    def extend():
        wait_for(f"{node} draining", lambda: drained(slurm_nodes()[node]), timeout=600)
        sh(CONTROLLER, "scontrol", "update", f"jobid={job}", f"TimeLimit={minutes}")

    thread = threading.Thread(target=extend, daemon=True)
    thread.start()
    return thread


def drain_when_draining(node: str, other: str, reason: str) -> threading.Thread:
    """Once ``node`` is draining, an operator drains ``other`` (someone else's drain, during the run)."""

    def drain():
        wait_for(f"{node} draining", lambda: drained(slurm_nodes()[node]), timeout=600)
        sh(CONTROLLER, "scontrol", "update", f"nodename={other}", "state=drain", f"reason={reason}")

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return thread


def journal_of(workdir: Path, audit: dict) -> list[dict]:
    """The run's journal (beside its report)."""
    path = workdir / f"gpuops-upgrade-{audit['run_id']}.journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module", name="outlasted")
def fixture_outlasted(workdir, ended_early):
    """Case 7: a 3-minute job admitted within a 150 s wait, then extended to an hour while its node drains;
    ru-gpu4 drained by someone else while the canary upgrades."""
    _unused, first, _unused, _unused = ended_early
    assert first.rc == 0
    busy = NODES[2]
    job = submit_job(busy, "sleep 3600", minutes=3)
    extension = extend_when_draining(busy, job, 60)
    operator = drain_when_draining(CANARY, NODES[3], MIDRUN_REASON)
    try:
        run, audit, wall = upgrade(
            workdir,
            "outlasted",
            NEW,
            # room for the busy node next to the canary's successors: it is admitted right after the canary
            gpuops_upgrade_max_unavailable=3,
            gpuops_upgrade_max_job_wait=150,
            gpuops_upgrade_on_drain_timeout="continue",
        )
        extension.join(timeout=30)
        operator.join(timeout=30)
        state = {
            "job_state": job_state(job),
            "slurm": slurm_nodes(),
            "line": scontrol_node(busy),
            "installed": {n: installed(n) for n in NODES},
            "journal": journal_of(workdir, audit) if audit else [],
        }
    finally:
        sh(CONTROLLER, "scancel", job, check=False)
        # its owner is done with it: back in service for the next case
        sh(CONTROLLER, "scontrol", "update", f"nodename={NODES[3]}", "state=resume", check=False)
    record("outlasted_run_wall_s", wall)
    return busy, run, audit, state


def test_a_job_outlasting_the_wait_leaves_its_node_in_service_and_deferred(outlasted):
    busy, run, audit, state = outlasted
    assert run.rc == 0, run.stdout[-4000:]
    entry = node_of(audit, busy)
    assert entry["status"] == "deferred", entry
    assert entry["drain"]["action"] == "drain"
    assert entry["drain"]["timed_out"]
    # resumed, never left drained: the job still runs on a node in service
    assert state["job_state"] == "RUNNING"
    assert not drained(state["slurm"][busy]), state["line"]
    assert "DRAIN" not in state["line"].split("State=", 1)[1].split()[0]
    assert state["slurm"][busy]["state"] in {"mixed", "allocated"}, state["line"]
    assert not state["installed"][busy]["nvidia-driver"].startswith(NEW)


def test_a_node_drained_by_someone_else_mid_run_is_seen_at_the_next_read_and_left_alone(outlasted):
    _unused, run, audit, state = outlasted
    assert run.rc == 0, run.stdout[-4000:]
    gone = NODES[3]
    entry = node_of(audit, gone)
    assert entry["status"] == "unavailable", entry
    assert MIDRUN_REASON in entry["reason"], entry
    assert "seen during the run" in entry["reason"], entry
    assert gone not in touched(audit)
    # a read of the fleet during the run saw it leave
    reads = [read for read in state["journal"] if read["event"] == "refresh" and read.get("ok")]
    left = [(read.get("changes") or {}).get("left") or {} for read in reads]
    assert "drained_by_others" in [changes.get(gone) for changes in left], left
    # not touched: still drained with its owner's reason, on the stack it had
    assert drained(state["slurm"][gone]), state["slurm"][gone]
    assert state["slurm"][gone]["reason"] == MIDRUN_REASON
    assert state["installed"][gone]["nvidia-driver"].startswith(BRANCH)


def test_the_run_finishes_the_other_nodes_and_names_the_deferred_one(outlasted):
    busy, _unused, audit, state = outlasted
    gone = NODES[3]
    assert audit["result"] == "partial"
    assert audit["halted_by"] is None
    assert sorted(node["host"] for node in audit["not_upgraded"]) == sorted([busy, gone])
    for name in NODES:
        if name not in (busy, gone):
            assert node_of(audit, name)["status"] in {"upgraded", "skipped"}
            assert state["installed"][name]["nvidia-driver"].startswith(NEW)
            assert not drained(state["slurm"][name])


DCGMI = "/usr/bin/dcgmi"


@pytest.fixture(scope="module", name="no_dcgmi")
def fixture_no_dcgmi(workdir, outlasted):
    """Case 8: dcgmi removed from the canary, whose extended gate runs it (the target carries no DCGM that would
    bring it back): the run to BRANCH names the canary and the missing tool in its plan and stops, nothing moved."""
    assert outlasted[1].rc == 0
    sh(CANARY, "mv", DCGMI, DCGMI + ".removed")
    before = {n: installed(n) for n in NODES}
    try:
        run, audit, wall = upgrade(workdir, "no_dcgmi", BRANCH, gpuops_upgrade_max_unavailable=2)
        state = {"before": before, "after": {n: installed(n) for n in NODES}, "slurm": slurm_nodes()}
    finally:
        sh(CANARY, "mv", DCGMI + ".removed", DCGMI)
    record("no_dcgmi_run_wall_s", wall)
    return run, audit, state


def test_a_canary_without_dcgmi_is_named_before_anything_moves(no_dcgmi):
    run, audit, state = no_dcgmi
    assert run.rc != 0
    assert audit == {}  # stopped at the plan: no window, no report
    (stop,) = [r for r in run.failures if r.task.startswith("Stop when a node lacks a tool its gate runs")]
    message = stop.result["msg"]
    assert message.startswith("Nothing moved: 1 node(s) whose health gate would fail for a missing tool"), message
    assert f"{CANARY} (a canary): dcgmi not installed, a gate at level=extended runs it" in message
    assert run.results_for(play="Upgrade in a sliding window") == []
    # nothing moved: no package changed, no node drained by this run
    assert state["after"] == state["before"]
    for name in NODES:
        assert "no_dcgmi" not in (state["slurm"][name]["reason"] or ""), scontrol_node(name)


ALL_REDUCE_PERF = "/opt/nccl-tests/build/all_reduce_perf"


@pytest.fixture(scope="module", name="no_nccl_tests")
def fixture_no_nccl_tests(workdir, no_dcgmi):
    """Case 9: nccl-tests' all_reduce_perf removed from the canary and from a node gated at standard; a plan-only run
    (as the README writes it, a string) names the canary, whose extended gate runs it, and moves nothing."""
    other = NODES[1]
    for node in (CANARY, other):
        sh(node, "mv", ALL_REDUCE_PERF, ALL_REDUCE_PERF + ".removed")
    before = {n: installed(n) for n in NODES}
    slurm_before = slurm_nodes()
    try:
        run, _audit, wall = upgrade(workdir, "no_nccl_tests", BRANCH, gpuops_upgrade_plan_only="true")
        state = {"after": {n: installed(n) for n in NODES}, "slurm": slurm_nodes()}
    finally:
        for node in (CANARY, other):
            sh(node, "mv", ALL_REDUCE_PERF + ".removed", ALL_REDUCE_PERF)
    record("no_nccl_tests_plan_only_wall_s", wall)
    return run, before, slurm_before, state


def test_a_plan_only_run_names_the_canary_without_all_reduce_perf_and_moves_nothing(no_nccl_tests):
    run, before, slurm_before, state = no_nccl_tests
    assert run.rc != 0
    plan = run.results_for(play="Plan the window", task="Print the plan before any node moves")[0].result["msg"]
    named = [line for line in plan if line.startswith("gate would fail: ")]
    assert len(named) == 1, plan
    assert named[0].startswith(f"gate would fail: {CANARY} (a canary): all_reduce_perf not installed"), named
    (stop,) = [r for r in run.failures if r.task.startswith("Stop when a node lacks a tool its gate runs")]
    assert stop.result["msg"].startswith("The plan-only run found 1 node(s) whose health gate would fail")
    assert NODES[1] not in stop.result["msg"]  # gated at standard, which runs no all_reduce_perf
    assert run.results_for(play="Upgrade in a sliding window") == []
    assert state["after"] == before
    drains = {name: (drained(node), node["reason"]) for name, node in state["slurm"].items()}
    assert drains == {name: (drained(node), node["reason"]) for name, node in slurm_before.items()}


@pytest.fixture(scope="module", name="waited")
def fixture_waited(workdir, no_nccl_tests):
    """Case 10: one run finishes the fleet. A job of 4 minutes (time limit 5) on ru-gpu4, max_job_wait 60 s, to NEW
    (ru-gpu1 and ru-gpu2 are on it since case 7; ru-gpu3 and ru-gpu4 on BRANCH since case 6): ru-gpu3 is upgraded
    long before the job nears its end, and the run, with nothing in flight, waits for it (the default deadline: the
    job's EndTime), ru-gpu4 in service, then upgrades it."""
    busy = NODES[3]
    job = submit_job(busy, "sleep 240", minutes=5)
    submitted = job_times(job)
    run, audit, wall = upgrade(
        workdir,
        "waited",
        NEW,
        gpuops_upgrade_max_unavailable=2,
        gpuops_upgrade_max_job_wait=60,
        gpuops_upgrade_refresh_interval=10,
    )
    state = {
        "job_state": settled_job_state(job),
        "times": job_times(job),
        "planned_end": submitted["end"],
        "slurm": slurm_nodes(),
        "installed": {n: installed(n) for n in NODES},
        "journal": journal_of(workdir, audit) if audit else [],
    }
    record("waited_run_wall_s", wall)
    return busy, run, audit, state


def test_one_run_waits_in_service_for_the_last_job_and_finishes_the_fleet(waited):
    busy, run, audit, state = waited
    assert run.rc == 0, run.stdout[-4000:]
    assert audit["result"] == "completed", audit["counts"]
    assert state["job_state"] == "COMPLETED"
    assert node_of(audit, busy)["status"] == "upgraded"
    others = [span for span in audit["window"]["timeline"] if span[0] != busy]
    admitted = admitted_at(audit, busy)
    # nothing else was in flight while it waited: every other node was back before it was admitted
    assert all(datetime.datetime.fromtimestamp(end, tz=datetime.timezone.utc) <= admitted for _n, _s, end in others)
    # in service until its job neared its end (EndTime - max_job_wait) or ended: never drained under a long job
    assert admitted >= min(state["times"]["end"], state["planned_end"] - datetime.timedelta(seconds=60)) - (
        datetime.timedelta(seconds=2)
    )
    assert sorted(node["host"] for node in audit["nodes"] if node["status"] == "upgraded") == [NODES[2], busy]
    for name in NODES:
        assert state["installed"][name]["nvidia-driver"].startswith(NEW)
        assert not drained(state["slurm"][name]), scontrol_node(name)
    # the journal says the same: the run's deadline (the job's EndTime), every node admitted and released ok, and a
    # progress line per admission and release, which the run printed too
    (start,) = [entry for entry in state["journal"] if entry["event"] == "start"]
    assert abs(start["deadline"] - state["planned_end"].timestamp()) <= 1
    replayed = run_journal.replay(state["journal"])
    assert sorted(replayed["done"]) == sorted(node["host"] for node in audit["nodes"] if node["status"] == "upgraded")
    assert replayed["deferred"] == {}
    released = [entry for entry in state["journal"] if entry["event"] == "release"]
    assert released[-1]["node"] == busy
    assert released[-1]["progress"]["waiting"] == 0
    assert "gpuops upgrade window: admitted %s" % busy in run.stdout
    assert audit["window"]["violations"] == []


# Case 11 (issue 28 item 5): the controller lost between a node's upgrade and its give-back. The lab's scontrol on the
# controller holds one node's resume (and says it was asked); every other call goes to Slurm's own scontrol.
HOLD_MARK = "/var/tmp/gpuops-lab-resume-asked"
HOLD_WRAPPER = "/usr/local/bin/scontrol"
HOLD_SECONDS = "901"  # the held call's sleep, told from any other sleep on the controller


def hold_resume_of(node: str) -> None:
    text = (
        "#!/bin/sh\n"
        "# lab only (rolling_upgrade case 11): hold the resume of one node, as a controller lost at that moment would\n"
        f'if [ "$1" = update ] && [ "$2" = nodename={node} ] && [ "$3" = state=resume ]; then\n'
        f"    touch {HOLD_MARK}\n"
        f"    exec sleep {HOLD_SECONDS}\n"
        "fi\n"
        'exec /usr/bin/scontrol "$@"\n'
    )
    write_file(CONTROLLER, HOLD_WRAPPER, text)
    sh(CONTROLLER, "chmod", "0755", HOLD_WRAPPER)
    sh(CONTROLLER, "rm", "-f", HOLD_MARK)


def release_hold() -> None:
    sh(CONTROLLER, "rm", "-f", HOLD_WRAPPER, HOLD_MARK)
    sh(CONTROLLER, "pkill", "-x", "-f", f"sleep {HOLD_SECONDS}", check=False)


def asked() -> bool:
    done = subprocess.run(["podman", "exec", CONTROLLER, "test", "-e", HOLD_MARK], check=False, timeout=PODMAN_TIMEOUT)
    return done.returncode == 0


def killed_at_give_back(workdir: Path, name: str, extravars: dict) -> subprocess.CompletedProcess:
    """rolling_upgrade.yml as run_playbook runs it, in its own process group, killed (SIGKILL, the controller and its
    workers) the moment the held resume is asked for."""
    (workdir / f"{name}.json").write_text(json.dumps(extravars))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ANSIBLE_NOCOLOR="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    output = workdir / f"{name}.out"
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(INVENTORY_DIR)]
    argv += [str(REPO / "rolling_upgrade.yml"), "-e", f"@{workdir / name}.json"]
    with output.open("w") as out:
        run = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for("the held resume asked for (or the run ended)", lambda: run.poll() is not None or asked(), timeout=600)
        assert run.poll() is None, output.read_text()[-4000:]
        os.killpg(run.pid, signal.SIGKILL)
    finally:
        run.wait(timeout=60)
    return subprocess.CompletedProcess(argv, run.returncode, output.read_text())


@pytest.fixture(scope="module", name="lost")
def fixture_lost(workdir, waited):
    """Case 11: the canary and ru-gpu3 go to BRANCH, one at a time (the canary group must be in the run)."""
    assert waited[1].rc == 0
    first_node, second_node = CANARY, NODES[2]
    settings = {
        "gpuops_stack": STACK[BRANCH],
        "gpuops_target_hosts": f"{first_node}:{second_node}",
        "gpuops_upgrade_max_unavailable": 1,
        "gpuops_upgrade_run_id": f"lost-{datetime.datetime.now(datetime.timezone.utc):%H%M%S}",
        "gpuops_upgrade_report_path": str(workdir / "lost.json"),
    }
    hold_resume_of(first_node)
    try:
        killed = killed_at_give_back(workdir, "lost-killed", settings)
        left = {
            "slurm": slurm_nodes(),
            "installed": {n: installed(n) for n in (first_node, second_node)},
            "fact": json.loads(sh(first_node, "cat", "/etc/ansible/facts.d/gpuops_stack.fact")),
        }
    finally:
        release_hold()
    start = time.monotonic()
    # the same command again
    run = run_playbook("rolling_upgrade.yml", INVENTORY_DIR, workdir / "lost-again", extravars=settings)
    record("lost_controller_rerun_wall_s", round(time.monotonic() - start, 1))
    audit = json.loads((workdir / "lost.json").read_text())
    after = {"slurm": slurm_nodes(), "installed": {n: installed(n) for n in (first_node, second_node)}}
    return (first_node, second_node), killed, left, run, audit, after


def test_the_killed_controller_left_the_node_upgraded_and_drained_by_us(lost):
    (first_node, second_node), killed, left, _run, _audit, _after = lost
    assert killed.returncode == -9, killed.stdout[-4000:]
    assert left["installed"][first_node]["nvidia-driver"].startswith(BRANCH)
    assert drained(left["slurm"][first_node]), left["slurm"][first_node]
    assert left["slurm"][first_node]["reason"].startswith("gpuops-upgrade["), left["slurm"][first_node]
    # its stack fact: the upgrade begun, never recorded as finished (given back first, then recorded)
    assert (left["fact"]["pending"] or {}).get("target_driver_version") == BRANCH, left["fact"]
    # the other node was never taken out: the canary's give-back had not ended
    assert not left["installed"][second_node]["nvidia-driver"].startswith(BRANCH)
    assert not drained(left["slurm"][second_node])


def test_the_same_command_gives_the_node_back_first_counting_it_out_of_service(lost):
    (first_node, second_node), _killed, _left, run, audit, after = lost
    assert run.rc == 0, run.stdout[-4000:]
    assert audit["result"] == "completed", audit["counts"]
    assert audit["plan"]["resumed"] == [first_node], audit["plan"]
    assert "resumed first, out of service already (left by an earlier run): %s" % first_node in run.stdout
    # the plan, printed before anything moved, continued the journal the window then continued (window_open)
    assert audit["plan"]["continues"]["journal"] == audit["journal"]["resumed_from"] == audit["journal"]["path"]
    # the output's YAML folds a long line at its spaces
    assert "continues the run its journal %s left" % audit["journal"]["path"] in " ".join(run.stdout.split())
    assert statuses(audit) == {first_node: "upgraded", second_node: "upgraded"}
    spans = {host: (start, end) for host, start, end in audit["window"]["timeline"]}
    # out of service from the run's start until given back; the other node only after that
    assert spans[second_node][0] >= spans[first_node][1], spans
    assert audit["window"]["violations"] == []
    for name in (first_node, second_node):
        assert after["installed"][name]["nvidia-driver"].startswith(BRANCH)
        assert not drained(after["slurm"][name]), scontrol_node(name)


# Case 12 (issue 29): Slurm 24.11 sees the MIG gres lines the mig_layout role wrote. The node's lab data
# (molecule.yml host_vars): lab_mig, the run's extra vars (gpuops_mig, gpuops_mig_config, gpuops_gpu and the
# simulator's mig-minors), lab_mig_gpus (its simulated GPUs in this case), lab_mig_gres (the layout's Gres=).
_HOST_VARS = yaml.safe_load((Path(__file__).resolve().parents[1] / "molecule.yml").read_text())["provisioner"][
    "inventory"
]["host_vars"]
MIG_NODE = next(name for name, host in sorted(_HOST_VARS.items()) if "lab_mig" in host)
MIG = _HOST_VARS[MIG_NODE]
MIG_GRES = MIG["lab_mig_gres"]
DRAIN_TASK = "Drain the node in Slurm before the change, and wait for its jobs"
GRES_FAIL_TASK = "Fail a node whose Gres in Slurm is not its layout's"


def gres_counts(gres: str) -> dict[str, int]:
    """``{type: count}`` of a ``gpu:<type>:<count>,...`` string."""
    return {entry.split(":")[1]: int(entry.split(":")[2]) for entry in gres.split(",")}


def node_field(line: str, key: str) -> str:
    """One ``Key=value`` of ``scontrol show node -o`` (values without spaces), "" when absent."""
    found = [word.split("=", 1)[1] for word in line.split() if word.startswith(key + "=")]
    return found[0] if found else ""


def slurm_conf_giving(text: str, node: str, gres: str) -> str:
    """slurm.conf with one NodeName line per node, in NODES order, ``node`` with ``Gres=gres``, the others as they were
    (the scenario's one line names every node: slurm.conf.j2)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            lines.append(line)
            continue
        rest = line.split(None, 1)[1]
        for name in NODES:
            lines.append(
                f"NodeName={name} "
                + (
                    " ".join(f"Gres={gres}" if word.startswith("Gres=") else word for word in rest.split())
                    if name == node
                    else rest
                )
            )
    return "\n".join(lines) + "\n"


def write_file(host: str, path: str, text: str) -> None:
    done = subprocess.run(
        ["podman", "exec", "-i", host, "sh", "-c", f"cat > {path}"],
        input=text,
        text=True,
        capture_output=True,
        check=False,
        timeout=PODMAN_TIMEOUT,
    )
    assert done.returncode == 0, f"{host}: writing {path}: {done.stderr}"


@pytest.fixture(scope="module", name="mig_gres")
def fixture_mig_gres(workdir, lost):
    """Case 12: a MIG layout on a node in service, by playbooks/mig_layout.yml, seen by Slurm 24.11.

    Runs last: it leaves MIG_NODE split (its simulated GPUs H100 SXM, the layout in place); a case added after it must
    not gate that node. As an operator does it (docs/mig.md): the node's GPUs become MIG-capable (the lab swaps its
    simulated L40S for H100 SXM), gres.conf leaves the node's GPU lines to the role (the other nodes' kept with
    NodeName=), a job runs on it. The run drains it (our reason) and waits for the job, applies the layout, writes the
    MultipleFiles lines from the capability minors, restarts slurmd, and keeps the node drained failing, because Slurm
    still has Gres=gpu:4 for it (only slurm.conf changes a GPU count). The operator gives slurm.conf the Gres= the run
    names and runs scontrol reconfigure (slurmctld and slurmd restart: slurmd -G and the registration read the lines);
    the second run changes nothing and resumes the node."""
    start = time.monotonic()
    assert lost[3].rc == 0
    before = {"slurm": slurm_nodes()[MIG_NODE], "line": scontrol_node(MIG_NODE)}
    write_file(MIG_NODE, "/etc/gpuops-lab/gpus.json", json.dumps(MIG["lab_mig_gpus"]) + "\n")
    others = ",".join(node for node in NODES if node != MIG_NODE)
    write_file(MIG_NODE, "/etc/slurm/gres.conf", f"NodeName={others} Name=gpu File=/dev/nvidia[0-3]\n")
    sh(MIG_NODE, "rm", "-f", RELEASE)
    job = submit_job(MIG_NODE, UNTIL_RELEASED)
    seen: dict = {}
    release = release_when_draining(MIG_NODE, seen)
    first_start = time.monotonic()
    first = run_playbook(
        "playbooks/mig_layout.yml", INVENTORY_DIR, workdir / "mig_layout_1", extravars=MIG["lab_mig"], limit=MIG_NODE
    )
    first_wall = round(time.monotonic() - first_start, 1)
    release.join(timeout=30)
    sh(MIG_NODE, "touch", RELEASE, check=False)  # the job ends even where the run never drained the node
    assert seen, f"the run never drained {MIG_NODE}:\n{first.stdout[-6000:]}"
    # the run stops where Slurm's Gres is not the layout's; anything else: its output, not a wait that runs out later
    assert [failure.task for failure in first.failures] == [GRES_FAIL_TASK], first.stdout[-6000:]
    state = {
        "before": before,
        "seen": seen,
        "job_state": settled_job_state(job),
        "after_first": slurm_nodes()[MIG_NODE],
        "gres_conf": sh(MIG_NODE, "cat", "/etc/slurm/gres.conf"),
        "slurmd_active": sh(MIG_NODE, "systemctl", "is-active", "slurmd", check=False).strip(),
        # the minors of the capability files the simulator made for the instances that exist
        "cap_minors": sh(
            MIG_NODE,
            "sh",
            "-c",
            "cat /run/gpuops-lab/proc/driver/nvidia/capabilities/gpu0/mig/*/access "
            "/run/gpuops-lab/proc/driver/nvidia/capabilities/gpu0/mig/*/ci*/access",
        ),
        "cap_types": sh(MIG_NODE, "sh", "-c", "stat -c '%n %F %t' /dev/nvidia-caps/nvidia-cap*"),
    }
    # the operator: slurm.conf gives the node the Gres= the run named, everywhere, then scontrol reconfigure
    conf = slurm_conf_giving(sh(CONTROLLER, "cat", "/etc/slurm/slurm.conf"), MIG_NODE, MIG_GRES)
    for host in [CONTROLLER, *NODES]:
        write_file(host, "/etc/slurm/slurm.conf", conf)
    started = node_field(scontrol_node(MIG_NODE), "SlurmdStartTime")
    time.sleep(1.1)  # SlurmdStartTime has a resolution of one second
    sh(CONTROLLER, "scontrol", "reconfigure")

    def registered_again():
        line = sh(CONTROLLER, "scontrol", "show", "node", "-o", MIG_NODE, check=False)
        return line if node_field(line, "SlurmdStartTime") not in ("", started) and f"Gres={MIG_GRES} " in line else ""

    state["reconfigured"] = wait_for(f"{MIG_NODE} registered with Gres={MIG_GRES}", registered_again, timeout=60)
    state["slurmd_g"] = subprocess.run(
        ["podman", "exec", MIG_NODE, "slurmd", "-G"],
        capture_output=True,
        text=True,
        check=False,
        timeout=PODMAN_TIMEOUT,
    )
    second_start = time.monotonic()
    second = run_playbook(
        "playbooks/mig_layout.yml", INVENTORY_DIR, workdir / "mig_layout_2", extravars=MIG["lab_mig"], limit=MIG_NODE
    )
    second_wall = round(time.monotonic() - second_start, 1)
    state["after_second"] = slurm_nodes()[MIG_NODE]
    state["line"] = scontrol_node(MIG_NODE)
    # a job asking for two MIG devices of one type runs on the node, given two of its GPU records
    state["srun"] = sh(
        CONTROLLER,
        "timeout",
        "60",
        "srun",
        f"--nodelist={MIG_NODE}",
        "--gres=gpu:1g.10gb:2",
        "printenv",
        "CUDA_VISIBLE_DEVICES",
        check=False,
    ).strip()
    record("mig_gres_first_run_wall_s", first_wall)
    record("mig_gres_second_run_wall_s", second_wall)
    record("mig_gres_case_wall_s", round(time.monotonic() - start, 1))
    return first, second, state


def gres_block(text: str) -> list[str]:
    """The lines of gres.conf's block written by gpuops.cluster.slurm_gres (markers left out)."""
    lines = text.splitlines()
    begin = next(i for i, line in enumerate(lines) if line.startswith("# BEGIN gpuops.cluster"))
    end = lines.index("# END gpuops.cluster")
    return lines[begin + 1 : end]


def test_mig_layout_drains_the_node_in_service_with_our_reason_and_waits_for_its_job(mig_gres):
    first, _unused, state = mig_gres
    assert not drained(state["before"]["slurm"]), state["before"]["line"]
    assert state["before"]["slurm"]["state"] in {"idle", "mixed", "allocated"}, state["before"]["line"]
    # Slurm while the run waited for the job: draining, our reason, the job still running
    assert "Reason=gpuops-mig[" in state["seen"]["line"], state["seen"]
    assert "MIG layout lab-inference being applied (gpuops.cluster mig_layout)" in state["seen"]["line"]
    assert "RUNNING" in state["seen"]["jobs"], state["seen"]
    (drain,) = [result.result for result in first.results_for(task=DRAIN_TASK, host=MIG_NODE)]
    assert drain["action"] == "drain", drain
    assert drain["ours"], drain
    assert drain["waited"] > 0, "the job ran when the drain started: the run must have waited for it"
    assert state["job_state"] == "COMPLETED"


def test_the_first_run_keeps_the_node_drained_naming_the_gres_slurm_conf_must_give(mig_gres):
    first, _unused, state = mig_gres
    assert first.rc != 0, first.stdout[-4000:]
    (failure,) = first.failures
    assert failure.host == MIG_NODE
    assert f"give NodeName={MIG_NODE} Gres={MIG_GRES} in the controller's slurm.conf" in failure.result["msg"]
    assert "Slurm has Gres=gpu:4" in failure.result["msg"], failure.result["msg"]
    after = state["after_first"]
    assert drained(after), after
    assert after["reason"].startswith("gpuops-mig[")
    assert f"slurm.conf must give the node Gres={MIG_GRES}" in after["reason"]
    assert state["slurmd_active"] == "active"


def test_gres_conf_has_the_multiple_files_lines_of_the_layout(mig_gres):
    _unused, _unused, state = mig_gres
    block = gres_block(state["gres_conf"])
    assert block[0] == f"# slurm.conf for this node: Gres={MIG_GRES}"
    lines = block[1:]
    types = [line.split()[1].removeprefix("Type=") for line in lines]
    assert {name: types.count(name) for name in types} == gres_counts(MIG_GRES)
    minors = set()
    for line in lines:
        name, kind, files = line.split()
        assert name == "Name=gpu"
        key, paths = files.split("=", 1)
        if kind == "Type=h100_80gb_hbm3":
            assert key == "File", line
            assert paths in {"/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"}, line
            continue
        assert key == "MultipleFiles", line
        gpu, gpu_instance, compute_instance = paths.split(",")
        assert gpu == "/dev/nvidia0"
        for cap in (gpu_instance, compute_instance):
            assert cap.startswith("/dev/nvidia-caps/nvidia-cap"), line
            minors.add(int(cap.removeprefix("/dev/nvidia-caps/nvidia-cap")))
    # the capability minors of the instances in place (the driver's DeviceFileMinor), each a character device
    in_place = {
        int(line.split(":")[1]) for line in state["cap_minors"].splitlines() if line.startswith("DeviceFileMinor")
    }
    assert minors == in_place, (minors, in_place)
    devices = dict(line.rsplit(" ", 1)[0].split(" ", 1) for line in state["cap_types"].splitlines())
    assert all(devices[f"/dev/nvidia-caps/nvidia-cap{minor}"] == "character special file" for minor in minors)
    # the other nodes' line, with their NodeName=, is kept
    kept = state["gres_conf"].splitlines()[0]
    assert kept.startswith("NodeName="), state["gres_conf"]
    assert MIG_NODE not in kept, state["gres_conf"]


def test_slurmd_reads_the_lines_and_slurm_reports_the_layout_gres(mig_gres):
    _unused, second, state = mig_gres
    # slurmd -G: the records slurmd builds from gres.conf, each a MIG device or a whole GPU with its type and files
    out = state["slurmd_g"].stdout + state["slurmd_g"].stderr
    assert "fix your gres.conf" not in out, out
    assert "can't stat" not in out, out
    records = [line for line in out.splitlines() if "Gres Name=gpu Type=" in line]
    typed = [line.split("Type=", 1)[1].split()[0] for line in records]
    assert {name: typed.count(name) for name in typed} == gres_counts(MIG_GRES), out
    assert all("HAS_TYPE" in line for line in records), out
    # after scontrol reconfigure: registered again (a new SlurmdStartTime), valid, with the layout's Gres
    flags = set(node_field(state["reconfigured"], "State").split("+"))
    assert not flags & {"INVAL", "INVALID_REG"}, state["reconfigured"]
    assert second.rc == 0, second.stdout[-4000:]
    assert f" Gres={MIG_GRES} " in state["line"], state["line"]
    assert node_field(state["line"], "State") == "IDLE", state["line"]


def test_the_second_run_changes_nothing_and_resumes_the_node(mig_gres):
    _unused, second, state = mig_gres
    changed = [(result.task, result.host) for result in second.changed]
    assert changed == [("Give the node back to Slurm", MIG_NODE)], changed
    assert not drained(state["after_second"]), state["after_second"]
    assert state["after_second"]["state"] == "idle", state["after_second"]
    # a job asking for two MIG devices of one type runs on the node with two GPU records
    assert len(set(state["srun"].split(","))) == 2, state["srun"]
