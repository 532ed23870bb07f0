"""Every resolver rule at its boundaries."""

from __future__ import annotations

import copy
import datetime
import fnmatch

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import StackMatrix, default_matrix
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_resolver import (
    StackViolations,
    resolve,
    violations,
)

TODAY = datetime.date(2026, 12, 2)


def run(request, os="Debian", os_version="12", gpu="h100-sxm", **kwargs):
    kwargs.setdefault("today", TODAY)
    return resolve(request, os, os_version, gpu, **kwargs)


def rules(request, os="Debian", os_version="12", gpu="h100-sxm", **kwargs):
    kwargs.setdefault("today", TODAY)
    return [v["rule"] for v in violations(request, os, os_version, gpu, **kwargs)]


def pairs(result):
    """``name=version`` of every resolved package (upstream versions; the node's index adds revisions)."""
    return ["%s=%s" % (p["name"], p["version"]) for p in result["packages"]]


def names(result, component=None):
    return [p["name"] for p in result["packages"] if component is None or p["component"] == component]


# ------------------------------------------------------------------ the reference example


def test_reference_example_debian12_h100():
    result = run({"driver": "550", "cuda": "12.4", "dcgm": "4"})
    assert result["driver_branch"] == "550"
    assert result["driver_version"] == default_matrix().releases(550)[-1]
    assert result["kernel_modules"] == "proprietary"
    assert result["cuda_version"] == "12.4"
    assert result["cuda_toolkit_version"] == "12.4.1"
    assert result["fabricmanager"] is True
    assert result["nvswitch"] is True
    assert result["os_family"] == "debian"
    assert result["dcgm"]["package"] == "datacenter-gpu-manager-4-cuda12"
    driver = result["driver_version"]
    # Upstream versions only: the node's package index supplies the revision (package_index).
    wanted = pairs(result)
    assert "cuda-drivers-550=%s" % driver in wanted
    assert "nvidia-kernel-dkms=%s" % driver in wanted
    assert "nvidia-fabricmanager-550=%s" % driver in wanted
    assert "libnvidia-nscq-550=%s" % driver in wanted
    assert "libnccl2=%s-*+cuda12.4" % result["nccl_version"] in wanted
    assert all(p["follows_driver"] for p in result["packages"] if p["component"] in ("driver", "fabricmanager"))
    assert not any(p["follows_driver"] for p in result["packages"] if p["component"] in ("cuda", "nccl", "dcgm"))
    driver_pin = next(p for p in result["pins"] if p["component"] == "driver")
    # apt's >= dependencies of the meta package float: the pin must cover them at the exact version.
    assert {"nvidia-driver", "nvidia-kernel-*", "libnvidia-*", "libcuda1", "nvidia-persistenced"} <= set(
        driver_pin["names"]
    )
    assert driver_pin["version"] == driver


def test_resolve_is_deterministic():
    request = {"driver": "580", "cuda": "13.0", "dcgm": "4", "nccl": "2.27.7"}
    assert run(request, gpu="b200") == run(dict(reversed(list(request.items()))), gpu="b200")


def test_violations_empty_when_valid():
    assert rules({"driver": "580", "cuda": "12.4"}) == []


# ------------------------------------------------------------------ driver selection


def test_exact_known_release():
    result = run({"driver": "550.127.08", "cuda": "12.4"})
    assert result["driver_version"] == "550.127.08"
    assert not any("not a release the compatibility matrix knows" in w for w in result["warnings"])


def test_unknown_exact_release_of_known_branch_is_refused():
    assert rules({"driver": "550.90", "cuda": "12.4"}) == ["driver.unknown_release"]
    (message,) = [v["message"] for v in violations({"driver": "550.90", "cuda": "12.4"}, "Debian", "12", "h100-sxm")]
    assert "driver 550.90 is not a release the compatibility matrix knows for R550" in message
    assert "allow_unknown_release: true" in message


def test_unknown_exact_release_allowed_explicitly_warns():
    result = run({"driver": "550.999.01", "cuda": "12.4", "allow_unknown_release": True})
    assert result["driver_version"] == "550.999.01"
    assert any("550.999.01 is not a release the compatibility matrix knows for R550" in w for w in result["warnings"])
    assert "request.malformed" in rules({"driver": "550.999.01", "cuda": "12.4", "allow_unknown_release": "maybe"})


