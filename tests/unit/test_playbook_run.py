"""The run harness's per-host counts (tests/integration/playbook_run.py), on hand-made events."""

from __future__ import annotations

from tests.integration.playbook_run import PlaybookRun


def event(host: str, action: str, kind: str = "runner_on_ok", play: str = "Upgrade") -> dict:
    return {"event": kind, "event_data": {"play": play, "task": "t", "task_action": action, "host": host, "res": {}}}


RUN = PlaybookRun(
    "successful",
    0,
    [
        event("a", "ansible.builtin.set_fact"),
        event("a", "gpuops.cluster.gpu_health"),
        event("a", "gpuops.cluster.slurm_drain"),
        event("b", "gpuops.cluster.gpu_health", "runner_on_skipped"),
        event("b", "ansible.builtin.copy", play="Other"),
    ],
    "",
)


def test_tasks_run_counts_every_task_that_was_not_skipped():
    assert RUN.tasks_run("Upgrade") == {"a": 3}


def test_module_calls_leave_out_controller_only_actions():
    assert RUN.module_calls("Upgrade") == {"a": 2}
    assert RUN.module_calls("Other") == {"b": 1}
