"""A node's record in a rolling upgrade: every event, the transitions refused, and the filters over them."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuops.cluster.plugins.filter import upgrade_node
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import node_record, upgrade_record
from hypothesis import given, settings
from hypothesis import strategies as st

OLD, NEW = "550.127.05", "550.127.08"
T = 1_764_000_000.0
START = {
    "host": "gpu1",
    "admitted": True,
    "adapter": "slurm",
    "slot_reason": "admitted: 1 of 2 out of service",
    "decision_reason": "stack differs from the target",
    "before_driver": OLD,
    "before_loaded": OLD,
    "target": NEW,
    "gate_level": "standard",
}
# what gpuops.cluster.upgrade_drain returns for state=drained (a registered result)
SLURM_DRAINED = {
    "adapter": "slurm",
    "state": "drained",
    "node": "gpu1",
    "action": "drain",
    "ours": True,
    "pre_existing": False,
    "timed_out": False,
    "reason": "gpuops-upgrade r1: upgrading the NVIDIA stack",
    "waited": 12.5,
    "blocking_pods": [],
    "changed": True,
    "msg": "slurm node gpu1: drain (ours)",
    "invocation": {"module_args": {"kubeconfig": "secret"}},
}
HEALTHY = {"changed": False, "healthy": True, "summary": {"counts": {"pass": 40}, "failed": []}, "level": "standard"}
SICK = {"healthy": False, "summary": {"failed": ["xid[gpu2]: Xid 79, fallen off the bus"]}}


def start(**changes):
    return node_record.step(None, "start", T, **dict(START, **changes))


def in_progress(**changes):
    record = start(**changes)
    record = node_record.step(record, "drain_started", T + 1)
    return node_record.step(record, "drained", T + 20, drain=SLURM_DRAINED, on_drain_timeout="halt")


def gated(result=None, **changes):
    result = HEALTHY if result is None else result
    record = node_record.step(in_progress(**changes), "upgraded", T + 200)
    return node_record.step(record, "gated", T + 230, level="standard", result=result)


def upgraded(**changes):
    return node_record.step(gated(**changes), "upgraded_ok", T + 231, after_driver=NEW, after_loaded=NEW)


def failed(**data):
    return node_record.step(gated(SICK), "failed", T + 232, **data)


def timed_out(**drain):
    record = node_record.step(start(), "drain_started", T + 1)
    return node_record.step(
        record,
        "drained",
        T + 10,
        drain=dict(SLURM_DRAINED, timed_out=True, **drain),
        on_drain_timeout="halt",
        drain_timeout=10,
    )


def with_status(status):
    """A record with ``status``, reached through events."""
    if status == "in_progress":
        return in_progress()
    if status == "blocked":
        return start(admitted=False, slot_reason="blocked: rack r1 full of down nodes")
    if status == "not_reached":
        return start(admitted=False, slot_reason="the run halted")
    if status == "upgraded":
        return upgraded()
    if status == "deferred":
        return timed_out()
    if status == "failed":
        return failed(task="Health gate", msg="unhealthy")
    if status == "rolled_back":
        return node_record.step(
            with_status("failed"),
            "rolled_back",
            T + 300,
            target_driver=OLD,
            after_driver=OLD,
            after_loaded=OLD,
            gate=HEALTHY,
            level="standard",
        )
    if status == "rollback_failed":
        return node_record.step(with_status("failed"), "rollback_failed", T + 300, task="Reinstall", msg="apt")
    # statuses the survey gives (no event makes them): a record as the playbook writes it
    return {"host": "gpu1", "status": status, "reason": "survey", "after": {"driver_version": OLD}}


# Today's playbook (playbooks/rolling_upgrade.yml before this module), its set_fact expressions
# verbatim, rendered with Ansible's own templating, to show the events give the same record.
TODAY = {
    "drain_timeout": (
        "{{ gpuops_upgrade_node | combine({'status': 'drain_timeout',"
        " 'halt': gpuops_upgrade_on_drain_timeout | default('halt') == 'halt',"
        " 'reason': 'jobs still running after the drain timeout; left drained, not upgraded' ~ blocking,"
        " 'timings': {'finished': now(utc=true).timestamp()}}, recursive=true) }}"
    ),
    "blocking": (
        "{{ (': pods ' ~ gpuops_upgrade_node.drain.blocking_pods | join(', '))"
        " if gpuops_upgrade_node.drain.blocking_pods | default([]) else '' }}"
    ),
    "drained": (
        "{{ gpuops_upgrade_node | combine({'drain': drain,"
        " 'timings': {'drained': now(utc=true).timestamp()}}, recursive=true) }}"
    ),
    "gated": (
        "{{ gpuops_upgrade_node | combine({'gates': gpuops_upgrade_node.gates + [{'phase': 'gate',"
        " 'level': gpuops_upgrade_gate,"
        " 'healthy': gpuops_upgrade_gate_result.healthy | default(false),"
        " 'failed': gpuops_upgrade_gate_result.summary.failed"
        " | default([gpuops_upgrade_gate_result.msg | default('no verdict')])}],"
        " 'timings': {'gated': now(utc=true).timestamp()}}, recursive=true) }}"
    ),
    "upgraded_ok": (
        "{{ gpuops_upgrade_node | combine({'status': 'upgraded', 'reason': 'on the target stack, gated'"
        " ~ ('' if gpuops_upgrade_node.drain.ours or gpuops_upgrade_adapter == 'none'"
        " else '; drain of its other owner kept'),"
        " 'after': {'driver_version': ansible_facts.gpu_stack.drift.installed_driver_version,"
        " 'loaded_version': ansible_facts.gpu_stack.drift.loaded_driver_version},"
        " 'timings': {'finished': now(utc=true).timestamp()}}, recursive=true) }}"
    ),
    "failed": (
        "{{ gpuops_upgrade_node | combine({'status': 'failed', 'halt': true,"
        " 'reason': (ansible_failed_task.name | default('a step')) ~ ': '"
        " ~ (ansible_failed_result.msg | default('failed'))}) }}"
    ),
    "rolled_back": (
        "{{ gpuops_upgrade_node | combine({'status': 'rolled_back',"
        " 'reason': gpuops_upgrade_node.reason ~ '; rolled back to ' ~ gpuops_upgrade_rollback_to.driver_version"
        " ~ ', gated',"
        " 'after': {'driver_version': ansible_facts.gpu_stack.drift.installed_driver_version,"
        " 'loaded_version': ansible_facts.gpu_stack.drift.loaded_driver_version},"
        " 'gates': gpuops_upgrade_node.gates + [{'phase': 'rollback_gate',"
        " 'level': gpuops_upgrade_gate_level | default('standard'),"
        " 'healthy': gpuops_upgrade_rollback_gate.healthy,"
        " 'failed': gpuops_upgrade_rollback_gate.summary.failed | default([])}]}) }}"
    ),
    "rollback_failed": (
        "{{ gpuops_upgrade_node | combine({'status': 'rollback_failed', 'reason': gpuops_upgrade_node.reason"
        " ~ '; rollback: ' ~ (ansible_failed_task.name | default('')) ~ ': '"
        " ~ (ansible_failed_result.msg | default('failed'))}) }}"
    ),
}


def today(name, now, **variables):
    """Today's expression ``name`` rendered by Ansible at ``now`` (epoch seconds)."""
    text = TODAY[name].replace("now(utc=true).timestamp()", "gpuops_test_now")
    templar = Templar(loader=DataLoader(), variables=dict(variables, gpuops_test_now=now))
    return templar.template(trust_as_template(text))


