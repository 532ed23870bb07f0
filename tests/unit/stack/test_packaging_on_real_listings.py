"""The matrix's packaging rules checked against real package listings (issue 27 item 3).

Each listing is an excerpt of real output kept under tests/fixtures/package_index/, with its source in that
folder's README.md. A rule passes when every package it installs, and every pin name without a glob, is a
package the listing holds at the driver version.
"""

from __future__ import annotations

import datetime
import fnmatch
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import stack_matrix, stack_resolver

LISTINGS = Path(__file__).resolve().parents[2] / "fixtures" / "package_index"


def rpm_listing(name):
    """{package name: [version-release, ...]} of a listing of RPM file stems (name-version-release per line)."""
    held = {}
    for line in (LISTINGS / name).read_text().splitlines():
        stem = line.strip().strip("|").strip()
        if not stem:
            continue
        package, version, release = stem.rsplit("-", 2)
        held.setdefault(package, []).append("%s-%s" % (version, release))
    return held


AL2023 = "al2023-nvidia-updated-packages-580.95.05.txt"


def installed(stack, component):
    return {package["name"] for package in stack["packages"] if package["component"] == component}


def pinned(stack, component):
    """The pin names without a glob: each must be a real package, or the lock holds nothing."""
    return {name for pin in stack["pins"] if pin["component"] == component for name in pin["names"] if "*" not in name}


def assert_listed(names, listing, driver=None):
    """Every name is in the listing (at the driver version when one is given)."""
    missing = sorted(
        name
        for name in names
        if not any(driver is None or version.startswith(driver + "-") for version in listing.get(name, []))
    )
    assert missing == [], "not in the listing%s: %s" % (" at %s" % driver if driver else "", missing)


@pytest.mark.parametrize("driver", ["570.195.03", "580.95.05"])
def test_rhel_fabric_manager_names_are_nvidias(driver):
    # R580: nvidia-fabricmanager and libnvidia-nscq, but the SDK keeps nvidia-fabric-manager-devel
    # (gpu-driver-container PR 898); R570: nvidia-fabric-manager and libnvidia-nscq-570
    stack = stack_resolver.resolve({"driver": driver}, "Rocky", "9.4", "h100-sxm")
    listing = rpm_listing(AL2023)
    assert_listed(installed(stack, "fabricmanager"), listing, driver)
    assert_listed(pinned(stack, "fabricmanager"), listing)


def debian_depends(name):
    """{package: version relation} of a Depends: line (alternatives not used by these excerpts)."""
    line = (LISTINGS / name).read_text().strip()
    assert line.startswith("Depends: ")
    relations = {}
    for part in line[len("Depends: ") :].split(","):
        package, _sep, relation = part.strip().partition(" ")
        relations[package] = relation.strip("()")
    return relations


CUDA_DRIVERS_580 = "debian12-cuda-drivers-580-depends.txt"


@pytest.mark.parametrize("kernel_modules", ["proprietary", "open"])
def test_debian12_pins_every_dependency_cuda_drivers_leaves_open(kernel_modules):
    # cuda-drivers-580 580.105.08-1 wants nvidia-xconfig (>= 580.65.06) ...: unpinned, it floats to R590
    relations = debian_depends(CUDA_DRIVERS_580)
    assert set(relations.values()) == {">= 580.65.06"}
    stack = stack_resolver.resolve(
        {"driver": "580.105.08", "kernel_modules": kernel_modules}, "Debian", "12.5", "h100-pcie"
    )
    globs = [name for pin in stack["pins"] if pin["component"] == "driver" for name in pin["names"]]
    floating = sorted(name for name in relations if not any(fnmatch.fnmatchcase(name, glob) for glob in globs))
    assert floating == []


