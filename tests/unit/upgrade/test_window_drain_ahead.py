"""Drain ahead (issue 17, item 2): busy nodes next in line drained ahead of their slot, within the floor and the
limit, first when their job ends, given back when no slot is free for them; never drained with no job."""

from __future__ import annotations

import random

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import window_input, window_preview
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_audit import check
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_preview import plan

DAY = 86400


def node(name, rack="r1", partitions=("batch",), state="busy", job_end=DAY, gpus=8, **extra):
    fields = {"name": name, "domains": {"rack": rack}, "partitions": list(partitions), "gpus": gpus, "state": state}
    if state == "busy":
        fields["job_end"] = job_end
    fields.update(extra)
    return fields


def past_canary(window, now=0):
    (canary,) = window.admit(now)
    window.finish(canary, True)
    return window.admit(now)


@pytest.mark.parametrize("bad", [-1, True, "two", 1.5])
def test_a_bad_drain_ahead_is_refused(bad):
    with pytest.raises(ValueError, match="drain_ahead is"):
        window_input.Settings({"drain_ahead": bad})


def test_drain_ahead_is_off_by_default_and_takes_digits():
    assert window_input.Settings({}).drain_ahead == 0
    assert window_input.Settings({"drain_ahead": "3"}).drain_ahead == 3
    fleet = [node("c", state="idle", canary=True)] + [node("b%d" % i) for i in range(4)]
    window = Window(fleet, {"max_unavailable": 2}, now=0)
    assert past_canary(window) == []
    assert window.drain_ahead(0) == []


def test_the_busy_nodes_next_in_line_are_drained_ahead_up_to_the_limit():
    fleet = [node("c", state="idle", canary=True)] + [node("b%d" % i, job_end=DAY * (i + 1)) for i in range(5)]
    window = Window(fleet, {"max_unavailable": 2, "drain_ahead": 3}, now=0)
    assert window.drain_ahead(0) == []  # the canary phase: nothing ahead
    assert past_canary(window) == []
    assert window.drain_ahead(0) == ["b0", "b1", "b2"]  # soonest job end first
    assert window.drained_ahead == ["b0", "b1", "b2"]
    assert window.drain_ahead(1) == []  # the limit is reached
    # not out of service: the window still has both its slots
    assert window.in_flight == []
    assert window.waiting_for_jobs(0).keys() == {"b0", "b1", "b2", "b3", "b4"}


def test_nothing_is_drained_ahead_while_the_window_is_full_or_in_waves():
    fleet = [node("c", state="idle", canary=True), node("i1", state="idle"), node("i2", state="idle"), node("b1")]
    window = Window(fleet, {"max_unavailable": 2, "drain_ahead": 2}, now=0)
    assert past_canary(window) == ["i1", "i2"]
    assert window.drain_ahead(0) == []  # full: the idle nodes upgrade, no need to drain b1 yet
    window.finish("i1", True)
    assert window.drain_ahead(0) == ["b1"]  # room it cannot fill
    waves = Window(fleet, {"max_unavailable": 2, "drain_ahead": 2, "barrier": True}, now=0)
    past_canary(waves)
    waves.finish("i1", True)
    waves.finish("i2", True)
    assert waves.admit(0) == []
    assert waves.drain_ahead(0) == []


def test_the_partition_floor_bounds_the_drains_ahead_with_the_nodes_out_of_service():
    # 10 nodes of 8 GPUs in one partition, floor 0.7: at most 3 nodes not schedulable, one down already
    fleet = [node("c", state="idle", canary=True), node("d", state="down")]
    fleet += [node("b%d" % i, job_end=DAY + i) for i in range(8)]
    window = Window(fleet, {"max_unavailable": 5, "partition_floor": 0.7, "drain_ahead": 5}, now=0)
    assert past_canary(window) == []
    assert window.drain_ahead(0) == ["b0", "b1"]  # the down node and two drained: 3 of 10
    # an idle node now finds the partition at its floor: a drain ahead keeps it schedulable no more
    window.update("b7", "idle")
    assert window.admit(0) == []
    assert window.blocked == {}  # without the drains ahead it would fit: not blocked, it waits