def facts(driver, loaded):
    return {"gpu_stack": {"drift": {"installed_driver_version": driver, "loaded_driver_version": loaded}}}


# start ---------------------------------------------------------------------------------------


def test_start_admitted():
    record = start()
    assert record == {
        "host": "gpu1",
        "status": "in_progress",
        "reason": "stack differs from the target",
        "before": {"driver_version": OLD, "loaded_version": OLD},
        "after": None,
        "target": NEW,
        "gate_level": "standard",
        "gates": [],
        "drain": {"adapter": "slurm"},
        "timings": {"started": T},
        "halt": False,
    }
    assert not node_record.is_final(record)


@pytest.mark.parametrize(
    ("slot_reason", "status"),
    [
        ("blocked: partition gpu would fall below its floor", "blocked"),
        ("blocked", "blocked"),
        ("the run halted before the window admitted it", "not_reached"),
        ("not blocked by a rule: the run halted", "not_reached"),
        ("unavailable: left alone: drained by someone else (LAB-43): not touched; seen during the run", "unavailable"),
        ("reserved: left alone: in a Slurm reservation that is not ours; seen during the run", "reserved"),
    ],
)
def test_start_not_admitted_is_blocked_or_not_reached(slot_reason, status):
    record = node_record.step({}, "start", T, **{**START, "admitted": False, "slot_reason": slot_reason})
    assert record["status"] == status
    assert record["reason"] == slot_reason
    assert record["after"] == record["before"] == {"driver_version": OLD, "loaded_version": OLD}
    assert record["after"] is not record["before"]
    assert record["timings"] == {"started": T, "finished": T}
    assert node_record.is_final(record)


def test_start_not_admitted_needs_the_slot_reason():
    with pytest.raises(ValueError, match="did not admit needs slot_reason"):
        node_record.step(None, "start", T, **{**START, "admitted": False, "slot_reason": None})


def test_start_takes_jinja_values():
    record = node_record.step(
        None,
        "start",
        str(T),
        **{**START, "host": trust_as_template("gpu1"), "admitted": "True", "adapter": trust_as_template("none")},
    )
    assert record["status"] == "in_progress"
    assert record["host"].__class__ is str
    assert record["timings"]["started"] == T
    assert record["drain"] == {"adapter": "none"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"host": ""}, "needs host"),
        ({"admitted": "maybe"}, "admitted must be true or false"),
        ({"adapter": "lsf"}, "adapter is 'lsf': expected one of slurm, kubernetes, none"),
    ],
)
def test_start_checks_its_data(changes, message):
    with pytest.raises(ValueError, match=message):
        start(**changes)


def test_start_needs_host_admitted_and_adapter():
    with pytest.raises(ValueError, match="event 'start' needs admitted, adapter"):
        node_record.step(None, "start", T, host="gpu1")


def test_start_twice_is_refused():
    with pytest.raises(
        ValueError, match=r"event 'start' is not allowed from status 'in_progress' \(host gpu1\): .* from no record"
    ):
        node_record.step(start(), "start", T, **START)


# drain ---------------------------------------------------------------------------------------


def test_drain_started_notes_the_time():
    record = node_record.step(start(), "drain_started", T + 1)
    assert record["timings"] == {"started": T, "drain_started": T + 1}
    assert record["status"] == "in_progress"


def test_drained_keeps_the_drain_and_drops_the_task_result():
    record = node_record.step(
        node_record.step(start(), "drain_started", T + 1), "drained", T + 20, drain=SLURM_DRAINED, drain_timeout="3600"
    )
    assert record["status"] == "in_progress"
    assert record["drain"] == {
        "adapter": "slurm",
        "action": "drain",
        "ours": True,
        "pre_existing": False,
        "timed_out": False,
        "reason": "gpuops-upgrade r1: upgrading the NVIDIA stack",
        "waited": 12.5,
        "blocking_pods": [],
        "timeout": 3600,
    }
    assert record["timings"]["drained"] == T + 20
    assert "finished" not in record["timings"]
    assert record["halt"] is False


def test_drain_keys_cover_what_drain_record_gives():
    node = {"resources": [{"metadata": {"name": "gpu1"}, "spec": {}}]}
    for drain in (
        upgrade_record.drain_record("slurm", slurm={"ours": True, "waited": 1, "node": {"reason": "x"}}),
        upgrade_record.drain_record("kubernetes", k8s_node=node, k8s_drain={}, k8s_pods={}, node_name="gpu1"),
        upgrade_record.drain_record("none"),
    ):
        assert set(drain) <= set(node_record.DRAIN_KEYS)
        record = node_record.step(start(adapter=drain["adapter"]), "drained", T, drain=drain)
        assert record["drain"] == drain


