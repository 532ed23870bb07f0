#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: irq_affinity
short_description: Pin the IRQs of NICs and GPUs to CPUs of their own NUMA node, persist the plan, tame irqbalance
version_added: 0.1.0
description:
  - Finds the PCI devices named in O(devices) or bound to O(drivers), reads their NUMA node,
    C(local_cpulist) and MSI IRQs from sysfs, and plans one CPU per IRQ, spreading each device's
    queues across the local cores (primary hardware threads first) and skipping O(housekeeping_cpus).
  - Writes C(/proc/irq/N/smp_affinity_list) for the IRQs whose affinity differs.
    IRQs are host-global, so in a container nothing is written live unless O(apply_live=always).
  - Persists the plan as C(pci_address msi_index cpulist) lines in O(persist_path), which the boot unit
    installed by the C(gpuops.cluster.kernel_tuning) role reads (IRQ numbers change across boots; the
    device address and queue index do not).
  - O(irqbalance=stop) disables and stops irqbalance; O(irqbalance=ban) points irqbalance at
    O(policy_script) (C(--policyscript)), which bans the planned devices' IRQs, and restarts it when running.
  - O(boot_unit=true) also installs, below O(root), the boot script at O(policy_script) (mode 0755),
    C(/etc/systemd/system/gpuops-irq-affinity.service) (0644) that runs it at boot when O(persist_path)
    exists, and the C(multi-user.target.wants) link that enables it; missing directories are created 0755.
    RV(changed_unit) says whether the unit file changed, so the caller reloads systemd only then.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  devices:
    description: Devices by PCI address (C(0000:17:00.0)), network interface (C(ens1f0)) or InfiniBand name (C(mlx5_0)).
    type: list
    elements: str
    default: []
  drivers:
    description: Every PCI device bound to these drivers, such as C(mlx5_core) and C(nvidia).
    type: list
    elements: str
    default: []
  housekeeping_cpus:
    description: CPUs kept free of these IRQs, as a cpulist (C(0-1,32-33)).
    type: str
    default: ""
  irqbalance:
    description: What to do with irqbalance, which would otherwise move the IRQs again.
    type: str
    choices: [leave, stop, ban]
    default: leave
  irqbalance_config:
    description:
      - The irqbalance environment file holding C(IRQBALANCE_ARGS), below O(root).
      - Default C(/etc/default/irqbalance) when it exists, else C(/etc/sysconfig/irqbalance) when it exists,
        else C(/etc/default/irqbalance).
    type: path
  policy_script:
    description:
      - The boot script, also the irqbalance policy script for O(irqbalance=ban).
      - Installed there with O(boot_unit=true).
      - An absolute path on the node (below O(root)), without spaces.
    type: path
    default: /usr/local/sbin/gpuops-irq-affinity
  boot_unit:
    description:
      - Install the boot script, the C(gpuops-irq-affinity.service) unit and its C(multi-user.target.wants)
        link (root-owned), which re-apply the persisted plan at every boot.
      - The unit is not started and systemd is not reloaded here; see RV(changed_unit).
    type: bool
    default: false
  persist:
    description: Whether to write O(persist_path) for the boot unit.
    type: bool
    default: true
  persist_path:
    description: The plan file the boot unit reads, below O(root).
    type: path
    default: /etc/gpuops/irq-affinity.conf
  apply_live:
    description:
      - V(auto) writes C(/proc/irq) outside containers when O(root) is C(/); V(always) and V(never) are what they say.
    type: str
    choices: [auto, always, never]
    default: auto
  root:
    description: Root directory prefixed to C(/sys), C(/proc) and C(/etc) paths. For tests and chroots.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The diff is the plan file, the boot script, unit and link, and the IRQ affinities before and after.
notes:
  - IRQs with kernel-managed affinity refuse writes; they are listed in RV(not_applied_live), not failed.
"""

EXAMPLES = r"""
- name: Pin InfiniBand NIC and GPU IRQs to their NUMA node, keeping CPUs 0-1 for housekeeping
  gpuops.cluster.irq_affinity:
    drivers: [mlx5_core, nvidia]
    housekeeping_cpus: "0-1"
    irqbalance: ban
  register: kernel_tuning_irq_result

- name: Pin them, persist the plan and install the boot unit that re-applies it
  gpuops.cluster.irq_affinity:
    drivers: [mlx5_core, nvidia]
    irqbalance: ban
    boot_unit: true
  register: irq_result
  notify: Reload systemd  # a handler with `when: irq_result.changed_unit`

- name: Plan only, for one NIC
  gpuops.cluster.irq_affinity:
    devices: [mlx5_0]
    apply_live: never
    persist: false
  check_mode: true
"""

RETURN = r"""
devices:
  description: The devices planned, each with its NUMA node, candidate CPUs, IRQs and a note when it fell back.
  returned: always
  type: list
  elements: dict
  sample: [{"address": "0000:17:00.0", "numa_node": 0, "cpus": "2-15", "irqs": [45, 46], "note": null}]
plan:
  description: The planned cpulist per IRQ (keys are IRQ numbers as strings).
  returned: always
  type: dict
  sample: {"45": "2", "46": "3"}
changes:
  description: IRQs whose affinity differed from the plan, with before and after cpulists.
  returned: always
  type: dict
  sample: {"45": {"before": "0-63", "after": "2"}}
applied_live:
  description: IRQs written live (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: ["45"]
not_applied_live:
  description: IRQs or steps not applied live, each with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "irq 45", "reason": "in a container (podman)"}]
irqbalance:
  description: The irqbalance action taken (C(none), C(disabled), C(configured), C(restarted)) and the commands.
  returned: always
  type: dict
  sample: {"action": "disabled", "commands": [["/usr/bin/systemctl", "disable", "--now", "irqbalance.service"]]}
persist_path:
  description: The plan file.
  returned: always
  type: str
  sample: /etc/gpuops/irq-affinity.conf
boot_files:
  description: The boot script, unit and link that changed (in check mode, would change), paths below O(root).
  returned: always
  type: list
  elements: str
  sample: ["/etc/systemd/system/gpuops-irq-affinity.service"]
changed_unit:
  description: Whether the unit file changed (or would); reload systemd when true. False without O(boot_unit).
  returned: always
  type: bool
  sample: false
container:
  description: The container kind detected, or null on a host.
  returned: always
  type: str
  sample: null
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import irq_affinity


def main():
    module = AnsibleModule(**irq_affinity.MODULE_KWARGS)
    use_c_locale(module)
    module.exit_json(**irq_affinity.run(module))


if __name__ == "__main__":
    main()
