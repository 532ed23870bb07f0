#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_dropins
short_description: Write the RDMA drop-ins of a GPU node, memlock limits and nvidia-peermem at boot
version_added: 0.1.0
description:
  - With O(memlock_limit), writes the locked-memory limit that RDMA memory registration needs, twice, in
    C(/etc/security/limits.d/90-gpuops-memlock.conf) (soft and hard, for every user and for root, PAM login
    sessions) and in C(/etc/systemd/system.conf.d/90-gpuops-memlock.conf) (C(DefaultLimitMEMLOCK), for services
    started by systemd).
  - With O(peermem=true), writes C(/etc/modules-load.d/nvidia-peermem.conf) so C(nvidia-peermem) (GPUDirect
    RDMA) is loaded at boot. The module is not loaded now; use C(modprobe) for that.
  - Each area is optional; the files of an area not asked for are left alone, and the module removes nothing.
  - Files are 0644 and root-owned (when the module runs as root), written atomically below O(root); missing
    directories are created 0755.
  - systemd reads C(DefaultLimitMEMLOCK) only when re-executed; RV(changed_systemd) says when to do it.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  memlock_limit:
    description:
      - Locked-memory limit, in kB or V(unlimited) (C(DefaultLimitMEMLOCK=infinity)).
      - Unset, the two memlock drop-ins are not managed.
    type: str
  peermem:
    description: Write the modules-load.d file for C(nvidia-peermem). V(false) leaves that file alone.
    type: bool
    default: false
  root:
    description: Root directory prefixed to every path written. For image builds, chroots and tests.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: One before/after entry per file that changes.
notes:
  - Limits in limits.d apply to new PAM sessions; services get C(DefaultLimitMEMLOCK) after C(systemctl daemon-reexec).
seealso:
  - module: gpuops.cluster.sysctl_profile
"""

EXAMPLES = r"""
- name: Unlimited memlock for RDMA and nvidia-peermem at boot
  gpuops.cluster.rdma_dropins:
    memlock_limit: unlimited
    peermem: true
  register: rdma_dropins_result
  notify: Re-execute systemd  # a handler with `when: rdma_dropins_result.changed_systemd`

- name: 64 GiB of locked memory, written into an image tree
  gpuops.cluster.rdma_dropins:
    memlock_limit: "67108864"
    root: /srv/images/gpu-node
"""

RETURN = r"""
files:
  description: Every file this call manages, below O(root).
  returned: always
  type: list
  elements: str
  sample: ["/etc/security/limits.d/90-gpuops-memlock.conf", "/etc/systemd/system.conf.d/90-gpuops-memlock.conf"]
changed_files:
  description: The files written (in check mode, that would be), below O(root).
  returned: always
  type: list
  elements: str
  sample: ["/etc/modules-load.d/nvidia-peermem.conf"]
changed_limits:
  description: Whether the limits.d drop-in changed (or would).
  returned: always
  type: bool
  sample: false
changed_systemd:
  description: Whether the system.conf.d drop-in changed (or would); re-execute systemd when true.
  returned: always
  type: bool
  sample: true
changed_peermem:
  description: Whether the modules-load.d file for nvidia-peermem changed (or would).
  returned: always
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import rdma_dropins


def main():
    module = AnsibleModule(**rdma_dropins.MODULE_KWARGS)
    use_c_locale(module)
    module.exit_json(**rdma_dropins.run(module))


if __name__ == "__main__":
    main()
