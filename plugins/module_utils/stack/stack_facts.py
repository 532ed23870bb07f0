# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What NVIDIA stack a node runs, and how far it is from what was requested.

Parsers for the loaded kernel module (``/proc/driver/nvidia/version``),
nvidia-smi's CSV query, ``lspci -n`` for NVSwitch detection, and the pure
``drift`` decision that the role's reboot policy reads.

NVSwitch PCI device ids (vendor 10de) from pciutils/pciids ``pci.ids``
(snapshot 006181e2): ``1af1`` "GA100 [A100 NVSwitch]" and ``22a3`` "GH100
[H100 NVSwitch]". That snapshot lists no Blackwell NVSwitch function: on HGX
B200-class boards the switches are reached through a management NIC, not as a
10de function, so detection there needs the ``nvswitch`` override (or more ids
through the module's ``nvswitch_pci_ids``) until an id is published.
"""

from __future__ import annotations

import fnmatch
import re

# One package of a resolved stack as modules take it (resolve_stack's packages: name, upstream version,
# component, whether it follows the driver release; with the exact version from the node's index, the
# install spec): the suboptions of gpu_stack_facts' requested and package_pin's packages.
PACKAGE_OPTIONS = {
    "name": {"type": "str", "required": True},
    "version": {"type": "str", "required": True},
    "component": {"type": "str", "default": ""},
    "spec": {"type": "str"},
    "follows_driver": {"type": "bool", "default": False},
}

NVIDIA_VENDOR_ID = "10de"
NVSWITCH_PCI_IDS = {"1af1": "A100 NVSwitch (NVLink3)", "22a3": "H100 NVSwitch (NVLink4)"}
NVIDIA_SMI_QUERY = "driver_version,name,pci.bus_id"

_PROC_VERSION_RE = re.compile(
    r"^NVRM version:\s+NVIDIA UNIX\s+"
    r"(?:(?P<open>Open) Kernel Module for (?P<open_arch>\S+)|(?P<arch>\S+) Kernel Module)"
    r"\s+(?P<version>\d+(?:\.\d+)+)",
)
_LSPCI_RE = re.compile(
    r"^(?P<slot>\S+)\s+(?P<class>[0-9a-fA-F]{4}):\s+(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})"
)
_DRIVER_VERSION_RE = re.compile(r"^\d+(?:\.\d+)+$")


class StackFactsError(ValueError):
    """Tool output that does not look like what the parser knows."""


def parse_proc_driver_version(text: str) -> dict:
    """Parse ``/proc/driver/nvidia/version`` into ``{version, flavor, arch, gcc}``.

    ``flavor`` is ``open`` for "NVIDIA UNIX Open Kernel Module for x86_64" and
    ``proprietary`` for "NVIDIA UNIX x86_64 Kernel Module".
    """
    result: dict = {"version": None, "flavor": None, "arch": None, "gcc": None}
    for raw in text.splitlines():
        line = raw.strip()
        match = _PROC_VERSION_RE.match(line)
        if match:
            result["version"] = match.group("version")
            if match.group("open"):
                result["flavor"], result["arch"] = "open", match.group("open_arch")
            else:
                result["flavor"], result["arch"] = "proprietary", match.group("arch")
        elif line.startswith("GCC version:"):
            result["gcc"] = line.split(":", 1)[1].strip()
    if result["version"] is None:
        raise StackFactsError("no 'NVRM version: NVIDIA UNIX ... Kernel Module <version>' line")
    return result


def parse_nvidia_smi_query(text: str) -> list[dict]:
    """Parse ``nvidia-smi --query-gpu=driver_version,name,pci.bus_id --format=csv,noheader``.

    One ``{driver_version, name, pci_bus_id}`` per GPU. The name sits between
    the first and the last comma, so a name with a comma still parses.
    """
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        first, sep1, rest = line.partition(",")
        name, sep2, bus_id = rest.rpartition(",")
        driver_version = first.strip()
        if not (sep1 and sep2) or not _DRIVER_VERSION_RE.match(driver_version):
            raise StackFactsError(f"unexpected nvidia-smi line {line.strip()!r}")
        gpus.append({"driver_version": driver_version, "name": name.strip(), "pci_bus_id": bus_id.strip()})
    return gpus


def parse_lspci_nvswitch(text: str, device_ids: dict[str, str] | None = None) -> list[dict]:
    """NVSwitch functions in ``lspci -n -d 10de:`` output: ``[{slot, device_id, generation}]``."""
    ids = {key.lower(): value for key, value in (device_ids or NVSWITCH_PCI_IDS).items()}
    found = []
    for line in text.splitlines():
        match = _LSPCI_RE.match(line.strip())
        if not match or match.group("vendor").lower() != NVIDIA_VENDOR_ID:
            continue
        device = match.group("device").lower()
        if device in ids:
            found.append({"slot": match.group("slot"), "device_id": device, "generation": ids[device]})
    return found


def parse_systemctl_show(text: str) -> dict[str, dict]:
    """``systemctl show --property=Id,ActiveState,UnitFileState a b`` -> ``{a: {active, enabled}}``.

    One block per unit, blocks separated by a blank line; the unit name loses its ``.service``.
    A unit that does not exist is inactive with an empty UnitFileState: not active, not enabled.
    """
    units = {}
    for block in text.strip().split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        name = fields.get("Id", "")
        if not name:
            continue
        if name.endswith(".service"):
            name = name[: -len(".service")]
        units[name] = {
            "active": fields.get("ActiveState") == "active",
            "enabled": fields.get("UnitFileState") in ("enabled", "enabled-runtime", "static", "alias"),
        }
    return units


def upstream_version(package_version: str | None) -> str | None:
    """The driver version inside a package version: ``3:550.127.08-1.el9`` -> ``550.127.08``."""
    if not package_version:
        return None
    version = package_version.split(":", 1)[1] if ":" in package_version else package_version
    return version.split("-", 1)[0]


def _covered(name: str, table: dict) -> object:
    if name in table:
        return table[name]
    for pattern in sorted(table):
        if any(ch in pattern for ch in "*?") and fnmatch.fnmatchcase(name, pattern):
            return table[pattern]
    return None


def drift(
    requested: list[dict],
    installed: dict[str, str | None],
    loaded: str | None,
    pins: dict[str, str],
    holds: set[str] | None,
    version_equal=None,
    loaded_flavor: str | None = None,
    kernel_modules: str | None = None,
) -> dict:
    """Compare the requested stack with the node.

    ``requested``: ``[{name, version, component}]`` (component ``driver`` marks
    the packages whose upstream version the kernel module must match).
    ``installed``: ``{name: version or None}``. ``loaded``: the loaded kernel
    module version or None. ``pins``: ``{name or glob: pinned version}``.
    ``holds``: held names, or None where holds do not exist (dnf: the lock is
    the hold). ``loaded_flavor`` (``open``/``proprietary``, None when unknown) and the
    requested ``kernel_modules`` add the reason ``loaded_flavor_differs`` when both are
    known and differ. ``version_equal(requested, installed)`` defaults to string
    equality (dpkg versions); pass ``rpm_versionlock.evr_matches`` for RPM.

    Returns flags plus ``reboot_required`` and its ``reboot_reasons``: the
    loaded module differs from the installed driver, or a driver is installed
    but no module is loaded.
    """
    equal = version_equal or (lambda want, have: want == have)
    installed_differs, pin_missing, hold_missing = [], [], []
    driver_versions = set()
    for package in sorted(requested, key=lambda item: item["name"]):
        name, version = package["name"], package["version"]
        have = installed.get(name)
        if not equal(version, have):
            installed_differs.append({"name": name, "requested": version, "installed": have})
        pinned = _covered(name, pins)
        if pinned is None or not equal(version, pinned):
            pin_missing.append(name)
        if holds is not None and name not in holds:
            hold_missing.append(name)
        if package.get("component") == "driver" and have:
            driver_versions.add(upstream_version(have))

    installed_driver = sorted(driver_versions)[0] if len(driver_versions) == 1 else None
    reasons = []
    if installed_driver is not None:
        if loaded is None:
            reasons.append("driver_not_loaded")
        elif loaded != installed_driver:
            reasons.append("loaded_differs_from_installed")
    if loaded_flavor and kernel_modules and loaded_flavor != kernel_modules:
        reasons.append("loaded_flavor_differs")
    loaded_differs = installed_driver is not None and loaded is not None and loaded != installed_driver
    return {
        "installed_differs": installed_differs,
        "pin_missing": pin_missing,
        "hold_missing": hold_missing,
        "installed_driver_version": installed_driver,
        "loaded_driver_version": loaded,
        "loaded_differs": loaded_differs,
        "driver_packages_disagree": len(driver_versions) > 1,
        "drifted": bool(installed_differs or pin_missing or hold_missing or loaded_differs or len(driver_versions) > 1),
        "reboot_required": bool(reasons),
        "reboot_reasons": reasons,
    }
