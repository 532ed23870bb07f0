"""Figures of the rolling upgrade on the lab (a plain script, not a test).

    .venv/bin/python tests/benchmarks/bench_rolling_upgrade.py        # needs podman (make lab's setup)
    make bench BENCH_LAB=1                                             # the same, with the other benchmarks

Brings up the molecule scenario rolling_upgrade (real Slurm controller, four lab
GPU nodes, one canary) unless its nodes already run, then times four full
rollouts of the four nodes between 550.127.05 and 550.127.08 through
rolling_upgrade.yml, two with wide waves (canary, then the other three at once,
max_unavailable 3) and two with waves of one node:

    old -> new  wide      new -> old  one by one
    old -> new  one by one new -> old  wide

and prints each run's wall time, the module calls per node (task results of the
upgrade play that ran a module, on the node or delegated to the Slurm controller;
a loop counts once) and the per-node phase durations from the run's audit report.
When it brought the nodes up itself it destroys them; otherwise it leaves them on
550.127.05.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
WIDE = {"gpuops_upgrade_waves": ["100%"], "gpuops_upgrade_max_unavailable": 3}
ONE_BY_ONE = {"gpuops_upgrade_waves": [1], "gpuops_upgrade_max_unavailable": 1}
PLAY = "Upgrade wave by wave"


def inventory(directory: Path) -> Path:
    """The scenario's inventory (its platforms, groups and group_vars) over the podman connection."""
    scenario = yaml.safe_load(SCENARIO.read_text())
    groups: dict[str, dict] = {}
    for platform in scenario["platforms"]:
        for group in platform.get("groups", []):
            groups.setdefault(group, {"hosts": {}})["hosts"][platform["name"]] = {}
    group_vars = scenario["provisioner"]["inventory"]["group_vars"]
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


def rollout(inv: Path, work: Path, name: str, stack: dict, waves: dict) -> dict:
    report = work / f"{name}.json"
    extravars = {
        "gpuops_stack": stack,
        "gpuops_upgrade_report_path": str(report),
        "gpuops_upgrade_run_id": f"bench-{name}-{datetime.datetime.now(datetime.timezone.utc):%H%M%S}",
        **waves,
    }
    start = time.monotonic()
    run = run_playbook("rolling_upgrade.yml", inv, work / name, extravars=extravars)
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
    return {"wall_s": wall, "waves": len(audit["plan"]["waves"]), "calls": calls, "phases": phases}


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
                extravars={"gpuops_stack": OLD, **WIDE, "gpuops_upgrade_report_path": str(work / "reset.json")},
            )
            runs = [
                ("old-to-new-wide", NEW, WIDE),
                ("new-to-old-one-by-one", OLD, ONE_BY_ONE),
                ("old-to-new-one-by-one", NEW, ONE_BY_ONE),
                ("new-to-old-wide", OLD, WIDE),
            ]
            columns = (("drain", 6), ("upgrade", 7), ("gate", 5), ("total", 5))
            header = f"{'run':24} {'waves':>5} {'wall s':>7} {'calls/node':>10}"
            print(header + "".join(f" {p:>{w}}" for p, w in columns))
            figures = {}
            for name, stack, waves in runs:
                fig = figures[name] = rollout(inv, work, name, stack, waves)
                calls = sorted(set(fig["calls"].values()))
                print(
                    f"{name:24} {fig['waves']:>5} {fig['wall_s']:>7.1f} {'/'.join(map(str, calls)):>10}"
                    + "".join(f" {fig['phases'][p]:>{w}.1f}" for p, w in columns)
                )
            wide = statistics.mean(figures[n]["wall_s"] for n in figures if n.endswith("-wide"))
            one = statistics.mean(figures[n]["wall_s"] for n in figures if n.endswith("-one-by-one"))
            print(f"mean wall: wide {wide:.1f} s, one by one {one:.1f} s ({one / wide:.2f}x); per-node medians in s")
    finally:
        if brought_up:
            molecule("destroy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
