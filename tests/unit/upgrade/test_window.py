"""The sliding-window planner: every rule at its boundaries, and properties over random fleets."""

from __future__ import annotations

import heapq

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_input, window_preview
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_audit import check
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_order import order
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_preview import plan
from hypothesis import given, settings
from hypothesis import strategies as st


def node(name, rack="r1", partitions=("batch",), state="idle", job_end=None, gpus=8, **extra):
    fields = {"name": name, "domains": {"rack": rack}, "partitions": list(partitions), "gpus": gpus, "state": state}
    if job_end is not None:
        fields["job_end"] = job_end
    fields.update(extra)
    return fields


def rack_fleet(racks=4, per_rack=4, **extra):
    return [
        node("r%dn%d" % (r, i), rack="r%d" % r, **extra) for r in range(1, racks + 1) for i in range(1, per_rack + 1)
    ]


def past_canary(window, now=0):
    """Admit and pass the canary; returns what the window admits right after."""
    (canary,) = window.admit(now)
    window.finish(canary, True)
    return window.admit(now)


# Settings and nodes: bad input is refused with a message naming the setting.


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"per_domain": {"rack": 0}}, r"per_domain\.rack is 0: set a positive integer"),
        ({"per_domain": {"rack": -1}}, r"per_domain\.rack is -1"),
        ({"per_domain": {"rack": "two"}}, r"per_domain\.rack is 'two'"),
        ({"per_domain": {"rack": True}}, r"per_domain\.rack is True"),
        ({"per_domain": {"rack": 1.5}}, r"per_domain\.rack is 1\.5"),
        ({"per_domain": ["rack"]}, r"per_domain must map a domain kind"),
        ({"partition_floor": 0}, r"partition_floor is 0: set a fraction above 0 and at most 1"),
        ({"partition_floor": 1.01}, r"partition_floor is 1\.01"),
        ({"partition_floor": -0.5}, r"partition_floor is -0\.5"),
        ({"partition_floor": "0.9"}, r"partition_floor is '0\.9'"),
        ({"partition_floor": True}, r"partition_floor is True"),
        ({"max_unavailable": 0}, r"max_unavailable size 0 must be at least 1"),
        ({"max_unavailable": "0%"}, r"max_unavailable size '0%' must be a percentage above 0%"),
        ({"max_unavailable": "many"}, r"max_unavailable size 'many' is neither a count"),
        ({"spread_by": ""}, r"spread_by is '': set the domain kind"),
        ({"granularity": 0}, r"granularity is 0: set the seconds"),
        ({"halt_on_failure": "yes"}, r"halt_on_failure is 'yes': set true or false"),
        ({"max_unavailabel": 2}, r"unknown window setting\(s\) max_unavailabel; set only max_unavailable"),
    ],
)
def test_bad_settings_name_the_setting_and_what_to_set(raw, message):
    with pytest.raises(ValueError, match=message):
        Window(rack_fleet(), raw)


def test_settings_boundaries_that_are_accepted():
    config = window_input.Settings({"per_domain": {"rack": "2", "nvlink": 1}, "partition_floor": 1}, 40)
    assert config.per_domain == {"rack": 2, "nvlink": 1}
    assert config.partition_floor == 1.0
    assert config.max_unavailable == 4  # default 10% of 40
    assert window_input.Settings({"max_unavailable": "10%"}, 5).max_unavailable == 1  # rounds down, at least one
    assert window_input.Settings({"max_unavailable": "10%"}, 19).max_unavailable == 1
    assert window_input.Settings({"max_unavailable": 7}, 3).max_unavailable == 7
    assert window_input.Settings({"partition_floor": None, "per_domain": None}, 3).per_domain == {}


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([node("a", state="rebooting")], r"node a: state 'rebooting' is not one of idle, busy"),
        ([node("a"), node("a")], r"node a is listed twice"),
        ([node("a", gpus=-1)], r"node a: gpus must be a count"),
        ([node("a", gpus=True)], r"node a: gpus must be a count"),
        ([{"name": "a", "partitions": "batch"}], r"node a: partitions must be a list"),
        ([{"name": "a", "domains": {"rack": 3}}], r"node a: domains must map"),
        ([{"name": "a", "rack": "r1"}], r"node a: unknown field\(s\) rack"),
        ([node("a", state="busy", job_end="soon")], r"node a: job_end must be epoch seconds"),
        ([{"name": ""}], r"node name '' is not a host name"),
        (["a"], r"a node must be a dict"),
        ("a,b", r"nodes must be a list"),
    ],
)
def test_bad_nodes_are_refused(nodes, message):
    with pytest.raises(ValueError, match=message):
        Window(nodes)


# Order.


def test_order_idle_first_then_soonest_job_end_then_unknown_end():
    nodes = [
        node("late", state="busy", job_end=9000),
        node("unknown", state="busy"),
        node("soon", state="busy", job_end=1000),
        node("idle", state="idle"),
        node("over", state="busy", job_end=50),  # its job already ended at now=100: idle
    ]
    assert order(nodes, 100, granularity=1) == ["idle", "over", "soon", "late", "unknown"]


def test_order_leaves_out_done_down_and_drained_by_others():
    nodes = [
        node("a"),
        node("b", done=True),
        node("c", state="down"),
        node("d", state="drained_by_others"),
        node("e", state="busy", job_end=5),
    ]
    assert order(nodes, 0) == ["a", "e"]


