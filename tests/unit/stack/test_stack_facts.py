"""stack_facts: loaded module, nvidia-smi, NVSwitch detection and the drift decision."""

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import rpm_versionlock, stack_facts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "stack"


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("proc_version_proprietary.txt", {"version": "550.127.08", "flavor": "proprietary", "arch": "x86_64"}),
        ("proc_version_open.txt", {"version": "550.127.08", "flavor": "open", "arch": "x86_64"}),
        ("proc_version_open_aarch64.txt", {"version": "570.133.20", "flavor": "open", "arch": "aarch64"}),
    ],
)
def test_parse_proc_driver_version(fixture, expected):
    parsed = stack_facts.parse_proc_driver_version((FIXTURES / fixture).read_text())
    assert {key: parsed[key] for key in expected} == expected
    assert parsed["gcc"].startswith("gcc version ")


def test_parse_proc_driver_version_rejects_other_text():
    with pytest.raises(stack_facts.StackFactsError, match="NVRM version"):
        stack_facts.parse_proc_driver_version("NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n")


def test_parse_nvidia_smi_h100():
    gpus = stack_facts.parse_nvidia_smi_query((FIXTURES / "nvidia_smi_h100x8.csv").read_text())
    assert len(gpus) == 8
    assert gpus[0] == {
        "driver_version": "550.127.08",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:18:00.0",
    }


def test_parse_nvidia_smi_name_with_comma():
    gpus = stack_facts.parse_nvidia_smi_query("550.127.08, NVIDIA A100-SXM4-80GB, rev, 00000000:07:00.0\n")
    assert gpus == [
        {"driver_version": "550.127.08", "name": "NVIDIA A100-SXM4-80GB, rev", "pci_bus_id": "00000000:07:00.0"}
    ]


def test_parse_nvidia_smi_rejects_error_text():
    with pytest.raises(stack_facts.StackFactsError):
        stack_facts.parse_nvidia_smi_query("Failed to initialize NVML: Driver/library version mismatch\n")


@pytest.mark.parametrize(
    ("fixture", "count", "device_id"),
    [("lspci_hgx_h100.txt", 4, "22a3"), ("lspci_dgx_a100.txt", 6, "1af1"), ("lspci_l40s.txt", 0, None)],
)
def test_parse_lspci_nvswitch(fixture, count, device_id):
    found = stack_facts.parse_lspci_nvswitch((FIXTURES / fixture).read_text())
    assert len(found) == count
    assert {entry["device_id"] for entry in found} == ({device_id} if device_id else set())


def test_parse_lspci_extra_ids_and_other_vendors():
    text = "0000:01:00.0 0680: 10de:2901 (rev a1)\n02:00.0 0680: 15b3:2901\n"
    assert stack_facts.parse_lspci_nvswitch(text) == []
    assert stack_facts.parse_lspci_nvswitch(text, {"2901": "site-specific"}) == [
        {"slot": "0000:01:00.0", "device_id": "2901", "generation": "site-specific"}
    ]


@pytest.mark.parametrize(
    ("package_version", "upstream"),
    [
        ("550.127.08-1", "550.127.08"),
        ("3:550.127.08-1.el9", "550.127.08"),
        ("550.127.08-0ubuntu1", "550.127.08"),
        (None, None),
    ],
)
def test_upstream_version(package_version, upstream):
    assert stack_facts.upstream_version(package_version) == upstream


REQUESTED = [
    {"name": "nvidia-driver-550", "version": "550.127.08-1", "component": "driver"},
    {"name": "libnccl2", "version": "2.21.5-1+cuda12.4", "component": "nccl"},
]
INSTALLED = {"nvidia-driver-550": "550.127.08-1", "libnccl2": "2.21.5-1+cuda12.4"}
PINS = {"nvidia-driver-550": "550.127.08-1", "libnccl2": "2.21.5-1+cuda12.4"}
HOLDS = {"nvidia-driver-550", "libnccl2"}


def test_drift_converged_node():
    result = stack_facts.drift(REQUESTED, INSTALLED, "550.127.08", PINS, HOLDS)
    assert result == {
        "installed_differs": [],
        "pin_missing": [],
        "hold_missing": [],
        "installed_driver_version": "550.127.08",
        "loaded_driver_version": "550.127.08",
        "loaded_differs": False,
        "driver_packages_disagree": False,
        "drifted": False,
        "reboot_required": False,
        "reboot_reasons": [],
    }