def test_unknown_branch():
    assert rules({"driver": "551", "cuda": "12.4"}) == ["driver.unknown_branch"]


def test_branch_without_releases_needs_exact_version():
    data = copy.deepcopy(default_matrix().data)
    next(entry for entry in data["driver_branches"] if entry["branch"] == 620)["releases"] = []
    assert "driver.no_release" in rules({"driver": "620", "cuda": "13.0"}, matrix=StackMatrix(data))


@pytest.mark.parametrize("driver", ["55", "550.", "latest", "550.127.08.1"])
def test_malformed_driver(driver):
    assert "driver.malformed" in rules({"driver": driver, "cuda": "12.4"})


# ------------------------------------------------------------------ CUDA vs driver minimum


@pytest.mark.parametrize(
    ("driver", "cuda", "ok", "toolkit"),
    [
        ("550.54.13", "12.4", False, None),
        ("550.54.14", "12.4", True, "12.4.0"),  # GA minimum exactly: GA toolkit
        ("550.54.15", "12.4", True, "12.4.1"),  # update 1 minimum exactly
        ("570.124.05", "12.8.1", False, None),
        ("570.124.06", "12.8.1", True, "12.8.1"),
        ("570.26", "12.8", True, "12.8.0"),
        ("580.65.05", "13.0", False, None),
        ("580.65.06", "13.0", True, "13.0.0"),
        ("580.95.05", "13.0", True, "13.0.2"),
        ("535.247.01", "12.2", True, "12.2.2"),
        # Updates added by the matrix audit (release notes table and runfiles)
        ("570.195.03", "12.8", True, "12.8.1"),
        ("570.211.01", "12.8", True, "12.8.2"),
        ("580.105.08", "13.0", True, "13.0.2"),
        ("580.126.20", "13.0", True, "13.0.3"),
        ("590.44.01", "13.1", True, "13.1.0"),
        ("590.48.01", "13.1", True, "13.1.2"),
        ("595.58.03", "13.2.2", False, None),
        ("595.58.03", "13.2", True, "13.2.1"),
        ("595.71.05", "13.2", True, "13.2.2"),
    ],
)
def test_cuda_min_driver_boundary(driver, cuda, ok, toolkit):
    # Releases just below a minimum are not in the matrix: allowed explicitly to test the minimum alone.
    request = {"driver": driver, "cuda": cuda, "allow_unknown_release": True}
    if ok:
        assert run(request)["cuda_toolkit_version"] == toolkit
    else:
        assert rules(request) == ["cuda.min_driver"]


def test_strict_message_points_at_minor_version_compat():
    found = violations({"driver": "535", "cuda": "12.4"}, "Debian", "12", "h100-sxm", today=TODAY)
    assert [v["rule"] for v in found] == ["cuda.min_driver"]
    assert "allow_minor_version_compat: true" in found[0]["message"]


@pytest.mark.parametrize(
    ("driver", "cuda", "ok"),
    [
        ("535.247.01", "12.9", True),  # 12.x floor 525.60.13
        ("570.195.03", "13.0", False),  # 13.x floor R580: R570 has no CUDA 13 even with compat
        ("580.65.06", "13.2", True),
    ],
)
def test_minor_version_compat_relaxes_to_the_major_floor(driver, cuda, ok):
    request = {"driver": driver, "cuda": cuda, "allow_minor_version_compat": True}
    if ok:
        result = run(request)
        assert any("minor version compatibility" in w for w in result["warnings"])
    else:
        assert rules(request) == ["cuda.min_driver"]


@pytest.mark.parametrize("cuda", ["12.7", "11.9", "14.0", "12.4.9"])
def test_cuda_that_does_not_exist(cuda):
    assert rules({"driver": "580", "cuda": cuda}) == ["cuda.unknown"]


def test_cuda_12_7_message_lists_real_minors():
    found = violations({"driver": "580", "cuda": "12.7"}, "Debian", "12", "h100-sxm", today=TODAY)
    assert "12.6, 12.8" in found[0]["message"]


@pytest.mark.parametrize("cuda", ["12", "twelve", 12.4])
def test_malformed_cuda(cuda):
    assert "cuda.malformed" in rules({"driver": "580", "cuda": cuda})


def test_cuda_checked_even_without_a_driver():
    assert set(rules({"driver": "551", "cuda": "12.7"})) == {"driver.unknown_branch", "cuda.unknown"}