def test_order_interleaves_racks_and_breaks_ties_by_name():
    nodes = [node("n%d" % i, rack=rack) for i, rack in enumerate(["r2", "r2", "r2", "r1", "r1", "r3"])]
    # turn 0 of r1, r2, r3, then turn 1 ..., each rack's nodes by name
    assert order(nodes, 0) == ["n3", "n0", "n5", "n4", "n1", "n2"]
    assert order(list(reversed(nodes)), 0) == order(nodes, 0)


def test_order_interleaves_racks_only_among_equal_job_ends():
    nodes = [
        node("a1", rack="a", state="busy", job_end=100),
        node("a2", rack="a", state="busy", job_end=200),
        node("b1", rack="b", state="busy", job_end=300),
        node("a3", rack="a", state="busy", job_end=5000),
    ]
    # a1, a2, b1 end within the same 600 s: interleaved; a3 ends later: after them
    assert order(nodes, 0) == ["a1", "b1", "a2", "a3"]
    # with 1 s granularity the soonest end wins over the spread
    assert order(nodes, 0, granularity=1) == ["a1", "a2", "b1", "a3"]


def test_order_puts_canaries_first_even_when_busy():
    nodes = [node("a"), node("z", state="busy", job_end=10**9, canary=True)]
    assert order(nodes, 0) == ["z", "a"]


def test_nodes_without_the_spread_domain_are_interleaved_as_one_group():
    nodes = [{"name": "x"}, {"name": "y"}, node("a", rack="r1")]
    assert order(nodes, 0) == ["x", "a", "y"]


# max_unavailable.


def test_max_unavailable_is_never_exceeded_and_is_filled_exactly():
    window = Window(rack_fleet(racks=4, per_rack=5), {"max_unavailable": 3})
    assert past_canary(window) == window.in_flight
    assert len(window.in_flight) == 3
    assert window.admit(1) == []
    first = window.in_flight[0]
    window.finish(first, True)
    assert len(window.admit(2)) == 1
    assert len(window.in_flight) == 3


def test_down_and_drained_by_others_count_against_max_unavailable_and_are_never_admitted():
    fleet = rack_fleet(racks=2, per_rack=5)
    fleet[0]["state"] = "down"
    fleet[1]["state"] = "drained_by_others"
    window = Window(fleet, {"max_unavailable": 4})
    assert window.unavailable == ["r1n1", "r1n2"]
    admitted = past_canary(window)
    assert len(admitted) == 2  # 4 - the two already out
    assert "r1n1" not in window.remaining
    assert "r1n2" not in window.remaining


def test_percentage_counts_the_whole_fleet_including_done_nodes():
    fleet = rack_fleet(racks=2, per_rack=10)
    for entry in fleet[:15]:
        entry["done"] = True
    window = Window(fleet, {"max_unavailable": "25%"})
    assert window.settings.max_unavailable == 5
    assert len(window.remaining) == 5
    assert window.skipped == sorted(entry["name"] for entry in fleet[:15])
    assert len(past_canary(window)) == 4


def test_budget_already_used_up_by_down_nodes_blocks_everything():
    fleet = rack_fleet(racks=1, per_rack=4)
    fleet[0]["state"] = "down"
    window = Window(fleet, {"max_unavailable": 1})
    assert window.admit(0) == []
    assert window.finished
    assert set(window.blocked) == set(window.remaining) == {"r1n2", "r1n3", "r1n4"}
    assert window.blocked[window.canaries[0]].startswith("max_unavailable 1: 1 node(s) already out")


# per_domain.


def test_per_domain_limit_is_reached_but_not_passed():
    window = Window(rack_fleet(racks=3, per_rack=4), {"max_unavailable": 12, "per_domain": {"rack": 2}})
    admitted = past_canary(window)
    racks = [window.nodes[name].domains["rack"] for name in admitted]
    assert sorted(racks) == ["r1", "r1", "r2", "r2", "r3", "r3"]
    assert window.admit(1) == []
    window.finish(admitted[0], True)
    assert [window.nodes[name].domains["rack"] for name in window.admit(2)] == [racks[0]]


def test_per_domain_applies_to_every_kind_and_ignores_nodes_without_it():
    fleet = [
        {"name": "a", "domains": {"rack": "r1", "nvlink": "n1"}},
        {"name": "b", "domains": {"rack": "r2", "nvlink": "n1"}},
        {"name": "c", "domains": {"rack": "r3"}},
        {"name": "d", "domains": {"rack": "r4", "nvlink": "n2"}},
        {"name": "e", "domains": {"rack": "r5"}, "canary": True},
    ]
    window = Window(fleet, {"max_unavailable": 5, "per_domain": {"rack": 1, "nvlink": 1}})
    assert window.admit(0) == ["e"]
    window.finish("e", True)
    # a and b share the NVLink domain n1: one of them; c has no NVLink domain: not limited by it
    assert window.admit(1) == ["a", "c", "d"]
    window.finish("a", True)
    assert window.admit(2) == ["b"]


def test_a_full_domain_does_not_hold_back_the_nodes_after_it():
    fleet = [node("a1", rack="a"), node("a2", rack="a"), node("a3", rack="a")]
    fleet.append(node("b1", rack="b", state="busy", job_end=100))
    window = Window(fleet, {"max_unavailable": 4, "per_domain": {"rack": 1}})
    assert window.remaining == ["a1", "a2", "a3", "b1"]
    assert window.admit(0) == ["a1"]
    window.finish("a1", True)
    assert window.admit(1) == ["a2", "b1"]  # a3 does not fit (rack a full), b1 after it does


