# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The package_pin module's work on a node: read the pin files and holds, plan (pin_plan), carry it out.

``MODULE_KWARGS`` and ``run(module)`` (module_utils/module_parts.py): the module itself, or a part of
another module's execution, on an AnsibleModule or a part.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils import managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import (
    CHANGE_LIMIT,
    run_bounded,
    run_checked,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    apt_pinning,
    installed_packages,
    kernel_lockstep,
    pin_plan,
    rpm_versionlock,
    stack_facts,
)

FIX_HINT = "check that the packages exist in the configured repositories and run again"


def read_text(module, path):
    """The file's text, or None when it does not exist."""
    try:
        return managed_file.read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg=f"cannot read {path}: {exc}; check the path and permissions")


def write_text(module, path, content):
    """Write content atomically (mode 0644) or remove the file when content is None."""
    if content is None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            module.fail_json(msg=f"cannot remove {path}: {exc}")
        return
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        module.fail_json(msg=f"{directory} does not exist: install apt/dnf (or set the path option) and run again")
    managed_file.write_atomic(module, path, content)
    module.set_mode_if_different(path, "0644", False)


def detect_package_manager(module):
    wanted = module.params["package_manager"]
    if wanted != "auto":
        return wanted
    if module.get_bin_path("apt-mark"):
        return "apt"
    if module.get_bin_path("dnf"):
        return "dnf"
    module.fail_json(msg="neither apt-mark nor dnf found: this module supports the apt and dnf families only")
    return None


def read_apt(module):
    """What the apt plan needs from the node: both files, the holds and the apt-mark path."""
    params = module.params
    pref_before = read_text(module, params["preferences_path"])
    uu_before = read_text(module, params["unattended_upgrades_path"])
    apt_mark = module.get_bin_path("apt-mark", required=True)
    out, _err = run_checked(module, [apt_mark, "showhold"], "read the apt holds", FIX_HINT)
    return pref_before, uu_before, apt_pinning.parse_showhold(out), apt_mark


def read_installed_rpms(module, pins):
    """``{name: {evr, ...}}`` of the installed packages the pins name (globs included): one ``rpm -qa`` call."""
    patterns = sorted({name for pin in pins or [] for name in pin["names"]})
    if not patterns or module.params["state"] != "present":
        return {}
    rpm = module.get_bin_path("rpm", required=True)
    argv = [rpm, "-qa", "--qf", rpm_versionlock.RPM_QUERY_FORMAT, *patterns]
    out, _err = run_checked(module, argv, "list the installed packages the pins name", FIX_HINT)
    try:
        return rpm_versionlock.parse_rpm_query(out)
    except rpm_versionlock.VersionlockError as exc:
        module.fail_json(msg=f"cannot read rpm -qa output: {exc}")
    return {}


def read_dnf(module):
    """What the dnf plan needs from the node: the lock list and the stream commands (read from dnf)."""
    params = module.params
    before = read_text(module, params["versionlock_path"])
    stream = params["dnf_module_stream"]
    if not (stream and params["state"] == "present"):
        return before, []
    dnf = module.get_bin_path("dnf", required=True)
    module_name = stream.partition(":")[0]
    argv = [dnf, "-q", "module", "list", "--enabled", module_name]
    rc, out, err = run_bounded(module, argv, "list the enabled dnf module streams", CHANGE_LIMIT, FIX_HINT)
    if rc != 0 and "No matching Modules" not in (out + err):
        module.fail_json(
            msg=f"dnf module list failed: {(err or out).strip()}; check the repository for {module_name}",
            rc=rc,
            stdout=out,
            stderr=err,
        )
    enabled = rpm_versionlock.parse_module_list(out)
    return before, pin_plan.dnf_stream_commands(stream, enabled, dnf)


def read_kernel_packages(module, manager):
    """The kernel packages to hold with the stack (kernel lockstep): apt names, or dnf versionlock lines.

    One command in this same execution: ``dpkg-query -W`` of the installed ``linux-*`` packages, or ``rpm -q``
    of the kernel packages (every installed version). Nothing without ``kernel_hold`` or ``state=present``.
    """
    params = module.params
    if not (params["kernel_hold"] and params["state"] == "present" and params["hold"]):
        return []
    installed = installed_packages.query_kernels(module, manager, FIX_HINT)
    if manager == "apt":
        return kernel_lockstep.apt_kernel_holds(installed)
    return kernel_lockstep.rpm_kernel_locks(installed)


MODULE_KWARGS = dict(
    argument_spec={
        "packages": {
            "type": "list",
            "elements": "dict",
            "default": [],
            "options": stack_facts.PACKAGE_OPTIONS,
        },
        "pins": {
            "type": "list",
            "elements": "dict",
            "default": [],
            "options": {
                "component": {"type": "str", "default": ""},
                "names": {"type": "list", "elements": "str", "required": True},
                "version": {"type": "str", "required": True},
                "follows_driver": {"type": "bool", "default": False},
            },
        },
        "state": {"type": "str", "default": "present", "choices": ["present", "released", "absent"]},
        "priority": {"type": "int", "default": 1001},
        "preferences_path": {"type": "path", "default": "/etc/apt/preferences.d/gpuops-nvidia.pref"},
        "hold": {"type": "bool", "default": True},
        "unattended_upgrades": {"type": "bool", "default": True},
        "unattended_upgrades_path": {
            "type": "path",
            "default": "/etc/apt/apt.conf.d/51gpuops-nvidia-blacklist",
        },
        "unattended_upgrades_patterns": {
            "type": "list",
            "elements": "str",
            "default": [],
        },
        "versionlock_path": {"type": "path", "default": "/etc/dnf/plugins/versionlock.list"},
        "dnf_module_stream": {"type": "str"},
        "package_manager": {"type": "str", "default": "auto", "choices": ["auto", "apt", "dnf"]},
        "kernel_hold": {"type": "bool", "default": False},
    },
    supports_check_mode=True,
)


def run(module) -> dict:
    """The package_pin module's work: its result dict."""
    params = module.params
    if params["state"] == "present" and not (params["packages"] or params["pins"]):
        module.fail_json(msg="state=present needs packages or pins: pass the resolved stack, or use state=absent")

    manager = detect_package_manager(module)
    try:
        dnf_locks = manager == "dnf" and params["packages"]
        installed_rpms = read_installed_rpms(module, params["pins"]) if dnf_locks else None
        pins, installed = pin_plan.request_pins(manager, params["pins"], params["packages"], installed_rpms)
        kernel = read_kernel_packages(module, manager)
        if manager == "apt":
            pref_before, uu_before, held, apt_mark = read_apt(module)
            plan = pin_plan.apt_plan(params, pins, installed, pref_before, uu_before, held, apt_mark, kernel)
        else:
            before, stream_commands = read_dnf(module)
            plan = pin_plan.dnf_plan(params, pins, before, stream_commands, kernel)
    except pin_plan.PlanError as exc:
        module.fail_json(msg=str(exc))

    changed_files, _commands, changed = pin_plan.changes(plan)
    if changed and not module.check_mode:
        # module streams before locks; files before holds so a failed hold leaves the pins written
        for argv in plan["stream_commands"]:
            run_checked(module, argv, "switch the dnf module stream", FIX_HINT, seconds=CHANGE_LIMIT)
        for change in changed_files:
            write_text(module, change["path"], change["after"])
        for argv in plan["hold_commands"]:
            run_checked(module, argv, f"run apt-mark {argv[1]}", FIX_HINT, seconds=CHANGE_LIMIT)
    return dict(pin_plan.result(manager, pins, plan, diff=module._diff), kernel_holds=kernel)
