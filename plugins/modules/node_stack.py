#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_stack
short_description: Blacklist nouveau, pin the NVIDIA stack, set up its DCGM Exporter and nvidia-peermem in one call
version_added: 0.2.0
description:
  - Runs the work of M(gpuops.cluster.modprobe_blacklist) and M(gpuops.cluster.package_pin) in one Python process on
    the node, in that order, then writes the DCGM Exporter's systemd drop-in (O(dcgm_exporter)) and makes
    C(nvidia-peermem) match the node's GPUDirect RDMA path (O(gpudirect_rdma)).
  - The C(nvidia_stack) role calls this module, one remote execution instead of three.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  modprobe_blacklist:
    description: The options of M(gpuops.cluster.modprobe_blacklist).
    type: dict
  package_pin:
    description: The options of M(gpuops.cluster.package_pin).
    type: dict
  dcgm_exporter:
    description:
      - Write C(/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuops.conf) (0644, root) for the packaged
        C(nvidia-dcgm-exporter.service), replacing its C(ExecStart) with
        C(/usr/bin/dcgm-exporter -f <collectors> -a :<port> -r <hostengine>) and, with a host engine,
        C(PartOf=nvidia-dcgm.service) (a restart or stop of the host engine restarts or stops the exporter) and
        C(After=nvidia-dcgm.service); C(Restart=on-failure).
      - "Keys: C(port) (int, default 9400), C(collectors) (an absolute path, default
        C(/etc/dcgm-exporter/default-counters.csv)), C(hostengine) (C(host:port), default C(localhost:5555); empty:
        the exporter embeds its own host engine, no C(-r), no C(PartOf)), C(path), C(state) (V(present) or
        V(absent)), C(root)."
      - Reload systemd and restart the exporter when the part changed (the C(nvidia_stack) role's handler does).
    type: dict
  gpudirect_rdma:
    description:
      - Make C(nvidia-peermem) match the GPUDirect RDMA path the node has, decided as the C(gpudirect_rdma) check
        of M(gpuops.cluster.gpu_health) decides it (sysfs and C(/proc) only).
      - Path C(peermem) writes C(/etc/modules-load.d/nvidia-peermem.conf) (0644, root) and runs
        C(modprobe nvidia-peermem) where the driver is loaded and it is not (a failure names the DKMS rebuild that
        fixes a module built without, or against another, OFED). Path C(dmabuf) or C(none) loads nothing and removes
        that file where it holds what this collection writes. No usable path changes nothing; the part's result
        says why.
      - After an OFED change (C(rebuild), on path C(peermem), on the node itself), where the C(nvidia-peermem) that
        C(modprobe) loads for the running kernel was built without OFED's peer-memory symbols or against another
        OFED (its symbol versions, C(modprobe --show-modversions), differ from those C(ib_core) exports,
        C(modprobe --show-exports)), the driver's DKMS module is rebuilt and reinstalled for that kernel
        (C(dkms build --force), C(dkms install --force)) before the load. Precompiled modules are not rebuilt;
        the result's C(notes) name the package. The result's C(build) holds the verdict, C(rebuilt) the rebuild.
      - "Keys: C(setting) (V(auto), V(peermem), V(dmabuf), V(none); default V(auto)), C(flavor) (V(open) or
        V(proprietary): the flavour the stack installs, used where no NVIDIA module is loaded yet), C(load_now)
        (bool, default V(true)), C(rebuild) (bool, default V(true)), C(root)."
    type: dict
extends_documentation_fragment:
  - gpuops.cluster.attributes
  - gpuops.cluster.module_parts
seealso:
  - module: gpuops.cluster.modprobe_blacklist
  - module: gpuops.cluster.package_pin
  - module: gpuops.cluster.node_tuning
"""

EXAMPLES = r"""
- name: Blacklist nouveau and pin the resolved packages
  gpuops.cluster.node_stack:
    modprobe_blacklist: {}
    package_pin:
      packages: "{{ gpuops_resolved_stack.packages }}"
      pins: "{{ gpuops_resolved_stack.pins }}"
  register: stack_files
  notify: Rebuild the initramfs  # a handler with `when: stack_files.results.modprobe_blacklist.changed`
"""

RETURN = r"""
results:
  description:
    - Each part that ran, with the return values its module documents (C(changed) included).
    - On a failure, the parts that ran before the failed one.
  returned: always
  type: dict
  sample: {"modprobe_blacklist": {"changed": false, "path": "/etc/modprobe.d/gpuops-blacklist-nouveau.conf"}}
changed_parts:
  description: The parts that changed something (in check mode, would have), in order.
  returned: always
  type: list
  elements: str
  sample: ["package_pin"]
failed_part:
  description: The part that failed; its own return values (C(rc), C(stdout), C(stderr), C(cmd)) are at the top level.
  returned: failure
  type: str
  sample: package_pin
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.module_parts import part_options, run_parts
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    dcgm_exporter_dropin,
    gpudirect_rdma_part,
    modprobe_blacklist,
    package_pin,
)

# The parts, in the order they run.
PARTS = {
    "modprobe_blacklist": modprobe_blacklist,
    "package_pin": package_pin,
    "dcgm_exporter": dcgm_exporter_dropin,
    "gpudirect_rdma": gpudirect_rdma_part,
}


def main():
    module = AnsibleModule(argument_spec=part_options(PARTS), supports_check_mode=True)
    use_c_locale(module)
    run_parts(module, PARTS)


if __name__ == "__main__":
    main()
