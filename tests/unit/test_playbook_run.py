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


def item(host: str, action: str, task_uuid: str, kind: str) -> dict:
    data = {"play": "Tune", "task": "t", "task_uuid": task_uuid, "task_action": action, "host": host, "res": {}}
    return {"event": kind, "event_data": data}


def test_executions_count_every_loop_item_and_the_builtin_file_ones():
    run = PlaybookRun(
        "successful",
        0,
        [
            # a loop of three file items, one skipped, then its summary event
            item("a", "ansible.builtin.file", "u1", "runner_item_on_ok"),
            item("a", "ansible.builtin.file", "u1", "runner_item_on_ok"),
            item("a", "ansible.builtin.file", "u1", "runner_item_on_skipped"),
            item("a", "ansible.builtin.file", "u1", "runner_on_ok"),
            # a plain module task, a controller-only task, a skipped task
            item("a", "gpuops.cluster.kernel_runtime", "u2", "runner_on_ok"),
            item("a", "ansible.builtin.set_fact", "u3", "runner_on_ok"),
            item("a", "ansible.builtin.template", "u4", "runner_on_skipped"),
            item("b", "ansible.builtin.template", "u4", "runner_on_ok"),
        ],
        "",
    )
    assert run.executions("Tune") == {"a": {"total": 3, "builtin_file": 2}, "b": {"total": 1, "builtin_file": 1}}
    assert run.executions("Other") == {}
    # the older count hides the loop: one task
    assert run.tasks_run("Tune", modules_only=True) == {"a": 2, "b": 1}
