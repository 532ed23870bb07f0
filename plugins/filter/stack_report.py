# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the nvidia_stack role's report (nvidia_stack_report) says of the node's packages (docs: installed_versions.yml,
moved_components.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def installed_versions(packages):
    """``{name: installed version or None}`` of gpu_stack_facts' ``packages`` (``{name: {installed, ...}}``)."""
    if not isinstance(packages, dict):
        raise AnsibleFilterError("gpuops.cluster.installed_versions: the input must be gpu_stack_facts' packages")
    return {name: (info or {}).get("installed") for name, info in packages.items()}


def moved_components(packages, moved):
    """The components (in the stack's order, once each) of the resolved ``packages`` (``{name, component}``) whose
    names are in ``moved``."""
    if not isinstance(packages, list):
        raise AnsibleFilterError("gpuops.cluster.moved_components: the input must be the resolved stack's packages")
    moved = set(moved or [])
    components = []
    for package in packages:
        if package.get("name") in moved and package.get("component") not in components:
            components.append(package.get("component"))
    return components


class FilterModule:
    """gpuops.cluster stack report filters."""

    def filters(self):
        return {"installed_versions": installed_versions, "moved_components": moved_components}
