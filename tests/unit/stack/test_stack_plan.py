"""stack_plan: what a pass of the nvidia_stack role does, decided from one read of the node."""

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import stack_facts, stack_plan

WANTED = ["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm"]
READY = {name: {"active": True, "enabled": True} for name in WANTED}
REQUESTED = [
    {"name": "nvidia-driver-580", "version": "580.126.09-1ubuntu1", "component": "driver"},
    {"name": "nvidia-fabricmanager-580", "version": "580.126.09-1ubuntu1", "component": "fabricmanager"},
]
CONVERGED = {item["name"]: item["version"] for item in REQUESTED}


def drift(installed=None, loaded="580.126.09", **options):
    """The drift gpu_stack_facts computes for REQUESTED on a node with ``installed`` and ``loaded``."""
    pins = {item["name"]: item["version"] for item in REQUESTED}
    return stack_facts.drift(REQUESTED, installed or CONVERGED, loaded, pins, set(CONVERGED), **options)


def test_a_converged_node_with_its_services_running_needs_nothing():
    assert stack_plan.plan(drift(), READY, WANTED) == {"move": [], "reboot_reasons": [], "start": [], "load": False}


def test_packages_that_move_restart_every_wanted_service():
    installed = dict(CONVERGED, **{"nvidia-driver-580": "580.95.05-0ubuntu1"})
    result = stack_plan.plan(drift(installed), READY, WANTED)
    assert result["move"] == ["nvidia-driver-580"]
    assert result["start"] == WANTED
    assert result["load"] is True


def test_a_package_not_installed_moves():
    installed = dict(CONVERGED, **{"nvidia-fabricmanager-580": None})
    assert stack_plan.plan(drift(installed), READY, [])["move"] == ["nvidia-fabricmanager-580"]


@pytest.mark.parametrize(
    ("state", "start"),
    [
        ({"active": False, "enabled": True}, ["nvidia-dcgm"]),
        ({"active": True, "enabled": False}, ["nvidia-dcgm"]),
        (None, ["nvidia-dcgm"]),  # not in the read: no systemctl on the node
        ({"active": True, "enabled": True}, []),
    ],
)
def test_a_wanted_service_not_active_and_enabled_is_started_alone(state, start):
    services = {name: value for name, value in dict(READY, **{"nvidia-dcgm": state}).items() if value is not None}
    result = stack_plan.plan(drift(), services, WANTED)
    assert result == {"move": [], "reboot_reasons": [], "start": start, "load": bool(start)}


def test_a_service_not_wanted_is_never_started():
    services = dict(READY, **{"nvidia-fabricmanager": {"active": False, "enabled": False}})
    result = stack_plan.plan(drift(), services, ["nvidia-persistenced", "nvidia-dcgm"])
    assert result["start"] == []
    assert result["load"] is False


@pytest.mark.parametrize(
    ("loaded", "options", "reasons"),
    [
        ("580.95.05", {}, ["loaded_differs_from_installed"]),
        (None, {}, ["driver_not_loaded"]),
        ("580.126.09", {"loaded_flavor": "proprietary", "kernel_modules": "open"}, ["loaded_flavor_differs"]),
    ],
)
def test_a_pending_reboot_alone_runs_the_load_stage(loaded, options, reasons):
    result = stack_plan.plan(drift(loaded=loaded, **options), READY, WANTED)
    assert result == {"move": [], "reboot_reasons": reasons, "start": [], "load": True}


def test_a_name_given_twice_is_started_once():
    assert stack_plan.plan(drift(), {}, ["nvidia-dcgm", "nvidia-dcgm"])["start"] == ["nvidia-dcgm"]


@pytest.mark.parametrize(
    ("names", "dkms"),
    [
        (["nvidia-driver-580-open", "libnccl2"], False),
        (["nvidia-dkms-580-open"], True),
        (["kmod-nvidia-open-dkms", "nvidia-driver"], True),
        ([], False),
    ],
)
def test_uses_dkms(names, dkms):
    assert stack_plan.uses_dkms(names) is dkms


@pytest.mark.parametrize(
    ("setting", "dkms", "wanted"),
    [("auto", False, False), ("auto", True, True), (True, False, True), (False, True, False)],
)
def test_kernel_headers(setting, dkms, wanted):
    assert stack_plan.kernel_headers(setting, dkms) is wanted


def test_kernel_headers_refuses_another_setting():
    with pytest.raises(ValueError, match="true, false or auto, not 'yes please'"):
        stack_plan.kernel_headers("yes please", False)