def test_drained_as_today_without_a_timeout():
    """Today's playbook combined the drain record in; so does the event (no drain_timeout: no timeout key)."""
    before = node_record.step(start(), "drain_started", T + 1)
    drain = upgrade_record.drain_record("slurm", slurm={"ours": True, "waited": 3.0, "node": {"reason": "r"}})
    expected = today("drained", T + 20, gpuops_upgrade_node=before, drain=drain)
    assert node_record.step(before, "drained", T + 20, drain=drain) == expected


@pytest.mark.parametrize(
    ("policy", "halt"),
    [("halt", True), ("continue", False)],
)
@pytest.mark.parametrize("pods", [[], ["ml/train-0", "ml/train-1"]])
def test_jobs_outlasting_the_wait_defer_the_node_and_halt_or_continue(policy, halt, pods):
    before = node_record.step(start(adapter="kubernetes"), "drain_started", T + 1)
    drain = {
        "adapter": "kubernetes",
        "ours": True,
        "pre_existing": False,
        "timed_out": True,
        "reason": "timeout reached while pods were still running",
        "blocking_pods": pods,
    }
    record = node_record.step(before, "drained", T + 10, drain=drain, on_drain_timeout=policy)
    assert record["status"] == "deferred"
    assert record["halt"] is halt
    reason = "jobs still running after the wait (max_job_wait); returned to service, not upgraded"
    assert record["reason"] == reason + (": pods ml/train-0, ml/train-1" if pods else "")
    assert record["timings"]["finished"] == T + 10
    assert node_record.is_final(record)
    # a deferred node is back in service: its slot comes back ok, never as a node left drained
    assert node_record.slot_release(record) == {"ok": True, "halt": halt, "deferred": True}


def test_deferred_reason_names_the_wait_and_the_job_end():
    before = node_record.step(start(), "drain_started", T + 1)
    record = node_record.step(
        before,
        "drained",
        T + 10,
        drain=dict(SLURM_DRAINED, timed_out=True),
        drain_timeout=3600,
        job_end=1_800_000_000,
    )
    assert record["reason"] == (
        "jobs still running after 3600s (max_job_wait); returned to service, not upgraded; "
        "its job ends at 2027-01-15T08:00:00Z (Slurm's EndTime)"
    )
    with pytest.raises(ValueError, match="job_end must be epoch seconds"):
        node_record.step(before, "drained", T, drain=dict(SLURM_DRAINED, timed_out=True), job_end="soon")


def test_on_drain_timeout_defaults_to_continue():
    record = node_record.step(start(), "drained", T, drain=dict(SLURM_DRAINED, timed_out=True))
    assert record["halt"] is False


def test_a_node_the_window_deferred_for_its_job_starts_deferred():
    record = start(admitted=False, slot_reason="deferred: its job ends at 2027-01-15T08:00:00Z (EndTime, in 9000s)")
    assert record["status"] == "deferred"
    assert record["reason"].startswith("deferred: its job ends")
    assert node_record.is_final(record)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"drain": "slurm"}, "drain .* must be a mapping"),
        ({"drain": {"adapter": "slurm", "ours": True}}, "with timed_out"),
        (
            {"drain": {"failed": True, "msg": "sinfo: connection refused"}},
            "the drain failed: sinfo: connection refused",
        ),
        ({"drain": dict(SLURM_DRAINED, adapter="kubernetes")}, "adapter 'kubernetes', the node's record says 'slurm'"),
        ({"drain": SLURM_DRAINED, "on_drain_timeout": "skip"}, "on_drain_timeout is 'skip': expected one of halt"),
        ({"drain": SLURM_DRAINED, "drain_timeout": "1h"}, "drain_timeout must be a whole number"),
        ({"drain": SLURM_DRAINED, "drain_timeout": -1}, "drain_timeout must be a whole number"),
        ({"drain": dict(SLURM_DRAINED, blocking_pods="a")}, "blocking_pods must be a list"),
        ({"drain": dict(SLURM_DRAINED, timed_out="perhaps")}, "drain.timed_out must be true or false"),
        ({}, "event 'drained' needs drain"),
        ({"drain": SLURM_DRAINED, "on_drain_timout": "halt"}, "does not take on_drain_timout"),
    ],
)
def test_drained_checks_its_data(data, message):
    with pytest.raises(ValueError, match=message):
        node_record.step(start(), "drained", T, **data)


# upgrade and gate ----------------------------------------------------------------------------


def test_upgraded_notes_the_time():
    record = node_record.step(in_progress(), "upgraded", T + 200)
    assert record["timings"]["upgraded"] == T + 200
    assert record["status"] == "in_progress"


@pytest.mark.parametrize(
    ("result", "entry"),
    [
        (HEALTHY, {"healthy": True, "failed": []}),
        (SICK, {"healthy": False, "failed": ["xid[gpu2]: Xid 79, fallen off the bus"]}),
        ({"failed": True, "msg": "nvidia-smi not found"}, {"healthy": False, "failed": ["nvidia-smi not found"]}),
        ({}, {"healthy": False, "failed": ["no verdict"]}),
        ({"healthy": True}, {"healthy": True, "failed": ["no verdict"]}),
    ],
)
def test_gated_appends_the_verdict_as_today(result, entry):
    before = node_record.step(in_progress(), "upgraded", T + 200)
    record = node_record.step(before, "gated", T + 230, level="extended", result=result)
    assert record["gates"] == [dict({"phase": "gate", "level": "extended"}, **entry)]
    assert record["timings"]["gated"] == T + 230
    assert record["status"] == "in_progress"  # the playbook fails the node on an unhealthy gate
    expected = today(
        "gated", T + 230, gpuops_upgrade_node=before, gpuops_upgrade_gate="extended", gpuops_upgrade_gate_result=result
    )
    assert record == expected


def test_gated_defaults_to_the_record_level_and_takes_a_phase():
    record = node_record.step(in_progress(gate_level="extended"), "gated", T, result=HEALTHY, phase="soak")
    record = node_record.step(record, "gated", T + 1, result=SICK)
    assert [(gate["phase"], gate["level"], gate["healthy"]) for gate in record["gates"]] == [
        ("soak", "extended", True),
        ("gate", "extended", False),
    ]


