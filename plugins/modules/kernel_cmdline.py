#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_cmdline
short_description: Add, replace or remove kernel arguments idempotently and say whether a reboot is pending
version_added: 0.1.0
description:
  - On Debian and Ubuntu edits C(GRUB_CMDLINE_LINUX) in C(/etc/default/grub) (other lines and the quoting
    style are kept) and runs C(update-grub) when the file changed.
  - On the RHEL family (BLS entries under C(/boot/loader/entries)) runs one
    C(grubby --update-kernel=ALL --args=... --remove-args=...) when any boot entry differs.
  - An argument is C(key) or C(key=value). Adding C(key=value) replaces other values of C(key); listing one
    key several times keeps exactly those values in that order. Removing C(key) drops every C(key) and
    C(key=...); removing C(key=value) drops only that argument.
  - Compares the request with the running C(/proc/cmdline) and returns RV(reboot_required).
  - The bootloader belongs to the host, so in a container the grub file is still written but
    C(update-grub) or C(grubby) only run with O(apply_live=always).
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  args:
    description: Arguments to add or replace, each C(key) or C(key=value).
    type: list
    elements: str
    default: []
  remove_args:
    description: Arguments to remove, each C(key) (every value) or C(key=value) (that value only).
    type: list
    elements: str
    default: []
  bootloader:
    description:
      - V(grub_default) edits O(grub_file) and runs C(update-grub) (or C(grub2-mkconfig)).
      - V(grubby) uses C(grubby) on every boot entry.
      - V(auto) picks V(grubby) when C(grubby) is installed and C(/boot/loader/entries) exists, else V(grub_default).
    type: str
    choices: [auto, grub_default, grubby]
    default: auto
  grub_file:
    description: The grub defaults file below O(root).
    type: path
    default: /etc/default/grub
  apply_live:
    description:
      - Whether to run the bootloader update (C(update-grub), C(grubby)).
      - V(auto) runs it outside containers; V(always) also in a container; V(never) only edits the file.
      - Under a O(root) other than C(/) it never runs (it would act on the machine running the module).
    type: str
    choices: [auto, always, never]
    default: auto
  root:
    description: Root directory prefixed to C(/etc), C(/boot) and C(/proc) paths. For tests and chroots.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The diff is the grub file, or the arguments of every grubby entry, before and after.
