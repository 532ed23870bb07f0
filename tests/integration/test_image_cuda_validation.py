"""The validation play with CUDA in the images (issue 19 item 3): a driver-only stack validates and resolves
to no toolkit, and a driver that cannot run an image's CUDA stops the run naming the driver it needs."""

from pathlib import Path

import pytest

from .playbook_run import run_playbook

pytestmark = pytest.mark.integration

PLAYBOOK = "tests/integration/playbooks/validate_play_vars.yml"
VALID = "tests/integration/inventories/valid/hosts.yml"


def test_driver_only_stack_with_image_cuda_validates(tmp_path: Path):
    stack = {"driver": "580", "dcgm": "4", "image_cuda": ["cu128", "13.0"]}
    run = run_playbook(PLAYBOOK, VALID, tmp_path / "runner", extravars={"test_stack": stack})
    assert run.status == "successful", run.stdout[-2000:]
    (h100,) = run.results_for(task="Record the resolved stack for the plays that follow", host="gpu-h100")
    resolved = h100.result["ansible_facts"]["gpuops_resolved_stack"]
    assert resolved["cuda_version"] is None
    assert resolved["nccl_version"] is None
    # the DCGM Exporter comes with DCGM by default (gpuops_stack.dcgm_exporter: auto)
    assert {p["component"] for p in resolved["packages"]} == {"driver", "fabricmanager", "dcgm", "dcgm_exporter"}
    assert [image["runs_by"] for image in resolved["image_cuda"]] == ["driver", "driver"]
    (shown,) = run.results_for(task="Show what each host will get", host="gpu-h100")
    assert "CUDA none on the host, NCCL none on the host" in shown.result["msg"]


def test_driver_that_cannot_run_the_image_cuda_stops_the_run(tmp_path: Path):
    stack = {"driver": "570", "image_cuda": ["cu130"]}
    run = run_playbook(PLAYBOOK, VALID, tmp_path / "runner", extravars={"test_stack": stack})
    (failure,) = [r for r in run.failures if r.task == "Stop the run when any host has a problem"]
    message = failure.result["msg"]
    assert "gpu-h100: image CUDA 13.0 (cu130) needs driver 580.65.06 or newer (R580+)" in message
    assert "the request resolves to R570 (570.211.01)" in message
