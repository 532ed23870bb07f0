"""The validation play stops a run, listing every problem, before any host changes."""

import re
from pathlib import Path

import pytest

from .playbook_run import run_playbook

pytestmark = pytest.mark.integration

INVALID = "tests/integration/inventories/invalid/hosts.yml"
VALIDATE_PLAY = "Validate the controller, the inventory and the requested stack"


@pytest.fixture(scope="module")
def invalid_site_run(tmp_path_factory):
    return run_playbook("site.yml", INVALID, tmp_path_factory.mktemp("runner"))


def test_invalid_stack_fails_the_run(invalid_site_run):
    assert invalid_site_run.status == "failed"
    assert invalid_site_run.rc == 2
    assert invalid_site_run.plays_started == [VALIDATE_PLAY]


def test_every_violation_of_every_host_is_listed_at_once(invalid_site_run):
    (failure,) = [r for r in invalid_site_run.failures if r.task == "Stop the run when any host has a problem"]
    message = failure.result["msg"]
    assert "validation failed on 3 of 4 host(s)" in message
    assert re.search(r"gpu-cuda: .*12\.7", message)
    assert re.search(r"gpu-model: .*H1000", message)
    assert "gpu-typo: unknown variable gpuops_stak: did you mean gpuops_stack?" in message
    assert "gpu-good:" not in message


def test_no_task_after_validation_ran_on_any_host(invalid_site_run):
    assert invalid_site_run.plays_started == [VALIDATE_PLAY]
    assert invalid_site_run.tasks_run_outside(VALIDATE_PLAY) == []
    assert invalid_site_run.changed == []


def test_play_after_validation_never_starts_on_invalid_stack(tmp_path: Path):
    markers = tmp_path / "markers"
    markers.mkdir()
    run = run_playbook(
        "tests/integration/playbooks/validate_then_change.yml",
        INVALID,
        tmp_path / "runner",
        extravars={"marker_dir": str(markers)},
    )
    assert run.status == "failed"
    assert run.plays_started == [VALIDATE_PLAY]
    assert list(markers.iterdir()) == []


def test_valid_stack_passes_and_the_next_play_runs(tmp_path: Path):
    markers = tmp_path / "markers"
    markers.mkdir()
    run = run_playbook(
        "tests/integration/playbooks/validate_then_change.yml",
        "tests/integration/inventories/valid/hosts.yml",
        tmp_path / "runner",
        extravars={"marker_dir": str(markers)},
    )
    assert run.status == "successful", run.stdout
    assert run.plays_started == [VALIDATE_PLAY, "Change every host"]
    assert sorted(p.name for p in markers.iterdir()) == ["gpu-h100", "gpu-l40s"]
    (h100,) = run.results_for(task="Record the resolved stack for the plays that follow", host="gpu-h100")
    resolved = h100.result["ansible_facts"]["gpuops_resolved_stack"]
    assert resolved["driver_branch"] == "580"
    assert resolved["fabricmanager"] is True
    (l40s,) = run.results_for(task="Record the resolved stack for the plays that follow", host="gpu-l40s")
    assert l40s.result["ansible_facts"]["gpuops_resolved_stack"]["fabricmanager"] is False


def test_example_inventory_validates_in_check_mode(tmp_path: Path):
    # The example's hosts do not exist: the validation play alone needs none of them.
    run = run_playbook("playbooks/validate.yml", "inventories/example/hosts.yml", tmp_path / "runner", check=True)
    assert run.status == "successful", run.stdout
    hosts = {r.host for r in run.results_for(task="Record the resolved stack for the plays that follow")}
    assert len(hosts) == 16
    assert run.changed == []
    assert run.plays_started == [VALIDATE_PLAY]


@pytest.mark.parametrize(
    ("stack", "ok"), [({"driver": "551", "cuda": "12.4"}, False), ({"driver": "550", "cuda": "12.4"}, True)]
)
def test_a_stack_given_as_play_vars_is_the_one_validated(tmp_path: Path, stack, ok):
    run = run_playbook(
        "tests/integration/playbooks/validate_play_vars.yml",
        "tests/integration/inventories/valid/hosts.yml",
        tmp_path / "runner",
        extravars={"test_stack": stack},
    )
    if not ok:
        (failure,) = [r for r in run.failures if r.task == "Stop the run when any host has a problem"]
        assert "driver branch R551 is not in the compatibility matrix" in failure.result["msg"]
        return
    assert run.status == "successful", run.stdout[-2000:]
    (h100,) = run.results_for(task="Record the resolved stack for the plays that follow", host="gpu-h100")
    assert h100.result["ansible_facts"]["gpuops_resolved_stack"]["driver_branch"] == "550"