def test_drift_after_upgrade_without_reboot():
    installed = dict(INSTALLED, **{"nvidia-driver-550": "550.144.03-1"})
    requested = [dict(REQUESTED[0], version="550.144.03-1"), REQUESTED[1]]
    result = stack_facts.drift(requested, installed, "550.127.08", PINS, HOLDS)
    assert result["installed_differs"] == []
    assert result["pin_missing"] == ["nvidia-driver-550"]
    assert result["loaded_differs"] is True
    assert result["reboot_required"] is True
    assert result["reboot_reasons"] == ["loaded_differs_from_installed"]


def test_drift_loaded_flavor_against_the_requested_one():
    same = stack_facts.drift(
        REQUESTED, INSTALLED, "550.127.08", PINS, HOLDS, loaded_flavor="open", kernel_modules="open"
    )
    assert same["reboot_reasons"] == []
    other = stack_facts.drift(
        REQUESTED, INSTALLED, "550.127.08", PINS, HOLDS, loaded_flavor="proprietary", kernel_modules="open"
    )
    assert other["reboot_reasons"] == ["loaded_flavor_differs"]
    assert other["reboot_required"] is True
    # Either side unknown: not compared.
    assert stack_facts.drift(REQUESTED, INSTALLED, None, PINS, HOLDS, kernel_modules="open")["reboot_reasons"] == [
        "driver_not_loaded"
    ]
    assert (
        stack_facts.drift(REQUESTED, INSTALLED, "550.127.08", PINS, HOLDS, loaded_flavor="open")["reboot_reasons"] == []
    )


def test_drift_flags_each_kind():
    installed = {"nvidia-driver-550": "550.90.07-1", "libnccl2": None}
    result = stack_facts.drift(REQUESTED, installed, "550.90.07", {"libnvidia-*": "1"}, {"libnccl2"})
    assert result["installed_differs"] == [
        {"name": "libnccl2", "requested": "2.21.5-1+cuda12.4", "installed": None},
        {"name": "nvidia-driver-550", "requested": "550.127.08-1", "installed": "550.90.07-1"},
    ]
    assert result["pin_missing"] == ["libnccl2", "nvidia-driver-550"]
    assert result["hold_missing"] == ["nvidia-driver-550"]
    assert result["reboot_required"] is False
    assert result["drifted"] is True


def test_drift_glob_pin_counts():
    result = stack_facts.drift(REQUESTED[:1], INSTALLED, "550.127.08", {"nvidia-driver-*": "550.127.08-1"}, HOLDS)
    assert result["pin_missing"] == []


def test_drift_driver_installed_but_not_loaded():
    result = stack_facts.drift(REQUESTED, INSTALLED, None, PINS, HOLDS)
    assert result["reboot_required"] is True
    assert result["reboot_reasons"] == ["driver_not_loaded"]
    assert result["loaded_differs"] is False


def test_drift_no_driver_requested_never_reboots():
    result = stack_facts.drift(REQUESTED[1:], INSTALLED, None, PINS, HOLDS)
    assert result["reboot_required"] is False
    assert result["installed_driver_version"] is None


def test_drift_driver_packages_disagree():
    requested = [*REQUESTED, {"name": "nvidia-kernel-common-550", "version": "550.127.08-1", "component": "driver"}]
    installed = dict(INSTALLED, **{"nvidia-kernel-common-550": "550.90.07-1"})
    result = stack_facts.drift(requested, installed, "550.127.08", PINS, HOLDS)
    assert result["driver_packages_disagree"] is True
    assert result["drifted"] is True


def test_drift_rpm_without_holds():
    requested = [{"name": "nvidia-driver", "version": "550.127.08-1.el9", "component": "driver"}]
    result = stack_facts.drift(
        requested,
        {"nvidia-driver": "3:550.127.08-1.el9"},
        "550.127.08",
        {"nvidia-driver": "3:550.127.08-1.el9"},
        None,
        version_equal=rpm_versionlock.evr_matches,
    )
    assert result["drifted"] is False
    assert result["hold_missing"] == []
    assert result["installed_driver_version"] == "550.127.08"


def test_parse_systemctl_show_blocks():
    from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_facts import parse_systemctl_show

    text = (
        "Id=nvidia-persistenced.service\nActiveState=active\nUnitFileState=static\n\n"
        "Id=nvidia-dcgm.service\nActiveState=activating\nUnitFileState=enabled\n\n"
        "Id=gone.service\nActiveState=inactive\nUnitFileState=\n"
    )
    assert parse_systemctl_show(text) == {
        "nvidia-persistenced": {"active": True, "enabled": True},
        "nvidia-dcgm": {"active": False, "enabled": True},
        "gone": {"active": False, "enabled": False},
    }
    assert parse_systemctl_show("") == {}
