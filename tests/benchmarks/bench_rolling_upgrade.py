"""Figures of the rolling upgrade on the lab: the sliding window against waves (a plain script, not a test).

    .venv/bin/python tests/benchmarks/bench_rolling_upgrade.py        # needs podman (make lab's setup)
    make bench BENCH_LAB=1                                             # the same, with the other benchmarks

Brings up the molecule scenario rolling_upgrade (real Slurm controller, four lab
GPU nodes, one canary) unless its nodes already run, moves them to 550.127.05,
then times two rollouts to 550.127.08 and two back, through rolling_upgrade.yml
with two nodes out of service at most: waves (``gpuops_upgrade_barrier: true``,
what ``serial: 2`` does) and the sliding window, in turn. Before each rollout
every node but the canary runs a real Slurm job with the same time limit, so
the window's order is the same in both modes. Each job ends SHORT_JOB_S
seconds after its node's drain starts, the one on ru-gpu2 SLOW_JOB_S seconds
later than that: ru-gpu2 and ru-gpu3 leave service together, waves wait for
ru-gpu2 before ru-gpu4 starts, the window upgrades ru-gpu4 meanwhile.

Prints each run's makespan (first admission to last release, from the audit
report's window timeline), wall time, the rule check (violations), the module
calls per node and the per-node phase durations. When it brought the nodes up
itself it destroys them; otherwise it leaves them on 550.127.05.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.integration.playbook_run import run_playbook

SCENARIO = ROOT / "extensions" / "molecule" / "rolling_upgrade" / "molecule.yml"
MOLECULE = ROOT / ".venv" / "bin" / "molecule"
OLD = {"driver": "550.127.05", "cuda": "12.4", "nccl": "2.21.5"}
NEW = {"driver": "550.127.08", "cuda": "12.4", "nccl": "2.21.5"}
WAVES = {"gpuops_upgrade_max_unavailable": 2, "gpuops_upgrade_barrier": True}
WINDOW = {"gpuops_upgrade_max_unavailable": 2, "gpuops_upgrade_barrier": False}
PLAY = "Upgrade in a sliding window"
CONTROLLER = "ru-ctl"
SLOW_NODE = "ru-gpu2"
JOB_NODES = ("ru-gpu2", "ru-gpu3", "ru-gpu4")
SHORT_JOB_S = 5
SLOW_JOB_S = 60


def inventory(directory: Path) -> Path:
    """The scenario's inventory (its platforms, groups and group_vars) over the podman connection."""
    scenario = yaml.safe_load(SCENARIO.read_text())
    groups: dict[str, dict] = {}
    for platform in scenario["platforms"]:
        for group in platform.get("groups", []):
            groups.setdefault(group, {"hosts": {}})["hosts"][platform["name"]] = {}
    group_vars = scenario["provisioner"]["inventory"]["group_vars"]
    host_vars = scenario["provisioner"]["inventory"].get("host_vars") or {}
    for group in groups.values():
        for host in group["hosts"]:
            group["hosts"][host] = host_vars.get(host, {})
    for group, variables in group_vars.items():
        if group != "all":
            groups.setdefault(group, {"hosts": {}})["vars"] = variables
    data = {
        "all": {
            "vars": dict(
                group_vars.get("all", {}),
                ansible_connection="containers.podman.podman",
                ansible_python_interpreter="/usr/bin/python3",
            ),
            "children": groups,
        }
    }
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def nodes_running() -> bool:
    done = subprocess.run(["podman", "ps", "--format", "{{.Names}}"], capture_output=True, text=True, check=False)
    return {"ru-ctl", "ru-gpu1", "ru-gpu2", "ru-gpu3", "ru-gpu4"} <= set(done.stdout.split())


def molecule(*argv: str) -> None:
    env = dict(
        os.environ,
        PATH=f"{MOLECULE.parent}:{os.environ['PATH']}",
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
    )
    subprocess.run([str(MOLECULE), *argv, "-s", "rolling_upgrade"], cwd=ROOT, env=env, check=True)


RELEASE = "/var/tmp/gpuops-bench-release"


def drained_nodes() -> set[str]:
    out = subprocess.run(
        ["podman", "exec", CONTROLLER, "sinfo", "--json"], capture_output=True, text=True, check=True
    ).stdout
    return {
        node["name"]
        for node in json.loads(out)["nodes"]
        if "DRAIN" in [flag.upper() for flag in node.get("state_flags") or []]
    }


