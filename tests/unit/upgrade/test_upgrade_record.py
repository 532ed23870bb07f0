"""Stack fact content, resume-after-abort decision and the audit report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import run_journal, upgrade_record

OLD = {
    "driver_version": "550.127.05",
    "kernel_modules": "proprietary",
    "cuda_version": "12.4",
    "packages": [
        {
            "name": "nvidia-driver",
            "version": "550.127.05-1",
            "component": "driver",
            "spec": "nvidia-driver=550.127.05-1",
        }
    ],
}
NEW = {
    "driver_version": "550.127.08",
    "kernel_modules": "proprietary",
    "cuda_version": "12.4",
    "packages": [
        {
            "name": "nvidia-driver",
            "version": "550.127.08-1",
            "component": "driver",
            "spec": "nvidia-driver=550.127.08-1",
        }
    ],
}
T0, T1, T2 = "2026-12-02T10:00:00Z", "2026-12-02T10:05:00Z", "2026-12-02T11:00:00Z"


def drift(installed_differs=(), loaded_differs=False, reboot_required=False):
    return {
        "drift": {
            "installed_differs": list(installed_differs),
            "loaded_differs": loaded_differs,
            "reboot_required": reboot_required,
        }
    }


HEALTHY = {"healthy": True, "summary": {"failed": []}}
SICK = {"healthy": False, "summary": {"failed": ["ecc_errors[gpu2]: 3 volatile uncorrectable"]}}


def test_first_upgrade_without_record_uses_the_fallback_previous():
    fact = upgrade_record.begin({}, NEW, "r1", T0, fallback_previous=OLD)
    assert fact["previous"]["driver_version"] == "550.127.05"
    assert fact["previous"]["resolved"] == OLD
    assert fact["pending"] == {"run_id": "r1", "target_driver_version": "550.127.08", "started_at": T0}
    assert fact["current"] is None
    assert upgrade_record.rollback_stack(fact) == OLD
    json.dumps(fact)  # the fact file is JSON


def test_without_record_or_fallback_no_rollback_is_possible():
    fact = upgrade_record.begin("", NEW, "r1", T0)
    assert fact["previous"] is None
    assert upgrade_record.rollback_stack(fact) is None


def test_upgrade_then_next_upgrade_records_what_was_current():
    fact = upgrade_record.finish(upgrade_record.begin({}, OLD, "r0", T0), OLD, "r0", T1, "upgraded")
    assert fact["current"]["driver_version"] == "550.127.05"
    assert fact["pending"] is None
    fact = upgrade_record.begin(fact, NEW, "r1", T2)
    assert fact["previous"]["resolved"] == OLD
    assert fact["pending"]["run_id"] == "r1"
    done = upgrade_record.finish(fact, NEW, "r1", T2, "upgraded")
    assert done["current"]["resolved"] == NEW
    assert done["previous"]["resolved"] == OLD
    assert done["history"][-1] == {
        "run_id": "r1",
        "from": "550.127.05",
        "to": "550.127.08",
        "result": "upgraded",
        "at": T2,
    }


def test_a_node_resumed_on_the_target_keeps_its_previous_stack():
    """Upgraded and recorded, but left drained by us (a controller lost before its give-back): the re-run takes it
    again to gate it and give it back; a rollback must still go back to the stack before the upgrade."""
    upgraded = upgrade_record.finish(
        upgrade_record.begin({}, NEW, "r1", T0, fallback_previous=OLD), NEW, "r1", T1, "upgraded"
    )
    again = upgrade_record.begin(upgraded, NEW, "r2", T2)
    assert again["previous"]["resolved"] == OLD
    assert upgrade_record.rollback_stack(again) == OLD
    assert again["pending"]["run_id"] == "r2"


def test_an_aborted_run_keeps_the_original_previous_on_resume():
    begun = upgrade_record.begin({}, NEW, "r1", T0, fallback_previous=OLD)
    # the run died half-way; the re-run must not record the half-upgraded node as "previous"
    resumed = upgrade_record.begin(begun, NEW, "r2", T1, fallback_previous=NEW)
    assert resumed["previous"]["resolved"] == OLD
    assert resumed["pending"] == {"run_id": "r2", "target_driver_version": "550.127.08", "started_at": T0}


def test_rollback_makes_previous_current_and_failure_keeps_pending():
    begun = upgrade_record.begin({}, NEW, "r1", T0, fallback_previous=OLD)
    rolled = upgrade_record.finish(begun, NEW, "r1", T1, "rolled_back")
    assert rolled["current"]["resolved"] == OLD
    assert rolled["pending"] is None
    failed = upgrade_record.finish(begun, NEW, "r1", T1, "rollback_failed")
    assert failed["pending"]["run_id"] == "r1"
    assert failed["history"][-1]["result"] == "rollback_failed"
    with pytest.raises(ValueError, match="unknown node status"):
        upgrade_record.finish(begun, NEW, "r1", T1, "great")


def test_history_is_bounded():
    fact = {}
    for i in range(upgrade_record.HISTORY_LENGTH + 5):
        fact = upgrade_record.finish(upgrade_record.begin(fact, NEW, "r%d" % i, T0), NEW, "r%d" % i, T1, "upgraded")
    assert len(fact["history"]) == upgrade_record.HISTORY_LENGTH
    assert fact["history"][-1]["run_id"] == "r14"


def test_a_fact_of_another_schema_is_ignored():
    assert upgrade_record.load_fact({"schema": 99, "current": "x"}) == upgrade_record.empty_fact()


@pytest.mark.parametrize(
    ("stack", "health", "fact", "decision"),
    [
        (drift(), HEALTHY, None, "skip"),
        (drift([{"name": "nvidia-driver"}]), HEALTHY, None, "upgrade"),
        (drift(loaded_differs=True), HEALTHY, None, "upgrade"),
        (drift(reboot_required=True), HEALTHY, None, "upgrade"),
        ({}, HEALTHY, None, "upgrade"),
        (drift(), SICK, None, "exclude"),
        (drift([{"name": "nvidia-driver"}]), SICK, None, "exclude"),
        # aborted run: ours, half-way, expected to be unhealthy (driver/library mismatch)
        (
            drift(reboot_required=True),
            {"healthy": False, "msg": "mismatch"},
            {"schema": 1, "pending": {"run_id": "r1"}},
            "upgrade",
        ),
    ],
)
def test_decide(stack, health, fact, decision):
    assert upgrade_record.decide(stack, health, fact)["decision"] == decision


def test_exclude_names_the_failed_checks():
    assert "ecc_errors[gpu2]" in upgrade_record.decide(drift(), SICK)["reason"]
    assert "no verdict" in upgrade_record.decide(drift(), {})["reason"]


# check-mode results of gpuops.cluster.kernel_package, as the module returns them (plugins/modules/kernel_package.py)
KERNEL_MOVES = {
    "changed": True,
    "kernel": "6.1.0-28-amd64",
    "running": "6.1.0-18-amd64",
    "reboot": True,
    "installed": ["linux-image-6.1.0-28-amd64", "linux-headers-6.1.0-28-amd64"],
    "verified": "",
}
KERNEL_INSTALLED_NOT_BOOTED = dict(KERNEL_MOVES, changed=False, installed=[])
KERNEL_STAYS = dict(KERNEL_MOVES, changed=False, running="6.1.0-28-amd64", reboot=False, installed=[])
KERNEL_HEADERS_MISSING = dict(KERNEL_STAYS, changed=True, installed=["linux-headers-6.1.0-28-amd64"])
KERNEL_UNRESOLVED = {"failed": True, "msg": "kernel 6.9.9: the index holds no such kernel", "running": "6.1.0-18-amd64"}
KERNEL_SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


@pytest.mark.parametrize(
    ("stack", "kernel", "decision"),
    [
        # issue 26 item 5: a kernel-only move takes the node into the window
        (drift(), KERNEL_MOVES, "upgrade"),
        (drift(), KERNEL_INSTALLED_NOT_BOOTED, "upgrade"),
        (drift(), KERNEL_HEADERS_MISSING, "upgrade"),
        (drift(), KERNEL_STAYS, "skip"),
        (drift(), KERNEL_SKIPPED, "skip"),
        (drift(), None, "skip"),
        (drift([{"name": "nvidia-driver"}]), KERNEL_STAYS, "upgrade"),
        # fail closed: a kernel the node cannot move to leaves it out before anything moves
        (drift(), KERNEL_UNRESOLVED, "exclude"),
        (drift([{"name": "nvidia-driver"}]), KERNEL_UNRESOLVED, "exclude"),
    ],
)
def test_decide_with_gpuops_kernel(stack, kernel, decision):
    assert upgrade_record.decide(stack, HEALTHY, None, kernel)["decision"] == decision


def test_the_kernel_decisions_say_why():
    moves = upgrade_record.decide(drift(), HEALTHY, None, KERNEL_MOVES)["reason"]
    assert moves == "kernel moves from 6.1.0-18-amd64 to 6.1.0-28-amd64 (gpuops_kernel); the stack is on the target"
    unresolved = upgrade_record.decide(drift(), HEALTHY, None, KERNEL_UNRESOLVED)["reason"]
    assert unresolved == "gpuops_kernel cannot be moved to here: kernel 6.9.9: the index holds no such kernel"
    # an unhealthy node is left out for its health, a resumed one resumed, whatever the kernel says
    assert upgrade_record.decide(drift(), SICK, None, KERNEL_UNRESOLVED)["reason"].startswith("unhealthy")
    pending = {"schema": 1, "pending": {"run_id": "r1"}}
    assert upgrade_record.decide(drift(), SICK, pending, KERNEL_UNRESOLVED)["decision"] == "upgrade"


PLAN = {"order": ["a", "b", "c"], "canary": ["a"], "first_window": ["a"], "after_canary": ["b", "c"]}


def test_report_completed():
    records = [
        {
            "host": "a",
            "status": "upgraded",
            "before": {"driver_version": "550.127.05"},
            "after": {"driver_version": "550.127.08"},
            "timings": {
                "started": 100,
                "drain_started": 101,
                "drained": 110,
                "upgraded": 150,
                "gated": 170,
                "finished": 171,
            },
        },
        {"host": "b", "status": "upgraded", "timings": {"started": 200, "finished": 260}},
        {"host": "c", "status": "upgraded"},
        {"host": "d", "status": "skipped", "reason": "already on the target stack and healthy"},
        {"host": "e", "status": "excluded", "reason": "unhealthy before the upgrade: xid"},
    ]
    audit = upgrade_record.report("r1", PLAN, records, T0, T1, {"on_failure": "halt"})
    # e was left out unhealthy: the plan ran to its end, but not every node is on the target
    assert audit["result"] == "partial"
    assert audit["not_upgraded"] == [{"host": "e", "status": "excluded", "reason": "unhealthy before the upgrade: xid"}]
    assert audit["halted_by"] is None
    assert [n["host"] for n in audit["nodes"]] == ["a", "b", "c", "d", "e"]
    assert audit["nodes"][0]["durations"] == {"drain": 9.0, "upgrade": 40.0, "gate": 20.0, "total": 71.0}
    assert audit["nodes"][0]["canary"] is True
    assert audit["nodes"][3]["canary"] is False
    assert audit["counts"] == {"upgraded": 3, "skipped": 1, "excluded": 1}
    lines = upgrade_record.summary_lines(audit)
    assert lines[0] == "run r1: partial (excluded 1, skipped 1, upgraded 3)"
    assert "550.127.05 -> 550.127.08 in 71.0s" in lines[1]
    assert lines[-1] == "NOT UPGRADED: e (excluded); see their reasons above"
    json.dumps(audit)


def test_report_completed_when_every_node_is_upgraded_or_skipped():
    records = [
        {"host": "a", "status": "upgraded"},
        {"host": "b", "status": "upgraded"},
        {"host": "c", "status": "skipped"},
    ]
    audit = upgrade_record.report("r1", PLAN, records, T0, T1)
    assert audit["result"] == "completed"
    assert audit["not_upgraded"] == []
    assert not any(line.startswith(("NOT UPGRADED", "HALTED")) for line in upgrade_record.summary_lines(audit))


def test_report_deferred_with_continue_is_partial():
    records = [
        {"host": "a", "status": "upgraded"},
        {"host": "b", "status": "deferred", "halt": False, "reason": "jobs still running"},
        {"host": "c", "status": "upgraded"},
    ]
    audit = upgrade_record.report("r1", PLAN, records, T0, T1, {"on_drain_timeout": "continue"})
    assert audit["result"] == "partial"
    assert audit["halted_by"] is None
    assert audit["not_upgraded"] == [{"host": "b", "status": "deferred", "reason": "jobs still running"}]
    assert upgrade_record.summary_lines(audit)[-1] == "NOT UPGRADED: b (deferred); see their reasons above"


def test_report_lists_reserved_nodes_as_left_alone():
    plan = dict(PLAN, reserved=["r"], reserved_reasons={"r": "in a Slurm reservation (idle+reserved): left alone"})
    records = [{"host": host, "status": "upgraded"} for host in PLAN["order"]]
    audit = upgrade_record.report("r1", plan, records, T0, T1)
    assert audit["result"] == "partial"
    assert audit["not_upgraded"] == [
        {"host": "r", "status": "reserved", "reason": "in a Slurm reservation (idle+reserved): left alone"}
    ]


def test_report_halted_marks_the_rest_not_reached():
    records = [{"host": "a", "status": "failed", "reason": "health gate: xid[gpu0]"}]
    audit = upgrade_record.report("r1", PLAN, records, T0, T1)
    assert audit["result"] == "halted"
    assert audit["halted_by"] == {"host": "a", "status": "failed", "reason": "health gate: xid[gpu0]"}
    assert [n["status"] for n in audit["nodes"]] == ["failed", "not_reached", "not_reached"]
    assert upgrade_record.summary_lines(audit)[-1] == "HALTED at a (failed): no further node was touched"


def test_report_halt_on_deferred_and_nothing_to_do():
    audit = upgrade_record.report("r1", PLAN, [{"host": "a", "status": "deferred", "halt": True}], T0, T1)
    assert audit["result"] == "halted"
    assert audit["halted_by"]["status"] == "deferred"
    assert upgrade_record.report("r2", {"order": []}, [], T0, T1)["result"] == "nothing_to_do"


def test_report_a_node_blocked_by_the_window_is_partial():
    records = [{"host": "a", "status": "upgraded"}, {"host": "b", "status": "blocked", "reason": "blocked: floor"}]
    audit = upgrade_record.report("r1", {"order": ["a", "b"], "canary": ["a"]}, records, T0, T1)
    assert audit["result"] == "partial"
    assert audit["not_upgraded"] == [{"host": "b", "status": "blocked", "reason": "blocked: floor"}]


WINDOW = {
    "nodes": [{"name": "a", "domains": {"rack": "r1"}}, {"name": "b", "domains": {"rack": "r1"}}, {"name": "c"}],
    "settings": {"max_unavailable": 2, "per_domain": {"rack": 1}},
}


def test_report_window_timeline_makespan_and_no_violation():
    records = [{"host": name, "status": "upgraded"} for name in ("a", "b", "c")]
    slots = {
        "a": {"admitted_at": 100.0, "released_at": 110.0},
        "b": {"admitted_at": 110.0, "released_at": 130.0},
        "c": {"admitted_at": 110.0, "released_at": 115.0},
    }
    audit = upgrade_record.report("r1", PLAN, records, T0, T1, window=WINDOW, slots=slots)
    assert audit["window"]["timeline"] == [["a", 100.0, 110.0], ["b", 110.0, 130.0], ["c", 110.0, 115.0]]
    assert audit["window"]["makespan"] == 30.0
    assert audit["window"]["violations"] == []
    assert audit["nodes"][1]["slot"] == slots["b"]


def test_report_lists_what_broke_a_rule_of_the_window():
    records = [{"host": name, "status": "upgraded"} for name in ("a", "b")]
    slots = {"a": {"admitted_at": 100.0, "released_at": 120.0}, "b": {"admitted_at": 110.0, "released_at": 130.0}}
    audit = upgrade_record.report("r1", PLAN, records, T0, T1, window=WINDOW, slots=slots)
    assert [violation["rule"] for violation in audit["window"]["violations"]] == ["per_domain"]


FLOOR_WINDOW = {
    "nodes": [{"name": name, "gpus": 8, "partitions": ["gpu"]} for name in ("a", "b", "c", "d")],
    "settings": {"max_unavailable": 2, "drain_ahead": 1, "partition_floor": 0.5},
}


def journal_of(*entries) -> dict:
    return run_journal.replay(
        [run_journal.entry("start", 90, run_id="r1", target="t", resumed_from=None, resumed=[]), *entries]
    )


def test_report_shows_the_drains_ahead_and_checks_them_against_the_floor():
    plan = {"order": ["a", "b", "c", "d"], "canary": ["a"]}
    records = [{"host": name, "status": "upgraded"} for name in ("a", "b", "c", "d")]
    entry = run_journal.entry
    within = journal_of(
        entry("admit", 100, node="a", canary=True, resume=False),
        entry("release", 110, node="a", ok=True, deferred=False, halt=False),
        entry("admit", 110, node="b", canary=False, resume=False),
        entry("drain_ahead", 110, node="c", ok=True, job_end=400),
        entry("release", 130, node="b", ok=True, deferred=False, halt=False),
        entry("admit", 140, node="c", canary=False, resume=False),
        entry("release", 160, node="c", ok=True, deferred=False, halt=False),
        entry("end", 161),
    )
    audit = upgrade_record.report("r1", plan, records, T0, T1, window=FLOOR_WINDOW, journal=within)
    assert audit["window"]["drained_ahead"] == [["c", 110, 140]]
    assert audit["window"]["violations"] == []
    # a second drain ahead while b and c are out: three of four nodes unschedulable, two drained ahead
    beyond = journal_of(
        entry("admit", 100, node="a", canary=True, resume=False),
        entry("release", 110, node="a", ok=True, deferred=False, halt=False),
        entry("admit", 110, node="b", canary=False, resume=False),
        entry("drain_ahead", 110, node="c", ok=True, job_end=400),
        entry("drain_ahead", 115, node="d", ok=True, job_end=500),
        entry("undrain", 120, node="d", ok=True),
        entry("release", 130, node="b", ok=True, deferred=False, halt=False),
        entry("admit", 140, node="c", canary=False, resume=False),
        entry("release", 160, node="c", ok=True, deferred=False, halt=False),
        entry("end", 161),
    )
    audit = upgrade_record.report("r1", plan, records, T0, T1, window=FLOOR_WINDOW, journal=beyond)
    assert audit["window"]["drained_ahead"] == [["c", 110, 140], ["d", 115, 120]]
    assert sorted(violation["rule"] for violation in audit["window"]["violations"]) == [
        "drain_ahead",
        "partition_floor",
    ]


KUBERNETES = Path(__file__).resolve().parents[2] / "fixtures" / "kubernetes"


def k8s_info(name: str) -> dict:
    """A registered kubernetes.core.k8s_info result around a recorded API object."""
    return {"changed": False, "api_found": True, "resources": [json.loads((KUBERNETES / name).read_text())]}


def test_slurm_drain_record_from_the_module_result():
    result = {
        "changed": True,
        "action": "drain",
        "ours": True,
        "pre_existing": False,
        "timed_out": False,
        "waited": 14.2,
        "node": {"name": "gpu1", "reason": "gpuops-upgrade[r1]: rolling upgrade"},
    }
    assert upgrade_record.drain_record("slurm", slurm=result) == {
        "adapter": "slurm",
        "ours": True,
        "pre_existing": False,
        "timed_out": False,
        "reason": "gpuops-upgrade[r1]: rolling upgrade",
        "waited": 14.2,
    }


def test_slurm_drain_record_without_a_result_fails():
    with pytest.raises(ValueError, match=r"no result of gpuops\.cluster\.slurm_drain: skipped"):
        upgrade_record.drain_record("slurm", slurm={"skipped": True, "msg": "skipped"})


def test_kubernetes_node_cordoned_before_is_not_ours():
    record = upgrade_record.drain_record(
        "kubernetes", k8s_node=k8s_info("node-cordoned.json"), k8s_drain={"changed": True}, node_name="gpu-a02"
    )
    assert record["ours"] is False
    assert record["pre_existing"] is True
    assert record["timed_out"] is False
    assert record["blocking_pods"] == []


def test_kubernetes_schedulable_node_drained_by_us():
    record = upgrade_record.drain_record(
        "kubernetes", k8s_node=k8s_info("node-schedulable.json"), k8s_drain={"changed": True}, node_name="gpu-a01"
    )
    assert (record["ours"], record["pre_existing"], record["timed_out"]) == (True, False, False)


def test_kubernetes_failed_drain_names_the_pods_left():
    pods = json.loads((KUBERNETES / "pods-on-gpu-a01.json").read_text())
    record = upgrade_record.drain_record(
        "kubernetes",
        k8s_node=k8s_info("node-schedulable.json"),
        k8s_drain={"failed": True, "msg": "Drain failed: timed out waiting for pods"},
        k8s_pods={"resources": pods["items"]},
        node_name="gpu-a01",
    )
    assert record["timed_out"] is True
    assert record["reason"] == "Drain failed: timed out waiting for pods"
    expected = [
        "%s/%s" % (p["namespace"], p["name"]) for p in upgrade_record.kubernetes_node.blocking_pods(pods, "gpu-a01")
    ]
    assert record["blocking_pods"] == expected
    assert expected


def test_kubernetes_node_not_found_says_what_to_set():
    with pytest.raises(ValueError, match="gpuops_upgrade_kubernetes_node_name"):
        upgrade_record.drain_record("kubernetes", k8s_node={"resources": []}, node_name="gpu-zz")


def test_no_adapter_and_unknown_adapter():
    assert upgrade_record.drain_record("none") == {
        "adapter": "none",
        "ours": False,
        "pre_existing": False,
        "timed_out": False,
    }
    with pytest.raises(ValueError, match="unknown drain adapter 'slrum'"):
        upgrade_record.drain_record("slrum")


def test_survey_keeps_the_decision_the_window_entry_and_the_record_of_a_node_not_upgraded():
    stack = drift()
    stack["drift"]["installed_driver_version"] = "580.65.06"
    skipped = upgrade_record.survey("n1", stack, HEALTHY, None, None, {"rack": "r1"}, "node001")
    assert skipped == {
        "decision": {"decision": "skip", "reason": "already on the target stack and healthy"},
        "entry": {"host": "n1", "done": True, "domains": {"rack": "r1"}, "scheduler_name": "node001"},
        "record": {
            "host": "n1",
            "status": "skipped",
            "reason": "already on the target stack and healthy",
            "before": {"driver_version": "580.65.06"},
            "after": {"driver_version": "580.65.06"},
        },
    }
    excluded = upgrade_record.survey("n2", stack, SICK, None, None, {}, None)
    assert excluded["record"]["status"] == "excluded"
    assert excluded["entry"] == {"host": "n2", "done": True, "domains": {}, "scheduler_name": "n2"}
    moving = upgrade_record.survey("n3", stack, HEALTHY, None, KERNEL_MOVES, {}, None)
    assert moving["decision"]["decision"] == "upgrade"
    assert moving["entry"]["done"] is False
    assert moving["record"] is None


def replayed_of(*items) -> dict:
    """A journal's entries, replayed: ``(event, at, fields)`` each."""
    return run_journal.replay([run_journal.entry(event, at, **fields) for event, at, fields in items])


