#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pcie_acs
short_description: Report PCIe ACS on bridges and, only when asked, disable it for GPUDirect peer-to-peer
version_added: 0.1.0
description:
  - Runs C(lspci -D -vvv) and lists the devices whose ACS control redirects peer-to-peer traffic
    (C(SrcValid), C(ReqRedir), C(CmpltRedir), C(UpstreamFwd)), which slows or breaks GPUDirect P2P and RDMA.
  - O(state=report) changes nothing. O(state=disabled) clears the ACS control register of those devices with
    C(setpci) until the next reboot; it is not persisted (prefer disabling ACS in the BIOS).
  - ACS is host-global, so in a container nothing is written unless O(apply_live=always).
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  state:
    description: V(report) only reads; V(disabled) clears ACS on the devices that have it enabled.
    type: str
    choices: [report, disabled]
    default: report
  devices:
    description: Restrict the change to these PCI addresses; empty means every device with ACS enabled.
    type: list
    elements: str
    default: []
  apply_live:
    description: V(auto) writes outside containers only; V(always) and V(never) are what they say.
    type: str
    choices: [auto, always, never]
    default: auto
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
requirements:
  - pciutils (C(lspci), C(setpci))
notes:
  - Needs root to read the extended capabilities; without it lspci shows no ACSCtl lines and nothing is reported.
"""

EXAMPLES = r"""
- name: Report ACS
  gpuops.cluster.pcie_acs:
  register: kernel_tuning_acs_result

- name: Disable ACS until the next reboot (explicit request only)
  gpuops.cluster.pcie_acs:
    state: disabled
"""

RETURN = r"""
devices:
  description: Every device that reports ACSCtl, with its flags.
  returned: always
  type: list
  elements: dict
  sample: [{"address": "0000:16:02.0", "description": "PCI bridge: ...", "acs_ctl": {"ReqRedir": true}}]
enabled:
  description: Addresses whose ACS redirects peer-to-peer traffic, before this run.
  returned: always
  type: list
  elements: str
  sample: ["0000:16:02.0"]
commands:
  description: setpci commands run (or that would run).
  returned: always
  type: list
  elements: list
  sample: [["/usr/bin/setpci", "-s", "0000:16:02.0", "ECAP_ACS+0x6.w=0000"]]
not_applied_live:
  description: Devices not changed, each with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "acs 0000:16:02.0", "reason": "in a container (podman)"}]
container:
  description: The container kind detected, or null on a host.
  returned: always
  type: str
  sample: null
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import pcie_acs


def main():
    module = AnsibleModule(**pcie_acs.MODULE_KWARGS)
    use_c_locale(module)
    module.exit_json(**pcie_acs.run(module))


if __name__ == "__main__":
    main()
