# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters over moving a node between NVIDIA stacks (docs: superseded_packages.yml)."""

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


class FilterModule:
    """gpuops.cluster package transition filters."""

    def filters(self):
        return {"superseded_packages": superseded_packages, "driver_companions": driver_companions}