def release_after_drain(stop: threading.Event) -> threading.Thread:
    """End each node's job SHORT_JOB_S after its drain starts (SLOW_JOB_S more on the slow node)."""

    def watch():
        due: dict[str, float] = {}
        while not stop.is_set():
            now = time.monotonic()
            for node in drained_nodes() & set(JOB_NODES):
                due.setdefault(node, now + SHORT_JOB_S + (SLOW_JOB_S if node == SLOW_NODE else 0))
            for node, when in due.items():
                if 0 < when <= now:
                    subprocess.run(["podman", "exec", node, "touch", RELEASE], check=False)
                    due[node] = 0
            time.sleep(1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def submit_jobs() -> None:
    """A job on every node but the canary, all with a 10 min limit, each running until released."""
    for node in JOB_NODES:
        subprocess.run(["podman", "exec", node, "rm", "-f", RELEASE], check=True)
        wait = f"while [ ! -e {RELEASE} ]; do sleep 1; done"
        argv = ["sbatch", "--parsable", f"--nodelist={node}", "--time=10", "--wrap", wait]
        subprocess.run(["podman", "exec", CONTROLLER, *argv], capture_output=True, text=True, check=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["podman", "exec", CONTROLLER, "squeue", "-h", "-t", "RUNNING", "-o", "%N"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if set(JOB_NODES) <= set(out):
            return
        time.sleep(1)
    raise SystemExit("the benchmark's Slurm jobs did not start")


def rollout(inv: Path, work: Path, name: str, stack: dict, mode: dict) -> dict:
    submit_jobs()
    report = work / f"{name}.json"
    extravars = {
        "gpuops_stack": stack,
        "gpuops_upgrade_report_path": str(report),
        "gpuops_upgrade_run_id": f"bench-{name}-{datetime.datetime.now(datetime.timezone.utc):%H%M%S}",
        "gpuops_upgrade_drain": "slurm",
        "gpuops_upgrade_max_job_wait": 600,
        **mode,
    }
    stop = threading.Event()
    watcher = release_after_drain(stop)
    start = time.monotonic()
    try:
        run = run_playbook("rolling_upgrade.yml", inv, work / name, extravars=extravars)
    finally:
        stop.set()
        watcher.join(timeout=10)
        for node in JOB_NODES:
            subprocess.run(["podman", "exec", node, "touch", RELEASE], check=False)
    wall = time.monotonic() - start
    if run.rc != 0:
        raise SystemExit(f"{name}: the rollout failed (rc {run.rc}):\n{run.stdout[-3000:]}")
    audit = json.loads(report.read_text())
    calls = run.module_calls(PLAY)
    upgraded = [node for node in audit["nodes"] if node["status"] == "upgraded"]
    if len(upgraded) != 4:
        raise SystemExit(f"{name}: expected 4 nodes upgraded, the report says {audit['counts']}")
    phases = {
        phase: statistics.median(node["durations"][phase] for node in upgraded)
        for phase in ("drain", "upgrade", "gate", "total")
    }
    return {
        "wall_s": wall,
        "makespan_s": audit["window"]["makespan"],
        "violations": len(audit["window"]["violations"]),
        "calls": calls,
        "phases": phases,
    }


def main() -> int:
    if subprocess.run(["podman", "--version"], capture_output=True, check=False).returncode != 0:
        print("podman is not installed: run make lab (or extensions/molecule/lab/bin/lab-prepare) first")
        return 1
    brought_up = not nodes_running()
    if brought_up:
        subprocess.run([str(ROOT / "extensions" / "molecule" / "lab" / "bin" / "lab-prepare")], cwd=ROOT, check=True)
        molecule("converge")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-rolling-upgrade-") as tmp:
            work = Path(tmp)
            inv = inventory(work)
            # from whatever the nodes run to OLD first (not measured; skipped nodes cost little)
            run_playbook(
                "rolling_upgrade.yml",
                inv,
                work / "reset",
                extravars={"gpuops_stack": OLD, **WINDOW, "gpuops_upgrade_report_path": str(work / "reset.json")},
            )
            runs = [
                ("old-to-new-waves", NEW, WAVES),
                ("new-to-old-window", OLD, WINDOW),
                ("old-to-new-window", NEW, WINDOW),
                ("new-to-old-waves", OLD, WAVES),
            ]
            columns = (("drain", 6), ("upgrade", 7), ("gate", 5), ("total", 5))
            header = f"{'run':20} {'makespan s':>10} {'wall s':>7} {'violations':>10} {'calls/node':>10}"
            print(header + "".join(f" {p:>{w}}" for p, w in columns))
            figures = {}
            for name, stack, mode in runs:
                fig = figures[name] = rollout(inv, work, name, stack, mode)
                calls = sorted(set(fig["calls"].values()))
                print(
                    f"{name:20} {fig['makespan_s']:>10.1f} {fig['wall_s']:>7.1f} {fig['violations']:>10} "
                    f"{'/'.join(map(str, calls)):>10}" + "".join(f" {fig['phases'][p]:>{w}.1f}" for p, w in columns)
                )
            waves = statistics.mean(figures[n]["makespan_s"] for n in figures if n.endswith("-waves"))
            window = statistics.mean(figures[n]["makespan_s"] for n in figures if n.endswith("-window"))
            print(
                f"mean makespan: waves {waves:.1f} s, window {window:.1f} s ({waves / window:.2f}x); "
                f"jobs end {SHORT_JOB_S} s after their drain starts, {SLOW_JOB_S} s later on {SLOW_NODE}; "
                "per-node medians in s"
            )
    finally:
        if brought_up:
            molecule("destroy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