def test_gated_needs_a_result_mapping():
    with pytest.raises(ValueError, match=r"gate's result .* must be a mapping"):
        node_record.step(in_progress(), "gated", T, result="healthy")
    with pytest.raises(ValueError, match="phase must be a name"):
        node_record.step(in_progress(), "gated", T, result=HEALTHY, phase="")


@pytest.mark.parametrize(
    ("adapter", "ours", "reason"),
    [
        ("slurm", True, "on the target stack, gated"),
        ("slurm", False, "on the target stack, gated; drain of its other owner kept"),
        ("kubernetes", False, "on the target stack, gated; drain of its other owner kept"),
        ("none", False, "on the target stack, gated"),
    ],
)
def test_upgraded_ok_as_today(adapter, ours, reason):
    drain = dict(SLURM_DRAINED, adapter=adapter, ours=ours)
    record = node_record.step(start(adapter=adapter), "drained", T + 20, drain=drain)
    record = node_record.step(record, "gated", T + 230, result=HEALTHY)
    done = node_record.step(record, "upgraded_ok", T + 231, after_driver=NEW, after_loaded=NEW, adapter=adapter)
    assert done["status"] == "upgraded"
    assert done["reason"] == reason
    assert done["after"] == {"driver_version": NEW, "loaded_version": NEW}
    assert done["timings"]["finished"] == T + 231
    expected = today(
        "upgraded_ok",
        T + 231,
        gpuops_upgrade_node=record,
        gpuops_upgrade_adapter=adapter,
        ansible_facts=facts(NEW, NEW),
    )
    assert done == expected
    assert node_record.slot_release(done) == {"ok": True, "halt": False}


@pytest.mark.parametrize(
    ("record", "data", "message"),
    [
        (lambda: gated(SICK), {}, r"needs a healthy last gate, host gpu1's \(gate, standard\) failed: xid\[gpu2\]"),
        (in_progress, {}, r"needs a healthy gate .* has none"),
        (start, {}, r"needs the drain recorded first \(event 'drained'\)"),
        (gated, {"adapter": "kubernetes"}, "adapter is 'kubernetes', the node's record says 'slurm'"),
    ],
)
def test_upgraded_ok_needs_a_drain_and_a_healthy_gate(record, data, message):
    with pytest.raises(ValueError, match=message):
        node_record.step(record(), "upgraded_ok", T, after_driver=NEW, after_loaded=NEW, **data)


# failure and rollback ------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["in_progress", "deferred", "upgraded"])
@pytest.mark.parametrize(
    ("task", "msg", "reason"),
    [
        ("Health gate", "unhealthy", "Health gate: unhealthy"),
        (None, None, "a step: failed"),
    ],
)
def test_failed_from_every_status_the_rescue_sees(status, task, msg, reason):
    before = with_status(status)
    record = node_record.step(before, "failed", T + 500, task=task, msg=msg)
    assert record["status"] == "failed"
    assert record["halt"] is True
    assert record["reason"] == reason
    assert record["timings"] == before["timings"]  # the rescue notes the end with 'finished'
    assert not node_record.is_final(record)
    variables = {"gpuops_upgrade_node": before}
    if task is not None:
        variables["ansible_failed_task"] = {"name": task}
    if msg is not None:
        variables["ansible_failed_result"] = {"msg": msg}
    assert record == today("failed", T + 500, **variables)


@pytest.mark.parametrize("status", ["failed", "rolled_back", "rollback_failed", "blocked", "not_reached", "skipped"])
def test_failed_is_refused_after_a_failure_or_outside_the_window(status):
    with pytest.raises(
        ValueError,
        match=r"event 'failed' is not allowed from status '%s' .*allowed from in_progress, deferred, upgraded" % status,
    ):
        node_record.step(with_status(status), "failed", T, task="x", msg="y")


def test_rolled_back_as_today():
    before = with_status("failed")
    gate = dict(HEALTHY, summary={"failed": []})
    record = node_record.step(
        before, "rolled_back", T + 300, target_driver=OLD, after_driver=OLD, after_loaded=OLD, gate=gate, level="basic"
    )
    assert record["status"] == "rolled_back"
    assert record["reason"] == "Health gate: unhealthy; rolled back to 550.127.05, gated"
    assert record["after"] == {"driver_version": OLD, "loaded_version": OLD}
    assert record["gates"][-1] == {"phase": "rollback_gate", "level": "basic", "healthy": True, "failed": []}
    assert [gate["phase"] for gate in record["gates"]] == ["gate", "rollback_gate"]
    assert node_record.is_final(record)
    assert node_record.slot_release(record) == {"ok": True, "halt": True}
    expected = today(
        "rolled_back",
        T + 300,
        gpuops_upgrade_node=before,
        gpuops_upgrade_rollback_to={"driver_version": OLD},
        ansible_facts=facts(OLD, OLD),
        gpuops_upgrade_rollback_gate=gate,
        gpuops_upgrade_gate_level="basic",
    )
    assert record == expected


def test_rolled_back_needs_a_healthy_rollback_gate():
    with pytest.raises(ValueError, match=r"needs a healthy rollback gate, host gpu1's failed: xid\[gpu2\]"):
        node_record.step(
            with_status("failed"),
            "rolled_back",
            T,
            target_driver=OLD,
            after_driver=OLD,
            after_loaded=OLD,
            gate=SICK,
            level="standard",
        )
    with pytest.raises(ValueError, match="event 'rolled_back' needs target_driver"):
        node_record.step(
            with_status("failed"),
            "rolled_back",
            T,
            target_driver=None,
            after_driver=OLD,
            after_loaded=OLD,
            gate=HEALTHY,
            level="standard",
        )


@pytest.mark.parametrize(
    ("task", "msg", "reason"),
    [
        ("Reinstall the previous stack", "apt failed", "; rollback: Reinstall the previous stack: apt failed"),
        (None, None, "; rollback: a step: failed"),
    ],
)
def test_rollback_failed(task, msg, reason):
    record = node_record.step(with_status("failed"), "rollback_failed", T + 300, task=task, msg=msg)
    assert record["status"] == "rollback_failed"
    assert record["reason"] == "Health gate: unhealthy" + reason
    assert record["halt"] is True
    assert node_record.is_final(record)
    assert node_record.slot_release(record) == {"ok": False, "halt": True}