def test_down_nodes_count_against_their_domain():
    fleet = [node("a1", rack="a", state="down"), node("a2", rack="a"), node("b1", rack="b")]
    window = Window(fleet, {"max_unavailable": 3, "per_domain": {"rack": 1}})
    assert window.blocked == {"a2": "per_domain rack 1: 1 node(s) of rack a already out of service"}
    assert window.admit(0) == ["b1"]  # a2 would be the canary by order, but it is blocked: b1 is the canary
    window.finish("b1", True)
    assert window.admit(1) == []
    assert window.finished
    assert window.remaining == ["a2"]


# partition_floor.


@pytest.mark.parametrize(
    ("floor", "out_at_once"),
    [(0.8, 2), (0.81, 1), (0.9, 1), (0.91, 0), (0.5, 5), (0.1, 9), (1.0, 0)],
)
def test_partition_floor_boundary(floor, out_at_once):
    # 10 nodes of 8 GPUs: 80 GPUs; floor 0.8 keeps >= 64 schedulable: 2 nodes out
    fleet = rack_fleet(racks=10, per_rack=1)
    window = Window(fleet, {"max_unavailable": 10, "partition_floor": floor})
    if out_at_once == 0:
        assert window.admit(0) == []
        assert set(window.blocked) == set(window.remaining)
        assert len(window.remaining) == 10
        return
    (canary,) = window.admit(0)
    window.finish(canary, True)
    assert len(window.admit(1)) == out_at_once


def test_partition_floor_counts_gpus_not_nodes_and_every_partition_of_a_node():
    fleet = [
        node("big1", partitions=["train"], gpus=8),
        node("small1", partitions=["train"], gpus=2),
        node("small2", partitions=["train"], gpus=2),
        node("both", partitions=["train", "infer"], gpus=4),
        node("inf1", partitions=["infer"], gpus=4),
    ]
    # train: 16 GPUs, floor 0.75 keeps 12: 4 GPUs out; infer: 8 GPUs keeps 6: nothing of 4 GPUs can leave
    window = Window(fleet, {"max_unavailable": 5, "partition_floor": 0.75})
    assert window.blocked == {
        "big1": "partition_floor 0.75: partition train would keep 8 of its 16 GPUs schedulable",
        "both": "partition_floor 0.75: partition infer would keep 4 of its 8 GPUs schedulable",
        "inf1": "partition_floor 0.75: partition infer would keep 4 of its 8 GPUs schedulable",
    }
    (canary,) = window.admit(0)
    assert canary == "small1"
    window.finish(canary, True)
    assert window.admit(1) == ["small2"]
    window.finish("small2", True)
    assert window.admit(2) == []
    assert window.finished
    assert sorted(window.remaining) == ["big1", "both", "inf1"]


def test_drained_by_others_count_against_the_floor():
    fleet = rack_fleet(racks=10, per_rack=1)
    fleet[0]["state"] = "drained_by_others"
    window = Window(fleet, {"max_unavailable": 10, "partition_floor": 0.85})
    # 80 GPUs, floor 68: one node of 8 may be out, and the node drained by others is that one
    assert window.admit(0) == []
    assert window.finished
    assert len(window.blocked) == 9
    window = Window(fleet, {"max_unavailable": 10, "partition_floor": 0.8})
    assert len(past_canary(window)) == 1


def test_partition_whose_floor_never_allows_a_node_out_is_reported_blocked_and_the_rest_proceeds():
    fleet = rack_fleet(racks=4, per_rack=2, partitions=["batch"])
    fleet += [node("tiny1", rack="r9", partitions=["tiny"]), node("tiny2", rack="r9", partitions=["tiny"])]
    window = Window(fleet, {"max_unavailable": 3, "partition_floor": 0.6})
    blocked = window.blocked
    assert blocked == {
        name: "partition_floor 0.6: partition tiny would keep 8 of its 16 GPUs schedulable"
        for name in ("tiny1", "tiny2")
    }
    steps = 0
    while not window.finished:
        for name in window.admit(steps):
            window.finish(name, True)
        steps += 1
        assert steps < 50
    assert sorted(window.done) == sorted(entry["name"] for entry in fleet[:8])
    assert sorted(window.remaining) == ["tiny1", "tiny2"]


# Canary.


def test_canary_goes_first_and_alone_and_the_rest_waits_for_it():
    fleet = rack_fleet(racks=2, per_rack=3)
    fleet[4]["canary"] = True
    window = Window(fleet, {"max_unavailable": 6})
    assert window.canaries == ["r2n2"]
    assert window.admit(0) == ["r2n2"]
    assert window.canary_phase
    assert window.admit(1) == []
    assert window.admit(2) == []
    window.finish("r2n2", True)
    assert not window.canary_phase
    assert len(window.admit(3)) == 5


def test_several_canaries_go_one_at_a_time():
    fleet = rack_fleet(racks=2, per_rack=3)
    fleet[0]["canary"] = True
    fleet[5]["canary"] = True
    window = Window(fleet, {"max_unavailable": 6})
    assert window.admit(0) == ["r1n1"]
    window.finish("r1n1", True)
    assert window.admit(1) == ["r2n3"]
    assert window.admit(2) == []
    window.finish("r2n3", True)
    assert len(window.admit(3)) == 4


