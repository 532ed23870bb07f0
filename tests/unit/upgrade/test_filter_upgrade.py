"""The gpuops.cluster upgrade_* filters: wrapping, errors with the filter's FQCN."""

from __future__ import annotations

import os

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import upgrade
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import upgrade_settings, window_slot


def test_filters_are_registered():
    assert set(upgrade.FilterModule().filters()) == {
        "upgrade_window",
        "upgrade_window_run",
        "upgrade_plan",
        "upgrade_decision",
        "upgrade_survey",
        "upgrade_plan_lines",
        "upgrade_run_report",
        "upgrade_stack_fact",
        "upgrade_report",
        "upgrade_drain_record",
        "upgrade_journal",
    }


HOSTS = [
    {"host": "a", "done": False, "domains": {"rack": "r1"}},
    {"host": "b", "done": False, "domains": {"rack": "r1"}},
    {"host": "c", "done": False, "domains": {"rack": "r2"}},
    {"host": "d", "done": True, "domains": {"rack": "r2"}},
]


def test_upgrade_window_previews_the_window_with_lines():
    result = upgrade.upgrade_window(HOSTS, {"max_unavailable": 2, "per_domain": {"rack": 1}}, canary=["b"], now=0)
    assert result["canary"] == ["b"]
    assert result["first_window"] == ["b"]
    assert result["after_canary"] == ["a", "c"]  # one per rack
    assert result["skipped"] == ["d"]
    assert [node["name"] for node in result["nodes"]] == ["a", "b", "c", "d"]
    assert result["lines"][1] == "canary, alone first: b"


def test_upgrade_window_takes_the_slurm_state():
    slurm = [
        {"name": "a", "state": "busy", "job_end": 500, "partitions": ["p"], "gpus": 8},
        {"name": "b", "state": "idle", "job_end": None, "partitions": ["p"], "gpus": 8},
        {"name": "c", "state": "drained_by_others", "job_end": None, "partitions": ["p"], "gpus": 8},
        {"name": "d", "state": "idle", "job_end": None, "partitions": ["p"], "gpus": 8},
    ]
    result = upgrade.upgrade_window(HOSTS, {"max_unavailable": 3}, slurm=slurm, now=0)
    assert result["unavailable"] == ["c"]
    assert result["order"] == ["b", "a"]  # idle first, then by job end; c is drained by someone else


def test_upgrade_window_takes_the_maintenance_reservation_first_and_reports_the_others():
    slurm = [
        {"name": "a", "state": "idle", "partitions": ["p"], "gpus": 8, "slurm_state": "idle+maintenance+reserved",
         "reservation": "upgrade"},
        {"name": "b", "state": "idle", "partitions": ["p"], "gpus": 8, "slurm_state": "idle+reserved",
         "reservation": "training"},
        {"name": "c", "state": "idle", "partitions": ["p"], "gpus": 8, "slurm_state": "idle"},
        {"name": "d", "state": "idle", "partitions": ["p"], "gpus": 8, "slurm_state": "idle"},
    ]  # fmt: skip
    result = upgrade.upgrade_window(HOSTS, {"max_unavailable": 1}, slurm=slurm, now=0, maintenance="upgrade")
    assert result["maintenance"] == ["a"]
    assert result["first_window"] == ["a"]
    assert result["reserved_reasons"] == {
        "b": "in a Slurm reservation training (idle+reserved): left alone, not upgraded"
    }
    with pytest.raises(AnsibleFilterError, match=r"upgrade_window: no node of this run is in the maintenance"):
        upgrade.upgrade_window(HOSTS, {}, slurm=slurm, maintenance="upgarde")


def test_upgrade_window_errors_name_the_filter():
    with pytest.raises(AnsibleFilterError, match=r"gpuops.cluster.upgrade_window: unknown window setting\(s\) waves"):
        upgrade.upgrade_window(HOSTS, {"waves": [1]})
    with pytest.raises(AnsibleFilterError, match=r"Slurm returned no state for node b"):
        upgrade.upgrade_window(HOSTS, {}, slurm=[{"name": "a", "state": "idle"}])
    with pytest.raises(AnsibleFilterError, match=r"gpuops_upgrade_domains of a must map"):
        upgrade.upgrade_window([{"host": "a", "domains": "r1"}])