PAYLOAD = {
    "run_id": "r2",
    "started_at": "2026-12-05T10:00:00+00:00",
    "plan": {"order": ["b", "c", "d", "e"], "canary": ["b"]},
    "window": {"nodes": [{"name": name} for name in "abcdef"], "settings": {"max_unavailable": 1}},
    "settings": {"drain": "slurm"},
    "survey": [
        {"host": "a", "status": "skipped", "reason": "already on the target stack and healthy"},
        {"host": "f", "status": "skipped", "reason": "already on the target stack and healthy"},
    ],
}


def test_plan_lines_and_the_report_payload_read_the_survey_records_of_the_nodes_not_upgraded():
    skipped = {"host": "a", "status": "skipped", "reason": "already on the target stack and healthy"}
    nodes = [
        {"inventory_hostname": "a", "rolling_upgrade_survey_record": skipped},
        {"inventory_hostname": "b", "rolling_upgrade_survey_record": None},
    ]
    window = {"lines": ["order: b"], "order": ["b"], "nodes": [{"name": "b"}], "settings": {"max_unavailable": 1}}
    upgrade = {"drain": "slurm", "on_failure": "halt", "plan_only": True, "max_job_wait": 600}
    assert upgrade_record.plan_lines(window, "r1", upgrade, nodes, ["b: no dcgmi"]) == [
        "run r1, drain adapter slurm, on failure halt, plan only: nothing moves",
        "order: b",
        "a: already on the target stack and healthy",
        "gate would fail: b: no dcgmi",
    ]
    payload = upgrade_record.report_payload("r1", "2026-12-05T10:00:00+00:00", window, upgrade, nodes)
    assert payload == {
        "run_id": "r1",
        "started_at": "2026-12-05T10:00:00+00:00",
        "plan": {"order": ["b"], "settings": {"max_unavailable": 1}},
        "window": {"nodes": [{"name": "b"}], "settings": {"max_unavailable": 1}},
        "settings": {
            "drain": "slurm",
            "on_failure": "halt",
            "on_drain_timeout": None,
            "max_job_wait": 600,
            "window": {"max_unavailable": 1},
        },
        "survey": [skipped],
    }
    # no node reached the window: the survey's records alone
    assert upgrade_record.journal_records(payload) == ([skipped], {})