def test_failed_canary_halts_everything():
    window = Window(rack_fleet(racks=2, per_rack=3), {"max_unavailable": 6})
    (canary,) = window.admit(0)
    window.finish(canary, False)
    assert window.halted
    assert window.admit(1) == []
    assert window.failed == [canary]
    assert window.finished
    assert len(window.remaining) == 5


def test_blocked_canary_blocks_everyone_after_it():
    fleet = [node("c", partitions=["tiny"], canary=True), node("a"), node("b")]
    window = Window(fleet, {"max_unavailable": 3, "partition_floor": 1.0})
    assert window.admit(0) == []
    assert window.blocked == {
        "c": "partition_floor 1: partition tiny would keep 0 of its 8 GPUs schedulable",
        "a": "waits for the canary c, which is blocked",
        "b": "waits for the canary c, which is blocked",
    }
    assert window.finished


def test_a_blocked_second_canary_blocks_the_rest_after_the_first_canary_passed():
    fleet = [
        node("c1", rack="r1", canary=True),
        node("c2", rack="r2", canary=True),
        node("d", rack="r2", state="down"),
        node("a", rack="r3"),
    ]
    window = Window(fleet, {"max_unavailable": 3, "per_domain": {"rack": 1}})
    assert window.blocked == {
        "c2": "per_domain rack 1: 1 node(s) of rack r2 already out of service",
        "a": "waits for the canary c2, which is blocked",
    }
    assert window.admit(0) == ["c1"]
    window.finish("c1", True)
    assert window.admit(1) == []
    assert window.finished
    assert window.remaining == ["c2", "a"]


# Failures.


def test_first_failure_stops_admission_but_in_flight_nodes_finish():
    window = Window(rack_fleet(racks=4, per_rack=3), {"max_unavailable": 4})
    admitted = past_canary(window)
    assert len(admitted) == 4
    window.finish(admitted[0], False)
    assert window.halted
    assert window.admit(1) == []
    window.finish(admitted[1], True)
    assert window.admit(2) == []
    window.finish(admitted[2], True)
    window.finish(admitted[3], False)
    assert not window.finished or window.in_flight == []
    assert window.finished
    assert window.failed == [admitted[0], admitted[3]]
    assert len(window.remaining) == 12 - 1 - 4


def test_without_halt_a_failed_node_stays_out_until_released():
    window = Window(rack_fleet(racks=2, per_rack=3), {"max_unavailable": 2, "halt_on_failure": False})
    admitted = past_canary(window)
    window.finish(admitted[0], False)
    assert not window.halted
    assert len(window.admit(1)) == 0  # the failed node still holds its place
    window.release(admitted[0])
    assert len(window.admit(2)) == 1
    with pytest.raises(ValueError, match="is not a failed node still out of service"):
        window.release(admitted[0])


def test_finish_of_a_node_not_in_flight_is_an_error():
    window = Window(rack_fleet())
    with pytest.raises(ValueError, match=r"finish: r1n1 is not in flight \(in flight: none\)"):
        window.finish("r1n1", True)


def test_update_reorders_the_waiting_nodes():
    fleet = [node("a"), node("b", state="busy", job_end=100), node("c", state="busy", job_end=200)]
    window = Window(fleet, {"max_unavailable": 1})
    assert window.admit(0) == ["a"]
    window.finish("a", True)
    window.update("b", "busy", 10_000)
    window.update("c", "idle")
    assert window.remaining == ["b", "c"]  # reordered at the next admission
    assert window.admit(1) == ["c"]
    assert window.remaining == ["b"]
    with pytest.raises(ValueError, match="update: c is not a node waiting"):
        window.update("c", "idle")
    with pytest.raises(ValueError, match="must be idle or busy"):
        window.update("b", "down")


# check().


def test_check_finds_every_kind_of_violation():
    fleet = [node("a", rack="r1"), node("b", rack="r1"), node("c", rack="r2"), node("d", rack="r2", state="down")]
    config = {"max_unavailable": 2, "per_domain": {"rack": 1}, "partition_floor": 0.5}
    assert check([("a", 0, 10), ("b", 10, 20)], fleet, config) == []
    assert [v["rule"] for v in check([("a", 0, 10), ("c", 10, 20)], fleet, config)] == ["per_domain"]
    violations = check([("a", 0, 10), ("b", 5, 8)], fleet, config)
    assert [v["rule"] for v in violations] == ["max_unavailable", "per_domain", "partition_floor"]
    assert violations[0] == {
        "time": 5,
        "rule": "max_unavailable",
        "detail": "3 nodes out of service, max_unavailable 2 (b left)",
    }
    assert violations[1]["detail"] == "2 nodes of rack r1 out of service, limit 1 (b left)"
    assert violations[2]["detail"] == "partition batch keeps 8 of 32 GPUs schedulable, floor 0.5 (b left)"


def test_check_intervals_are_half_open():
    fleet = [node("a"), node("b")]
    assert check([("a", 0, 10), ("b", 10, 20)], fleet, {"max_unavailable": 1}) == []
    assert len(check([("a", 0, 10), ("b", 9.5, 20)], fleet, {"max_unavailable": 1})) == 1
    with pytest.raises(ValueError, match="check: zz of the timeline is not a node"):
        check([("zz", 0, 1)], fleet)


# plan().