def test_upgrade_decision_and_its_input_check():
    stack = {"drift": {"installed_differs": [], "loaded_differs": False, "reboot_required": False}}
    assert upgrade.upgrade_decision(stack, {"healthy": True})["decision"] == "skip"
    moves = {"kernel": "6.1.0-28-amd64", "running": "6.1.0-18-amd64", "reboot": True, "installed": []}
    assert upgrade.upgrade_decision(stack, {"healthy": True}, kernel=moves)["decision"] == "upgrade"
    with pytest.raises(AnsibleFilterError, match="upgrade_decision"):
        upgrade.upgrade_decision("nope")


def test_upgrade_stack_fact_steps():
    target = {"driver_version": "2"}
    begun = upgrade.upgrade_stack_fact({}, target, "begin", "r1", "t0", fallback_previous={"driver_version": "1"})
    done = upgrade.upgrade_stack_fact(begun, target, "finish", "r1", "t1", result="upgraded")
    assert done["current"]["driver_version"] == "2"
    assert done["previous"]["driver_version"] == "1"
    with pytest.raises(AnsibleFilterError, match="step must be begin or finish"):
        upgrade.upgrade_stack_fact({}, target, "middle", "r1", "t")
    with pytest.raises(AnsibleFilterError, match="unknown node status"):
        upgrade.upgrade_stack_fact({}, target, "finish", "r1", "t", result="bogus")


def test_upgrade_report_adds_the_summary():
    plan = upgrade.upgrade_window([{"host": "a"}])
    audit = upgrade.upgrade_report([{"host": "a", "status": "upgraded"}], "r1", plan, "t0", "t1")
    assert audit["summary"][0] == "run r1: completed (upgraded 1)"
    with pytest.raises(AnsibleFilterError, match="upgrade_report"):
        upgrade.upgrade_report([{"status": "x"}], "r1", plan, "t0", "t1")


def test_upgrade_drain_record_errors_carry_the_filter_name():
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.upgrade_drain_record: unknown drain adapter"):
        upgrade.upgrade_drain_record("slrum")


def test_upgrade_window_takes_the_run_settings_through_the_adapter():
    run = upgrade_settings.settings({"gpuops_upgrade_max_unavailable": "50%", "gpuops_upgrade_drain_ahead": 2})
    result = upgrade.upgrade_window(HOSTS, upgrade=run, now=0)
    assert result["settings"]["max_unavailable"] == 2  # 50% of 4 hosts, read once here
    assert result["settings"]["drain_ahead"] == 0  # the run's adapter (none) does not drain ahead
    slurm = dict(run, drain="slurm")
    assert upgrade.upgrade_window(HOSTS, upgrade=slurm, now=0)["settings"]["drain_ahead"] == 2
    with pytest.raises(AnsibleFilterError, match="upgrade_window: set settings or upgrade, not both"):
        upgrade.upgrade_window(HOSTS, {"max_unavailable": 1}, upgrade=run)


def test_upgrade_window_run_is_the_plans_window_with_the_adapters_services():
    journal = {"path": "/var/tmp/r1.journal.jsonl", "run_id": "r1", "target": "gpu_nodes {}", "resume": "auto"}
    names = {"a": "gpu-a", "b": "gpu-b"}
    run = upgrade_settings.settings({"gpuops_upgrade_drain": "slurm", "gpuops_upgrade_drain_ahead": 3})
    window = upgrade.upgrade_window(HOSTS, upgrade=run, now=0)
    result = upgrade.upgrade_window_run(window, run, "ctl", names, "r1", journal)
    assert set(result) == set(window_slot.WINDOW_KEYS) - {"report"}  # the plan adds the report's part (upgrade_plan)
    assert (result["nodes"], result["settings"], result["journal"]) == (window["nodes"], window["settings"], journal)
    assert result["refresh"] == {
        "delegate_to": "ctl",
        "names": names,
        "interval": 60,
        "options": {"reason_prefix": "gpuops-upgrade"},
    }
    assert result["drain_ahead"] == {
        "delegate_to": "ctl",
        "names": names,
        "run_id": "r1",
        "reason_prefix": "gpuops-upgrade",
        "become": True,
    }
    no_ahead = upgrade.upgrade_window_run(window, dict(run, drain_ahead=0), "ctl", names, "r1", journal)
    assert no_ahead["drain_ahead"] is None
    assert no_ahead["refresh"] is not None
    other = upgrade.upgrade_window_run(window, dict(run, drain="none"), "localhost", names, "r1", journal)
    assert (other["refresh"], other["drain_ahead"]) == (None, None)
    # Kubernetes: the Nodes read again during the run (tests/unit/upgrade/test_kubernetes_refresh.py), no drain ahead
    k8s = upgrade.upgrade_window_run(window, dict(run, drain="kubernetes"), "localhost", names, "r1", journal)
    assert (k8s["refresh"]["adapter"], k8s["drain_ahead"]) == ("kubernetes", None)
    with pytest.raises(AnsibleFilterError, match="upgrade_window_run: "):
        upgrade.upgrade_window_run({"settings": {}}, run, "ctl", names, "r1", journal)