def test_the_journal_gives_each_node_its_record_and_slot():
    """b released with its record; c not admitted (its slot task's record); d admitted, then left the play (the
    strategy's why); e admitted and never back (lost); a and f skipped by the survey."""
    upgraded = {"host": "b", "status": "upgraded", "reason": "on the target stack, gated"}
    deferred = {"host": "c", "status": "deferred", "reason": "its job ends later"}
    replayed = replayed_of(
        ("start", 1, {"run_id": "r2", "target": "t", "report": PAYLOAD}),
        ("admit", 2, {"node": "b"}),
        ("release", 3, {"node": "b", "ok": True, "record": upgraded, "slot": {"admitted_at": 2, "released_at": 3}}),
        ("not_admitted", 4, {"node": "c", "record": deferred, "slot": {"admitted": False}}),
        ("admit", 5, {"node": "d"}),
        ("release", 6, {"node": "d", "ok": False, "why": "left the play: unreachable", "slot": {"admitted": True}}),
        ("admit", 7, {"node": "e"}),
    )
    records, slots = upgrade_record.journal_records(PAYLOAD, replayed)
    assert sorted((record["host"], record["status"]) for record in records) == [
        ("a", "skipped"),
        ("b", "upgraded"),
        ("c", "deferred"),
        ("d", "failed"),
        ("e", "failed"),
        ("f", "skipped"),
    ]
    by_host = {record["host"]: record for record in records}
    assert by_host["d"] == {"host": "d", "status": "failed", "halt": True, "reason": "left the play: unreachable"}
    assert by_host["e"] == {"host": "e", "status": "failed", "halt": True, "reason": upgrade_record.LOST_REASON}
    assert slots == {"b": {"admitted_at": 2, "released_at": 3}, "c": {"admitted": False}, "d": {"admitted": True}}
    audit = upgrade_record.journal_report(PAYLOAD, "2026-12-05T10:10:00+00:00", replayed)
    assert audit["result"] == "halted"
    assert audit["halted_by"]["host"] == "d"
    assert [node["host"] for node in audit["nodes"]] == ["b", "c", "d", "e", "a", "f"]
    assert audit["nodes"][0]["slot"] == {"admitted_at": 2, "released_at": 3}
    assert audit["plan"] == PAYLOAD["plan"]
    assert audit["settings"] == PAYLOAD["settings"]
    assert audit["window"]["timeline"] == [["b", 2.0, 3.0], ["d", 5.0, 6.0]]