def test_plan_previews_the_order_and_the_first_windows():
    fleet = rack_fleet(racks=3, per_rack=2)
    fleet[0]["done"] = True
    fleet[5]["state"] = "down"
    fleet[2]["state"] = "busy"
    fleet[2]["job_end"] = 500
    preview = plan(Window(fleet, {"max_unavailable": 3, "per_domain": {"rack": 1}}, 0), 0)
    assert preview["order"] == ["r1n2", "r2n2", "r3n1", "r2n1"]
    assert preview["canary"] == ["r1n2"]
    assert preview["first_window"] == ["r1n2"]
    # rack r3 already has its down node out: r3n1 is blocked; 3 - 1 down = 2 places
    assert preview["after_canary"] == ["r2n2"]
    assert preview["blocked"] == {"r3n1": "per_domain rack 1: 1 node(s) of rack r3 already out of service"}
    assert preview["skipped"] == ["r1n1"]
    assert preview["unavailable"] == ["r3n2"]
    lines = window_preview.describe(preview)
    assert lines[0] == (
        "6 node(s) in the fleet, at most 3 out of service, at most 1 per rack, "
        "a busy node waits for its job at most 3600s; 4 to upgrade, 1 already done, 1 down or drained by others"
    )
    assert "starts once the canary passed: r2n2" in lines
    assert "blocked: r3n1 (per_domain rack 1: 1 node(s) of rack r3 already out of service)" in lines


def test_plan_of_nothing_to_do():
    preview = plan(Window([node("a", done=True)], {}, 0), 0)
    assert preview["order"] == []
    assert preview["first_window"] == []
    assert window_preview.describe(preview)[-1] == "order: nothing to upgrade"


# Properties: random fleets driven through an event loop.

RACKS = ["r1", "r2", "r3", "r4", "r5"]
PARTITIONS = ["a", "b", "c"]


@st.composite
def fleets(draw):
    size = draw(st.integers(min_value=1, max_value=24))
    nodes = []
    for index in range(size):
        state = draw(st.sampled_from(["idle", "idle", "busy", "busy", "busy", "down", "drained_by_others"]))
        entry = {
            "name": "n%02d" % index,
            "domains": {"rack": draw(st.sampled_from(RACKS)), "leaf": draw(st.sampled_from(["l1", "l2"]))},
            "partitions": draw(st.lists(st.sampled_from(PARTITIONS), min_size=0, max_size=2, unique=True)),
            "gpus": draw(st.sampled_from([4, 8, 8])),
            "state": state,
            "canary": draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans()),
            "done": draw(st.integers(0, 9)) == 0,
        }
        if state == "busy":
            entry["job_end"] = draw(st.one_of(st.none(), st.integers(0, 500)))
        nodes.append(entry)
    config = {
        "max_unavailable": draw(st.one_of(st.integers(1, 6), st.sampled_from(["10%", "25%", "50%"]))),
        "per_domain": draw(
            st.one_of(
                st.none(),
                st.fixed_dictionaries({"rack": st.integers(1, 3)}),
                st.fixed_dictionaries({"rack": st.integers(1, 2), "leaf": st.integers(1, 3)}),
            )
        ),
        "partition_floor": draw(st.sampled_from([None, 0.3, 0.5, 0.75, 0.85, 1.0])),
        "granularity": draw(st.sampled_from([1, 50, 600])),
        "max_job_wait": draw(st.sampled_from([0, 100, 300, 10**9])),
        # None: the run waits for the jobs running now (until the latest ends); 0: it waits for none
        "deadline": draw(st.sampled_from([None, 0, 50])),
    }
    durations = {entry["name"]: draw(st.integers(1, 100)) for entry in nodes}
    return nodes, config, durations


def out_of_service_rules_hold(window, nodes, config):
    """Independent of the planner's bookkeeping: recount everything from the node list."""
    limits = window_input.Settings(config, len(nodes))
    out = [entry for entry in nodes if entry["state"] in ("down", "drained_by_others")]
    out += [entry for entry in nodes if entry["name"] in set(window.in_flight) | set(window.failed)]
    if window.in_flight:
        assert len(out) <= limits.max_unavailable
    for kind, limit in limits.per_domain.items():
        members = {}
        for entry in out:
            member = entry["domains"].get(kind)
            members.setdefault(member, []).append(entry["name"])
        for names in members.values():
            ours = [name for name in names if name in window.in_flight]
            assert not ours or len(names) <= limit, (kind, names)
    if limits.partition_floor is not None:
        for partition in PARTITIONS:
            total = sum(entry["gpus"] for entry in nodes if partition in entry["partitions"])
            gone = sum(entry["gpus"] for entry in out if partition in entry["partitions"])
            ours = [entry for entry in out if partition in entry["partitions"] and entry["name"] in window.in_flight]
            assert not ours or total - gone >= limits.partition_floor * total - 1e-9, (partition, total, gone)


def drive(nodes, config, durations, fail=frozenset(), deferred_at=None):
    """Run a window to its end; returns (window, timeline, admissions [(time, [names])]).

    ``deferred_at`` (a dict, when given) receives when each node was deferred: the time the window ran dry.
    """
    window = Window(nodes, config, now=0)
    heap, timeline, admissions, started_at = [], [], [], {}
    deferred_at = {} if deferred_at is None else deferred_at
    now = 0
    while True:
        started = window.admit(now)
        if started:
            admissions.append((now, started))
        out_of_service_rules_hold(window, nodes, config)
        for name in started:
            started_at[name] = now
            heapq.heappush(heap, (now + durations[name], name))
        if not heap:
            if window.defer_waiting(now):
                deferred_at.update((name, now) for name in window.deferred if name not in deferred_at)
                continue  # the rest may be blocked by a deferred canary now
            wake = window.next_change(now)
            if wake is not None:
                now = wake  # nothing runs: the window waits, in service, for the next job to near its end
                continue
            break
        now, name = heapq.heappop(heap)
        window.finish(name, name not in fail)
        timeline.append((name, started_at[name], now))
    return window, timeline, admissions