def test_a_node_drained_ahead_takes_its_slot_first_when_its_job_ends():
    fleet = [node("c", state="idle", canary=True), node("a", job_end=DAY), node("b", job_end=2 * DAY)]
    fleet += [node("z", job_end=3 * DAY)]
    window = Window(fleet, {"max_unavailable": 1, "drain_ahead": 1, "max_job_wait": 600}, now=0)
    assert past_canary(window) == []
    assert window.drain_ahead(0) == ["a"]
    # z's job and a's both end early; a was drained ahead: it goes first, z waits in service
    window.update("z", "idle")
    window.update("a", "idle")
    assert window.admit(100) == ["a"]
    assert window.drained_ahead == []
    assert window.undrain_due() == []
    window.finish("a", True)
    assert window.admit(200) == ["z"]


def test_a_node_drained_ahead_takes_its_slot_when_its_end_comes_within_the_wait():
    fleet = [node("c", state="idle", canary=True), node("a", job_end=DAY)]
    window = Window(fleet, {"max_unavailable": 1, "drain_ahead": 1, "max_job_wait": 600}, now=0)
    past_canary(window)
    assert window.drain_ahead(0) == ["a"]
    assert window.admit(DAY - 601) == []
    assert window.admit(DAY - 600) == ["a"]


def test_a_node_drained_ahead_whose_job_ended_without_a_free_slot_is_given_back():
    fleet = [node("c", state="idle", canary=True), node("i", state="idle"), node("a"), node("b")]
    window = Window(fleet, {"max_unavailable": 2, "drain_ahead": 2}, now=0)
    assert past_canary(window) == ["i"]
    assert window.drain_ahead(0) == ["a", "b"]
    window.update("a", "busy", 50)  # a's job now ends sooner: ready within the wait
    assert window.admit(0) == ["a"]  # the window is full now: i and a
    window.update("b", "idle")  # b's job ended, no slot: back to its scheduler, never drained and idle
    assert window.admit(10) == []
    assert window.undrain_due() == ["b"]
    assert window.undrain_due() == []
    assert window.drained_ahead == []
    assert "b" in window.remaining
    window.finish("i", True)
    assert window.admit(20) == ["b"]  # an ordinary idle node waiting in service


def test_a_deferred_node_drained_ahead_leaves_the_floor():
    fleet = [node("c", state="idle", canary=True), node("a", job_end=5 * DAY), node("i", state="idle")]
    settings = {"max_unavailable": 2, "drain_ahead": 1, "partition_floor": 0.3, "deadline": 0}  # 0: waits for no job
    window = Window(fleet, settings, now=0)
    (canary,) = window.admit(0)
    window.finish(canary, True)
    assert window.admit(0) == ["i"]
    assert window.drain_ahead(0) == ["a"]
    window.finish("i", True)
    assert window.admit(1) == []
    assert window.defer_waiting(1).keys() == {"a"}
    assert window.drained_ahead == []
    assert window.finished


def test_a_node_drained_ahead_by_a_crashed_run_starts_drained_ahead():
    fleet = [node("c", state="idle", canary=True), node("a", drained_ahead=True), node("b"), node("d", state="down")]
    window = Window(fleet, {"max_unavailable": 2, "partition_floor": 0.5}, now=0)
    assert window.drained_ahead == ["a"]
    assert window.resumed == []
    preview = plan(Window(fleet, {"max_unavailable": 2, "partition_floor": 0.5}, 0), 0)
    assert preview["drained_ahead"] == ["a"]
    assert any("drained ahead by an earlier run" in line for line in window_preview.describe(preview))
    # the canary phase: a node drained ahead whose job ends is given back, not left drained and idle
    window.update("a", "idle")
    (canary,) = window.admit(0)
    assert canary == "c"
    assert window.undrain_due() == ["a"]
    # a node drained ahead cannot be both resumed (admitted at once) and drained ahead
    assert window_input.Node("x", state="busy", job_end=1, resume=True, drained_ahead=True).drained_ahead is False


