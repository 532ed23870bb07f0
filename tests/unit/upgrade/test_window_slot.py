"""The slot contract the upgrade_window strategy and the upgrade_slot action share (module_utils/upgrade)."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.action.upgrade_slot import ActionModule
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_slot
from ansible_collections.gpuops.cluster.plugins.modules import upgrade_slot
from ansible_collections.gpuops.cluster.plugins.strategy import upgrade_window

RECORD = {"state": "acquired", "admitted": True, "reason": "admitted"}


def test_the_action_takes_the_arguments_its_documentation_names():
    documented = set(yaml.safe_load(upgrade_slot.DOCUMENTATION)["options"])
    assert set(window_slot.ARGS) == documented
    assert frozenset(window_slot.ARGS) == ActionModule._VALID_ARGS


def test_the_task_names_the_strategy_by_its_name():
    assert "gpuops.cluster." + yaml.safe_load(upgrade_window.DOCUMENTATION)["name"] == window_slot.STRATEGY


@pytest.mark.parametrize(
    ("action", "args", "expected"),
    [
        ("gpuops.cluster.upgrade_slot", {}, "acquired"),
        ("upgrade_slot", {"state": "released"}, "released"),
        ("gpuops.cluster.upgrade_slot", {"state": "taken"}, "acquired"),
        ("ansible.builtin.debug", {"state": "released"}, None),
    ],
)
def test_state_of_a_task(action, args, expected):
    assert window_slot.state_of(action, args) == expected


def test_what_a_release_gives_back_is_what_the_strategy_reads():
    given = window_slot.answer("released", RECORD, {"ok": "yes", "halt": "no", "deferred": True})
    assert given["release"] == {"ok": True, "halt": False, "deferred": True}
    assert window_slot.released(given) == given["release"]


# The node's record (node_record.build) built by the slot task from the node's start and registered steps.
START = {"host": "gpu1", "adapter": "slurm", "decision_reason": "differs", "before": {}, "target": "580.65.06"}
DRAINED = {"adapter": "slurm", "ours": True, "timed_out": False, "started_at": 10.0, "ended_at": 20.0}
GATE = {"healthy": True, "summary": {"failed": []}, "started_at": 30.0, "ended_at": 40.0}
AFTER = {"installed_driver_version": "580.65.06", "loaded_driver_version": "580.65.06"}


def node(**steps):
    slot = {"admitted": True, "slot": dict(RECORD, admitted_at=5.0)}
    return dict(
        START, **dict({"slot": slot, "gate_level": "quick", "drained": DRAINED, "gate": GATE, "after": AFTER}, **steps)
    )


def test_a_release_with_the_node_says_what_its_record_says():
    given = window_slot.answer("released", RECORD, {"state": "released", "node": node()}, now=50.0)
    assert given["node"]["status"] == "upgraded"
    assert given["node"]["timings"]["finished"] == 50.0
    assert given["release"] == {"ok": True, "halt": False, "deferred": False}
    failed = window_slot.answer("released", RECORD, {"node": node(failure={"task": "Health gate", "msg": "x"})})
    assert failed["node"]["status"] == "failed"
    assert window_slot.released(failed) == {"ok": False, "halt": True, "deferred": False}
    deferred = node(drained=dict(DRAINED, timed_out=True), on_drain_timeout="continue")
    assert window_slot.released(window_slot.answer("released", RECORD, {"node": deferred})) == {
        "ok": True,
        "halt": False,
        "deferred": True,
    }


def test_an_acquisition_with_the_node_records_only_a_node_not_admitted():
    blocked = dict(RECORD, admitted=False, reason="blocked: partition gpu would fall below its floor")
    given = window_slot.answer("acquired", blocked, {"node": START}, now=7.0)
    assert given["admitted"] is False
    assert given["node"]["status"] == "blocked"
    assert given["node"]["timings"] == {"started": 7.0, "finished": 7.0}
    assert "node" not in window_slot.answer("acquired", RECORD, {"node": START})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"node": node(), "ok": True}, "give node (the node's record says ok, halt and deferred) or ok/halt/deferred"),
        ({"node": node(gate=None)}, "the node's record: no slot release for a node with status 'in_progress'"),
        ({"node": dict(node(), gate_result={})}, "the node's record: node has the key(s) gate_result"),
    ],
)
def test_a_release_whose_record_cannot_be_built_fails_and_gives_nothing_back(args, message):
    found = window_slot.answer("released", RECORD, args)
    assert found["failed"] is True
    assert message in found["msg"]
    assert window_slot.released(found) is None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"release": {"ok": True}}, {"ok": True, "halt": None, "deferred": False}),
        ({"release": {"ok": False, "deferred": True, "halt": 1}}, {"ok": False, "halt": True, "deferred": False}),
        ({"release": {"ok": True}, "skipped": True}, None),
        ({"failed": True, "msg": "deferred is true but ok is false"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_released_reads_only_a_release(data, expected):
    assert window_slot.released(data) == expected


@pytest.mark.parametrize(
    ("state", "record", "args", "message"),
    [
        ("taken", RECORD, {}, "set acquired or released"),
        ("acquired", None, {}, "strategy: gpuops.cluster.upgrade_window"),
        ("acquired", dict(RECORD, state="released"), {}, "released already"),
        ("released", dict(RECORD, admitted=False, reason="blocked: floor"), {}, "no slot to release (blocked: floor)"),
        ("released", RECORD, {"ok": False, "deferred": True}, "a deferred node is back in service"),
    ],
)
def test_what_the_contract_refuses(state, record, args, message):
    found = window_slot.answer(state, record, args)
    assert found["failed"] is True
    assert message in found["msg"]


def test_the_window_is_the_plays_variable_with_every_key():
    found = window_slot.window_of({"nodes": [{"name": "n1"}], "settings": {"max_unavailable": 1}})
    assert found == {"nodes": [{"name": "n1"}], "settings": {"max_unavailable": 1}} | dict.fromkeys(
        ("refresh", "journal", "drain_ahead", "report")
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "the play variable gpuops_upgrade_window is None: set it on the play with strategy"),
        ([], "gpuops_upgrade_window is \\[\\]"),
        ({"nodes": [], "setings": {}}, "has the key\\(s\\) setings; it takes only nodes, settings"),
    ],
)
def test_a_window_that_cannot_be_built_says_what_to_set(value, message):
    with pytest.raises(ValueError, match=message):
        window_slot.window_of(value)