def test_os_minimum_cuda():
    assert rules({"driver": "550", "cuda": "12.4"}, os="Ubuntu", os_version="24.04") == ["cuda.os"]
    assert rules({"driver": "555", "cuda": "12.5"}, os="Ubuntu", os_version="24.04") == []


# ------------------------------------------------------------------ NCCL


def test_default_nccl_is_newest_built_for_the_cuda():
    matrix = default_matrix()
    assert run({"driver": "550", "cuda": "12.4"})["nccl_version"] == matrix.nccl_for_cuda("12.4")[-1]


def test_nccl_not_built_for_that_cuda():
    found = violations({"driver": "550", "cuda": "12.4", "nccl": "2.26.2"}, "Debian", "12", "h100-sxm", today=TODAY)
    assert [v["rule"] for v in found] == ["nccl.cuda_build"]
    assert "built for CUDA 12.8, not for CUDA 12.4" in found[0]["message"]


def test_nccl_explicit_ok():
    result = run({"driver": "550", "cuda": "12.4", "nccl": "2.21.5"})
    assert "libnccl2=2.21.5-*+cuda12.4" in pairs(result)


@pytest.mark.parametrize(("nccl", "rule"), [("2.99.1", "nccl.unknown"), ("2.21", "nccl.malformed")])
def test_nccl_unknown_or_malformed(nccl, rule):
    assert rules({"driver": "550", "cuda": "12.4", "nccl": nccl}) == [rule]


def test_no_nccl_build_for_cuda_warns_and_leaves_it_out():
    result = run({"driver": "545", "cuda": "12.3"})
    assert result["nccl_version"] is None
    assert not names(result, "nccl")
    assert any("no NCCL build for CUDA 12.3" in w for w in result["warnings"])


@pytest.mark.parametrize(
    ("driver", "cuda", "nccl"),
    [("535", "12.2", "2.25.1"), ("560", "12.6", "2.23.4"), ("580", "13.0", "2.28.9"), ("590", "13.1", "2.29.2")],
)
def test_default_nccl_uses_the_audited_builds(driver, cuda, nccl):
    assert run({"driver": driver, "cuda": cuda})["nccl_version"] == nccl


def test_nccl_build_for_a_cuda_the_matrix_lacks_is_not_offered():
    # 2.30.7 has a +cuda13.3 build, but CUDA 13.3 is not in the matrix (its minimum driver is unchecked).
    assert rules({"driver": "580", "cuda": "13.0", "nccl": "2.30.7"}) == ["nccl.cuda_build"]


# ------------------------------------------------------------------ DCGM


@pytest.mark.parametrize(
    ("driver", "cuda", "package"),
    [("575", "12.9", "datacenter-gpu-manager-4-cuda12"), ("580", "13.0", "datacenter-gpu-manager-4-cuda13")],
)
def test_dcgm4_package_follows_driver_cuda_major(driver, cuda, package):
    result = run({"driver": driver, "cuda": cuda, "dcgm": "4"})
    assert result["dcgm"]["package"] == package
    assert package in names(result, "dcgm")
    assert {p["version"] for p in result["packages"] if p["component"] == "dcgm"} == {result["dcgm"]["version"]}


def test_dcgm_release_without_package_for_cuda13_driver():
    assert rules({"driver": "580", "cuda": "13.0", "dcgm": "4.1.1"}) == ["dcgm.cuda_major"]
    assert rules({"driver": "575", "cuda": "12.9", "dcgm": "4.1.1"}) == []


@pytest.mark.parametrize(
    ("gpu", "driver", "cuda", "package"),
    [
        # NVIDIA: Maxwell, Pascal and Volta on R580 take the -cuda12 DCGM packages, not -cuda13.
        ("v100-sxm2", "580", "12.9", "datacenter-gpu-manager-4-cuda12"),
        ("v100-pcie", "580.178.04", "12.8", "datacenter-gpu-manager-4-cuda12"),
        ("v100-sxm2", "575", "12.9", "datacenter-gpu-manager-4-cuda12"),
        ("a100-sxm4", "580", "12.9", "datacenter-gpu-manager-4-cuda13"),
        ("h100-sxm", "580", "13.0", "datacenter-gpu-manager-4-cuda13"),
    ],
)
def test_dcgm4_cuda_major_follows_gpu_architecture(gpu, driver, cuda, package):
    result = run({"driver": driver, "cuda": cuda, "dcgm": "4"}, gpu=gpu)
    assert result["dcgm"]["package"] == package
    assert result["dcgm"]["cuda_major"] == int(package[-2:])
    dcgm_pin = next(p for p in result["pins"] if p["component"] == "dcgm")
    assert package in dcgm_pin["names"]
    assert any(name.endswith("cuda13") for name in dcgm_pin["names"]) is package.endswith("cuda13")


