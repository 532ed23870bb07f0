# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What one pass of the nvidia_stack role does on a node, decided from one read of it.

gpu_stack_facts returns it as ``gpu_stack.plan``; the role's task files read the plan of the
pass's first read (before any change) instead of deciding again in Jinja:

========================  ================================================================
``move``                  the requested packages whose installed version differs (sorted
                          names): the packages are moved (tasks/move.yml) when not empty
``reboot_reasons``        why the loaded kernel module is not the installed driver
                          (``drift.reboot_reasons``)
``start``                 the wanted services to (re)start: every one when packages move,
                          otherwise those not both active and enabled
``load``                  whether the load stage runs at all (driver, reboot, services): any
                          of the above; a converged node's re-run skips it
``dkms``                  whether a package of the stack is built by DKMS (:func:`uses_dkms`)
``kernel_headers``        whether the running kernel's headers are installed (tasks/kernel.yml):
                          :func:`kernel_headers`; both added by gpu_stack_facts
========================  ================================================================
"""

from __future__ import annotations


def _ready(services: dict, name: str) -> bool:
    state = services.get(name) or {}
    return bool(state.get("active") and state.get("enabled"))


def plan(drift: dict, services: dict, wanted_services: list[str]) -> dict:
    """The pass's plan from ``drift`` (``stack_facts.drift``), the ``services`` read
    (``{name: {active, enabled}}``, ``stack_facts.parse_systemctl_show``) and the services the stack
    runs (``wanted_services``, in the caller's order).

    A wanted service the read does not list (no systemctl on the node) is not ready: it is started.
    """
    move = sorted(item["name"] for item in drift["installed_differs"])
    reboot_reasons = list(drift["reboot_reasons"])
    wanted = list(dict.fromkeys(wanted_services))
    start = [name for name in wanted if move or not _ready(services, name)]
    return {
        "move": move,
        "reboot_reasons": reboot_reasons,
        "start": start,
        "load": bool(move or reboot_reasons or start),
    }


def uses_dkms(package_names) -> bool:
    """Whether a package of the stack is built by DKMS: its name says ``dkms`` (``nvidia-dkms-580-open``,
    ``kmod-nvidia-open-dkms``). Then the kernel headers are needed, and the kernel moves only in lockstep."""
    return any("dkms" in name for name in package_names)


def kernel_headers(setting, dkms: bool) -> bool:
    """Whether the pass installs the running kernel's headers.

    ``setting`` is ``nvidia_stack_kernel_headers``: true or false, or ``auto``, which wants them when the
    stack is built by DKMS (``dkms``, from :func:`uses_dkms`). Anything else is refused with what to set.
    """
    if setting is True or setting is False:
        return setting
    if setting != "auto":
        raise ValueError(f"kernel_headers must be true, false or auto, not {setting!r}")
    return bool(dkms)
