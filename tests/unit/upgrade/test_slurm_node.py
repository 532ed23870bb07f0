"""Slurm node state from sinfo (JSON and text), drain ownership and scontrol argv."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import slurm_node

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

PREFIX = "gpuops-upgrade"
RUN = "20261202T101500-ab12"


@pytest.fixture(scope="module")
def json_nodes():
    return slurm_node.parse_sinfo_json((FIXTURES / "slurm" / "sinfo-22.05-mixed-states.json").read_text())


@pytest.fixture(scope="module")
def text_nodes():
    return slurm_node.parse_sinfo_text((FIXTURES / "slurm" / "sinfo-N-O-mixed-states.txt").read_text())


def test_json_states(json_nodes):
    assert sorted(json_nodes) == ["ru-node%d" % i for i in range(1, 8)]
    draining = json_nodes["ru-node1"]
    assert draining["state"] == "mixed"
    assert draining["drain"]
    assert draining["jobs_running"]
    assert not draining["drained"]
    assert json_nodes["ru-node2"]["drained"]
    assert not json_nodes["ru-node2"]["jobs_running"]
    other = json_nodes["ru-node3"]
    assert other["reason"] == "bad DIMM, ticket HW-4411"
    assert other["reason_set_by_user"] == "alice"
    assert json_nodes["ru-node4"] == {
        "name": "ru-node4",
        "state": "idle",
        "state_flags": [],
        "drain": False,
        "jobs_running": False,
        "drained": False,
        "reason": None,
        "reason_set_by_user": None,
        "boot_time": 1764670000,
    }
    assert json_nodes["ru-node5"]["state"] == "down"
    assert json_nodes["ru-node5"]["drained"]
    assert json_nodes["ru-node5"]["boot_time"] == 1764671400
    assert json_nodes["ru-node6"]["jobs_running"]
    assert not json_nodes["ru-node6"]["drain"]
    assert json_nodes["ru-node7"]["state_flags"] == ["not_responding"]


def test_text_agrees_with_json_on_state_and_ownership(json_nodes, text_nodes):
    assert sorted(text_nodes) == sorted(json_nodes)
    for name, node in text_nodes.items():
        for key in ("state", "drain", "drained", "jobs_running"):
            assert node[key] == json_nodes[name][key], (name, key)
        assert slurm_node.ownership(node, PREFIX) == slurm_node.ownership(json_nodes[name], PREFIX), name
    # the text cuts reasons at 60 characters; the prefix survives
    assert text_nodes["ru-node2"]["reason"] == json_nodes["ru-node2"]["reason"][:60]


def test_slurm_23_list_states_are_read():
    text = json.dumps(
        {"nodes": [{"name": "x", "state": ["IDLE", "DRAIN"], "reason": "r", "boot_time": {"set": True, "number": 5}}]}
    )
    node = slurm_node.parse_sinfo_json(text)["x"]
    assert node["state"] == "idle"
    assert node["drain"]
    assert node["drained"]
    assert node["boot_time"] == 5


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"errors": []}', '{"nodes": [{"state": "idle"}]}'],
    ids=["text", "list", "no-nodes", "no-name"],
)
def test_unreadable_json_raises(text):
    with pytest.raises(slurm_node.SlurmParseError):
        slurm_node.parse_sinfo_json(text)


def test_unreadable_text_raises():
    with pytest.raises(slurm_node.SlurmParseError, match="NodeList:20"):
        slurm_node.parse_sinfo_text("ru-node1\n")


@pytest.mark.parametrize(
    ("node", "owner"),
    [
        ("ru-node1", "ours"),
        ("ru-node2", "ours"),
        ("ru-node3", "other"),
        ("ru-node4", "none"),
        ("ru-node5", "ours"),
        ("ru-node6", "none"),
        ("ru-node7", "other"),
    ],
)
def test_ownership(json_nodes, node, owner):
    assert slurm_node.ownership(json_nodes[node], PREFIX) == owner


def test_a_reason_that_only_mentions_the_prefix_is_not_ours():
    node = {"drain": True, "state": "idle", "reason": "waiting for gpuops-upgrade[x]: later"}
    assert slurm_node.ownership(node, PREFIX) == "other"
    assert slurm_node.reason_run_id("gpuops-upgrade[r9]: upgrading", PREFIX) == "r9"
    assert slurm_node.reason_run_id("gpuops-upgrade-other[r9]: x", PREFIX) is None


def test_decide_drain(json_nodes):
    reason = slurm_node.make_reason(PREFIX, RUN, "upgrading the NVIDIA stack")
    assert slurm_node.decide_drain(json_nodes["ru-node4"], PREFIX, reason) == {
        "action": "drain",
        "ours": True,
        "pre_existing": False,
    }
    assert slurm_node.decide_drain(json_nodes["ru-node2"], PREFIX, reason)["action"] == "none"
    assert slurm_node.decide_drain(json_nodes["ru-node2"], PREFIX, reason + " (again)")["action"] == "update_reason"
    assert slurm_node.decide_drain(json_nodes["ru-node3"], PREFIX, reason) == {
        "action": "none",
        "ours": False,
        "pre_existing": True,
    }
    assert slurm_node.decide_drain(json_nodes["ru-node7"], PREFIX, reason)["pre_existing"] is True


def test_decide_resume(json_nodes):
    assert slurm_node.decide_resume(json_nodes["ru-node5"], PREFIX)["action"] == "resume"
    assert slurm_node.decide_resume(json_nodes["ru-node3"], PREFIX) == {
        "action": "none",
        "ours": False,
        "pre_existing": True,
    }
    assert slurm_node.decide_resume(json_nodes["ru-node4"], PREFIX) == {
        "action": "none",
        "ours": False,
        "pre_existing": False,
    }


def test_reason_and_argv():
    reason = slurm_node.make_reason(PREFIX, RUN, "  jobs still\nrunning after 600s ")
    assert reason == "gpuops-upgrade[20261202T101500-ab12]: jobs still running after 600s"
    assert slurm_node.drain_argv("/usr/bin/scontrol", "ru-node1", reason) == [
        "/usr/bin/scontrol",
        "update",
        "nodename=ru-node1",
        "state=drain",
        "reason=" + reason,
    ]
    assert slurm_node.resume_argv("/usr/bin/scontrol", "ru-node1") == [
        "/usr/bin/scontrol",
        "update",
        "nodename=ru-node1",
        "state=resume",
    ]
    assert slurm_node.sinfo_json_argv("/usr/bin/sinfo") == ["/usr/bin/sinfo", "--json"]
    assert slurm_node.sinfo_text_argv("/usr/bin/sinfo", "n1")[-1] == "NodeList:20,StateComplete:30,Reason:60"


@pytest.mark.parametrize(
    ("prefix", "run_id", "message"),
    [("", RUN, "m"), ("a[b", RUN, "m"), (PREFIX, "", "m"), (PREFIX, "has space", "m"), (PREFIX, RUN, 'say "hi"')],
)
def test_bad_reason_parts(prefix, run_id, message):
    with pytest.raises(ValueError, match=r"prefix|run id|double quotes"):
        slurm_node.make_reason(prefix, run_id, message)