def test_rollback_failed_matches_today_for_a_named_task():
    before = with_status("failed")
    record = node_record.step(before, "rollback_failed", T, task="Gate the previous stack", msg="GPU health: 1 failed")
    expected = today(
        "rollback_failed",
        T,
        gpuops_upgrade_node=before,
        ansible_failed_task={"name": "Gate the previous stack"},
        ansible_failed_result={"msg": "GPU health: 1 failed"},
    )
    assert record == expected


@pytest.mark.parametrize("event", ["rolled_back", "rollback_failed"])
@pytest.mark.parametrize("status", ["in_progress", "upgraded", "rolled_back", "rollback_failed"])
def test_rollback_events_need_a_failed_record(event, status):
    with pytest.raises(
        ValueError, match=r"event '%s' is not allowed from status '%s' .* from failed$" % (event, status)
    ):
        node_record.step(with_status(status), event, T, task="x")


# finished, is_final, slot_release ------------------------------------------------------------


@pytest.mark.parametrize("status", node_record.STATUSES)
def test_finished_sets_the_end_whatever_the_status(status):
    record = node_record.step(with_status(status), "finished", T + 999)
    assert record["timings"]["finished"] == T + 999
    assert record["status"] == status


def test_is_final():
    assert {status: node_record.is_final(with_status(status)) for status in node_record.STATUSES} == {
        "skipped": True,
        "excluded": True,
        "upgraded": True,
        "deferred": True,
        "failed": False,
        "rolled_back": True,
        "rollback_failed": True,
        "not_reached": True,
        "unavailable": True,
        "blocked": True,
        "reserved": True,
        "in_progress": False,
    }
    assert node_record.is_final(None) is False
    assert node_record.is_final({}) is False


@pytest.mark.parametrize(
    ("record", "release"),
    [
        ({"status": "upgraded"}, {"ok": True, "halt": False}),
        ({"status": "rolled_back"}, {"ok": True, "halt": True}),
        ({"status": "deferred", "halt": True}, {"ok": True, "halt": True, "deferred": True}),
        ({"status": "deferred", "halt": False}, {"ok": True, "halt": False, "deferred": True}),
        ({"status": "deferred", "halt": "false"}, {"ok": True, "halt": False, "deferred": True}),
        ({"status": "deferred"}, {"ok": True, "halt": False, "deferred": True}),
        ({"status": "failed", "halt": True}, {"ok": False, "halt": True}),
        ({"status": "rollback_failed"}, {"ok": False, "halt": True}),
    ],
)
def test_slot_release(record, release):
    assert node_record.slot_release(dict(record, host="gpu1")) == release


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"host": "gpu1", "status": "in_progress"}, "with status 'in_progress'"),
        ({"host": "gpu1", "status": "blocked"}, "with status 'blocked'"),
        ({"host": "gpu1", "status": "not_reached"}, "with status 'not_reached'"),
        (None, "without a record"),
    ],
)
def test_slot_release_refuses_a_node_without_a_slot_to_give_back(record, message):
    with pytest.raises(ValueError, match="no slot release for a node %s" % message):
        node_record.slot_release(record)


# the record in the audit report ---------------------------------------------------------------


def test_happy_path_record_goes_into_the_report():
    record = start()
    for event, offset, data in [
        ("drain_started", 1, {}),
        ("drained", 20, {"drain": SLURM_DRAINED, "on_drain_timeout": "halt", "drain_timeout": 3600}),
        ("upgraded", 200, {}),
        ("gated", 230, {"level": "standard", "result": HEALTHY}),
        ("upgraded_ok", 231, {"after_driver": NEW, "after_loaded": NEW, "adapter": "slurm"}),
    ]:
        record = node_record.step(record, event, T + offset, **data)
    assert set(record) == {
        "host",
        "status",
        "reason",
        "before",
        "after",
        "target",
        "gate_level",
        "gates",
        "drain",
        "timings",
        "halt",
    }
    assert node_record.slot_release(record) == {"ok": True, "halt": False}
    plan = {"order": ["gpu1"], "canary": ["gpu1"]}
    audit = upgrade_record.report(
        "r1", plan, [record], "t0", "t1", slots={"gpu1": {"admitted_at": T, "released_at": T}}
    )
    assert audit["result"] == "completed"
    assert audit["counts"] == {"upgraded": 1}
    assert audit["nodes"][0]["durations"] == {"drain": 19.0, "upgrade": 180.0, "gate": 30.0, "total": 231.0}
    assert upgrade_record.summary_lines(audit)[1] == (
        "canary    gpu1             upgraded           550.127.05 -> 550.127.08 in 231.0s: on the target stack, gated"
    )


def test_failed_paths_go_into_the_report():
    rolled_back = node_record.step(with_status("rolled_back"), "finished", T + 400)
    timed_out_continue = node_record.step(
        node_record.step(start(host="gpu2"), "drain_started", T + 1),
        "drained",
        T + 11,
        drain=dict(SLURM_DRAINED, timed_out=True),
        on_drain_timeout="continue",
    )
    blocked = start(host="gpu3", admitted=False, slot_reason="blocked: rack r1 full")
    not_reached = start(host="gpu4", admitted=False, slot_reason="the run halted")
    plan = {"order": ["gpu1", "gpu2", "gpu3", "gpu4"], "canary": ["gpu1"]}
    audit = upgrade_record.report("r1", plan, [rolled_back, timed_out_continue, blocked, not_reached], "t0", "t1")
    assert audit["result"] == "halted"
    assert audit["halted_by"] == {
        "host": "gpu1",
        "status": "rolled_back",
        "reason": "Health gate: unhealthy; rolled back to 550.127.05, gated",
    }
    assert [entry["host"] for entry in audit["not_upgraded"]] == ["gpu2", "gpu3"]
    assert audit["nodes"][0]["durations"]["total"] == 400.0
    assert audit["nodes"][1]["durations"] == {"drain": 10.0, "upgrade": None, "gate": None, "total": 11.0}
    assert audit["nodes"][2]["durations"]["total"] == 0.0
    assert upgrade_record.summary_lines(audit)


