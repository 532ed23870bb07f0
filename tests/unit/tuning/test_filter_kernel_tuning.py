"""kernel_tuning_options / kernel_tuning_results: the kernel_tuning role's one node_tuning call, its options built
from the role's settings and its results mapped to the role's areas (the logic that was Jinja in the role)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.kernel_tuning import (
    SETTINGS,
    kernel_tuning_options,
    kernel_tuning_results,
)

# The role's defaults with the training profile (roles/kernel_tuning/defaults/main.yml), Debian's values.
TRAINING = {
    "sysctl_file": "90-gpuops-tuning",
    "sysctls": {"vm.swappiness": 1, "vm.max_map_count": 1048576},
    "numa_enabled": True,
    "numa_balancing": False,
    "rdma_enabled": True,
    "rdma_sysctls": {"net.core.rmem_max": 268435456},
    "sysctl_extra": {},
    "thp_enabled": True,
    "thp_mode": "madvise",
    "thp_defrag": "defer+madvise",
    "hugepages_enabled": False,
    "hugepages": None,
    "hugepages_per_node": {},
    "hugepage_size_kb": 2048,
    "governor_enabled": True,
    "governor": "performance",
    "irq_drivers": ["mlx5_core", "nvidia"],
    "irq_devices": [],
    "irq_housekeeping_cpus": "",
    "irqbalance": "ban",
    "irqbalance_config": "/etc/default/irqbalance",
    "irq_script": "/usr/local/sbin/gpuops-irq-affinity",
    "irq_conf": "/etc/gpuops/irq-affinity.conf",
    "cmdline_args": ["iommu=pt"],
    "cmdline_max_cstate": None,
    "cmdline_extra_args": [],
    "cmdline_remove_args": [],
    "bootloader": "grub_default",
    "memlock_enabled": True,
    "memlock_limit": "unlimited",
    "peermem_enabled": False,
    "acs_disable": False,
    "apply_live": "auto",
    "root": "/",
}


def test_the_training_defaults():
    options = kernel_tuning_options(TRAINING)
    assert options["sysctl_profile"] == {
        "name": "90-gpuops-tuning",
        "sysctls": {
            "vm.swappiness": 1,
            "vm.max_map_count": 1048576,
            "kernel.numa_balancing": 0,
            "net.core.rmem_max": 268435456,
        },
        "state": "present",
        "apply_live": "auto",
        "root": "/",
    }
    assert options["kernel_runtime"] == {
        "name": "gpuops-kernel-runtime",
        "replaces": ["gpuops-thp", "gpuops-hugepages", "gpuops-governor"],
        "hugepage_size_kb": 2048,
        "apply_live": "auto",
        "root": "/",
        "thp_enabled": "madvise",
        "thp_defrag": "defer+madvise",
        "governor": "performance",
    }
    assert options["kernel_cmdline"]["args"] == ["iommu=pt"]
    assert options["rdma_dropins"] == {"peermem": False, "root": "/", "memlock_limit": "unlimited"}
    assert options["pcie_acs"] == {"state": "report", "apply_live": "auto"}
    assert options["irq_affinity"]["boot_unit"] is True


def test_areas_switched_off_leave_their_keys_out():
    settings = dict(
        TRAINING,
        numa_enabled=False,
        rdma_enabled=False,
        thp_enabled="false",
        governor_enabled=False,
        memlock_enabled=True,
        memlock_limit=None,
        sysctls={},
    )
    options = kernel_tuning_options(settings)
    assert options["sysctl_profile"]["sysctls"] == {}
    assert options["sysctl_profile"]["state"] == "absent"
    assert "thp_enabled" not in options["kernel_runtime"]
    assert "governor" not in options["kernel_runtime"]
    assert "memlock_limit" not in options["rdma_dropins"]


def test_hugepages_cstate_extra_keys_and_acs():
    settings = dict(
        TRAINING,
        hugepages_enabled=True,
        hugepages=512,
        cmdline_max_cstate=1,
        cmdline_extra_args=["pci=realloc"],
        sysctl_extra={"vm.swappiness": 10},
        numa_balancing=True,
        acs_disable=True,
        memlock_limit=65536,
    )
    options = kernel_tuning_options(settings)
    assert options["kernel_runtime"]["hugepages"] == 512
    assert "hugepages_per_node" not in options["kernel_runtime"]
    assert options["kernel_cmdline"]["args"] == [
        "iommu=pt",
        "processor.max_cstate=1",
        "intel_idle.max_cstate=1",
        "pci=realloc",
    ]
    assert options["sysctl_profile"]["sysctls"]["vm.swappiness"] == 10  # the extra keys win
    assert options["sysctl_profile"]["sysctls"]["kernel.numa_balancing"] == 1
    assert options["pcie_acs"]["state"] == "disabled"
    assert options["rdma_dropins"]["memlock_limit"] == "65536"
    per_node = kernel_tuning_options(dict(TRAINING, hugepages_enabled=True, hugepages_per_node={"0": 8}))
    assert per_node["kernel_runtime"]["hugepages_per_node"] == {"0": 8}
    assert "hugepages" not in per_node["kernel_runtime"]


def test_settings_must_be_complete():
    with pytest.raises(AnsibleFilterError, match="settings lack root"):
        kernel_tuning_options({name: TRAINING[name] for name in SETTINGS if name != "root"})
    with pytest.raises(AnsibleFilterError, match="must be the role's settings"):
        kernel_tuning_options(["sysctls"])


def test_results_map_the_modules_to_the_areas():
    parts = {
        "kernel_runtime": {"changed": True, "changed_areas": ["thp"]},
        "rdma_dropins": {"changed": True, "changed_limits": False, "changed_systemd": True, "changed_peermem": False},
        "sysctl_profile": {"changed": False},
    }
    results = kernel_tuning_results(parts)
    assert results["runtime"] == {"changed": False, "changed_areas": ["thp"]}
    assert (results["thp"], results["hugepages"], results["governor"]) == (
        {"changed": True},
        {"changed": False},
        {"changed": False},
    )
    assert (results["memlock"], results["peermem"]) == ({"changed": True}, {"changed": False})
    assert results["sysctl"] == {"changed": False}
    assert results["irq"] == {}
    assert results["acs"] == {}
    assert kernel_tuning_results({})["memlock"] == {"changed": False}
