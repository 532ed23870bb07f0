"""Run a playbook through ansible-runner's Python API and answer questions from its events.

This is the harness the integration tests (and the rolling-upgrade tests)
use to assert which host did what, in which order: every event ansible-runner
reports is kept, and the helpers below read plays, tasks and results from it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner

REPO = Path(__file__).resolve().parents[2]

TASK_RESULT_EVENTS = {
    "runner_on_ok",
    "runner_on_failed",
    "runner_on_skipped",
    "runner_on_unreachable",
    "runner_item_on_ok",
    "runner_item_on_failed",
}


# Actions that run on the controller only (no connection to a node): not counted as module calls.
CONTROLLER_ONLY = frozenset(
    {
        "ansible.builtin.set_fact",
        "ansible.builtin.debug",
        "ansible.builtin.assert",
        "ansible.builtin.fail",
        "ansible.builtin.meta",
        "ansible.builtin.include_role",
        "ansible.builtin.include_tasks",
        "ansible.builtin.import_tasks",
        "ansible.builtin.include_vars",
        "ansible.builtin.validate_argument_spec",
        "ansible.builtin.add_host",
        "ansible.builtin.group_by",
        # The collection's report writer never starts a module (it runs in the controller's process).
        "gpuops.cluster.controller_report",
        "include_vars",
        "validate_argument_spec",
        "set_fact",
        "debug",
        "assert",
        "fail",
        "meta",
    }
)


# Builtin actions that write one file (or one loop item's file) on the node: each costs a module execution.
BUILTIN_FILE_ACTIONS = frozenset(
    {
        f"{prefix}{name}"
        for prefix in ("", "ansible.builtin.")
        for name in ("file", "template", "copy", "lineinfile", "blockinfile", "replace", "stat")
    }
)
ITEM_EVENTS = {"runner_item_on_ok", "runner_item_on_failed"}


@dataclass
class TaskResult:
    """One host's result for one task."""

    play: str
    task: str
    action: str
    host: str
    event: str
    changed: bool
    result: dict = field(repr=False)

    @property
    def failed(self) -> bool:
        return self.event in {"runner_on_failed", "runner_on_unreachable"} and not self.result.get("ignore_errors")


@dataclass
class PlaybookRun:
    """What one ansible-playbook run did."""

    status: str
    rc: int
    events: list[dict]
    stdout: str

    @property
    def plays_started(self) -> list[str]:
        return [e["event_data"].get("play", "") for e in self.events if e.get("event") == "playbook_on_play_start"]

    @property
    def results(self) -> list[TaskResult]:
        found = []
        for event in self.events:
            if event.get("event") not in TASK_RESULT_EVENTS or event["event"].startswith("runner_item"):
                continue
            data = event["event_data"]
            res = data.get("res") or {}
            found.append(
                TaskResult(
                    play=data.get("play", ""),
                    task=data.get("task", ""),
                    action=data.get("task_action", ""),
                    host=data.get("host", ""),
                    event=event["event"],
                    changed=bool(res.get("changed")),
                    result=res,
                )
            )
        return found

    def results_for(self, *, play: str | None = None, task: str | None = None, host: str | None = None):
        return [
            r
            for r in self.results
            if (play is None or r.play == play)
            and (task is None or r.task == task)
            and (host is None or r.host == host)
        ]

    def tasks_run_outside(self, play: str) -> list[TaskResult]:
        """Results of tasks that ran (not skipped) in any play other than ``play``."""
        return [r for r in self.results if r.play != play and r.event != "runner_on_skipped"]

    def tasks_run(self, play: str, modules_only: bool = False) -> dict[str, int]:
        """Per host: the tasks of ``play`` that ran (not skipped) for it; a loop counts once.

        ``modules_only`` leaves out the controller-only actions (CONTROLLER_ONLY): what remains
        ran a module on the host or delegated for it.
        """
        counts: dict[str, int] = {}
        for result in self.results_for(play=play):
            if result.event != "runner_on_skipped" and not (modules_only and result.action in CONTROLLER_ONLY):
                counts[result.host] = counts.get(result.host, 0) + 1
        return counts

    def module_calls(self, play: str) -> dict[str, int]:
        """Per host: the tasks of ``play`` that ran a module on it (or delegated for it)."""
        return self.tasks_run(play, modules_only=True)

    def executions(self, play: str | None = None) -> dict[str, dict[str, int]]:
        """Per host: remote module executions, ``{'total': n, 'builtin_file': m}``.

        Unlike :meth:`tasks_run`, every loop item that ran counts as one execution (a loop of
        three ``file`` items costs three module runs on the node, as the module is shipped and
        run per item); skipped tasks and items, and controller-only actions, do not count.
        ``builtin_file`` is the part spent in builtin file actions (BUILTIN_FILE_ACTIONS).
        """
        looped = {
            (e["event_data"].get("task_uuid"), e["event_data"].get("host"))
            for e in self.events
            if e.get("event", "").startswith("runner_item_on_")
        }
        counts: dict[str, dict[str, int]] = {}
        for event in self.events:
            kind = event.get("event")
            data = event.get("event_data", {})
            if kind not in TASK_RESULT_EVENTS or (play is not None and data.get("play") != play):
                continue
            if data.get("task_action") in CONTROLLER_ONLY or kind == "runner_on_skipped":
                continue
            is_item = kind in ITEM_EVENTS
            if not is_item and (data.get("task_uuid"), data.get("host")) in looped:
                continue  # the loop's summary: its items were counted
            host = counts.setdefault(data.get("host", ""), {"total": 0, "builtin_file": 0})
            host["total"] += 1
            if data.get("task_action") in BUILTIN_FILE_ACTIONS:
                host["builtin_file"] += 1
        return counts

    @property
    def changed(self) -> list[TaskResult]:
        return [r for r in self.results if r.changed]

    @property
    def failures(self) -> list[TaskResult]:
        return [r for r in self.results if r.failed]


def run_playbook(
    playbook: str | Path,
    inventory: str | Path,
    private_data_dir: Path,
    extravars: dict | None = None,
    check: bool = False,
    limit: str | None = None,
    tags: str | None = None,
    collections: tuple = (),
) -> PlaybookRun:
    """Run ``playbook`` (relative to the repository root or absolute) against ``inventory``.

    ``collections``: more collection paths, before the repository's (a test double of a collection's module).
    """
    envvars = {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([*map(str, collections), str(REPO / ".collections")]),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        # ansible-playbook of the interpreter running the tests, venv activated or not.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    options = (["--check"] if check else []) + ([f"--tags={tags}"] if tags else [])
    cmdline = " ".join(options) or None
    private_data_dir.mkdir(parents=True, exist_ok=True)
    runner = ansible_runner.run(
        private_data_dir=str(private_data_dir),
        project_dir=str(REPO),
        playbook=str(REPO / playbook),
        inventory=str(REPO / inventory),
        extravars=extravars or {},
        envvars=envvars,
        cmdline=cmdline,
        limit=limit,
        quiet=True,
        json_mode=False,
    )
    stdout = runner.stdout.read() if runner.stdout else ""
    return PlaybookRun(status=runner.status, rc=runner.rc, events=list(runner.events), stdout=stdout)