@settings(max_examples=200, deadline=None)
@given(fleets())
def test_property_no_rule_broken_and_everything_done_or_blocked(case):
    nodes, config, durations = case
    before = Window(nodes, config)
    blocked_at_start = set(before.blocked)
    deferred_at = {}
    window, timeline, admissions = drive(nodes, config, durations, deferred_at=deferred_at)
    assert check(timeline, nodes, config) == []
    assert window.finished
    assert not window.halted
    assert window.in_flight == []
    candidates = {e["name"] for e in nodes if not e["done"] and e["state"] in ("idle", "busy")}
    assert set(window.done) | set(window.remaining) | set(window.deferred) == candidates
    assert set(window.done).isdisjoint(window.remaining)
    # a deferred node was busy, its job not ending within max_job_wait when the window ran dry
    limits = window_input.Settings(config, len(nodes))
    for name in window.deferred:
        entry = next(e for e in nodes if e["name"] == name)
        assert entry["state"] == "busy"
        assert entry.get("job_end") is None or entry["job_end"] - deferred_at[name] > limits.max_job_wait
    # every admitted busy node's job ended within max_job_wait of its admission
    starts = {name: start for name, start, _end in timeline}
    for name, start in starts.items():
        entry = next(e for e in nodes if e["name"] == name)
        if entry["state"] == "busy":
            assert entry.get("job_end") is not None
            assert entry["job_end"] - start <= limits.max_job_wait
    # what is left is exactly what is blocked, and was blocked from the start (nothing we did can block a node)
    assert set(window.remaining) == set(window.blocked)
    assert set(window.remaining) <= blocked_at_start | {
        name for name in window.remaining if window.blocked[name].startswith("waits for the canary")
    }
    # every left-over node really cannot leave service alone: recheck it by hand
    down = [e for e in nodes if e["state"] in ("down", "drained_by_others")]
    for name in window.remaining:
        entry = next(e for e in nodes if e["name"] == name)
        if window.blocked[name].startswith("waits for the canary"):
            continue
        fits = len(down) + 1 <= limits.max_unavailable
        for kind, limit in limits.per_domain.items():
            same = [e for e in down if e["domains"].get(kind) == entry["domains"].get(kind)]
            fits = fits and len(same) + 1 <= limit
        if limits.partition_floor is not None:
            for partition in entry["partitions"]:
                total = sum(e["gpus"] for e in nodes if partition in e["partitions"])
                gone = sum(e["gpus"] for e in down if partition in e["partitions"]) + entry["gpus"]
                fits = fits and total - gone >= limits.partition_floor * total - 1e-9
        assert not fits, (name, window.blocked[name])
    # the canary (if any admitted) went first and alone, and nothing else started before it finished
    if admissions:
        _first_time, first = admissions[0]
        assert len(first) == 1
        # the first canary, or a later one when every canary before it was deferred (its job too long)
        ahead = window.canaries[: window.canaries.index(first[0])]
        assert all(name in window.deferred for name in ahead), (first, window.canaries, window.deferred)
        canary_end = next(end for name, _start, end in timeline if name == first[0])
        for when, names in admissions[1:]:
            assert when >= canary_end or set(names) <= set(window.canaries)


@settings(max_examples=200, deadline=None)
@given(fleets(), st.data())
def test_property_nothing_admitted_after_the_first_failure(case, data):
    nodes, config, durations = case
    candidates = sorted(e["name"] for e in nodes if not e["done"] and e["state"] in ("idle", "busy"))
    fail = set(data.draw(st.lists(st.sampled_from(candidates), max_size=3)) if candidates else [])
    window, timeline, admissions = drive(nodes, config, durations, fail)
    assert check(timeline, nodes, config) == []
    failures = [end for name, _start, end in timeline if name in fail]
    if not failures:
        assert not window.halted
        return
    first_failure = min(failures)
    assert window.halted
    # a node back at the very moment of the failure, but handled before it, may still let one start
    assert all(when <= first_failure for when, _names in admissions)
    assert window.in_flight == []  # nodes in flight at the failure were let finish
    assert set(window.failed) <= fail
    assert window.admit(first_failure + 1000) == []


@settings(max_examples=100, deadline=None)
@given(fleets())
def test_property_order_is_a_deterministic_permutation_of_the_candidates(case):
    nodes, config, _durations = case
    first = order(nodes, 100, granularity=config["granularity"])
    assert first == order(list(reversed(nodes)), 100, granularity=config["granularity"])
    candidates = sorted(e["name"] for e in nodes if not e["done"] and e["state"] in ("idle", "busy"))
    assert sorted(first) == candidates
    # canaries first; then idle (or ended) nodes before busy ones; unknown ends last
    kinds = []
    for name in first:
        entry = next(e for e in nodes if e["name"] == name)
        if entry["canary"]:
            kinds.append(0)
        elif entry["state"] == "idle" or (entry.get("job_end") is not None and entry["job_end"] <= 100):
            kinds.append(1)
        elif entry.get("job_end") is not None:
            kinds.append(2)
        else:
            kinds.append(3)
    assert kinds == sorted(kinds)


