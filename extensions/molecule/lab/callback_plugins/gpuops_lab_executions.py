# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lab only: record every playbook run's remote module executions per host, for a scenario's tests.

A scenario enables it in its provisioner's env (ANSIBLE_CALLBACK_PLUGINS pointing here,
ANSIBLE_CALLBACKS_ENABLED=gpuops_lab_executions); every ansible-playbook run of the scenario (molecule's own
and the ones its playbooks start) then appends one JSON line to $MOLECULE_EPHEMERAL_DIRECTORY/lab-runs.jsonl:
``{"playbook": "converge.yml", "check": false, "executions": {host: n}, "changed": {host: n},
"failures": {host: n}}``. Without that variable it records nothing.

Counted as tests/integration/playbook_run.py's ``PlaybookRun.executions`` counts (what
tests/benchmarks/bench_site_rerun.py reports): every task or loop item that ran a module for a host is one
execution; skipped tasks and items, and the actions that run on the controller only, are not counted.
"""

from __future__ import annotations

import json
import os

from ansible import context
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: gpuops_lab_executions
type: aggregate
short_description: lab only - remote module executions per host of each playbook run
description: Appends one JSON line per playbook run to $MOLECULE_EPHEMERAL_DIRECTORY/lab-runs.jsonl.
requirements: [enable in callbacks_enabled]
"""

# tests/integration/playbook_run.py CONTROLLER_ONLY: actions that never reach a node.
CONTROLLER_ONLY = frozenset(
    {
        f"{prefix}{name}"
        for prefix in ("", "ansible.builtin.")
        for name in (
            "set_fact",
            "debug",
            "assert",
            "fail",
            "meta",
            "include_role",
            "include_tasks",
            "import_tasks",
            "include_vars",
            "validate_argument_spec",
            "add_host",
            "group_by",
        )
    }
    | {"gpuops.cluster.controller_report"}
)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuops_lab_executions"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._playbook = ""
        self._executions = {}

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.basename(playbook._file_name)

    def _count(self, result, item):
        if result._task.action in CONTROLLER_ONLY:
            return
        if not item and isinstance(result._result.get("results"), list):
            return  # a loop's summary: its items were counted
        host = result._host.get_name()
        self._executions[host] = self._executions.get(host, 0) + 1

    def v2_runner_on_ok(self, result):
        self._count(result, item=False)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result, item=False)

    def v2_runner_item_on_ok(self, result):
        self._count(result, item=True)

    def v2_runner_item_on_failed(self, result):
        self._count(result, item=True)

    def v2_playbook_on_stats(self, stats):
        folder = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
        if not folder:
            return
        hosts = sorted(stats.processed)
        record = {
            "playbook": self._playbook,
            "check": bool(context.CLIARGS.get("check")),
            "executions": {host: self._executions.get(host, 0) for host in hosts},
            "changed": {host: stats.summarize(host)["changed"] for host in hosts},
            "failures": {host: stats.summarize(host)["failures"] for host in hosts},
        }
        with open(os.path.join(folder, "lab-runs.jsonl"), "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
