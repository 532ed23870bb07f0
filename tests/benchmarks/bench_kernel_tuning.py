"""Figures of the kernel tuning modules and role (a plain script, not a test).

    .venv/bin/python tests/benchmarks/bench_kernel_tuning.py

Prints: for a 20-sysctl profile, the module calls and sysctl reloads of a first
run and of a re-run (run_command mocked; a stand-in sysctl writes a fake /proc/sys
tree, so nothing on this machine is touched) and the time of one module call;
then the wall time of the kernel_tuning role against a fake tree (first run,
idempotent re-run, --check), with kernel_tuning_root pointing at that tree and
every area the molecule scenario enables switched on (hugepages per node, peermem),
and the remote module executions of each run: tasks that ran a module on the host
(controller-side actions such as set_fact, debug, assert, include_vars left out),
each loop item counted once, skipped ones not at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
# Counts the remote module executions of a run (a callback plugin written next to the play).
COUNTER = """
import json
import os

from ansible.plugins.callback import CallbackBase

CONTROLLER_SIDE = {"set_fact", "debug", "assert", "include_vars", "meta", "fail", "include_role", "import_role",
                   "include_tasks", "import_tasks", "add_host", "group_by", "pause", "validate_argument_spec"}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuops_count"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tasks = []

    def _count(self, result):
        if result._task.action.rsplit(".", 1)[-1] in CONTROLLER_SIDE:
            return
        items = result._result.get("results")
        ran = len([r for r in items if not r.get("skipped")]) if isinstance(items, list) else 1
        if ran:
            self.tasks.append([result._task.get_name().split(" : ", 1)[-1], ran])

    v2_runner_on_ok = v2_runner_on_failed = _count

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["GPUOPS_COUNT_FILE"], "w", encoding="utf-8") as handle:
            json.dump(self.tasks, handle)
"""
sys.path.insert(0, str(ROOT / ".collections"))
sys.path.insert(0, str(ROOT))

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import sysctl_profile as sp
from ansible_collections.gpuops.cluster.plugins.modules import sysctl_profile as module

from tests.unit.tuning.sysfs_tree import build
from tests.unit.tuning.test_sysctl_profile import PROFILE


class Exit(Exception):
    pass


def call(root: Path, commands: list) -> dict:
    """One sysctl_profile module call; every run_command argv lands in commands."""

    def run_command(self, argv, **kwargs):
        commands.append(argv)
        for key, value in sp.parse_dropin(Path(argv[2]).read_text()).items():
            target = root / "proc" / "sys" / sp.key_to_path(key)
            if target.exists():
                target.write_text(value + "\n")
        return 0, "", ""

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return "/usr/sbin/sysctl" if name == "sysctl" else None

    def exit_json(self, **kwargs):
        raise Exit(kwargs)

    args = {"sysctls": PROFILE, "root": str(root), "apply_live": "always"}
    with contextlib.ExitStack() as stack:
        stack.enter_context(patch_module_args(args))
        stack.enter_context(mock.patch.object(basic.AnsibleModule, "run_command", run_command))
        stack.enter_context(mock.patch.object(basic.AnsibleModule, "exit_json", exit_json))
        stack.enter_context(mock.patch.object(basic.AnsibleModule, "get_bin_path", get_bin_path))
        # treat the tree as the running system so the sysctl command path is the one counted
        stack.enter_context(mock.patch.object(container_detection, "is_running_system", return_value=True))
        try:
            module.main()
        except Exit as done:
            return done.args[0]
    raise RuntimeError("module did not exit")


def module_figures() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tree"
        build("two_socket", root)
        first, second = [], []
        result = call(root, first)
        again = call(root, second)
        print(f"sysctl_profile, {len(PROFILE)} keys, drift on {len(result['drift'])}:")
        print(f"  first run : 1 module call, {len(first)} sysctl reload(s), changed={result['changed']}")
        print(f"  re-run    : 1 module call, {len(second)} sysctl reload(s), changed={again['changed']}")
        samples = []
        for _unused in range(30):
            start = time.perf_counter()
            call(root, [])
            samples.append((time.perf_counter() - start) * 1000)
        print(f"  module call (no drift): median {statistics.median(samples):.2f} ms over 30")


def role_figures() -> None:
    env = dict(
        os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tree"
        build("two_socket", root)
        play = Path(tmp) / "play.yml"
        play.write_text(
            "---\n- name: Bench\n  hosts: localhost\n  gather_facts: false\n  roles:\n"
            "    - role: gpuops.cluster.kernel_tuning\n"
            f"      vars:\n        kernel_tuning_root: {root}\n        kernel_tuning_apply_live: always\n"
            "        kernel_tuning_hugepages_enabled: true\n        kernel_tuning_hugepages_per_node: {0: 16}\n"
            "        kernel_tuning_peermem_enabled: true\n"
        )
        plugins = Path(tmp) / "callbacks"
        plugins.mkdir()
        (plugins / "gpuops_count.py").write_text(COUNTER)
        counted = Path(tmp) / "count.json"
        env.update(
            ANSIBLE_CALLBACK_PLUGINS=str(plugins),
            ANSIBLE_CALLBACKS_ENABLED="gpuops_count",
            GPUOPS_COUNT_FILE=str(counted),
        )
        argv = [
            str(ROOT / ".venv/bin/ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(play),
        ]
        for label, extra in (("first run", []), ("re-run", []), ("--check", ["--check"])):
            start = time.perf_counter()
            done = subprocess.run(argv + extra, env=env, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - start
            recap = [line for line in done.stdout.splitlines() if line.startswith("localhost")]
            tally = recap[-1].split(":", 1)[1].strip() if recap else done.stdout[-400:]
            tasks = json.loads(counted.read_text()) if counted.exists() else []
            print(f"role {label:9}: {wall:5.2f} s  rc={done.returncode}  {tally}")
            listed = ", ".join(f"{name} x{n}" for name, n in tasks)
            print(f"  {sum(n for _name, n in tasks)} remote module executions: {listed}")


if __name__ == "__main__":
    module_figures()
    role_figures()
    print("fake trees only: this machine's kernel values are neither read nor written")