# Time-aware admission: a busy node takes a slot only when its job ends within max_job_wait.


def test_busy_node_beyond_the_wait_is_passed_over_in_service_and_admitted_when_its_end_comes_near():
    fleet = [node("a", rack="r1"), node("b", rack="r2", state="busy", job_end=5000), node("c", rack="r3")]
    window = Window(fleet, {"max_unavailable": 3, "max_job_wait": 3600}, now=0)
    assert window.canaries == ["a"]
    assert past_canary(window) == ["c"]  # b's job ends in 5000 s: it keeps running, c goes on
    assert window.remaining == ["b"]
    assert window.waiting_for_jobs(0) == {
        "b": "its job ends at 1970-01-01T01:23:20Z (EndTime, in 5000s), beyond max_job_wait 3600s; "
        "it keeps running, in service"
    }
    assert window.admit(1399) == []
    assert window.admit(1400) == ["b"]  # 5000 - 1400 = 3600: within the wait


def test_busy_node_within_the_wait_or_past_its_end_is_admitted():
    fleet = [node("a"), node("b", rack="r2", state="busy", job_end=3600), node("c", rack="r3", state="busy", job_end=1)]
    window = Window(fleet, {"max_unavailable": 3}, now=100)
    assert past_canary(window, now=100) == ["c", "b"]


def test_max_job_wait_zero_takes_only_nodes_without_jobs():
    fleet = [node("a"), node("b", rack="r2", state="busy", job_end=10)]
    window = Window(fleet, {"max_unavailable": 2, "max_job_wait": 0}, now=0)
    assert past_canary(window) == []
    assert window.admit(10) == ["b"]


def test_busy_node_without_a_known_end_waits_until_it_is_idle():
    fleet = [node("a"), node("b", rack="r2", state="busy")]
    window = Window(fleet, {"max_unavailable": 2, "max_job_wait": 10**9}, now=0)
    assert past_canary(window) == []
    assert "no known end" in window.waiting_for_jobs(0)["b"]
    window.update("b", "idle")
    assert window.admit(1) == ["b"]


def test_nodes_waiting_for_their_jobs_are_deferred_only_when_nothing_else_can_start():
    fleet = [node("a"), node("b", rack="r2", state="busy", job_end=90000), node("c", rack="r3", state="busy")]
    window = Window(fleet, {"max_unavailable": 1, "deadline": 0}, now=0)  # 0: the run waits for no job
    assert window.admit(0) == ["a"]
    assert window.defer_waiting(0) == {}  # a is in flight: nothing deferred yet
    window.finish("a", True)
    assert window.admit(10) == []
    assert not window.finished
    deferred = window.defer_waiting(10)
    assert sorted(deferred) == ["b", "c"]
    assert "1970-01-02T01:00:00Z" in deferred["b"]
    assert window.deferred == deferred
    assert window.remaining == []
    assert window.finished
    # deferred nodes never counted as out of service
    assert window.admit(10) == []
    assert window.done == ["a"]


def test_by_default_the_run_waits_in_service_for_every_job_running_now_and_ends():
    fleet = [node("a"), node("b", rack="r2", state="busy", job_end=90000), node("c", rack="r3", state="busy")]
    window = Window(fleet, {"max_unavailable": 1}, now=0)
    assert window.deadline == 90000  # the latest EndTime of the jobs running now
    assert window.admit(0) == ["a"]
    window.finish("a", True)
    # c's job has no time limit: named and left for a later run; b's job ends before the deadline: it waits
    deferred = window.defer_waiting(10)
    assert list(deferred) == ["c"]
    assert "no known end (no time limit in Slurm)" in deferred["c"]
    assert window.remaining == ["b"]
    assert not window.finished
    assert window.next_change(10) == 90000 - window_input.DEFAULT_MAX_JOB_WAIT  # when b's job nears its end
    assert window.admit(86399) == []
    assert window.admit(86400) == ["b"]
    window.finish("b", True)
    assert window.finished
    assert window.done == ["a", "b"]


def test_a_job_ending_after_the_deadline_is_deferred_at_once_and_all_once_it_passed():
    fleet = [
        node("a"),
        node("b", rack="r2", state="busy", job_end=90000),
        node("c", rack="r3", state="busy", job_end=20000),
    ]
    window = Window(fleet, {"max_unavailable": 1, "max_job_wait": 100, "deadline": 50000}, now=0)
    assert window.admit(0) == ["a"]
    window.finish("a", True)
    deferred = window.defer_waiting(10)
    assert list(deferred) == ["b"]
    assert "after the run's deadline 1970-01-01T13:53:20Z" in deferred["b"]
    assert window.next_change(10) == 19900
    # c's job got longer (a fresh read): now it too ends after the deadline, and is deferred
    window.observe([node("c", rack="r3", state="busy", job_end=60000)], now=19000)
    assert "ends at 1970-01-01T16:40:00Z (EndTime), after the run's deadline" in window.defer_waiting(19000)["c"]
    assert window.finished
    assert window.next_change(19000) is None


def test_the_deadline_is_a_setting_checked_like_the_others():
    assert window_input.Settings({"deadline": "1765000000"}).deadline == 1765000000.0
    with pytest.raises(ValueError, match="deadline is -1: set when the run stops waiting"):
        window_input.Settings({"deadline": -1})
    with pytest.raises(ValueError, match="deadline is 'tomorrow'"):
        window_input.Settings({"deadline": "tomorrow"})