def test_a_node_taken_out_by_someone_else_during_the_run_leaves_the_run_partial():
    upgraded = node_record.step(with_status("upgraded"), "finished", T + 300)
    gone = start(
        host="gpu2",
        admitted=False,
        slot_reason="unavailable: left alone: drained by someone else (LAB-43): not touched; seen during the run",
    )
    plan = {"order": ["gpu1", "gpu2"], "canary": ["gpu1"]}
    audit = upgrade_record.report("r1", plan, [upgraded, gone], "t0", "t1")
    # not "completed": the node is not on the target, and not "not reached" by a halt: the run went on
    assert audit["result"] == "partial"
    assert audit["halted_by"] is None
    assert audit["not_upgraded"] == [{"host": "gpu2", "status": "unavailable", "reason": gone["reason"]}]


# purity and robustness -----------------------------------------------------------------------


def _containers(value):
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _containers(item)
    elif isinstance(value, list):
        yield value
        for item in value:
            yield from _containers(item)


@pytest.mark.parametrize(
    ("status", "event", "data"),
    [
        ("in_progress", "drain_started", {}),
        ("in_progress", "drained", {"drain": dict(SLURM_DRAINED, timed_out=True, blocking_pods=["a/b"])}),
        ("in_progress", "upgraded", {}),
        ("in_progress", "gated", {"result": SICK}),
        ("failed", "rolled_back", {"target_driver": OLD, "after_driver": OLD, "after_loaded": OLD, "gate": HEALTHY}),
        ("failed", "rollback_failed", {"task": "t", "msg": "m"}),
        ("upgraded", "failed", {"task": "t", "msg": "m"}),
        ("upgraded", "finished", {}),
    ],
)
def test_events_never_change_their_input(status, event, data):
    record = with_status(status)
    data = dict(data, level="standard") if event == "rolled_back" else data
    record_copy, data_copy = copy.deepcopy(record), copy.deepcopy(data)
    result = node_record.step(record, event, T + 1000, **data)
    assert record == record_copy
    assert data == data_copy
    inputs = {id(container) for container in _containers(record)} | {id(c) for c in _containers(data)}
    assert not inputs & {id(container) for container in _containers(result)}


def test_start_shares_nothing_with_its_input():
    record = start()
    gated_record = node_record.step(gated(), "gated", T, result=HEALTHY)
    assert gated_record["gates"][0]["failed"] is not HEALTHY["summary"]["failed"]
    assert record["drain"] is not start()["drain"]


class TaggedDict(dict):
    """Like the tagged dict Ansible's templating hands a filter."""


class TaggedStr(str):
    """Like the tagged str Ansible's templating hands a filter."""


def test_tagged_jinja_values_are_taken():
    record = TaggedDict(start())
    record["timings"] = TaggedDict(record["timings"])
    drain = TaggedDict(SLURM_DRAINED, blocking_pods=[TaggedStr("ml/a")], timed_out=TaggedStr("true"))
    result = node_record.step(
        record, TaggedStr("drained"), TaggedStr(str(T)), drain=drain, on_drain_timeout=TaggedStr("continue")
    )
    assert result.__class__ is dict
    assert result["timings"].__class__ is dict
    assert result["status"] == "deferred"
    assert result["halt"] is False
    assert result["reason"].endswith(": pods ml/a")
    assert result["timings"]["drained"] == T


@pytest.mark.parametrize(
    ("record", "event", "now", "message"),
    [
        (None, "launch", T, "unknown event 'launch': expected one of start, drain_started"),
        (None, ["start"], T, "unknown event"),
        (None, "drained", T, r"event 'drained' needs the node's record: it has none yet \('start' it first\)"),
        ({}, "finished", T, "needs the node's record"),
        ("gpu1", "finished", T, "record must be a mapping"),
        ({"host": "gpu1", "status": "done"}, "finished", T, "the node's record has status 'done': expected one of"),
        ({"host": "gpu1", "status": "upgraded", "timings": []}, "finished", T, "has timings"),
        ({"host": "gpu1", "status": "upgraded"}, "finished", "soon", "now must be epoch seconds"),
        ({"host": "gpu1", "status": "upgraded"}, "finished", None, "now must be epoch seconds"),
        ({"host": "gpu1", "status": "upgraded"}, "finished", True, "now must be epoch seconds"),
    ],
)
def test_bad_records_events_and_times(record, event, now, message):
    with pytest.raises(ValueError, match=message):
        node_record.step(record, event, now)


def test_finished_takes_no_data():
    with pytest.raises(ValueError, match="event 'finished' does not take msg: it takes no data"):
        node_record.step(upgraded(), "finished", T, msg="x")


def test_a_record_without_timings_gets_them():
    record = node_record.step({"host": "gpu1", "status": "skipped"}, "finished", T)
    assert record == {"host": "gpu1", "status": "skipped", "timings": {"finished": T}}


_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.text(max_size=3),
    st.just({}),
    st.just([]),
    st.just("true"),
)


