"""fleet_nodes: the window's nodes from the survey and Slurm's view of the fleet."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import (
    fleet_nodes,
    window_input,
    window_open,
    window_preview,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window

HOSTS = [
    {"host": "gpu01", "done": False, "domains": {"rack": "r1"}, "scheduler_name": "node01"},
    {"host": "gpu02", "done": True, "domains": {"rack": "r1", "nvlink": "nvl72-1"}, "scheduler_name": "node02"},
]
SLURM = [
    {"name": "node01", "state": "busy", "job_end": 1000, "partitions": ["gpu"], "gpus": 8, "reason": None},
    {
        "name": "node02",
        "state": "drained_by_others",
        "job_end": None,
        "partitions": ["gpu"],
        "gpus": 8,
        "reason": "HW-4411 bad DIMM",
        "owner": "other",
    },
]


def test_nodes_carry_domains_canary_done_and_the_slurm_state_by_inventory_name():
    nodes = fleet_nodes.window_nodes(HOSTS, SLURM, canary=["gpu01"])
    assert nodes == [
        {
            "name": "gpu01",
            "domains": {"rack": "r1"},
            "canary": True,
            "done": False,
            "state": "busy",
            "job_end": 1000,
            "partitions": ["gpu"],
            "gpus": 8,
            "resume": False,
            "drained_ahead": False,
        },
        {
            "name": "gpu02",
            "domains": {"rack": "r1", "nvlink": "nvl72-1"},
            "canary": False,
            "done": True,
            "state": "drained_by_others",
            "job_end": None,
            "partitions": ["gpu"],
            "gpus": 8,
        },
    ]
    # what the window takes as is
    assert [node.name for node in window_input.nodes_of(nodes)] == ["gpu01", "gpu02"]


def test_slurm_is_the_truth_about_a_node_a_previous_journal_left_out():
    """A node in service with no drain of ours: resume false, which a previous run's journal does not override; one
    drained by us: resume true; without a scheduler the journal decides (no resume key)."""
    ours = dict(SLURM[0], name="node03", owner="ours", reason="gpuops-upgrade[run-1]: failed")
    hosts = [*HOSTS, {"host": "gpu03", "scheduler_name": "node03"}]
    nodes = {node["name"]: node for node in fleet_nodes.window_nodes(hosts, [*SLURM, ours])}
    left = {"gpu01", "gpu03"}
    said = {name: window_open.journal_says(node, left, set()) for name, node in nodes.items()}
    assert said["gpu01"]["resume"] is False
    assert said["gpu03"]["resume"] is True
    assert "resume" not in said["gpu02"]  # done: not taken again
    plain = fleet_nodes.window_nodes([{"host": "gpu01"}])[0]
    assert window_open.journal_says(plain, left, set())["resume"] is True
    assert window_open.journal_says(plain, set(), {"gpu01"})["drained_ahead"] is True
    window = Window(list(said.values()), {"max_unavailable": 1})
    assert window.resumed == ["gpu03"]


def test_without_a_scheduler_every_node_is_idle_in_no_partition():
    nodes = fleet_nodes.window_nodes([{"host": "gpu01"}])
    assert nodes == [{"name": "gpu01", "domains": {}, "canary": False, "done": False}]
    assert window_input.nodes_of(nodes)[0].state == "idle"


def test_a_node_slurm_does_not_report_is_an_error_naming_both_names():
    with pytest.raises(ValueError, match="Slurm returned no state for node node02 \\(inventory host gpu02\\)"):
        fleet_nodes.window_nodes(HOSTS, SLURM[:1])


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        (["gpu01"], "a surveyed host must be a mapping"),
        ([{"host": "gpu01", "domains": ["r1"]}], "gpuops_upgrade_domains of gpu01 must map"),
    ],
)
def test_bad_input_is_refused(hosts, message):
    with pytest.raises(ValueError, match=message):
        fleet_nodes.window_nodes(hosts)


def test_why_nodes_are_out_of_service():
    reasons = fleet_nodes.unavailable_reasons(
        [*SLURM, {"name": "node03", "state": "down", "reason": "Not responding"}, {"name": "node04", "state": "idle"}]
    )
    assert reasons == {
        "node02": "drained by someone else (HW-4411 bad DIMM): not touched",
        "node03": "down in Slurm (Not responding): not touched",
    }


@pytest.mark.parametrize("slurm_state", ["idle+reserved", "mixed+maint", "RESERVED"])
def test_a_node_in_a_reservation_is_reserved_for_the_window_and_reported(slurm_state):
    slurm = [
        {
            "name": "node01",
            "state": "busy",
            "job_end": 1000,
            "partitions": ["gpu"],
            "gpus": 8,
            "slurm_state": slurm_state,
        },
        dict(SLURM[1]),
    ]
    nodes = fleet_nodes.window_nodes(HOSTS, slurm)
    assert nodes[0]["state"] == "reserved"
    assert "job_end" not in nodes[0]
    assert fleet_nodes.reserved_reasons(slurm) == {
        "node01": "in a Slurm reservation (%s): left alone, not upgraded" % slurm_state
    }
    window = Window(nodes, {"max_unavailable": 2})
    assert window.reserved == ["gpu01"]
    assert window.admit(0) == []


def test_a_node_drained_by_others_in_a_reservation_stays_drained_by_others():
    slurm = [dict(SLURM[0]), dict(SLURM[1], slurm_state="idle+drain+reserved")]
    nodes = fleet_nodes.window_nodes(HOSTS, slurm)
    assert nodes[1]["state"] == "drained_by_others"
    assert fleet_nodes.reserved_reasons(slurm) == {}


def test_a_named_reservation_is_reported_by_name():
    slurm = [dict(SLURM[0], state="idle", job_end=None, slurm_state="idle", reservation="training-q3"), SLURM[1]]
    assert fleet_nodes.reserved_reasons(slurm)["node01"] == (
        "in a Slurm reservation training-q3 (idle): left alone, not upgraded"
    )


# ---------------------------------------------------------------- the operator's maintenance reservation

MAINT_HOSTS = [{"host": "gpu%02d" % n, "scheduler_name": "node%02d" % n, "domains": {"rack": "r1"}} for n in (1, 2, 3)]
MAINT_SLURM = [
    # as scontrol show nodes --json of 24.11 gives a node in a maint reservation: MIXED+RESERVED+MAINTENANCE, named
    {"name": "node01", "state": "idle", "job_end": None, "partitions": ["gpu"], "gpus": 8,
     "slurm_state": "idle+maintenance+reserved", "reservation": "upgrade-r580"},
    {"name": "node02", "state": "busy", "job_end": 5000, "partitions": ["gpu"], "gpus": 8,
     "slurm_state": "mixed+reserved", "reservation": "training-q3"},
    {"name": "node03", "state": "idle", "job_end": None, "partitions": ["gpu"], "gpus": 8, "slurm_state": "idle"},
]  # fmt: skip


def test_the_maintenance_reservation_goes_first_and_other_reservations_are_left_alone():
    nodes = fleet_nodes.window_nodes(MAINT_HOSTS, MAINT_SLURM, canary=["gpu03"], maintenance="upgrade-r580")
    assert [(node["name"], node["state"], node.get("maintenance", False)) for node in nodes] == [
        ("gpu01", "idle", True),
        ("gpu02", "reserved", False),
        ("gpu03", "idle", False),
    ]
    assert fleet_nodes.reserved_reasons(MAINT_SLURM, "upgrade-r580") == {
        "node02": "in a Slurm reservation training-q3 (mixed+reserved): left alone, not upgraded"
    }
    # out of users' service already: first, before the canary, without a slot of max_unavailable 1
    preview = window_preview.plan(Window(nodes, {"max_unavailable": 1}, 0), 0)
    assert preview["maintenance"] == ["gpu01"]
    assert preview["resumed"] == []
    assert preview["first_window"] == ["gpu01"]
    assert preview["reserved"] == ["gpu02"]
    assert any(line.startswith("first, in the maintenance reservation") for line in window_preview.describe(preview))


def test_without_a_maintenance_reservation_its_nodes_are_left_alone_like_any_reservation():
    nodes = fleet_nodes.window_nodes(MAINT_HOSTS, MAINT_SLURM)
    assert [node["state"] for node in nodes] == ["reserved", "reserved", "idle"]


def test_a_maintenance_reservation_no_node_is_in_stops_the_plan_naming_the_reservations():
    with pytest.raises(ValueError, match=r"no node of this run is in the maintenance reservation 'upgrade-r850'"):
        fleet_nodes.window_nodes(MAINT_HOSTS, MAINT_SLURM, maintenance="upgrade-r850")
    with pytest.raises(ValueError, match=r"reservations: training-q3, upgrade-r580\)"):
        fleet_nodes.window_nodes(MAINT_HOSTS, MAINT_SLURM, maintenance="upgrade-r850")
    with pytest.raises(ValueError, match="must name a Slurm reservation"):
        fleet_nodes.window_nodes(MAINT_HOSTS, MAINT_SLURM, maintenance=" ")