def test_defer_waiting_does_nothing_after_a_halt():
    window = Window([node("a"), node("b", rack="r2", state="busy", job_end=90000)], {"max_unavailable": 2})
    window.admit(0)
    window.finish("a", False)
    assert window.halted
    assert window.defer_waiting(0) == {}


def test_a_node_whose_jobs_outlast_its_wait_is_back_in_service_and_deferred():
    fleet = [node("a"), node("b", rack="r1"), node("c", rack="r1")]
    window = Window(fleet, {"max_unavailable": 3, "per_domain": {"rack": 1}}, now=0)
    (canary,) = window.admit(0)
    window.finish(canary, ok=True, deferred=True)
    assert canary in window.deferred
    assert canary not in window.done
    assert "returned to service" in window.deferred[canary]
    assert not window.halted
    # its slot and its rack are free again; the chosen canary did not pass: the next node is the canary, alone
    assert window.canaries == ["b"]
    assert window.admit(1) == ["b"]
    window.finish("b", True)
    assert window.admit(2) == ["c"]


def test_a_deferred_named_canary_holds_the_rest_back():
    fleet = [node("a", canary=True), node("b", rack="r2")]
    window = Window(fleet, {"max_unavailable": 2}, now=0)
    assert window.admit(0) == ["a"]
    window.finish("a", ok=True, deferred=True)
    assert window.admit(1) == []
    assert window.blocked == {"b": "waits for the canary a, which is deferred (%s)" % window.deferred["a"]}
    assert window.finished


def test_deferred_finish_must_be_back_in_service():
    window = Window([node("a")], {})
    window.admit(0)
    with pytest.raises(ValueError, match="ok must be true"):
        window.finish("a", ok=False, deferred=True)


def test_a_deferred_node_after_the_canary_gives_its_slot_back_without_halting():
    fleet = [node("a"), node("b", rack="r2"), node("c", rack="r2")]
    window = Window(fleet, {"max_unavailable": 2, "per_domain": {"rack": 1}}, now=0)
    assert past_canary(window) == ["b"]
    window.finish("b", ok=True, deferred=True)
    assert window.admit(1) == ["c"]
    assert not window.halted


def test_the_chosen_canary_is_a_node_that_can_start_now():
    fleet = [node("a", state="busy", job_end=90000), node("b", state="busy", job_end=100), node("c", rack="r2")]
    window = Window(fleet, {"max_unavailable": 3}, now=0)
    assert window.canaries == ["c"]


def test_a_chosen_canary_deferred_for_its_job_is_replaced():
    fleet = [node("a", state="busy", job_end=90000), node("b", rack="r2")]
    window = Window(fleet, {"max_unavailable": 2, "deadline": 0}, now=0)  # 0: the run waits for no job
    window.update("b", "busy", 80000)  # both busy now: the chosen canary b cannot start
    assert window.admit(0) == []
    assert sorted(window.defer_waiting(0)) == ["a", "b"]
    assert window.finished


def test_a_named_canary_waits_for_its_job_and_holds_the_rest_back_until_deferred():
    fleet = [node("a", state="busy", job_end=90000, canary=True), node("b", rack="r2")]
    window = Window(fleet, {"max_unavailable": 2, "deadline": 0}, now=0)  # 0: the run waits for no job
    assert window.admit(0) == []
    assert window.defer_waiting(0) == {"a": window.deferred["a"]}
    assert window.blocked == {"b": "waits for the canary a, which is deferred (%s)" % window.deferred["a"]}
    assert window.finished


def test_reserved_nodes_are_left_alone_and_not_counted_out_of_service():
    fleet = [node("a"), node("b", rack="r2", state="reserved"), node("c", rack="r3")]
    window = Window(fleet, {"max_unavailable": 1}, now=0)
    assert window.reserved == ["b"]
    assert window.unavailable == []
    assert "b" not in window.remaining
    assert window.admit(0) == ["a"]
    window.finish("a", True)
    assert window.admit(0) == ["c"]
    assert check([("a", 0, 1), ("c", 1, 2)], fleet, {"max_unavailable": 1}) == []
    preview = plan(Window(fleet, {"max_unavailable": 1}, 0), 0)
    assert preview["reserved"] == ["b"]
    assert "left alone: b (in a Slurm reservation that is not ours)" in window_preview.describe(preview)


def test_plan_lists_the_nodes_waiting_for_their_jobs():
    fleet = [node("a"), node("b", rack="r2", state="busy", job_end=7200)]
    preview = plan(Window(fleet, {"max_unavailable": 2, "max_job_wait": 3600}, 0), 0)
    assert preview["settings"]["max_job_wait"] == 3600
    assert list(preview["waiting_for_jobs"]) == ["b"]
    lines = window_preview.describe(preview)
    expected = "waits for its job, in service: b (its job ends at 1970-01-01T02:00:00Z"
    assert any(line.startswith(expected) for line in lines)


@pytest.mark.parametrize("wait", [-1, True, "1h", 1.5j])
def test_bad_max_job_wait_is_refused(wait):
    with pytest.raises(ValueError, match="max_job_wait is"):
        window_input.Settings({"max_job_wait": wait})


def test_max_job_wait_accepts_digits_and_defaults_to_an_hour():
    assert window_input.Settings({"max_job_wait": "600"}).max_job_wait == 600
    assert window_input.Settings({}).max_job_wait == window_input.DEFAULT_MAX_JOB_WAIT == 3600