def test_debian12_open_modules_do_not_install_the_proprietary_metapackage():
    # cuda-drivers-580 depends on nvidia-kernel-dkms, the proprietary module, which the open one conflicts with
    assert "nvidia-kernel-dkms" in debian_depends(CUDA_DRIVERS_580)
    stack = stack_resolver.resolve({"driver": "580.105.08", "kernel_modules": "open"}, "Debian", "12.5", "h100-pcie")
    names = installed(stack, "driver")
    assert "nvidia-kernel-open-dkms" in names
    assert "cuda-drivers-580" not in names
    # what cuda-drivers-580 brought besides the kernel module and X parts is installed by name
    assert {"nvidia-driver", "nvidia-driver-cuda"} <= names
    proprietary = stack_resolver.resolve(
        {"driver": "580.105.08", "kernel_modules": "proprietary"}, "Debian", "12.5", "h100-pcie"
    )
    assert "cuda-drivers-580" in installed(proprietary, "driver")


def guide_sections(name):
    """{'Release 620': [lines], ...} of the install guide excerpts, keyed by the release each '#' header names."""
    sections = {}
    current = None
    for line in (LISTINGS / name).read_text().splitlines():
        if line.startswith("# Release "):
            current = sections.setdefault(line[2:].split(" (")[0], [])
        elif current is not None:
            current.append(line)
    return sections


GUIDES = "driver-installation-guide-r615-r620-kernel-modules.txt"


@pytest.mark.parametrize(("os", "version"), [("Rocky", "9.4"), ("Ubuntu", "22.04"), ("Debian", "12.5")])
def test_proprietary_modules_are_refused_where_nvidia_publishes_none(os, version):
    guides = guide_sections(GUIDES)
    assert any("Proprietary Kernel Modules Removed" in line for line in guides["Release 620"])
    assert not any("Proprietary Kernel Modules Removed" in line for line in guides["Release 615"])
    found = stack_resolver.violations({"driver": "620", "kernel_modules": "proprietary"}, os, version, "h100-sxm")
    assert [v["rule"] for v in found] == ["kernel_modules.not_published"]
    message = found[0]["message"]
    assert "no proprietary kernel modules for driver branch R620" in message
    assert "only the open ones" in message
    assert "kernel_modules: open or auto" in message
    assert 'driver: "615" or older' in message
    # R615 still has them; auto on R620 takes the open modules
    assert stack_resolver.violations({"driver": "615", "kernel_modules": "proprietary"}, os, version, "h100-sxm") == []
    stack = stack_resolver.resolve({"driver": "620"}, os, version, "h100-sxm")
    assert stack["kernel_modules"] == "open"


@pytest.mark.parametrize(("today", "eol"), [(datetime.date(2025, 5, 31), False), (datetime.date(2025, 6, 1), True)])
def test_r550_end_of_life_is_june_2025(today, eol):
    # NVIDIA/gpu-driver-container PR 381 (an NVIDIA maintainer, citing NVIDIA's supported drivers page):
    # "R550 has EOL'ed as of June 2025"
    request = {"driver": "550", "allow_eol_branch": False}
    found = [v["rule"] for v in stack_resolver.violations(request, "Debian", "12.5", "h100-pcie", today=today)]
    assert found == (["driver.eol"] if eol else [])


@pytest.mark.parametrize(("driver", "nvsdm"), [("570.195.03", "libnvsdm-570"), ("580.95.05", "libnvsdm")])
def test_an_nvlink5_x86_node_gets_libnvsdm_from_r570(driver, nvsdm):
    # the listing holds libnvsdm-570-570.195.03-1 and libnvsdm-580.95.05-1; a B200 on R570 got none before
    stack = stack_resolver.resolve({"driver": driver}, "Rocky", "9.4", "b200")
    names = {package["name"] for package in stack["packages"]}
    assert nvsdm in names
    listing = rpm_listing(AL2023)
    assert_listed(installed(stack, "fabricmanager"), listing, driver)
    assert_listed(pinned(stack, "fabricmanager"), listing)


@pytest.mark.parametrize(("driver", "imex"), [("570.195.03", "nvidia-imex-570"), ("580.95.05", "nvidia-imex")])
def test_a_gb200_gets_imex_and_no_libnvsdm(driver, imex):
    # Grace hosts are arm64, for which NVIDIA builds no libnvsdm (gpu-driver-container install scripts)
    stack = stack_resolver.resolve({"driver": driver}, "Rocky", "9.4", "gb200")
    names = {package["name"] for package in stack["packages"]}
    pins = {name for pin in stack["pins"] for name in pin["names"]}
    assert not any(name.startswith("libnvsdm") for name in names | pins)
    assert any("no libnvsdm for arm64" in warning for warning in stack["warnings"])
    listing = rpm_listing(AL2023)
    assert imex in installed(stack, "imex")
    assert_listed(installed(stack, "imex"), listing, driver)


