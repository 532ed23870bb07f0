"""The matrix's packaging rules checked against real package listings (issue 27 item 3).

Each listing is an excerpt of real output kept under tests/fixtures/package_index/, with its source in that
folder's README.md. A rule passes when every package it installs, and every pin name without a glob, is a
package the listing holds at the driver version.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import stack_resolver

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