def test_dcgm_without_cuda13_package_is_fine_on_volta_with_r580():
    # DCGM 4.1.1 has no -cuda13 package: refused for an H100 on R580, right for a V100 on R580 (-cuda12).
    assert rules({"driver": "580", "cuda": "12.9", "dcgm": "4.1.1"}, gpu="v100-sxm2") == []
    found = violations({"driver": "580", "cuda": "13.0", "dcgm": "4.1.1"}, "Debian", "12", "h100-sxm", today=TODAY)
    assert [v["rule"] for v in found] == ["dcgm.cuda_major"]
    assert "CUDA 13 drivers (R580 on hopper)" in found[0]["message"]
    assert rules({"driver": "580", "cuda": "12.9", "dcgm": "3"}, gpu="v100-sxm2") == []


def test_dcgm3_has_no_cuda13_package():
    assert rules({"driver": "580", "cuda": "13.0", "dcgm": "3"}) == ["dcgm.cuda_major"]
    result = run({"driver": "550", "cuda": "12.4", "dcgm": "3"})
    assert [w for w in pairs(result) if w.startswith("datacenter")] == ["datacenter-gpu-manager=3.3.6"]


@pytest.mark.parametrize(
    ("dcgm", "rule"), [("5", "dcgm.unknown"), ("4.0.9", "dcgm.unknown"), ("four", "dcgm.malformed")]
)
def test_dcgm_unknown(dcgm, rule):
    assert rules({"driver": "550", "cuda": "12.4", "dcgm": dcgm}) == [rule]


def test_no_dcgm_by_default():
    assert run({"driver": "550", "cuda": "12.4"})["dcgm"] is None


# ------------------------------------------------------------------ GPU vs branch


@pytest.mark.parametrize(
    ("gpu", "driver", "cuda", "rule"),
    [
        ("b200", "565", "12.6", "gpu.min_branch"),
        ("b200", "570.124.06", "12.8", "gpu.min_driver"),  # HGX B200 needs 570.133.20
        ("h200-sxm", "545", "12.3", "gpu.min_branch"),
        ("v100-sxm2", "590", "12.9", "gpu.last_branch"),
    ],
)
def test_gpu_branch_limits(gpu, driver, cuda, rule):
    assert rule in rules({"driver": driver, "cuda": cuda}, gpu=gpu)


@pytest.mark.parametrize(
    ("gpu", "driver", "cuda"),
    [("b200", "570.133.20", "12.8"), ("h200-sxm", "550", "12.4"), ("v100-sxm2", "580", "12.9")],
)
def test_gpu_branch_limits_inclusive(gpu, driver, cuda):
    assert rules({"driver": driver, "cuda": cuda}, gpu=gpu) == []


@pytest.mark.parametrize("gpu", ["v100-sxm2", "v100-pcie", "v100-sxm3", "Tesla V100-SXM2-32GB"])
@pytest.mark.parametrize("cuda", ["13.0", "13.0.2", "13.2"])
def test_cuda13_is_refused_on_volta(gpu, cuda):
    # CUDA 13.0 dropped Maxwell, Pascal and Volta: no driver, compat flag or update brings it back.
    request = {"driver": "580", "cuda": cuda, "allow_minor_version_compat": True}
    found = violations(request, "Debian", "12", gpu, today=TODAY)
    assert [v["rule"] for v in found] == ["cuda.gpu_architecture"]
    assert "CUDA 13.0 dropped volta GPUs" in found[0]["message"]
    assert 'use cuda "12.9" or older' in found[0]["message"]


@pytest.mark.parametrize(
    ("gpu", "cuda"), [("v100-sxm2", "12.9"), ("v100-sxm2", "12.2"), ("a100-sxm4", "13.0"), ("l4", "13.0")]
)
def test_cuda_up_to_the_architecture_limit_is_allowed(gpu, cuda):
    assert rules({"driver": "580", "cuda": cuda}, gpu=gpu) == []


