"""The nvidia_stack role run twice in one play (the rolling upgrade's upgrade, then rollback pass): a pass reads
its own plan, and nothing an earlier pass registered counts in a later one.

Runs on this machine (local connection) without changing it: a stack of no package with every area switched off,
so the role only reads (tests/integration/playbooks/nvidia_stack_passes.yml).
"""

from __future__ import annotations

import pytest

from tests.integration.playbook_run import run_playbook

pytestmark = pytest.mark.integration

PLAY = "Two passes of the nvidia_stack role"
CONVERGED = {"move": [], "reboot_reasons": [], "start": [], "load": False, "dkms": False, "kernel_headers": False}


@pytest.fixture(scope="module")
def passes(tmp_path_factory):
    run = run_playbook(
        "tests/integration/playbooks/nvidia_stack_passes.yml",
        "tests/integration/inventories/valid/hosts.yml",
        tmp_path_factory.mktemp("runner"),
    )
    assert run.rc == 0, run.stdout[-3000:]
    return run


def test_a_later_pass_counts_no_reboot_removal_or_load_failure_of_an_earlier_one(passes):
    shown = passes.results_for(play=PLAY, task="Show the reports")[0].result["msg"]
    for report in (shown["first"], shown["second"]):
        assert report["rebooted"] is False
        assert report["removed"] == []
        assert report["reboot_required"] is False
        assert report["reboot_reasons"] == []
        assert report["changed_components"] == []
    assert shown["plan"] == CONVERGED


def test_a_kernel_moved_without_a_reboot_is_reported_pending_naming_the_kernel(passes):
    report = passes.results_for(play=PLAY, task="Show the reports")[0].result["msg"]["kernel_moved"]
    assert (report["reboot_required"], report["reboot_reasons"]) == (True, ["kernel_moved"])
    # skipped in the two passes, said after the third report
    said = passes.results_for(play=PLAY, task="Say that a reboot is pending")
    assert [result.event for result in said] == ["runner_on_skipped", "runner_on_skipped", "runner_on_ok"]
    said = said[-1:]
    assert "It boots into kernel 6.1.0-56-amd64, whose NVIDIA module was verified." in said[0].result["msg"]


def test_each_pass_reads_the_node_once_and_plans_nothing_on_it(passes):
    reads = passes.results_for(play=PLAY, task="Read the node's NVIDIA stack before changing it")
    assert [read.event for read in reads] == ["runner_on_ok", "runner_on_ok"]
    assert [read.result["ansible_facts"]["gpu_stack"]["plan"] for read in reads] == [CONVERGED, CONVERGED]
    # the load stage (driver, reboot, services) is not included, and no other read follows
    for task in (
        "Load the driver, reboot when needed, start Fabric Manager and DCGM",
        "Move the node to the resolved versions",
    ):
        assert {r.event for r in passes.results_for(play=PLAY, task=task)} <= {"runner_on_skipped"}
    assert passes.results_for(play=PLAY, task="Read the node's NVIDIA stack after the changes") == []
    assert passes.executions(PLAY) == {"gpu-h100": {"total": 2, "builtin_file": 0}}
    assert passes.changed == []
