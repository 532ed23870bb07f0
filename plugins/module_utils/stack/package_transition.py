# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which installed NVIDIA packages a newly requested stack supersedes.

Moving a node to another stack installs the new exact versions in one package
manager call. Packages whose *name* is in the new set are simply moved to the
new version. Installed packages whose name is not in the new set stay unless
something removes them, and some of them then conflict with the new set:

- Packages bound to one exact driver version (Fabric Manager, NSCQ, NVSDM, the
  ``cuda-drivers-<branch>`` metapackage, the kernel module flavour) depend on
  ``nvidia-driver (= V)``. Their name carries the branch before R580
  (``nvidia-fabricmanager-550``, ``libnvidia-nscq-550``) and none from R580
  (``nvidia-fabricmanager``), and RHEL renamed ``nvidia-fabric-manager`` to
  ``nvidia-fabricmanager`` at R580 (NVIDIA/apt-packaging-fabric-manager,
  NVIDIA/yum-packaging-fabric-manager). An old-branch package left behind
  breaks its dependency and, for Fabric Manager, ships the same unit file as
  its successor, so dpkg refuses to unpack the new one unless the old one is
  gone first. The lab's stand-ins (extensions/molecule/lab/packages/spec.yml) declare no
  Conflicts/Replaces between branch names, like NVIDIA's packages before the
  rename, so this is not left to the package manager.
- DCGM 4 replaces the legacy ``datacenter-gpu-manager`` (DCGM 3) package, and
  ``datacenter-gpu-manager-4-cuda<N>`` follows the driver's CUDA major.

Packages the new set does not name but that followed the old driver release move with it
(:func:`driver_companions`): a dependency such as Debian's ``nvidia-driver-cuda`` (``cuda-drivers-<branch>``
depends on it with ``>=``) is satisfied by the old release, so installing the named packages alone would leave
it behind on a downgrade, one node running two releases. The driver's pins already name it by pattern.

CUDA toolkits (``cuda-toolkit-X-Y``) are installed side by side by design
(``/usr/local/cuda-X.Y``) and are never superseded: an old toolkit stays, no
longer pinned. Anything not matched by a family below is left alone.
"""

from __future__ import annotations

import fnmatch
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import parse_package_version

# Families of packages bound to the exact driver version: an installed member
# that the new set does not name is superseded, whether or not the new set has
# a member of that family (a node that no longer gets Fabric Manager must not
# keep one that depends on the old driver).
DRIVER_BOUND_FAMILIES = {
    "fabricmanager": re.compile(r"^nvidia-fabric-?manager(-\d+)?$"),
    "fabricmanager-dev": re.compile(r"^nvidia-fabric-?manager-dev(el)?(-\d+)?$"),
    "nscq": re.compile(r"^libnvidia-nscq(-\d+)?$"),
    "nvsdm": re.compile(r"^libnvsdm(-\d+)?$"),
    "cuda-drivers": re.compile(r"^cuda-drivers(-\d+)?$"),
    "kernel-module": re.compile(r"^(nvidia-kernel(-open)?-dkms|kmod-nvidia(-open|-latest)?-dkms)$"),
}

# DCGM: superseded only when the new set requests DCGM 4.
DCGM4 = re.compile(r"^datacenter-gpu-manager-4-")
DCGM_SUPERSEDED = re.compile(r"^(datacenter-gpu-manager|datacenter-gpu-manager-4-cuda\d+)$")


class TransitionError(ValueError):
    """Input that is not a package list."""


def _names(items, what):
    names = set()
    for item in items or []:
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str) or not name:
            raise TransitionError(f"{what}: {item!r} is not a package name or a {{name, version}} entry")
        names.add(name)
    return names


def superseded_packages(installed, requested) -> list:
    """Return the sorted installed package names that the ``requested`` set supersedes.

    ``installed``: names (or ``{name}`` dicts, or the keys of ``ansible_facts.packages``).
    ``requested``: the resolver's ``packages`` list (``{name, version, ...}``) or names.
    A requested name is never superseded.
    """
    if isinstance(installed, dict):
        installed = list(installed)
    have = _names(installed, "installed")
    want = _names(requested, "requested")
    dcgm4 = any(DCGM4.match(name) for name in want)

    def superseded(name):
        driver_bound = any(pattern.match(name) for pattern in DRIVER_BOUND_FAMILIES.values())
        return driver_bound or bool(dcgm4 and DCGM_SUPERSEDED.match(name))

    return [name for name in sorted(have - want) if superseded(name)]


def _installed_versions(installed) -> dict:
    """``{name: [version, ...]}`` from ``ansible_facts.packages`` (name -> list of ``{version}``) or such a dict."""
    if not isinstance(installed, dict):
        raise TransitionError("installed must be ansible_facts.packages (a mapping of name to versions)")
    versions = {}
    for name, value in installed.items():
        entries = value if isinstance(value, list) else [value]
        versions[name] = [str(item["version"]) for item in entries if isinstance(item, dict) and item.get("version")]
    return versions


def driver_companions(installed, packages, pins, old_driver) -> list:
    """``name=version`` specs for the installed packages the new set does not name that carry the old driver
    release and that a driver pin names (by name or pattern) at another version: they move with the driver.

    ``installed``: ``ansible_facts.packages``; ``packages``: the exact packages (``{name, version}``);
    ``pins``: the exact pins (``{names, version}``, apt patterns such as ``nvidia-driver-*``); ``old_driver``:
    the driver release the node ran (upstream, ``550.127.08``). Packages of another version (the container
    toolkit's ``libnvidia-container1`` matches ``libnvidia-*``) and superseded ones are left out. Empty
    without an old driver.
    """
    if not old_driver:
        return []
    versions = _installed_versions(installed)
    named = _names(packages, "packages")
    superseded = set(superseded_packages(list(versions), packages))
    specs = []
    for name in sorted(set(versions) - named - superseded):
        carried = [version for version in versions[name] if parse_package_version(version)[1] == str(old_driver)]
        if not carried:
            continue
        target = next(
            (
                pin.get("version")
                for pin in pins or []
                if any(fnmatch.fnmatchcase(name, pattern) for pattern in pin.get("names") or [])
            ),
            None,
        )
        if target and target not in carried:
            specs.append("%s=%s" % (name, target))
    return specs
