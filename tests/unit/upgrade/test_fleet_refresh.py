"""Fresh state during the run: when the window reads the fleet again, and what the window makes of it."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import fleet_refresh
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.fleet_refresh import RefreshSchedule
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window


def node(name, rack="r1", state="idle", job_end=None, **extra):
    fields = {"name": name, "domains": {"rack": rack}, "partitions": ["batch"], "gpus": 8, "state": state}
    if job_end is not None:
        fields["job_end"] = job_end
    fields.update(extra)
    return fields


def seen(name, state="idle", job_end=None):
    return {"name": name, "state": state, "job_end": job_end}


# The schedule: after each release, every interval while nodes wait, one read at a time.


def test_a_read_is_due_after_a_release_and_every_interval():
    schedule = RefreshSchedule(60, now=0)
    assert schedule.due(59) is None
    assert schedule.due(60) == "interval"
    schedule.released(10)
    assert schedule.due(11) == "release"
    assert schedule.holds(11)


def test_one_read_at_a_time_and_a_release_during_it_asks_for_one_more():
    schedule = RefreshSchedule(60, now=0)
    schedule.started(100, "interval")
    assert schedule.due(500) is None
    schedule.released(101)
    assert schedule.holds(102)  # a release not read since
    read = schedule.finished(103, True, {"jobs_ended": ["a"]})
    assert read == {"at": 100, "took": 3, "why": "interval", "ok": True, "changes": {"jobs_ended": ["a"]}}
    assert schedule.due(104) == "release"
    schedule.started(104, "release")
    assert schedule.holds(105)
    assert not schedule.fresh
    schedule.finished(106, True)
    assert schedule.fresh
    assert not schedule.holds(106)
    assert [read["why"] for read in schedule.reads] == ["interval", "release"]


def test_admission_waits_for_the_read_after_a_release_at_most_the_hold_limit():
    schedule = RefreshSchedule(60, now=0)
    schedule.released(10)
    assert schedule.holds(10 + fleet_refresh.HOLD_LIMIT - 1)
    assert not schedule.holds(10 + fleet_refresh.HOLD_LIMIT)


def test_a_failed_read_is_recorded_and_releases_the_hold():
    schedule = RefreshSchedule(30, now=0)
    schedule.released(1)
    schedule.started(1, "release")
    read = schedule.finished(2, False, error="slurmctld did not answer")
    assert read["ok"] is False
    assert read["error"] == "slurmctld did not answer"
    assert not schedule.holds(2)
    assert schedule.due(32) == "interval"  # retried at the next occasion


def test_interval_zero_reads_after_releases_only():
    schedule = RefreshSchedule(0, now=0)
    assert schedule.due(10**6) is None
    schedule.released(5)
    assert schedule.due(6) == "release"


@pytest.mark.parametrize("interval", [-1, "1m", True, None])
def test_a_bad_interval_is_refused(interval):
    with pytest.raises(ValueError, match="refresh_interval is"):
        RefreshSchedule(interval, now=0)


# What slurm_fleet returned, as the window's observations, named by inventory host.


def test_observations_name_nodes_by_host_and_say_why_nodes_are_out():
    slurm = [
        {"name": "node01", "state": "busy", "job_end": 900, "slurm_state": "mixed"},
        {
            "name": "node02",
            "state": "drained_by_others",
            "job_end": None,
            "reason": "HW-1",
            "slurm_state": "idle+drain",
        },
        {"name": "node03", "state": "idle", "job_end": None, "slurm_state": "idle+reserved"},
    ]
    nodes, reasons = fleet_refresh.observations(
        slurm, {"gpu01": "node01", "gpu02": "node02", "gpu03": "node03", "gpu04": "node04"}
    )
    assert nodes == [
        seen("gpu01", "busy", 900),
        seen("gpu02", "drained_by_others"),
        seen("gpu03", "reserved"),
    ]
    assert reasons == {
        "gpu02": "drained by someone else (HW-1): not touched",
        "gpu03": "in a Slurm reservation (idle+reserved): left alone, not upgraded",
    }


# Window.observe: new jobs, jobs that ended early, foreign drains and downs, reservations.


def test_a_node_that_gained_a_job_waits_for_it_and_is_deferred_when_nothing_else_can_start():
    window = Window([node("a", canary=True), node("b")], {"max_unavailable": 1, "max_job_wait": 600}, now=0)
    assert window.admit(0) == ["a"]
    changes = window.observe([seen("b", "busy", 86400)], 10)
    assert changes["new_jobs"] == ["b"]
    window.finish("a", True)
    assert window.admit(20) == []
    assert list(window.defer_waiting(20)) == ["b"]


def test_a_job_that_ended_early_lets_its_node_in_sooner():
    window = Window([node("a", canary=True), node("b", state="busy", job_end=86400)], {"max_unavailable": 2}, now=0)
    assert window.admit(0) == ["a"]
    window.finish("a", True)
    assert window.admit(1) == []  # its job ends in a day
    assert window.observe([seen("b", "idle")], 2)["jobs_ended"] == ["b"]
    assert window.admit(2) == ["b"]


def test_a_moved_job_end_is_taken():
    window = Window([node("a", canary=True), node("b", state="busy", job_end=86400)], {"max_job_wait": 600}, now=0)
    assert window.observe([seen("b", "busy", 300)], 1)["job_end_moved"] == ["b"]
    assert window.nodes["b"].job_end == 300


def test_a_waiting_node_drained_by_someone_else_leaves_the_plan_and_counts_as_out():
    fleet = [node("a", canary=True), node("b"), node("c"), node("d")]
    window = Window(fleet, {"max_unavailable": 2}, now=0)
    window.finish(*window.admit(0), ok=True)
    changes = window.observe([seen("b", "drained_by_others")], 1, {"b": "drained by someone else (HW-7): not touched"})
    assert changes["left"] == {"b": "drained_by_others"}
    assert window.gone == {"b": "drained by someone else (HW-7): not touched; seen during the run"}
    assert "b" in window.unavailable
    assert "b" not in window.remaining
    assert window.admit(1) == ["c"]  # b out of service: one slot left, not two


def test_a_node_down_after_its_upgrade_counts_and_counts_no_more_once_back():
    window = Window([node("a", canary=True), node("b"), node("c")], {"max_unavailable": 1}, now=0)
    window.finish(*window.admit(0), ok=True)
    assert window.observe([seen("a", "down")], 1)["left"] == {"a": "down"}
    assert "a" not in window.gone  # upgraded already: counted, not a node of the plan that left it
    assert window.admit(1) == []  # a is out of service: the window of one is full
    assert window.observe([seen("a", "idle")], 2)["back"] == ["a"]
    assert window.admit(2) == ["b"]


def test_a_waiting_node_in_a_reservation_leaves_the_plan_in_service():
    window = Window([node("a", canary=True), node("b"), node("c")], {"max_unavailable": 1}, now=0)
    window.finish(*window.admit(0), ok=True)
    window.observe([seen("b", "reserved")], 1)
    assert window.reserved == ["b"]
    assert window.gone["b"].startswith("in a Slurm reservation that is not ours")
    assert window.admit(1) == ["c"]


def test_nodes_in_flight_failed_or_to_resume_are_ours_and_not_judged():
    fleet = [node("a", canary=True), node("b"), node("r", resume=True)]
    window = Window(fleet, {"max_unavailable": 3, "halt_on_failure": False}, now=0)
    assert window.admit(0) == ["r"]
    assert window.admit(0) == []  # the canary goes alone
    window.finish("r", True)
    assert window.admit(0) == ["a"]
    changes = window.observe([seen("a", "drained_by_others"), seen("r", "drained_by_others")], 1)
    assert changes["left"] == {"r": "drained_by_others"}  # r is done: someone else's drain now counts
    assert "a" not in window.unavailable


def test_a_chosen_canary_that_left_is_replaced_and_a_named_one_holds_the_rest():
    chosen = Window([node("a", state="busy", job_end=10**6), node("b"), node("c")], {"max_unavailable": 2}, now=0)
    (canary,) = chosen.canaries
    chosen.observe([seen(canary, "down")], 1)
    assert canary not in chosen.canaries
    assert chosen.canaries
    assert chosen.admit(1) == chosen.canaries
    named = Window([node("a", canary=True, state="busy", job_end=10**6), node("b")], {"max_unavailable": 2}, now=0)
    named.observe([seen("a", "drained_by_others")], 1)
    assert named.admit(1) == []
    assert named.blocked == {
        "b": "waits for the canary a, which left the plan (drained by someone else; seen during the run)"
    }
    assert named.finished


def test_an_unknown_state_is_refused():
    window = Window([node("a")], now=0)
    with pytest.raises(ValueError, match="observe: the state of a"):
        window.observe([seen("a", "draining")], 1)


def test_admission_on_observed_state_never_exceeds_the_window():
    """Whatever Slurm says between admissions, nothing is admitted beyond the nodes out of service it counts."""
    fleet = [node("n%d" % i, rack="r%d" % (i % 3)) for i in range(12)]
    window = Window(fleet, {"max_unavailable": 3, "per_domain": {"rack": 1}}, now=0)
    states = ["idle", "busy", "drained_by_others", "down", "reserved"]
    for step in range(60):
        admitted = window.admit(step)
        if admitted:
            out = set(window.in_flight) | set(window.unavailable)
            assert len(out) <= 3, (step, out)
            for rack in ("r0", "r1", "r2"):
                assert sum(1 for name in out if window.nodes[name].domains["rack"] == rack) <= 1
        for name in window.in_flight[:1]:
            window.finish(name, True)
        name = "n%d" % (step * 7 % 12)
        state = states[step % 5]
        window.observe([seen(name, state, step + 100 if state == "busy" else None)], step)