def test_cuda_architecture_limit_comes_from_the_matrix():
    data = copy.deepcopy(default_matrix().data)
    next(a for a in data["architectures"] if a["name"] == "ampere")["cuda_major_max"] = 12
    assert rules({"driver": "580", "cuda": "13.0"}, gpu="a100-sxm4", matrix=StackMatrix(data)) == [
        "cuda.gpu_architecture"
    ]


def test_unknown_gpu_message():
    found = violations({"driver": "550", "cuda": "12.4"}, "Debian", "12", "NVIDIA H1000", today=TODAY)
    assert [v["rule"] for v in found] == ["gpu.unknown"]
    assert "nvidia-smi" in found[0]["message"]


# ------------------------------------------------------------------ kernel modules


@pytest.mark.parametrize(
    ("gpu", "requested", "driver", "cuda", "expected"),
    [
        ("gh200", "auto", "550", "12.4", "open"),
        ("b200", "auto", "570", "12.8", "open"),
        ("gb200", "open", "580", "13.0", "open"),
        ("v100-sxm2", "auto", "580", "12.9", "proprietary"),
        ("h100-sxm", "auto", "555", "12.5", "proprietary"),  # before R560 default
        ("h100-sxm", "auto", "560", "12.6", "open"),  # R560 made open the default
        ("h100-sxm", "proprietary", "580", "13.0", "proprietary"),
        ("h100-sxm", "open", "535", "12.2", "open"),
    ],
)
def test_kernel_modules_choice(gpu, requested, driver, cuda, expected):
    result = run({"driver": driver, "cuda": cuda, "kernel_modules": requested}, gpu=gpu)
    assert result["kernel_modules"] == expected
    module_package = "nvidia-kernel-open-dkms" if expected == "open" else "nvidia-kernel-dkms"
    assert module_package in names(result, "driver")


@pytest.mark.parametrize(
    ("gpu", "requested", "rule"),
    [
        ("gh200", "proprietary", "kernel_modules.open_required"),
        ("gb200", "proprietary", "kernel_modules.open_required"),
        ("v100-sxm2", "open", "kernel_modules.open_unsupported"),
        ("h100-sxm", "closed", "kernel_modules.malformed"),
    ],
)
def test_kernel_modules_violations(gpu, requested, rule):
    assert rule in rules({"driver": "580", "cuda": "13.0", "kernel_modules": requested}, gpu=gpu)


# ------------------------------------------------------------------ Fabric Manager by branch range


@pytest.mark.parametrize(
    ("os", "os_version", "driver", "cuda", "expected"),
    [
        ("Ubuntu", "22.04", "570.172.08", "12.8", ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]),
        ("Ubuntu", "22.04", "575.57.08", "12.9", ["nvidia-fabricmanager-575", "libnvidia-nscq-575"]),
        ("Ubuntu", "22.04", "580.65.06", "13.0", ["nvidia-fabricmanager", "libnvidia-nscq"]),
        ("Debian", "12", "575.57.08", "12.9", ["nvidia-fabricmanager-575", "libnvidia-nscq-575"]),
        ("Debian", "12", "580.82.07", "13.0", ["nvidia-fabricmanager", "libnvidia-nscq"]),
        ("Rocky", "9.4", "570.172.08", "12.8", ["nvidia-fabric-manager", "libnvidia-nscq-570"]),
        ("Rocky", "9.4", "575.57.08", "12.9", ["nvidia-fabric-manager", "libnvidia-nscq-575"]),
        ("RedHat", "8.10", "580.95.05", "13.0", ["nvidia-fabricmanager", "libnvidia-nscq"]),
    ],
)
def test_fabricmanager_names_at_r570_r575_r580(os, os_version, driver, cuda, expected):
    result = run({"driver": driver, "cuda": cuda}, os=os, os_version=os_version)
    fm = [p for p in result["packages"] if p["component"] == "fabricmanager"]
    assert [p["name"] for p in fm] == expected
    # always at exactly the driver version (the node's index adds the revision)
    assert all(p["version"] == driver and p["follows_driver"] for p in fm)
    fm_pins = [p for p in result["pins"] if p["component"] == "fabricmanager"]
    assert fm_pins
    assert all(p["version"] == driver for p in fm_pins)


@pytest.mark.parametrize("branch", sorted(b for b in default_matrix().branches if 535 <= b <= 595))
def test_every_branch_with_releases_gets_fabric_manager(branch):
    version = default_matrix().releases(branch)[-1]
    cuda = "13.0" if branch >= 580 else "12.2"
    result = run({"driver": version, "cuda": cuda, "allow_minor_version_compat": True})
    assert result["fabricmanager"] is True
    assert any(p["component"] == "fabricmanager" for p in result["packages"])


