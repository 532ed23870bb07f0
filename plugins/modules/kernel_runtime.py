#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_runtime
short_description: Set transparent hugepages, hugepages and the CPU governor live and persist them with tmpfiles.d
version_added: 0.1.0
description:
  - Reads transparent hugepage C(enabled)/C(defrag), the hugepage count (total or per NUMA node under
    C(/sys/devices/system/node/node*/hugepages)) and the CPU frequency governor from sysfs, and writes
    only the values that differ.
  - Persists the same writes as C(w) lines in one systemd-tmpfiles file, C(/etc/tmpfiles.d/NAME.conf),
    applied by C(systemd-tmpfiles-setup.service) at every boot.
  - These knobs are host-global, so in a container the file is persisted but nothing is written live
    unless O(apply_live=always) (which writes the HOST's values); what was not applied is listed in
    RV(not_applied_live).
  - Knobs left unset (null) are not touched and not persisted, so one call can set the three areas (or
    any of them) in one drop-in; RV(changed_areas) says which of them changed.
  - O(replaces) names older drop-ins of this module whose lines the drop-in now holds (one per area
    before the areas shared a file); they are removed, so systemd-tmpfiles never applies stale values.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  name:
    description: File name of the tmpfiles.d drop-in without C(.conf); give each caller its own name.
    type: str
    default: gpuops-kernel-runtime
  thp_enabled:
    description: Transparent hugepages mode.
    type: str
    choices: [always, madvise, never]
  thp_defrag:
    description: Transparent hugepages defrag mode.
    type: str
    choices: [always, defer, defer+madvise, madvise, never]
  hugepages:
    description: Total number of hugepages of O(hugepage_size_kb). Mutually exclusive with O(hugepages_per_node).
    type: int
  hugepages_per_node:
    description: "Hugepages per NUMA node, as C({node number: count})."
    type: dict
  hugepage_size_kb:
    description: Hugepage size in kB (C(2048) or C(1048576)); 1 GiB pages are best reserved with kernel arguments.
    type: int
    default: 2048
  governor:
    description: CPU frequency governor for every CPU with cpufreq, such as C(performance).
    type: str
  replaces:
    description:
      - Names (without C(.conf)) of older tmpfiles.d drop-ins this one replaces. Each is removed when O(persist)
        is true, but only when it carries the header this module writes; any other file of that name is left alone.
      - Never list O(name) itself.
    type: list
    elements: str
    default: []
  persist:
    description: Whether to write the tmpfiles.d drop-in (and remove the O(replaces) ones).
    type: bool
    default: true
  apply_live:
    description:
      - V(auto) writes sysfs outside containers when O(root) is C(/); V(always) and V(never) are what they say.
    type: str
    choices: [auto, always, never]
    default: auto
  root:
    description: Root directory prefixed to C(/sys) and C(/etc) paths. For tests and chroots.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The diff is the tmpfiles.d drop-in, each replaced drop-in removed, and the sysfs values before and after.
"""

EXAMPLES = r"""
- name: THP, hugepages and the governor in one call and one drop-in, replacing the older per-area drop-ins
  gpuops.cluster.kernel_runtime:
    name: gpuops-kernel-runtime
    replaces: [gpuops-thp, gpuops-hugepages, gpuops-governor]
    thp_enabled: madvise
    thp_defrag: defer+madvise
    hugepages: 1024
    governor: performance
  register: kernel_runtime_result

- name: Transparent hugepages to madvise for training nodes
  gpuops.cluster.kernel_runtime:
    name: gpuops-thp
    thp_enabled: madvise
    thp_defrag: defer+madvise

- name: 1024 hugepages on each socket
  gpuops.cluster.kernel_runtime:
    name: gpuops-hugepages
    hugepages_per_node: {0: 1024, 1: 1024}

- name: Performance governor
  gpuops.cluster.kernel_runtime:
    name: gpuops-governor
    governor: performance
"""

RETURN = r"""
path:
  description: The tmpfiles.d drop-in.
  returned: always
  type: str
  sample: /etc/tmpfiles.d/gpuops-thp.conf
drift:
  description: sysfs values that differed from the request before this run, by path.
  returned: always
  type: dict
  sample: {"/sys/kernel/mm/transparent_hugepage/enabled": {"live": "always", "desired": "madvise"}}
applied_live:
  description: sysfs paths written live (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: ["/sys/kernel/mm/transparent_hugepage/enabled"]
not_applied_live:
  description: Knobs not applied live, each with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "thp_enabled", "reason": "in a container (podman)"}]
file_changed:
  description: Whether the tmpfiles.d drop-in changed (or would).
  returned: always
  type: bool
  sample: false
changed_areas:
  description:
    - The areas (C(thp), C(hugepages), C(governor)) whose sysfs values were written live or whose persisted
      lines changed, or that had lines in a removed O(replaces) drop-in (in check mode, would be).
  returned: always
  type: list
  elements: str
  sample: ["thp"]
removed:
  description: The O(replaces) drop-ins removed (in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: ["/etc/tmpfiles.d/gpuops-thp.conf"]
container:
  description: The container kind detected, or null on a host.
  returned: always
  type: str
  sample: podman
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import kernel_runtime


def main():
    module = AnsibleModule(**kernel_runtime.MODULE_KWARGS)
    use_c_locale(module)
    module.exit_json(**kernel_runtime.run(module))


if __name__ == "__main__":
    main()