def _mostly(*valid):
    """One of ``valid`` most of the time, anything else sometimes."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(valid), _JUNK)


_DRAINS = (
    SLURM_DRAINED,
    dict(SLURM_DRAINED, timed_out=True),
    dict(SLURM_DRAINED, adapter="kubernetes", timed_out=True, blocking_pods=["ml/a"]),
    dict(SLURM_DRAINED, ours=False),
    upgrade_record.drain_record("none"),
    {"failed": True, "msg": "boom"},
)
_DATA = {
    "start": st.fixed_dictionaries(
        {
            "host": _mostly("gpu1"),
            "admitted": _mostly(True, False, "yes"),
            "adapter": _mostly("slurm", "kubernetes", "none"),
        },
        optional={
            "slot_reason": _mostly("blocked: floor", "the run halted"),
            "decision_reason": _JUNK,
            "before_driver": _mostly(OLD),
            "target": _mostly(NEW),
        },
    ),
    "drain_started": st.just({}),
    "drained": st.fixed_dictionaries(
        {"drain": _mostly(*_DRAINS)},
        optional={"on_drain_timeout": _mostly("halt", "continue"), "drain_timeout": _mostly(10, "3600")},
    ),
    "upgraded": st.just({}),
    "gated": st.fixed_dictionaries(
        {"result": _mostly(HEALTHY, SICK, {}, {"summary": "x"})},
        optional={"level": _mostly("standard"), "phase": _mostly("gate", "soak")},
    ),
    "upgraded_ok": st.fixed_dictionaries(
        {"after_driver": _mostly(NEW), "after_loaded": _mostly(NEW)},
        optional={"adapter": _mostly("slurm", "none", "kubernetes")},
    ),
    "failed": st.fixed_dictionaries({}, optional={"task": _mostly("Health gate"), "msg": _JUNK}),
    "rolled_back": st.fixed_dictionaries(
        {
            "target_driver": _mostly(OLD),
            "after_driver": _mostly(OLD),
            "after_loaded": _mostly(OLD),
            "gate": _mostly(HEALTHY, SICK, {"healthy": True, "summary": None}),
            "level": _mostly("standard"),
        }
    ),
    "rollback_failed": st.fixed_dictionaries({}, optional={"task": _JUNK, "msg": _JUNK}),
    "finished": st.just({}),
}
_STEP = st.sampled_from(sorted(_DATA)).flatmap(lambda event: st.tuples(st.just(event), _DATA[event]))
_ROLLBACK = {"target_driver": OLD, "after_driver": OLD, "after_loaded": OLD, "gate": HEALTHY, "level": "standard"}
# the playbook's paths, which random events are then inserted into
_PATHS = {
    "upgraded": [
        ("start", START),
        ("drain_started", {}),
        ("drained", {"drain": SLURM_DRAINED}),
        ("upgraded", {}),
        ("gated", {"result": HEALTHY}),
        ("upgraded_ok", {"after_driver": NEW, "after_loaded": NEW}),
    ],
    "deferred": [
        ("start", START),
        ("drain_started", {}),
        ("drained", {"drain": dict(SLURM_DRAINED, timed_out=True), "on_drain_timeout": "continue"}),
    ],
    "rolled_back": [
        ("start", START),
        ("drained", {"drain": SLURM_DRAINED}),
        ("gated", {"result": SICK}),
        ("failed", {"task": "Health gate", "msg": "unhealthy"}),
        ("rolled_back", _ROLLBACK),
        ("finished", {}),
    ],
    "rollback_failed": [
        ("start", START),
        ("failed", {}),
        ("rollback_failed", {"task": "Reinstall", "msg": "apt"}),
        ("finished", {}),
    ],
    "blocked": [("start", dict(START, admitted=False, slot_reason="blocked: floor")), ("finished", {})],
    "not_reached": [("start", dict(START, admitted=False, slot_reason="the run halted"))],
    "deferred_at_its_slot": [("start", dict(START, admitted=False, slot_reason="deferred: its job ends later"))],
}


@st.composite
def _sequences(draw):
    """A path of the playbook with random events (valid or not) inserted anywhere, and a time for each."""
    steps = list(_PATHS[draw(st.sampled_from(sorted(_PATHS)))])
    for _index in range(draw(st.integers(0, 6))):
        steps.insert(draw(st.integers(0, len(steps))), draw(_STEP))
    nows = st.one_of(st.floats(0, 2e9), st.floats(0, 2e9), st.floats(0, 2e9), st.sampled_from(["1.5", "x", None]))
    return [(event, data, draw(nows)) for event, data in steps]


@settings(max_examples=500, deadline=None)
@given(steps=_sequences(), first=st.sampled_from(["none", "empty", "in_progress"]))
def test_any_sequence_gives_a_valid_record_or_a_value_error(steps, first):
    record = {"none": lambda: None, "empty": dict, "in_progress": in_progress}[first]()
    for event, data, now in steps:
        before, data_before = copy.deepcopy(record), copy.deepcopy(data)
        try:
            result = node_record.step(record, event, now, **data)
        except ValueError:
            assert record == before
            continue
        assert record == before
        assert data == data_before
        assert result["status"] in (*upgrade_record.NODE_STATUSES, "in_progress")
        assert isinstance(result["timings"], dict)
        if result["status"] not in ("in_progress", "blocked", "not_reached"):
            release = node_record.slot_release(result)
            assert set(release) == ({"ok", "halt", "deferred"} if result["status"] == "deferred" else {"ok", "halt"})
        record = result
    if record:
        entry = upgrade_record.node_entry(record)
        assert set(entry["durations"]) == {"drain", "upgrade", "gate", "total"}
        upgrade_record.report("r", {"order": [record["host"]]}, [record], "t0", "t1")


# the filters ---------------------------------------------------------------------------------


def test_filters_are_registered():
    assert upgrade_node.FilterModule().filters() == {"upgrade_node": upgrade_node.upgrade_node}


# build: the record made once from the registered results ------------------------------------

NODE_START = {
    "host": "gpu1",
    "adapter": "slurm",
    "decision_reason": "stack differs from the target",
    "before": {"installed_driver_version": OLD, "loaded_driver_version": OLD},
    "target": NEW,
}
SLOT = {
    "changed": False,
    "admitted": True,
    "slot": {"state": "acquired", "admitted": True, "reason": "admitted", "admitted_at": T, "max_job_wait": 600},
}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def steps(**changes):
    """The node's start and its registered steps, as the role hands them to the release (upgraded)."""
    defaults = {
        "slot": SLOT,
        "gate_level": "standard",
        "on_drain_timeout": "halt",
        "drained": dict(SLURM_DRAINED, started_at=T + 1, ended_at=T + 20),
        "soak": SKIPPED,
        "gate": dict(HEALTHY, started_at=T + 200, ended_at=T + 230),
        "after": {"installed_driver_version": NEW, "loaded_driver_version": NEW},
        "failure": None,
        "rollback": None,
    }
    return dict(NODE_START, **dict(defaults, **changes))