def test_no_fabricmanager_without_nvswitch():
    result = run({"driver": "550", "cuda": "12.4"}, gpu="NVIDIA H100 PCIe")
    assert result["fabricmanager"] is False
    assert not names(result, "fabricmanager")


def test_nvswitch_override():
    assert run({"driver": "550", "cuda": "12.4"}, gpu="h100-pcie", nvswitch=True)["fabricmanager"] is True
    assert run({"driver": "550", "cuda": "12.4"}, gpu="h100-sxm", nvswitch=False)["fabricmanager"] is False
    assert run({"driver": "550", "cuda": "12.4"}, gpu="h100-sxm", nvswitch=None)["fabricmanager"] is True


@pytest.mark.parametrize(
    ("gpu", "requested", "rule"),
    [
        ("h100-sxm", False, "fabricmanager.required"),
        ("h100-pcie", True, "fabricmanager.no_nvswitch"),
        ("h100-sxm", "maybe", "request.malformed"),
    ],
)
def test_fabricmanager_request_conflicts(gpu, requested, rule):
    assert rules({"driver": "550", "cuda": "12.4", "fabricmanager": requested}, gpu=gpu) == [rule]


def test_nvlink5_adds_nvsdm_from_r580_and_warns_about_nvlsm():
    result = run({"driver": "580", "cuda": "13.0"}, gpu="b200")
    assert "libnvsdm" in names(result, "fabricmanager")
    assert any("nvlsm" in w for w in result["warnings"])
    assert "libnvsdm" not in names(run({"driver": "575", "cuda": "12.9"}, gpu="b200"))


def test_gb200_gets_imex_at_the_driver_version():
    result = run({"driver": "580.82.07", "cuda": "13.0"}, gpu="gb200")
    assert [w for w in pairs(result) if w.startswith("nvidia-imex")] == ["nvidia-imex=580.82.07"]
    result = run({"driver": "575.57.08", "cuda": "12.9"}, gpu="gb200")
    assert [p["name"] for p in result["packages"] if p["component"] == "imex"] == ["nvidia-imex-575"]


# ------------------------------------------------------------------ OS families and package formats


def test_ubuntu_packages_and_pins():
    result = run({"driver": "550.127.08", "cuda": "12.4"}, os="Ubuntu", os_version="22.04")
    assert "nvidia-driver-550=550.127.08" in pairs(result)
    assert result["repo_dist"] == "ubuntu2204"


def test_ubuntu_r590_names_drop_the_branch():
    result = run({"driver": "595.58.03", "cuda": "13.2"}, os="Ubuntu", os_version="24.04")
    assert result["kernel_modules"] == "open"
    assert names(result, "driver") == ["nvidia-open", "nvidia-driver-open"]
    assert "nvidia-fabricmanager=595.58.03" in pairs(result)
    proprietary = run(
        {"driver": "595.58.03", "cuda": "13.2", "kernel_modules": "proprietary"}, os="Ubuntu", os_version="24.04"
    )
    assert [w for w in pairs(proprietary) if w.startswith(("cuda-drivers", "nvidia-driver"))] == [
        "cuda-drivers=595.58.03",
        "nvidia-driver=595.58.03",
    ]


# Unbranched R590+ package names, each from a source: nvidia-dkms[-open] and libnvidia-* (NVIDIA Driver Installation
# Guide, "Ubuntu 590 package renames"); nvidia-open, nvidia-driver-open, nvidia-kernel-source, nvidia-firmware,
# nvidia-headless-no-dkms-open (NVIDIA/gpu-driver-container ubuntu26.04 at 06a208c; nvidia-kernel-source-open in its
# nvidia-driver script); nvidia-kernel-common, nvidia-utils, nvidia-compute-utils, xserver-xorg-video-nvidia (the
# R590 ubuntu2404/sbsa set of dsx-ai-factory/infra-controller PR 6049); nvidia-modprobe (NVIDIA/gpu-driver-container
# commit 64eff74 pins it at the driver's version).
R590_UBUNTU_COMMON = [
    "nvidia-kernel-common",
    "nvidia-kernel-source",
    "nvidia-firmware",
    "nvidia-utils",
    "nvidia-compute-utils",
    "libnvidia-compute",
    "libnvidia-cfg1",
    "libnvidia-gl",
    "xserver-xorg-video-nvidia",
    "nvidia-persistenced",
    "nvidia-modprobe",
]
R590_UBUNTU_FLAVOUR = {
    "proprietary": ["cuda-drivers", "nvidia-driver", "nvidia-dkms"],
    "open": [
        "nvidia-open",
        "nvidia-driver-open",
        "nvidia-dkms-open",
        "nvidia-kernel-source-open",
        "nvidia-headless-no-dkms-open",
    ],
}


