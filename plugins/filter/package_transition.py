# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters over moving a node between NVIDIA stacks (docs: superseded_packages.yml, driver_companions.yml,
stack_companions.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import package_transition


def superseded_packages(installed, requested):
    """Installed package names that the requested stack supersedes (see module_utils/stack/package_transition.py)."""
    try:
        return package_transition.superseded_packages(installed, requested)
    except package_transition.TransitionError as exc:
        raise AnsibleFilterError(f"gpuops.cluster.superseded_packages: {exc}") from exc


def driver_companions(installed, packages, pins, old_driver):
    """Specs of the installed packages that move with the driver (module_utils/stack/package_transition.py)."""
    try:
        return package_transition.driver_companions(installed, packages, pins, old_driver)
    except package_transition.TransitionError as exc:
        raise AnsibleFilterError(f"gpuops.cluster.driver_companions: {exc}") from exc


def stack_companions(installed, read, package_manager):
    """:func:`driver_companions` for the move to a stack read by gpu_stack_facts (its ``index`` and ``drift``): apt
    only (dnf's dependencies carry no such ``>=`` on the driver release), else empty."""
    if package_manager != "apt":
        return []
    if not isinstance(read, dict) or not isinstance(read.get("index"), dict):
        raise AnsibleFilterError("gpuops.cluster.stack_companions: the read must be gpu_stack_facts' (with index)")
    index, drift = read["index"], read.get("drift") or {}
    return driver_companions(
        installed, index.get("packages") or [], index.get("pins") or [], drift.get("installed_driver_version")
    )


class FilterModule:
    """gpuops.cluster package transition filters."""

    def filters(self):
        return {
            "superseded_packages": superseded_packages,
            "driver_companions": driver_companions,
            "stack_companions": stack_companions,
        }
