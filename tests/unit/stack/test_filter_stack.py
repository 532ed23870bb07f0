"""The stack filters: argument shape, error wrapping, and registration."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.stack import (
    FilterModule,
    apt_preferences,
    cuda_min_driver,
    nvidia_version_compare,
    resolve_stack,
    stack_violations,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import DEFAULT_MATRIX_PATH


def test_filters_registered():
    assert set(FilterModule().filters()) == {
        "resolve_stack",
        "stack_violations",
        "cuda_min_driver",
        "nvidia_version_compare",
        "stack_index_problems",
        "stack_at_release",
        "apt_preferences",
        "apt_install_argv",
    }


def test_apt_preferences_pin_the_exact_versions_of_the_index_read():
    index = {
        "packages": [
            {"name": "nvidia-driver", "version": "550.127.08-1", "component": "driver"},
            {"name": "libnccl2", "version": "2.21.5-1+cuda12.4", "component": "nccl"},
        ],
        "pins": [{"component": "driver", "names": ["nvidia-driver", "nvidia-driver-*"], "version": "550.127.08-1"}],
    }
    text = apt_preferences(index, 1001)
    assert "Package: nvidia-driver nvidia-driver-*\nPin: version 550.127.08-1\nPin-Priority: 1001" in text
    assert "Package: libnccl2\nPin: version 2.21.5-1+cuda12.4\nPin-Priority: 1001" in text
    with pytest.raises(AnsibleFilterError, match="apt_preferences: Pin-Priority 500 is too low"):
        apt_preferences(index, 500)


def test_resolve_stack_playbook_call_shape():
    result = resolve_stack(
        {"driver": "550", "cuda": "12.4", "dcgm": "4"},
        os="Debian",
        os_version="12",
        gpu="NVIDIA H100 80GB HBM3",
        nvswitch=None,
    )
    assert result["driver_branch"] == "550"
    assert result["fabricmanager"] is True


def test_resolve_stack_accepts_numeric_os_version():
    assert (
        resolve_stack({"driver": "580", "cuda": "13.0"}, os="Debian", os_version=12, gpu="h100-sxm")["os_id"]
        == "debian12"
    )


def test_resolve_stack_error_lists_every_violation_with_fqcn():
    with pytest.raises(AnsibleFilterError) as caught:
        resolve_stack({"drvier": "550", "cuda": "12.7"}, os="Debian", os_version="12", gpu="h100-sxm")
    message = str(caught.value)
    assert message.startswith("gpuops.cluster.resolve_stack: ")
    assert "request.unknown_key" in message
    assert "request.missing_key" in message
    assert "cuda.unknown" in message


def test_missing_host_arguments():
    with pytest.raises(AnsibleFilterError, match=r"gpuops.cluster.resolve_stack: missing argument\(s\) os, gpu"):
        resolve_stack({"driver": "550", "cuda": "12.4"}, os_version="12")
    with pytest.raises(AnsibleFilterError, match=r"gpuops.cluster.stack_violations: missing"):
        stack_violations({"driver": "550", "cuda": "12.4"})


def test_stack_violations_returns_list():
    assert stack_violations({"driver": "550", "cuda": "12.4"}, os="Debian", os_version="12", gpu="h100-sxm") == []
    found = stack_violations({"driver": "550", "cuda": "12.4"}, os="Debian", os_version="12", gpu="gb200")
    assert [v["rule"] for v in found] == ["gpu.min_branch"]
    assert set(found[0]) == {"rule", "message"}


def test_matrix_path_override(tmp_path):
    with open(DEFAULT_MATRIX_PATH, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    data["schema_version"] = 9
    path = tmp_path / "m.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(AnsibleFilterError, match=r"gpuops.cluster.resolve_stack: compatibility matrix .* invalid"):
        resolve_stack(
            {"driver": "550", "cuda": "12.4"}, os="Debian", os_version="12", gpu="h100", matrix_path=str(path)
        )


@pytest.mark.parametrize(("cuda", "expected"), [("12.4", "550.54.14"), ("12.4.1", "550.54.15"), ("13.0", "580.65.06")])
def test_cuda_min_driver(cuda, expected):
    assert cuda_min_driver(cuda) == expected


@pytest.mark.parametrize(
    ("cuda", "match"), [("12.7", "CUDA 12.7 is not in the compatibility matrix"), ("x", "malformed")]
)
def test_cuda_min_driver_errors(cuda, match):
    with pytest.raises(AnsibleFilterError, match=r"gpuops.cluster.cuda_min_driver: .*" + match):
        cuda_min_driver(cuda)


@pytest.mark.parametrize(
    ("left", "op", "right", "expected"),
    [("570.26", "<", "570.124.06", True), ("1:4.1.1-1", ">", "4.9-1", True), ("550.127.08", "==", "550.127.8", True)],
)
def test_nvidia_version_compare(left, op, right, expected):
    assert nvidia_version_compare(left, op, right) is expected


def test_nvidia_version_compare_errors():
    with pytest.raises(AnsibleFilterError, match=r"gpuops.cluster.nvidia_version_compare: unknown version operator"):
        nvidia_version_compare("1", "~=", "2")
    with pytest.raises(AnsibleFilterError, match=r"gpuops.cluster.nvidia_version_compare: package version"):
        nvidia_version_compare("x.1", "<", "2")


def test_stack_index_problems_reads_every_host_and_compares_one_repository():
    from ansible_collections.gpuops.cluster.plugins.filter.stack import stack_index_problems

    def read(driver, problems=(), kept=False, repo="http://mirror/ubuntu2204/x86_64"):
        index = {
            "driver_version": driver,
            "branch_request": "580",
            "problems": list(problems),
            "kept_installed": kept,
            "repositories": [repo],
        }
        return {"stack_read": {"ansible_facts": {"gpu_stack": {"index": index}}}}

    hostvars = {
        "a": read("580.126.09"),
        "b": read("580.126.09"),
        "c": read("580.105.08", kept=True),
        "d": read(None, problems=["nvidia-fabricmanager 580.126.09: the repository holds no version"]),
        "e": {},
    }
    assert stack_index_problems(["a", "b", "c", "e"], hostvars, "stack_read") == []
    assert stack_index_problems(list(hostvars), hostvars, "stack_read") == [
        "d: nvidia-fabricmanager 580.126.09: the repository holds no version"
    ]
    hostvars["b"] = read("580.105.08")
    assert stack_index_problems(["a", "b"], hostvars, "stack_read") == [
        "nodes asking for R580 from http://mirror/ubuntu2204/x86_64 would get different driver releases "
        "(580.105.08 on b; 580.126.09 on a): their package lists differ; run apt-get update (dnf makecache) on "
        "them or point them at one mirror"
    ]
    # exact requests are what they name: no disagreement between nodes that ask for different releases
    hostvars["b"]["stack_read"]["ansible_facts"]["gpu_stack"]["index"]["branch_request"] = None
    assert stack_index_problems(["a", "b"], hostvars, "stack_read") == []


def test_stack_at_release_makes_a_branch_request_exact():
    from ansible_collections.gpuops.cluster.plugins.filter.stack import stack_at_release

    resolved = {
        "driver_version": "580.95.05",
        "driver_request": {"branch": "580", "exact": None, "floor": None, "skip": [], "upgrade": False},
        "packages": [],
    }
    at = stack_at_release(resolved, {"driver_version": "580.126.09", "problems": []})
    assert at["driver_version"] == "580.126.09"
    assert at["driver_request"] == {"branch": "580", "exact": "580.126.09", "floor": None, "skip": [], "upgrade": False}
    assert resolved["driver_request"]["exact"] is None  # the input is not changed
    assert stack_at_release(resolved, {"driver_version": None}) is resolved