def test_check_counts_drains_ahead_on_the_floor_and_the_limit():
    fleet = [node("n%d" % i, gpus=8) for i in range(4)]
    settings = {"max_unavailable": 1, "partition_floor": 0.5, "drain_ahead": 1}
    assert check([("n0", 0, 10)], fleet, settings, ahead=[("n1", 0, 10)]) == []
    found = check([("n0", 0, 10)], fleet, settings, ahead=[("n1", 0, 10), ("n2", 5, 10)])
    assert {violation["rule"] for violation in found} == {"drain_ahead", "partition_floor"}
    # an interval ahead that ends when the node's slot starts does not overlap it
    assert check([("n1", 10, 20)], fleet, settings, ahead=[("n1", 0, 10)]) == []


@pytest.mark.parametrize("seed", range(12))
def test_random_rollouts_with_drain_ahead_break_no_rule_and_strand_no_node(seed):
    """Jobs end at random (earlier than Slurm's end, or not); after every step no node drained ahead is idle."""
    rng = random.Random(seed)
    racks = ["r%d" % i for i in range(3)]
    fleet = [node("c", state="idle", canary=True, rack="r0")]
    real_end = {"c": 0}
    for index in range(18):
        name = "n%02d" % index
        busy = rng.random() < 0.8
        limit_end = rng.choice([100, 400, 2000, 5000])
        real_end[name] = rng.uniform(0, limit_end) if busy else 0
        fleet.append(
            node(name, rack=rng.choice(racks), state="busy" if busy else "idle", job_end=limit_end if busy else None)
        )
    settings = {
        "max_unavailable": 3,
        "per_domain": {"rack": 2},
        "partition_floor": 0.6,
        "drain_ahead": rng.choice([1, 2, 4]),
        "max_job_wait": 300,
        "halt_on_failure": False,
    }
    window = Window(fleet, settings, now=0)
    drained_since: dict = {}
    ahead_spans, out_spans, started_at = [], [], {}
    now = 0.0

    def take(now):
        started = window.admit(now)
        for name in started:
            started_at[name] = now
            if name in drained_since:
                ahead_spans.append((name, drained_since.pop(name), now))
        return started

    for _step in range(400):
        for name in window.remaining:
            if real_end[name] <= now and window.nodes[name].state == "busy":
                window.update(name, "idle")
        take(now)
        for name in window.undrain_due():
            ahead_spans.append((name, drained_since.pop(name), now))
        for name in window.drain_ahead(now):
            drained_since[name] = now
        # the rule: no node drained ahead is idle once the window has decided
        assert not [name for name in window.drained_ahead if window.nodes[name].state == "idle"]
        assert sorted(window.drained_ahead) == sorted(drained_since)
        for name in list(window.in_flight):
            if now - started_at[name] >= 60:
                window.finish(name, True)
                out_spans.append((name, started_at[name], now))
        if window.finished:
            for name in window.drained_ahead:
                ahead_spans.append((name, drained_since.pop(name), now))
            break
        if not window.in_flight and not take(now):
            for name in window.defer_waiting(now):
                if name in drained_since:
                    ahead_spans.append((name, drained_since.pop(name), now))
        now += 20
    assert drained_since == {}
    assert ahead_spans or seed in (3, 6)  # most fleets drain some node ahead
    assert check(out_spans, fleet, settings, ahead=ahead_spans) == []


def test_admit_ahead_takes_only_the_nodes_drained_ahead_whose_job_ended():
    fleet = [node("c", state="idle", canary=True), node("a"), node("b"), node("i", state="busy", job_end=2 * DAY)]
    window = Window(fleet, {"max_unavailable": 1, "drain_ahead": 2}, now=0)
    past_canary(window)
    assert window.drain_ahead(0) == ["a", "b"]
    window.update("i", "idle")
    window.update("b", "idle")
    window.update("a", "idle")
    # while admission waits for a read, a node drained ahead whose job ended is not left drained: a goes, b back
    assert window.admit_ahead(10) == ["a"]
    assert window.undrain_due() == ["b"]
    assert "i" in window.remaining  # ordinary nodes wait for the fresh read