def test_upgrade_plan_makes_the_run_id_the_window_and_the_paths_at_one_time(tmp_path):
    run = upgrade_settings.settings({"gpuops_upgrade_drain": "kubernetes"})
    names = {host["host"]: host["host"] for host in HOSTS}
    at = 1_796_280_000.0  # 2026-12-03T06:40:00Z
    ops, reports, journals = (tmp_path / "ops", tmp_path / "r", tmp_path / "j")
    for folder in (ops, reports, journals):
        folder.mkdir()
    plan = upgrade.upgrade_plan(HOSTS, run, names=names, cwd=str(ops), journal_target="t", kubeconfig="/k", now=at)
    assert plan["run_id"] == "20261203T064000Z"
    assert plan["started_at"] == "2026-12-03T06:40:00+00:00"
    assert plan["window"] == upgrade.upgrade_window(HOSTS, upgrade=run, now=at)
    assert plan["report_path"] == "%s/gpuops-upgrade-20261203T064000Z.json" % ops
    assert plan["journal_path"] == "%s/gpuops-upgrade-20261203T064000Z.journal.jsonl" % ops
    assert plan["run"]["journal"] == {
        "path": plan["journal_path"],
        "run_id": "20261203T064000Z",
        "target": "t",
        "resume": run["resume_journal"],
    }
    assert plan["run"]["refresh"]["options"]["kubeconfig"] == "/k"  # the adapter's reads during the run
    given = upgrade.upgrade_plan(HOSTS, run, run_id="fixed", report_path=str(reports / "report.json"), now=at)
    assert given["journal_path"] == "%s/gpuops-upgrade-fixed.journal.jsonl" % reports  # beside the report
    journal = str(journals / "run.jsonl")
    assert upgrade.upgrade_plan(HOSTS, run, journal_path=journal, cwd=str(ops), now=at)["journal_path"] == journal
    assert [os.listdir(folder) for folder in (ops, reports, journals)] == [[], [], []]  # the plan writes nothing


def test_upgrade_plan_refuses_a_journal_or_report_the_run_could_not_write(tmp_path):
    """Said by the plan, before any node moves: the window would open no journal (and admit no node), or the run
    would end without its report."""
    run = upgrade_settings.settings({})
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(AnsibleFilterError, match=r"link.jsonl is a symbolic link.*set gpuops_upgrade_journal_path"):
        upgrade.upgrade_plan(HOSTS, run, journal_path=str(link), cwd=str(tmp_path), now=0)
    missing = tmp_path / "no-such-folder" / "report.json"
    with pytest.raises(AnsibleFilterError, match=r"its folder .*no-such-folder does not exist.*gpuops_upgrade_report_"):
        upgrade.upgrade_plan(HOSTS, run, report_path=str(missing), journal_path=str(tmp_path / "j.jsonl"), now=0)
    (tmp_path / "a-folder").mkdir()
    with pytest.raises(AnsibleFilterError, match=r"a-folder is not a file this user can write"):
        upgrade.upgrade_plan(HOSTS, run, journal_path=str(tmp_path / "a-folder"), cwd=str(tmp_path), now=0)


def test_upgrade_stack_fact_takes_epoch_seconds_as_utc():
    begun = upgrade.upgrade_stack_fact({}, {"driver_version": "2"}, "begin", "r1", 1_796_280_000)
    assert begun["pending"]["started_at"] == "2026-12-03T06:40:00+00:00"