@pytest.mark.parametrize("kernel_modules", ["open", "proprietary"])
@pytest.mark.parametrize(
    ("driver", "cuda", "os_version"), [("590.48.01", "13.1", "24.04"), ("595.58.03", "13.2", "22.04")]
)
def test_ubuntu_r590_pins_hold_every_package_of_the_release(kernel_modules, driver, cuda, os_version):
    # The metapackages depend with ">=": a package no pin names (the DKMS module, nvidia-modprobe) can move to
    # another release while the rest stays.
    result = run({"driver": driver, "cuda": cuda, "kernel_modules": kernel_modules}, os="Ubuntu", os_version=os_version)
    driver_pins = [p for p in result["pins"] if p["component"] == "driver"]
    assert driver_pins
    assert all(p["version"] == driver and p["follows_driver"] for p in driver_pins)
    globs = [name for p in driver_pins for name in p["names"]]
    dkms = "nvidia-dkms-open" if kernel_modules == "open" else "nvidia-dkms"
    assert {dkms, "nvidia-modprobe"} <= set(globs)
    unpinned = [
        name
        for name in R590_UBUNTU_COMMON + R590_UBUNTU_FLAVOUR[kernel_modules]
        if not any(fnmatch.fnmatchcase(name, glob) for glob in globs)
    ]
    assert unpinned == []
    # The driver's own packages are all covered by the pins as well.
    assert all(any(fnmatch.fnmatchcase(name, glob) for glob in globs) for name in names(result, "driver"))


def test_rhel_packages_module_and_spec():
    result = run({"driver": "550.127.08", "cuda": "12.4", "kernel_modules": "open"}, os="Rocky", os_version="9.4")
    assert result["os_family"] == "redhat"
    assert result["dnf_module"] == "nvidia-driver:550-open"
    wanted = pairs(result)
    assert "kmod-nvidia-open-dkms=550.127.08" in wanted
    assert "libnccl=%s-*+cuda12.4" % result["nccl_version"] in wanted
    assert (
        run({"driver": "550", "cuda": "12.4"}, os="RedHat", os_version="8.10")["dnf_module"] == "nvidia-driver:550-dkms"
    )


def test_unknown_os_message_lists_supported():
    found = violations({"driver": "550", "cuda": "12.4"}, "Ubuntu", "20.04", "h100-sxm", today=TODAY)
    assert [v["rule"] for v in found] == ["os.unknown"]
    assert "Debian 12" in found[0]["message"]


# ------------------------------------------------------------------ end of life, judged against today


@pytest.mark.parametrize(
    ("today", "eol_warning"),
    [(datetime.date(2026, 5, 31), False), (datetime.date(2026, 6, 1), True), (datetime.date(2027, 1, 1), True)],
)
def test_eol_warning_judged_against_today(today, eol_warning):
    result = run({"driver": "535", "cuda": "12.2"}, today=today)
    assert any("reached end of life" in w for w in result["warnings"]) is eol_warning


def test_eol_branch_refused_by_policy():
    assert rules({"driver": "535", "cuda": "12.2", "allow_eol_branch": False}, today=datetime.date(2026, 7, 1)) == [
        "driver.eol"
    ]
    assert rules({"driver": "535", "cuda": "12.2", "allow_eol_branch": False}, today=datetime.date(2026, 5, 1)) == []


@pytest.mark.parametrize(("driver", "cuda"), [("575", "12.9"), ("615", "13.2")])
def test_feature_branch_warns(driver, cuda):
    result = run({"driver": driver, "cuda": cuda})
    assert result["driver_kind"] == "feature"
    assert any("new feature branch" in w for w in result["warnings"])


def test_today_defaults_to_now():
    result = resolve({"driver": "580", "cuda": "13.0"}, "Debian", "12", "h100-sxm")
    assert result["driver_branch"] == "580"


