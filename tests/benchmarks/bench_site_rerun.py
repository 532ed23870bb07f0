"""An idempotent re-run of site.yml on the lab against a fact gather (a plain script, not a test).

    make bench BENCH_LAB=1        # or: .venv/bin/python tests/benchmarks/bench_site_rerun.py [--keep]

Brings the lab up when it is not (extensions/molecule/lab/bin/lab-prepare and lab-up, which
converge site.yml once), then measures, in one run and side by side:

* ``ansible gpu_nodes -m ansible.builtin.setup`` (a full fact gather of the three nodes), and
* ``ansible-playbook site.yml`` again (nothing to change),

three times each, alternating, both as plain command-line runs, and prints the medians and
their ratio. One more re-run through the run harness (tests/integration/playbook_run.py,
ansible-runner, whose event files cost time of their own and so are not timed) checks that
nothing changed and counts the remote module executions per host by play
(PlaybookRun.executions: every loop item counts, controller-only actions do not), with the
part spent in builtin file actions. Goals from the issue: at most 12 module executions per
host, and the re-run at most 4x the fact gather. Tears the lab down again when it brought it
up (``--keep`` leaves it).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.integration.playbook_run import run_playbook

INVENTORY = "inventories/lab/hosts.yml"
LAB_BIN = ROOT / "extensions" / "molecule" / "lab" / "bin"
ROUNDS = 3
GOAL_EXECUTIONS = 12
GOAL_RATIO = 4.0


def lab_is_up() -> bool:
    names = subprocess.run(
        ["podman", "ps", "--format", "{{.Names}}", "--filter", "network=gpuops-lab"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    return {"lab-repo", "lab-h100-1", "lab-h100-2", "lab-l40s-1"} <= set(names)


def environment() -> dict:
    env = dict(os.environ)
    env.update(
        PATH=os.pathsep.join([str(ROOT / ".venv" / "bin"), env.get("PATH", "")]),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
    )
    return env


def fact_gather() -> float:
    start = time.monotonic()
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible"), "-i", INVENTORY, "gpu_nodes", "-m", "ansible.builtin.setup"],
        cwd=ROOT,
        env=environment(),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - start


def site_rerun() -> float:
    start = time.monotonic()
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", INVENTORY, "site.yml"],
        cwd=ROOT,
        env=environment(),
        check=False,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        sys.exit("site.yml re-run failed (rc %d):\n%s" % (done.returncode, done.stdout[-3000:]))
    return elapsed


def counted_rerun(workdir: Path):
    run = run_playbook("site.yml", INVENTORY, workdir)
    if run.rc != 0:
        sys.exit("site.yml re-run failed (rc %d):\n%s" % (run.rc, run.stdout[-3000:]))
    if run.changed:
        print("warning: the re-run changed %s" % sorted({(r.host, r.task) for r in run.changed}))
    return run


def main() -> int:
    keep = "--keep" in sys.argv[1:]
    if shutil.which("podman") is None:
        print("podman is not installed: run make lab first")
        return 2
    brought_up = False
    if not lab_is_up():
        subprocess.run([str(LAB_BIN / "lab-prepare")], cwd=ROOT, check=True)
        subprocess.run([str(LAB_BIN / "lab-up")], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        brought_up = True
    try:
        gathers, reruns = [], []
        with tempfile.TemporaryDirectory() as tmp:
            last = counted_rerun(Path(tmp) / "counted")
            for _index in range(ROUNDS):
                gathers.append(fact_gather())
                reruns.append(site_rerun())
        gather, rerun = statistics.median(gathers), statistics.median(reruns)
        per_play: dict[str, dict[str, dict[str, int]]] = {}
        for play in dict.fromkeys(last.plays_started):
            per_play[play] = last.executions(play)
        hosts = sorted(last.executions())
        totals = last.executions()
        print("site.yml idempotent re-run against a fact gather, lab of %d nodes, %d rounds" % (len(hosts), ROUNDS))
        print(
            "  fact gather (ansible -m setup)   median %6.1f s   %s" % (gather, " ".join("%.1f" % t for t in gathers))
        )
        print("  site.yml re-run                  median %6.1f s   %s" % (rerun, " ".join("%.1f" % t for t in reruns)))
        print("  ratio re-run / fact gather       %6.1fx   (goal <= %.0fx)" % (rerun / gather, GOAL_RATIO))
        print("remote module executions per host (every loop item counted; builtin file actions in brackets)")
        width = max(len(play) for play in per_play)
        print("  %-*s  %s" % (width, "play", "  ".join("%12s" % host for host in hosts)))
        for play, counts in per_play.items():
            cells = [counts.get(host, {"total": 0, "builtin_file": 0}) for host in hosts]
            print("  %-*s  %s" % (width, play, "  ".join("%7d (%2d)" % (c["total"], c["builtin_file"]) for c in cells)))
        cells = [totals[host] for host in hosts]
        print("  %-*s  %s" % (width, "total", "  ".join("%7d (%2d)" % (c["total"], c["builtin_file"]) for c in cells)))
        worst = max(c["total"] for c in cells)
        print(
            "goal: at most %d module executions per host: %d  %s"
            % (GOAL_EXECUTIONS, worst, "met" if worst <= GOAL_EXECUTIONS else "NOT met")
        )
        print(
            "goal: re-run at most %.0fx a fact gather: %.1fx  %s"
            % (GOAL_RATIO, rerun / gather, "met" if rerun / gather <= GOAL_RATIO else "NOT met")
        )
        record = {"gather_s": gathers, "rerun_s": reruns, "executions": totals, "per_play": per_play}
        out = ROOT / ".lab" / "site_rerun_measures.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    finally:
        if brought_up and not keep:
            subprocess.run([str(LAB_BIN / "lab-down")], cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