notes:
  - The module edits C(/etc/default/grub) itself rather than a C(/etc/default/grub.d/) drop-in because
    replacing and removing arguments needs the whole line; it warns when a C(grub.d/*.cfg) reassigns
    C(GRUB_CMDLINE_LINUX) and would override the edit.
  - Values holding whitespace, quotes or shell syntax are refused.
"""

EXAMPLES = r"""
- name: Pass-through IOMMU and limit C-states for GPU training nodes
  gpuops.cluster.kernel_cmdline:
    args:
      - iommu=pt
      - intel_idle.max_cstate=1
      - processor.max_cstate=1
    remove_args:
      - quiet
  register: kernel_tuning_cmdline_result

- name: Reboot when the running kernel lacks the arguments
  ansible.builtin.reboot:
  when: kernel_tuning_cmdline_result.reboot_required
"""

RETURN = r"""
bootloader:
  description: The bootloader method used.
  returned: always
  type: str
  sample: grub_default
args_before:
  description: Arguments configured for the next boot before this run (the first entry for grubby).
  returned: always
  type: list
  elements: str
  sample: ["quiet"]
args_after:
  description: Arguments configured for the next boot after this run.
  returned: always
  type: list
  elements: str
  sample: ["iommu=pt"]
running:
  description: Arguments of the running kernel, from /proc/cmdline.
  returned: always
  type: list
  elements: str
  sample: ["BOOT_IMAGE=/vmlinuz", "root=/dev/sda1", "quiet"]
reboot_required:
  description: Whether the running kernel's arguments differ from the request.
  returned: always
  type: bool
  sample: true
pending_reboot:
  description: Requested arguments the running kernel lacks, and removed ones (prefixed C(-)) it still has.
  returned: always
  type: list
  elements: str
  sample: ["iommu=pt", "-quiet"]
command:
  description: The bootloader command run (or that would run); empty when none.
  returned: always
  type: list
  elements: str
  sample: ["/usr/sbin/update-grub"]
not_applied_live:
  description: Steps skipped, each with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "update-grub", "reason": "in a container (podman)"}]
container:
  description: The container kind detected, or null on a host.
  returned: always
  type: str
  sample: null
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection, managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_checked, use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import kernel_cmdline


def _live_reason(module, root, container):
    apply_live = module.params["apply_live"]
    if apply_live == "never":
        return "apply_live is never"
    if not container_detection.is_running_system(root):
        # update-grub and grubby act on the machine running the module, never on another root.
        return f"root is {root}, not the running system"
    if not container_detection.should_apply_live(apply_live, container):
        return f"in a container ({container})"
    return None


def _grub_default(module, root, add, remove, result, skip_reason):
    path = os.path.join(root, module.params["grub_file"].lstrip("/"))
    before = managed_file.read_text(path, "")
    try:
        result["args_before"] = kernel_cmdline.parse_grub_default(before)
        after = kernel_cmdline.edit_grub_default(before, add, remove)
    except kernel_cmdline.CmdlineError as exc:
        module.fail_json(msg=f"cannot edit {path}: {exc}")
    result["args_after"] = kernel_cmdline.parse_grub_default(after)
    dropins = {}
    for name in glob.glob(os.path.join(os.path.dirname(path), "grub.d", "*.cfg")):
        dropins[os.path.basename(name)] = managed_file.read_text(name, "")
    for name in kernel_cmdline.overriding_dropins(dropins):
        module.warn(f"grub.d/{name} reassigns GRUB_CMDLINE_LINUX and may override these arguments; review it")
    changed = before != after
    if changed:
        command = []
        if skip_reason:
            result["not_applied_live"].append(dict(name="update-grub", reason=skip_reason))
        else:
            update = module.get_bin_path("update-grub")
            mkconfig = module.get_bin_path("grub2-mkconfig") or module.get_bin_path("grub-mkconfig")
            if update:
                command = [update]
            elif mkconfig:
                target = "/boot/grub2/grub.cfg" if "grub2" in os.path.basename(mkconfig) else "/boot/grub/grub.cfg"
                command = [mkconfig, "-o", target]
            else:
                module.fail_json(
                    msg="neither update-grub nor grub-mkconfig is installed: install grub2-common, "
                    "or set apply_live=never to only edit the grub file",
                    **result,
                )
        result["command"] = command
        if not module.check_mode:
            managed_file.write_atomic(module, path, after, mode=None, create_parent=True)
            if command:
                rc, out, err = module.run_command(command)
                if rc != 0:
                    module.fail_json(
                        msg=f"{' '.join(command)} failed (rc={rc}); {path} is already edited: fix the grub "
                        "configuration and rerun",
                        rc=rc,
                        stdout=out,
                        stderr=err,
                        **result,
                    )
    if module._diff:
        result["diff"] = dict(before=before, after=after, before_header=path, after_header=path)
    return changed


def _grubby(module, root, add, remove, result, skip_reason):
    if not container_detection.is_running_system(root):
        module.fail_json(
            msg=f"bootloader=grubby reads the running system's /boot, not {root}; use root / or grub_default"
        )
    grubby = module.get_bin_path("grubby", required=True)
    out, _err = run_checked(module, [grubby, "--info=ALL"], "list the boot entries", hint="check /boot/loader/entries")
    entries = kernel_cmdline.parse_grubby_info(out)
    if not entries:
        module.fail_json(
            msg="grubby lists no boot entries; install a kernel or use bootloader=grub_default", stdout=out
        )
    result["args_before"] = list(entries[0]["args"])
    result["args_after"] = kernel_cmdline.apply_changes(entries[0]["args"], add, remove)
    command = kernel_cmdline.grubby_plan(grubby, entries, add, remove)
    if module._diff:
        result["diff"] = dict(
            before="".join(f"{e['kernel']}: {' '.join(e['args'])}\n" for e in entries),
            after="".join(
                f"{e['kernel']}: {' '.join(kernel_cmdline.apply_changes(e['args'], add, remove))}\n" for e in entries
            ),
        )
    if not command:
        return False
    if skip_reason:
        result["not_applied_live"].append(dict(name="grubby", reason=skip_reason))
        return False
    result["command"] = command
    if not module.check_mode:
        run_checked(module, command, "change the kernel arguments", hint="check the arguments and /boot")
    return True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            args=dict(type="list", elements="str", default=[]),
            remove_args=dict(type="list", elements="str", default=[]),
            bootloader=dict(type="str", choices=["auto", "grub_default", "grubby"], default="auto"),
            grub_file=dict(type="path", default="/etc/default/grub"),
            apply_live=dict(type="str", choices=list(container_detection.APPLY_LIVE_CHOICES), default="auto"),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    use_c_locale(module)
    root = module.params["root"]
    try:
        add = kernel_cmdline.validate_args(module.params["args"])
        remove = kernel_cmdline.validate_args(module.params["remove_args"])
    except kernel_cmdline.CmdlineError as exc:
        module.fail_json(msg=str(exc))
    both = {kernel_cmdline.arg_key(a) for a in add} & {a for a in remove if "=" not in a}
    if both:
        module.fail_json(msg=f"{', '.join(sorted(both))} is both added and removed; keep it in one list")
    container = container_detection.detect(module, root)
    bootloader = module.params["bootloader"]
    if bootloader == "auto":
        has_bls = os.path.isdir(os.path.join(root, "boot", "loader", "entries"))
        bootloader = "grubby" if has_bls and module.get_bin_path("grubby") else "grub_default"
    running = kernel_cmdline.parse_proc_cmdline(managed_file.read_text(os.path.join(root, "proc", "cmdline"), ""))
    result = dict(
        changed=False,
        bootloader=bootloader,
        args_before=[],
        args_after=[],
        running=running,
        command=[],
        not_applied_live=[],
        container=container,
    )
    skip_reason = _live_reason(module, root, container)
    if bootloader == "grubby":
        result["changed"] = _grubby(module, root, add, remove, result, skip_reason)
    else:
        result["changed"] = _grub_default(module, root, add, remove, result, skip_reason)
    result["pending_reboot"] = kernel_cmdline.pending(running, add, remove)
    result["reboot_required"] = bool(result["pending_reboot"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
