"""The upgrade_window strategy's cost on the controller against ``free`` (a plain script, not a test).

    .venv/bin/python tests/benchmarks/bench_window_strategy.py            # 300 hosts
    .venv/bin/python tests/benchmarks/bench_window_strategy.py 1250       # issue 17's size
    .venv/bin/python tests/benchmarks/bench_window_strategy.py 300 --profile /tmp/prof
    make bench BENCH_FLEET=1                                              # with the other benchmarks

Runs the stand-in playbook of tests/integration/test_upgrade_window.py
(tests/integration/playbooks/upgrade_window.yml: local connection, each host's
work a wait of one second) at N hosts twice, side by side: under ``free`` (a
copy of the playbook whose only change is ``strategy: free``; each host is
handed an admitted slot record, so the upgrade_slot tasks run as they do under
the window) and under ``gpuops.cluster.upgrade_window`` (window 10 %, the
window's canary first and alone, forks equal to the window in both runs).
Prints both wall times (ansible-playbook start to exit) and their ratio; issue
17 asks for the window within 10 % of ``free`` at 1,250 hosts. ``--profile DIR``
runs each controller under cProfile and writes ``DIR/<strategy>.prof`` (the
workers are not profiled).

The default, 300 hosts, takes a few minutes on two cores; 1,250 hosts takes tens
of minutes there, which is why ``make bench`` runs it only with BENCH_FLEET=1.
Wall times on a shared machine move with its load: the script prints the load
average before and after.

Figures, on two cores shared with other sessions (load average, 1 minute, at
the start of the pair and at its end):

    hosts  free       window     window/free  load         code
      300   196.6 s    250.2 s   1.27          5.6 -> 25.0  before issue 17, item 8 (both under --profile)
      300   241.2 s    277.0 s   1.15         14.9 -> 23.5  first cut of the fix; the window's tests ran alongside
    1,250  1615.8 s    952.6 s   0.59         23.5 -> 14.4  the fix
      300    76.1 s     68.2 s   0.90          0.7 -> 10.4  window built once from the play (stop 23), machine
                                                            otherwise idle (the load is the benchmark's own forks)
    1,250   370.4 s    366.2 s   0.99          9.6 ->  9.0  the same, right after
    1,250   423.3 s    397.0 s   0.94          0.2 ->  8.8  stop 36 (issue 28's window: refresh, deadline, journal,
                                                            node records), a quiet machine, nothing else running
    1,250   417.2 s    431.0 s   1.03          0.8 ->  8.7  the report from the journal (not_admitted and release
                                                            records journaled), the window opened by window_open; quiet

The profile at 300 hosts put the cost in the strategy's get_hosts_left: every
host's next task looked up (a copy of its iterator state) and one set of the
hosts built per node in flight, on every pass of the loop. One pass with 1,250
hosts waiting took about 380 ms before the fix and about 5 ms after it (timed
in one process, load about 16). At 1,250 hosts the window beats free: free's
own loop looks at every host on every pass, the window's loop only at the
hosts in flight; the load also fell between the two runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_input

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "upgrade_window.yml"
WINDOW_STRATEGY = "strategy: gpuops.cluster.upgrade_window"
WINDOW = "10%"
# What the window strategy hands an admitted host; under free every host is handed it from the start.
ADMITTED = {"state": "acquired", "admitted": True, "reason": "admitted (free: no window)"}


def write_inputs(directory: Path, hosts: int) -> tuple[Path, Path, dict]:
    names = ["n%05d" % index for index in range(1, hosts + 1)]
    inventory = directory / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "fleet": {
                    "hosts": {name: {} for name in names},
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    },
                }
            }
        )
    )
    text = PLAYBOOK.read_text()
    if WINDOW_STRATEGY not in text:
        raise SystemExit("%s no longer says %r: update the benchmark" % (PLAYBOOK, WINDOW_STRATEGY))
    free = directory / "upgrade_free.yml"
    free.write_text(text.replace(WINDOW_STRATEGY, "strategy: free"))
    extravars = {"window_nodes": [{"name": name} for name in names], "window_settings": {"max_unavailable": WINDOW}}
    return inventory, free, extravars


def run(playbook: Path, inventory: Path, extravars: dict, forks: int, log: Path, profile: Path | None) -> float:
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_NOCOLOR="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    extra = log.with_suffix(".vars.json")
    extra.write_text(json.dumps(extravars))
    command = [str(Path(sys.executable).parent / "ansible-playbook")]
    if profile is not None:
        command = [sys.executable, "-m", "cProfile", "-o", str(profile), command[0]]
    command += ["-i", str(inventory), "-f", str(forks), "-e", "@%s" % extra, str(playbook)]
    started = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.call(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    if rc != 0:  # the temporary folder goes with the exit: the log's end here
        raise SystemExit("%s failed (rc %d); the end of its output:\n%s" % (playbook.name, rc, log.read_text()[-3000:]))
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hosts", nargs="?", type=int, default=300, help="stand-in hosts (issue 17: 1250)")
    parser.add_argument("--profile", type=Path, help="write each controller's cProfile output to this folder")
    parser.add_argument("--only", choices=("free", "window"), help="run one side only")
    options = parser.parse_args()
    forks = window_input.size_of(WINDOW, options.hosts, "max_unavailable")
    if options.profile is not None:
        options.profile.mkdir(parents=True, exist_ok=True)
    print("hosts %d, window %s = %d, forks %d; load average %s" % (options.hosts, WINDOW, forks, forks, load()))
    with tempfile.TemporaryDirectory(prefix="bench-window-") as tmp:
        directory = Path(tmp)
        inventory, free_playbook, extravars = write_inputs(directory, options.hosts)
        sides = {
            "free": (free_playbook, dict(extravars, gpuops_upgrade_slot=ADMITTED)),
            "window": (PLAYBOOK, extravars),
        }
        walls = {}
        for side, (playbook, variables) in sides.items():
            if options.only and side != options.only:
                continue
            profile = options.profile / ("%s.prof" % side) if options.profile is not None else None
            walls[side] = run(playbook, inventory, variables, forks, directory / ("%s.log" % side), profile)
            print("  %-6s %8.1f s" % (side, walls[side]), flush=True)
    if len(walls) == 2:
        ratio = walls["window"] / walls["free"]
        verdict = "within" if ratio <= 1.10 else "NOT within"
        print("window / free: %.3f (%+.1f %%), %s issue 17's 10 %%" % (ratio, (ratio - 1) * 100, verdict))
    print("load average after: %s" % load())
    return 0


def load() -> str:
    return " ".join("%.2f" % value for value in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
