"""superseded_packages: what a new stack request removes before installing."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.package_transition import FilterModule
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.package_transition import (
    TransitionError,
    superseded_packages,
)

R550_NVSWITCH = [
    "cuda-drivers-550",
    "nvidia-driver",
    "nvidia-kernel-dkms",
    "libcuda1",
    "libnvidia-ml1",
    "nvidia-smi",
    "nvidia-persistenced",
    "nvidia-fabricmanager-550",
    "libnvidia-nscq-550",
    "cuda-toolkit-12-4",
    "libnccl2",
    "libnccl-dev",
    "datacenter-gpu-manager-4-core",
    "datacenter-gpu-manager-4-cuda12",
]
R580_NVSWITCH = [
    {"name": n, "version": "580.65.06-1"}
    for n in (
        "cuda-drivers-580",
        "nvidia-driver",
        "nvidia-kernel-open-dkms",
        "libcuda1",
        "libnvidia-ml1",
        "nvidia-smi",
        "nvidia-persistenced",
        "nvidia-fabricmanager",
        "libnvidia-nscq",
    )
] + [
    {"name": "cuda-toolkit-13-0", "version": "13.0.0-1"},
    {"name": "libnccl2", "version": "2.27.7-1+cuda13.0"},
    {"name": "libnccl-dev", "version": "2.27.7-1+cuda13.0"},
    {"name": "datacenter-gpu-manager-4-core", "version": "1:4.5.2-1"},
    {"name": "datacenter-gpu-manager-4-cuda13", "version": "1:4.5.2-1"},
]


def test_branch_change_to_r580_removes_branch_named_packages_and_keeps_toolkit():
    assert superseded_packages(R550_NVSWITCH, R580_NVSWITCH) == [
        "cuda-drivers-550",
        "datacenter-gpu-manager-4-cuda12",
        "libnvidia-nscq-550",
        "nvidia-fabricmanager-550",
        "nvidia-kernel-dkms",
    ]


def test_downgrade_from_r580_removes_the_unbranched_names():
    installed = [p["name"] for p in R580_NVSWITCH]
    assert superseded_packages(installed, R550_NVSWITCH) == [
        "cuda-drivers-580",
        "datacenter-gpu-manager-4-cuda13",
        "libnvidia-nscq",
        "nvidia-fabricmanager",
        "nvidia-kernel-open-dkms",
    ]


def test_same_release_names_supersede_nothing():
    assert superseded_packages(R550_NVSWITCH, R550_NVSWITCH) == []


def test_node_that_no_longer_gets_fabric_manager_drops_it():
    requested = [n for n in R550_NVSWITCH if "fabricmanager" not in n and "nscq" not in n]
    assert superseded_packages(R550_NVSWITCH, requested) == ["libnvidia-nscq-550", "nvidia-fabricmanager-550"]


def test_legacy_dcgm3_goes_only_when_dcgm4_is_requested():
    installed = ["datacenter-gpu-manager", "nvidia-driver"]
    assert superseded_packages(installed, ["nvidia-driver", "datacenter-gpu-manager-4-cuda12"]) == [
        "datacenter-gpu-manager"
    ]
    assert superseded_packages(installed, ["nvidia-driver"]) == []


def test_rhel_fabric_manager_rename_and_kmod_flavour():
    installed = ["nvidia-fabric-manager", "kmod-nvidia-latest-dkms", "nvidia-driver", "libnccl"]
    requested = ["nvidia-fabricmanager", "kmod-nvidia-open-dkms", "nvidia-driver", "libnccl"]
    assert superseded_packages(installed, requested) == ["kmod-nvidia-latest-dkms", "nvidia-fabric-manager"]


def test_unrelated_and_side_by_side_packages_are_left_alone():
    installed = ["nvidia-container-toolkit", "cuda-toolkit-12-4", "libnvidia-ml1", "openssh-server"]
    assert superseded_packages(installed, ["cuda-toolkit-13-0", "libnvidia-ml1"]) == []


def test_package_facts_mapping_is_accepted():
    facts = {"nvidia-fabricmanager-550": [{"version": "550.127.05-1"}], "nvidia-driver": [{}]}
    assert FilterModule().filters()["superseded_packages"](facts, ["nvidia-driver", "nvidia-fabricmanager"]) == [
        "nvidia-fabricmanager-550"
    ]


@pytest.mark.parametrize("bad", [[None], [{"version": "1"}], [""]])
def test_bad_input_is_refused(bad):
    with pytest.raises(TransitionError):
        superseded_packages(bad, [])
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.superseded_packages"):
        FilterModule().filters()["superseded_packages"](["nvidia-driver"], bad)


# ---------------------------------------------------------------- driver_companions

DEBIAN_PINS = [
    {
        "component": "driver",
        "names": ["cuda-drivers", "cuda-drivers-550", "nvidia-driver", "nvidia-driver-*", "libnvidia-*", "nvidia-smi"],
        "version": "550.127.05-1",
    }
]
DOWNGRADE = [{"name": n, "version": "550.127.05-1"} for n in ("cuda-drivers-550", "nvidia-driver", "nvidia-smi")]


def test_a_dependency_the_stack_does_not_name_moves_with_the_driver():
    """As the lab's nvidia_stack scenario found: a downgrade 550.127.08 -> .05 left nvidia-driver-cuda (a '>='
    dependency of cuda-drivers-550) on .08, one node with two releases."""
    installed = {
        "cuda-drivers-550": [{"version": "550.127.08-1"}],
        "nvidia-driver": [{"version": "550.127.08-1"}],
        "nvidia-driver-cuda": [{"version": "550.127.08-1"}],
        "nvidia-smi": [{"version": "550.127.08-1"}],
        "libnvidia-container1": [{"version": "1.17.8-1"}],  # matches libnvidia-*, another release: left alone
        "nvidia-fabricmanager-550": [{"version": "550.127.08-1"}],  # named by no pin: left alone
        "cuda-toolkit-12-4": [{"version": "12.4.1-1"}],
    }
    specs = FilterModule().filters()["driver_companions"](installed, DOWNGRADE, DEBIAN_PINS, "550.127.08")
    assert specs == ["nvidia-driver-cuda=550.127.05-1"]


def test_nothing_moves_without_an_old_driver_or_when_the_companion_is_already_there():
    installed = {"nvidia-driver-cuda": [{"version": "550.127.05-1"}], "nvidia-driver": [{"version": "550.127.08-1"}]}
    assert FilterModule().filters()["driver_companions"](installed, DOWNGRADE, DEBIAN_PINS, None) == []
    assert FilterModule().filters()["driver_companions"](installed, DOWNGRADE, DEBIAN_PINS, "550.127.08") == []


def test_a_superseded_package_is_removed_not_moved():
    installed = {"cuda-drivers-580": [{"version": "580.65.06-1"}], "nvidia-driver": [{"version": "580.65.06-1"}]}
    pins = [dict(DEBIAN_PINS[0], names=["cuda-drivers-*", "nvidia-driver"])]
    assert FilterModule().filters()["driver_companions"](installed, DOWNGRADE, pins, "580.65.06") == []


def test_driver_companions_refuses_a_package_list_for_the_installed_mapping():
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.driver_companions: installed must be"):
        FilterModule().filters()["driver_companions"](["nvidia-driver"], DOWNGRADE, DEBIAN_PINS, "550.127.08")


# ---------------------------------------------------------------- stack_companions


def test_stack_companions_reads_the_move_from_the_stack_read_on_apt_only():
    installed = {
        "cuda-drivers-550": [{"version": "550.127.08-1"}],
        "nvidia-driver": [{"version": "550.127.08-1"}],
        "nvidia-driver-cuda": [{"version": "550.127.08-1"}],
    }
    read = {
        "index": {"packages": DOWNGRADE, "pins": DEBIAN_PINS},
        "drift": {"installed_driver_version": "550.127.08"},
    }
    companions = FilterModule().filters()["stack_companions"]
    assert companions(installed, read, "apt") == ["nvidia-driver-cuda=550.127.05-1"]
    assert companions(installed, read, "dnf") == []
    assert companions(installed, dict(read, drift={}), "apt") == []  # no driver ran before
    with pytest.raises(AnsibleFilterError, match=r"stack_companions: the read must be gpu_stack_facts'"):
        companions(installed, {"packages": DOWNGRADE}, "apt")