def test_build_replays_the_events_timed_by_the_results():
    """The record built once equals the one the events give, one by one, at the times the results carry."""
    record = node_record.build(steps(), T + 231)
    expected = dict(node_record.step(upgraded(), "finished", T + 231), reason="on the target stack, gated")
    expected["drain"]["timeout"] = 600
    assert record == expected
    assert record["timings"] == {
        "started": T,
        "drain_started": T + 1,
        "drained": T + 20,
        "upgraded": T + 200,
        "gated": T + 230,
        "finished": T + 231,
    }
    assert node_record.slot_release(record) == {"ok": True, "halt": False}


def test_build_times_the_upgrade_before_the_canary_soak():
    soak = {"changed": False, "elapsed": 120, "state": "started"}
    record = node_record.build(steps(soak=soak, gate_level="extended"), T + 231)
    assert record["timings"]["upgraded"] == T + 80  # the gate began at T+200, after a 120 s soak
    assert record["gates"][0]["level"] == "extended"
    assert record["gate_level"] == "extended"


def test_build_a_drain_that_timed_out_is_deferred_and_back_in_service():
    drained = dict(SLURM_DRAINED, timed_out=True, started_at=T + 1, ended_at=T + 601)
    record = node_record.build(steps(drained=drained, gate=None, on_drain_timeout="continue"), T + 605)
    assert record["status"] == "deferred"
    assert record["timings"]["finished"] == T + 601  # when the wait ended, not when the slot came back
    assert record["reason"].startswith("jobs still running after 600s (max_job_wait)")
    assert node_record.slot_release(record) == {"ok": True, "halt": False, "deferred": True}


def test_build_a_failure_halts_and_a_healthy_rollback_gate_rolls_back():
    failure = {"task": "Fail the node when its gate failed", "msg": "health gate (standard) failed: xid"}
    failed_only = node_record.build(
        steps(gate=dict(SICK, started_at=T + 200, ended_at=T + 230), failure=failure), T + 300
    )
    assert failed_only["status"] == "failed"
    assert failed_only["reason"] == "Fail the node when its gate failed: health gate (standard) failed: xid"
    assert failed_only["gates"][-1]["healthy"] is False
    assert node_record.slot_release(failed_only) == {"ok": False, "halt": True}
    rollback = {"target_driver": OLD, "level": "standard", "gate": HEALTHY, "failure": failure}
    back = steps(gate=dict(SICK, started_at=T + 200, ended_at=T + 230), failure=failure, rollback=rollback)
    back["after"] = {"installed_driver_version": OLD, "loaded_driver_version": OLD}
    record = node_record.build(back, T + 400)
    assert record["status"] == "rolled_back"
    assert record["after"] == {"driver_version": OLD, "loaded_version": OLD}
    assert record["gates"][-1]["phase"] == "rollback_gate"
    assert node_record.slot_release(record) == {"ok": True, "halt": True}


def test_build_a_rollback_without_a_healthy_gate_failed_with_its_own_failure():
    failure = {"task": "Health gate", "msg": "boom"}
    ended = {"task": "Reinstall the previous stack", "msg": "apt failed"}
    for gate in (None, SKIPPED, dict(SICK, failed=True)):
        rollback = {"target_driver": OLD, "level": "standard", "gate": gate, "failure": ended}
        record = node_record.build(steps(gate=None, failure=failure, rollback=rollback), T + 400)
        assert record["status"] == "rollback_failed"
        assert record["reason"] == "Health gate: boom; rollback: Reinstall the previous stack: apt failed"
        assert node_record.slot_release(record) == {"ok": False, "halt": True}


def test_build_a_failed_drain_is_not_recorded_as_a_drain():
    failure = {"task": "Take the node out of service and wait for its work to leave", "msg": "scontrol timed out"}
    drained = {"failed": True, "msg": "scontrol timed out", "started_at": T + 1, "ended_at": T + 61}
    record = node_record.build(steps(drained=drained, gate=None, failure=failure), T + 62)
    assert record["status"] == "failed"
    assert record["drain"] == {"adapter": "slurm"}  # ours unknown: the rescue keeps the node drained
    assert "drained" not in record["timings"]


def test_build_a_node_not_admitted_is_final_with_its_slot_reason():
    slot = {
        "admitted": False,
        "slot": {"state": "acquired", "admitted": False, "reason": "deferred: its job ends late"},
    }
    record = node_record.build(dict(NODE_START, slot=slot), T + 9)
    assert record["status"] == "deferred"
    assert record["reason"] == "deferred: its job ends late"
    assert record["timings"] == {"started": T + 9, "finished": T + 9}


def test_build_refuses_what_it_does_not_take_and_what_the_events_refuse():
    with pytest.raises(ValueError, match=r"node has the key\(s\) gate_result"):
        node_record.build(dict(steps(), gate_result=HEALTHY), T)
    # read on the way (after the drain, before the gate; a failed gate before the role fails the node): in progress,
    # and a release of it fails (closed) instead of saying upgraded
    for on_the_way in (steps(gate=None), steps(gate=dict(SICK, started_at=T + 200, ended_at=T + 230))):
        record = node_record.build(on_the_way, T + 231)
        assert record["status"] == "in_progress"
        assert "finished" not in record["timings"]
        with pytest.raises(ValueError, match="no slot release for a node with status 'in_progress'"):
            node_record.slot_release(record)


def test_filter_builds_the_record_and_defaults_now(monkeypatch):
    monkeypatch.setattr(upgrade_node.time, "time", lambda: T + 500)
    assert upgrade_node.upgrade_node(steps())["timings"]["finished"] == T + 500
    assert upgrade_node.upgrade_node(steps(), now=T + 231)["timings"]["finished"] == T + 231


def test_filter_errors_name_the_filter():
    with pytest.raises(
        AnsibleFilterError, match=r"gpuops\.cluster\.upgrade_node: the drain was done by adapter 'kubernetes'"
    ) as caught:
        upgrade_node.upgrade_node(steps(drained=dict(SLURM_DRAINED, adapter="kubernetes")), now=T)
    assert isinstance(caught.value.__cause__, ValueError)