def test_imex_packaging_starts_at_r550():
    # gpu-driver-container commit ef2d9d1 installs nvidia-imex-<branch> when DRIVER_BRANCH >= 550
    matrix = stack_matrix.default_matrix()
    assert matrix.packaging_rule("imex", "rhel", 535, "open") is None
    assert matrix.packaging_rule("imex", "rhel", 545, "open") is None
    assert matrix.packaging_rule("imex", "ubuntu", 550, "open")["packages"][0]["name"] == "nvidia-imex-{branch}"


@pytest.mark.parametrize("driver", ["595.91.07", "610.57.04"])
def test_ubuntu_open_modules_from_r590_install_nvidias_metapackage(driver):
    # apt-cache madison nvidia-open on ubuntu2404: 610.57.04-1ubuntu1, 595.91.07-1ubuntu1, 590.48.01-0ubuntu1
    held = {}
    for line in (LISTINGS / "ubuntu2404-sbsa-apt-cache-madison-nvidia-open.txt").read_text().splitlines()[1:]:
        name, version, _repository = (field.strip() for field in line.split("|"))
        held.setdefault(name, []).append(version)
    stack = stack_resolver.resolve({"driver": driver, "kernel_modules": "open"}, "Ubuntu", "24.04", "h100-pcie")
    assert "nvidia-open" in installed(stack, "driver")
    assert_listed({"nvidia-open"}, held, driver)


def apt_policy_versions(name):
    """The versions of an `apt policy` version table."""
    lines = (LISTINGS / name).read_text().splitlines()
    start = lines.index("  Version table:") + 1
    return [line.split()[-2] if line.startswith(" *** ") else line.split()[0] for line in lines[start::2]]


def test_nccl_2_28_3_for_cuda_13_0_is_known():
    # apt policy libnccl-dev on NVIDIA's ubuntu2204 repository lists 2.28.3-1+cuda13.0 (what current H200 images run)
    held = apt_policy_versions("ubuntu2204-apt-policy-libnccl-dev.txt")
    assert "2.28.3-1+cuda13.0" in held
    stack = stack_resolver.resolve({"driver": "580", "cuda": "13.0", "nccl": "2.28.3"}, "Ubuntu", "22.04", "h200-sxm")
    nccl = [package for package in stack["packages"] if package["component"] == "nccl"]
    assert {package["name"] for package in nccl} == {"libnccl2", "libnccl-dev"}
    assert all(any(fnmatch.fnmatchcase(version, package["version"]) for version in held) for package in nccl)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ({"driver": "610", "cuda": "13.3"}, ("cuda_toolkit_version", "13.3.1")),
        ({"driver": "610.43.02", "image_cuda": ["cu133"]}, ("driver_version", "610.43.02")),
        ({"driver": "620", "cuda": "13.2", "nccl": "2.30.4"}, ("nccl_version", "2.30.4")),
        ({"driver": "580", "dcgm": "4.5.3"}, ("dcgm", "4.5.3")),
        ({"driver": "535.216.03"}, ("driver_version", "535.216.03")),
        ({"driver": "550.90.12"}, ("driver_version", "550.90.12")),
        ({"driver": "615"}, ("driver_version", "615.78.08")),
    ],
)
def test_missing_releases_are_known(request_, expected):
    # CUDA 13.3 GA and Update 1 bundle 610.43.02 (cuda_13.3.0_610.43.02_linux.run, cuda_13.3.1_...); NCCL 2.30.4
    # +cuda13.2; DCGM 4.5.3 (NVIDIA/DCGM tag v4.5.3); 535.216.03 and 550.90.12 (open-gpu-kernel-modules tags)
    stack = stack_resolver.resolve(request_, "Ubuntu", "22.04", "h100-pcie")
    key, value = expected
    found = stack[key]["version"] if key == "dcgm" else stack[key]
    assert found == value
    assert not any("not in the compatibility matrix" in warning for warning in stack["warnings"])