# ------------------------------------------------------------------ request shape


def test_typo_in_request_key():
    found = violations({"drvier": "550", "cuda": "12.4"}, "Debian", "12", "h100-sxm", today=TODAY)
    messages = {v["rule"]: v["message"] for v in found}
    assert "did you mean 'driver'?" in messages["request.unknown_key"]
    assert "request.missing_key" in messages


@pytest.mark.parametrize("request_value", [None, {}, [], "550"])
def test_request_must_be_a_mapping_with_driver_and_cuda(request_value):
    assert rules(request_value)


def test_all_violations_are_collected():
    found = rules(
        {"driver": "535", "cuda": "12.7", "nccl": "9", "dcgm": "3", "kernel_modules": "open", "colour": "green"},
        gpu="v100-sxm2",
    )
    assert {"request.unknown_key", "cuda.unknown", "nccl.malformed", "kernel_modules.open_unsupported"} <= set(found)


def test_resolve_raises_with_every_violation():
    with pytest.raises(StackViolations) as caught:
        run({"driver": "535", "cuda": "12.7", "kernel_modules": "open"}, gpu="v100-sxm2")
    assert len(caught.value.violations) == 2
    assert "cuda.unknown" in str(caught.value)
    assert "kernel_modules.open_unsupported" in str(caught.value)


# ------------------------------------------------------------------ CUDA and NCCL on the host are optional


@pytest.mark.parametrize(
    ("os", "os_version"), [("Ubuntu", "22.04"), ("Ubuntu", "24.04"), ("Debian", "12"), ("Rocky", "9.4")]
)
def test_driver_only_request_installs_no_toolkit(os, os_version):
    result = run({"driver": "580", "dcgm": "4"}, os=os, os_version=os_version)
    assert result["cuda_version"] is None
    assert result["cuda_toolkit_version"] is None
    assert result["nccl_version"] is None
    assert result["image_cuda"] == []
    components = {p["component"] for p in result["packages"]}
    # the DCGM Exporter paired with the DCGM comes with it (dcgm_exporter: auto)
    assert components == {"driver", "fabricmanager", "dcgm", "dcgm_exporter"}
    assert not [p for p in result["packages"] if p["name"].startswith(("cuda-toolkit", "libnccl"))]
    assert {p["component"] for p in result["pins"]} <= {"driver", "fabricmanager", "dcgm", "dcgm_exporter"}
    assert not any("None" in p["version"] or "None" in p["name"] for p in result["packages"])
    # DCGM's CUDA build follows the driver branch, not a host toolkit.
    assert result["dcgm"]["package"].endswith("-cuda13")


def test_driver_only_request_keeps_the_driver_request_contract():
    result = run({"driver": "580"})
    assert result["driver_request"] == {
        "branch": "580",
        "exact": None,
        "floor": None,
        "skip": default_matrix().known_bad(580),
        "upgrade": False,
    }
    # The GPU's own minimum still sets the floor without CUDA on the host.
    assert run({"driver": "570"}, gpu="b200")["driver_request"]["floor"] == "570.133.20"


def test_driver_only_on_volta_takes_dcgm_cuda12():
    result = run({"driver": "580", "dcgm": "4"}, gpu="v100-sxm2")
    assert result["dcgm"]["package"] == "datacenter-gpu-manager-4-cuda12"
    assert "cuda" not in {p["component"] for p in result["packages"]}


def test_driver_is_still_required_and_the_message_names_both_ways():
    messages = {v["rule"]: v["message"] for v in violations({"cuda": "13.0"}, "Debian", "12", "h100-sxm", today=TODAY)}
    assert "needs 'driver'" in messages["request.missing_key"]
    assert "image_cuda" in messages["request.missing_key"]
    assert rules({"driver": "580"}) == []


def test_nccl_without_host_cuda_is_refused():
    messages = {
        v["rule"]: v["message"]
        for v in violations({"driver": "580", "nccl": "2.27.7"}, "Debian", "12", "h100-sxm", today=TODAY)
    }
    assert list(messages) == ["nccl.needs_cuda"]
    assert "leave nccl out" in messages["nccl.needs_cuda"]


def test_host_cuda_still_resolves_as_before():
    result = run({"driver": "580", "cuda": "13.0"})
    assert result["cuda_version"] == "13.0"
    assert "cuda" in {p["component"] for p in result["packages"]}
    assert result["nccl_version"] is not None