def test_the_journals_records_stand_across_the_runs_it_holds():
    """A run continuing one whose controller was lost: b was upgraded by that run, and this run's survey found it on
    the target (skipped); the first run's record is the one reported. c, passed by the first run and skipped by
    this one, has this run's record; the first run's slots and losses are not this run's."""
    first = dict(PAYLOAD, run_id="r1", started_at="2026-12-05T09:00:00+00:00")
    second = dict(PAYLOAD, survey=[{"host": "b", "status": "skipped"}, {"host": "c", "status": "skipped"}])
    upgraded = {"host": "b", "status": "upgraded"}
    replayed = replayed_of(
        ("start", 1, {"run_id": "r1", "target": "t", "report": first}),
        ("admit", 2, {"node": "b"}),
        ("release", 3, {"node": "b", "ok": True, "record": upgraded, "slot": {"admitted_at": 2}}),
        ("not_admitted", 4, {"node": "c", "record": {"host": "c", "status": "deferred"}, "slot": {}}),
        ("admit", 5, {"node": "e"}),
        ("start", 10, {"run_id": "r2", "target": "t", "report": second}),
    )
    assert replayed["report"] == second
    records, slots = upgrade_record.journal_records(second, replayed)
    assert sorted((record["host"], record["status"]) for record in records) == [("b", "upgraded"), ("c", "skipped")]
    assert slots == {}
