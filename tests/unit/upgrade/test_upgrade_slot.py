"""The upgrade_slot action (what it returns for the strategy's record) and the strategy's slot detection."""

from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible_collections.gpuops.cluster.plugins.action.upgrade_slot import ActionModule
from ansible_collections.gpuops.cluster.plugins.strategy.upgrade_window import slot_state


def action(args: dict) -> ActionModule:
    task = MagicMock(Task)
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.diff = False
    connection = MagicMock()
    connection._shell = MagicMock()
    return ActionModule(task, connection, PlayContext(), loader=None, templar=None, shared_loader_obj=None)


RECORD = {"state": "acquired", "admitted": True, "reason": "admitted", "admitted_at": 1.0, "in_flight": ["n1"]}


def test_acquired_returns_the_strategy_decision():
    result = action({"state": "acquired"}).run(task_vars={"gpuops_upgrade_slot": RECORD})
    assert not result.get("failed")
    assert result["admitted"] is True
    assert result["slot"] == RECORD
    assert result["changed"] is False


def test_not_admitted_is_not_a_failure():
    record = dict(RECORD, admitted=False, reason="the run halted before this node started")
    result = action({}).run(task_vars={"gpuops_upgrade_slot": record})
    assert not result.get("failed")
    assert result["admitted"] is False
    assert result["slot"]["reason"] == "the run halted before this node started"


@pytest.mark.parametrize(
    ("args", "release"),
    [
        ({"state": "released", "ok": True}, {"ok": True, "halt": None, "deferred": False}),
        ({"state": "released", "ok": "false", "halt": "yes"}, {"ok": False, "halt": True, "deferred": False}),
        ({"state": "released"}, {"ok": False, "halt": None, "deferred": False}),
        ({"state": "released", "ok": True, "deferred": "yes"}, {"ok": True, "halt": None, "deferred": True}),
    ],
)
def test_released_asks_the_strategy_to_give_the_slot_back(args, release):
    result = action(args).run(task_vars={"gpuops_upgrade_slot": RECORD})
    assert not result.get("failed")
    assert result["release"] == release
    assert result["slot"] == RECORD
    assert "admitted" not in result


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (dict(RECORD, admitted=False, reason="blocked: floor"), "holds no slot to release (blocked: floor)"),
        (dict(RECORD, state="released"), "holds no slot to release"),
    ],
)
def test_a_release_without_a_slot_fails(record, message):
    result = action({"state": "released", "ok": True}).run(task_vars={"gpuops_upgrade_slot": record})
    assert result["failed"] is True
    assert message in result["msg"]


def test_a_deferred_release_must_be_back_in_service():
    result = action({"state": "released", "ok": False, "deferred": True}).run(task_vars={"gpuops_upgrade_slot": RECORD})
    assert result["failed"] is True
    assert "a deferred node is back in service" in result["msg"]


def test_acquiring_twice_fails():
    result = action({}).run(task_vars={"gpuops_upgrade_slot": dict(RECORD, state="released")})
    assert result["failed"] is True
    assert "released already" in result["msg"]


@pytest.mark.parametrize(
    "task_vars",
    [{}, {"gpuops_upgrade_slot": {"state": "taken"}}, {"gpuops_upgrade_slot": "admitted"}],
    ids=["no record", "record of no state", "not a record"],
)
def test_without_the_strategy_the_task_fails_and_names_it(task_vars):
    result = action({}).run(task_vars=task_vars)
    assert result["failed"] is True
    assert "strategy: gpuops.cluster.upgrade_window" in result["msg"]


def test_a_bad_state_fails():
    result = action({"state": "taken"}).run(task_vars={"gpuops_upgrade_slot": RECORD})
    assert result["failed"] is True
    assert "set acquired or released" in result["msg"]


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (SimpleNamespace(action="gpuops.cluster.upgrade_slot", args={}), "acquired"),
        (SimpleNamespace(action="upgrade_slot", args={"state": "released"}), "released"),
        (SimpleNamespace(action="ansible.builtin.debug", args={"state": "released"}), None),
        (None, None),
    ],
)
def test_the_strategy_knows_the_slot_tasks(task, expected):
    assert slot_state(task) == expected


def test_the_window_is_not_a_task_argument():
    """The strategy builds the window from the play's gpuops_upgrade_window; the task refuses its old arguments."""
    with pytest.raises(AnsibleActionFail, match=r"Invalid options for .*: (nodes,settings|settings,nodes)"):
        action({"nodes": [], "settings": {}}).run(task_vars={"gpuops_upgrade_slot": RECORD})
