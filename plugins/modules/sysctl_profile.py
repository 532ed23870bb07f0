#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sysctl_profile
short_description: Own one sysctl drop-in holding a whole dict of keys, reload once, report drift
version_added: 0.1.0
description:
  - Renders a whole dict of sysctl keys into one file under C(/etc/sysctl.d), sorted and deterministic.
  - Reads the live value of every key from C(/proc/sys) and returns per-key drift between live and desired.
  - Applies the keys that drift with one C(sysctl) call (C(sysctl -p FILE)), never one call per key;
    when nothing drifts no command runs.
  - Under a O(root) other than C(/) no command ever runs (it would act on the machine running the module);
    with O(apply_live=always) the values are written to C(ROOT/proc/sys) directly.
  - In a container the host-global keys (C(vm.*), C(kernel.numa_balancing), host-only C(net.core.*))
    are persisted but not written live unless O(apply_live=always); keys that belong to the container's
    own network, IPC or UTS namespace are applied with one C(sysctl -w) call. What was not applied live is
    listed in RV(not_applied_live).
  - Unlike M(ansible.posix.sysctl) (one key and one reload per task) this module sets the whole profile at once.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  sysctls:
    description:
      - Keys and values. Lists and runs of whitespace in multi-value keys such as C(net.ipv4.tcp_rmem)
        are normalised to single spaces; booleans become C(1) and C(0).
      - Required when O(state=present).
    type: dict
  name:
    description:
      - File name of the drop-in without the C(.conf) suffix. The number orders it among other drop-ins.
    type: str
    default: 90-gpuops-tuning
  directory:
    description:
      - Directory of the drop-in, below O(root).
    type: path
    default: /etc/sysctl.d
  state:
    description:
      - V(present) writes the drop-in and applies drift; V(absent) removes the drop-in (live values stay until reboot).
    type: str
    choices: [present, absent]
    default: present
  apply_live:
    description:
      - V(auto) applies every drifting key live on a host, only namespaced keys in a container, and nothing
        when O(root) is not C(/).
      - V(always) applies every drifting key live, even host-global keys in a container (this writes the HOST's values).
      - V(never) only persists the drop-in.
    type: str
    choices: [auto, always, never]
    default: auto
  root:
    description:
      - Root directory prefixed to C(/etc) and C(/proc) paths. For tests and chroots; leave C(/) on real nodes.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The diff is the drop-in file before and after.
seealso:
  - module: ansible.posix.sysctl
"""

EXAMPLES = r"""
- name: Apply the training sysctl profile in one drop-in and one reload
  gpuops.cluster.sysctl_profile:
    name: 90-gpuops-tuning
    sysctls:
      kernel.numa_balancing: 0
      vm.swappiness: 1
      net.core.rmem_max: 268435456
      net.ipv4.tcp_rmem: [4096, 87380, 134217728]
  register: kernel_tuning_sysctl_result

- name: Persist only, never write live
  gpuops.cluster.sysctl_profile:
    sysctls:
      vm.max_map_count: 1048576
    apply_live: never

- name: Remove the drop-in
  gpuops.cluster.sysctl_profile:
    name: 90-gpuops-tuning
    state: absent
"""

RETURN = r"""
path:
  description: The drop-in file.
  returned: always
  type: str
  sample: /etc/sysctl.d/90-gpuops-tuning.conf
drift:
  description: Keys whose live value differed from the desired value before this run, with both values.
  returned: always
  type: dict
  sample: {"kernel.numa_balancing": {"live": "1", "desired": "0"}}
drift_after:
  description: Keys whose live value still differs after this run (in check mode, those that would).
  returned: always
  type: dict
  sample: {"vm.nr_hugepages": {"live": "0", "desired": "1024"}}
applied_live:
  description: Keys written live by this run (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: ["kernel.numa_balancing"]
not_applied_live:
  description: Drifting keys not written live, each with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "vm.nr_hugepages", "reason": "host-global key in a container (podman)"}]
file_changed:
  description: Whether the drop-in content changed (or would change in check mode).
  returned: always
  type: bool
  sample: true
reloaded:
  description: Whether the drift was applied live in one pass (one sysctl command under root C(/)).
  returned: always
  type: bool
  sample: true
command:
  description: The sysctl command run (or that would run in check mode); empty when none.
  returned: always
  type: list
  elements: str
  sample: ["/usr/sbin/sysctl", "-p", "/etc/sysctl.d/90-gpuops-tuning.conf"]
container:
  description: The container kind detected, or null on a host.
  returned: always
  type: str
  sample: podman
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import sysctl_profile


def main():
    module = AnsibleModule(**sysctl_profile.MODULE_KWARGS)
    use_c_locale(module)
    module.exit_json(**sysctl_profile.run(module))


if __name__ == "__main__":
    main()
