#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_tuning
short_description: Run several kernel tuning modules in one remote execution
version_added: 0.1.0
description:
  - Runs the work of M(gpuops.cluster.sysctl_profile), M(gpuops.cluster.kernel_runtime),
    M(gpuops.cluster.irq_affinity), M(gpuops.cluster.kernel_cmdline), M(gpuops.cluster.rdma_dropins) and
    M(gpuops.cluster.pcie_acs) in one Python process on the node, in that order.
  - The C(kernel_tuning) role calls this module, one remote execution instead of up to six.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  sysctl_profile:
    description: The options of M(gpuops.cluster.sysctl_profile).
    type: dict
  kernel_runtime:
    description: The options of M(gpuops.cluster.kernel_runtime).
    type: dict
  irq_affinity:
    description: The options of M(gpuops.cluster.irq_affinity).
    type: dict
  kernel_cmdline:
    description: The options of M(gpuops.cluster.kernel_cmdline).
    type: dict
  rdma_dropins:
    description: The options of M(gpuops.cluster.rdma_dropins).
    type: dict
  pcie_acs:
    description: The options of M(gpuops.cluster.pcie_acs).
    type: dict
extends_documentation_fragment:
  - gpuops.cluster.attributes
  - gpuops.cluster.module_parts
seealso:
  - module: gpuops.cluster.sysctl_profile
  - module: gpuops.cluster.kernel_runtime
  - module: gpuops.cluster.irq_affinity
  - module: gpuops.cluster.kernel_cmdline
  - module: gpuops.cluster.rdma_dropins
  - module: gpuops.cluster.pcie_acs
"""

EXAMPLES = r"""
- name: Sysctls, THP and IRQ affinity in one call
  gpuops.cluster.node_tuning:
    sysctl_profile:
      sysctls:
        kernel.numa_balancing: 0
        vm.max_map_count: 1048576
    kernel_runtime:
      thp_enabled: madvise
      thp_defrag: defer+madvise
    irq_affinity:
      drivers: [mlx5_core]
  register: tuning

- name: What each part did
  ansible.builtin.debug:
    msg: "{{ tuning.changed_parts }} changed; sysctl drift {{ tuning.results.sysctl_profile.drift }}"
"""

RETURN = r"""
results:
  description:
    - Each part that ran, with the return values its module documents (C(changed) included).
    - On a failure, the parts that ran before the failed one.
  returned: always
  type: dict
  sample: {"sysctl_profile": {"changed": false, "path": "/etc/sysctl.d/90-gpuops-tuning.conf", "drift": {}}}
changed_parts:
  description: The parts that changed something (in check mode, would have), in order.
  returned: always
  type: list
  elements: str
  sample: ["kernel_runtime"]
failed_part:
  description: The part that failed; its own return values (C(rc), C(stdout), C(stderr), C(cmd)) are at the top level.
  returned: failure
  type: str
  sample: kernel_cmdline
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.module_parts import part_options, run_parts
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import (
    irq_affinity,
    kernel_cmdline,
    kernel_runtime,
    pcie_acs,
    rdma_dropins,
    sysctl_profile,
)

# The parts, in the order they run (the kernel_tuning role's order).
PARTS = {
    "sysctl_profile": sysctl_profile,
    "kernel_runtime": kernel_runtime,
    "irq_affinity": irq_affinity,
    "kernel_cmdline": kernel_cmdline,
    "rdma_dropins": rdma_dropins,
    "pcie_acs": pcie_acs,
}


def main():
    module = AnsibleModule(argument_spec=part_options(PARTS), supports_check_mode=True)
    use_c_locale(module)
    run_parts(module, PARTS)


if __name__ == "__main__":
    main()
