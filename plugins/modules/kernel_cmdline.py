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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import kernel_cmdline


def main():
    module = AnsibleModule(**kernel_cmdline.MODULE_KWARGS)
    use_c_locale(module)
    module.exit_json(**kernel_cmdline.run(module))


if __name__ == "__main__":
    main()
