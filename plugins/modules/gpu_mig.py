#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_mig
short_description: Apply a declared MIG layout (a mig-parted v1 config) to the node's GPUs with the smallest change
version_added: 0.4.0
description:
  - Reads the node's MIG state once (C(nvidia-smi -q -x), and C(nvidia-smi mig -lgi) and C(mig -lci) where a GPU has
    MIG on), plans the smallest change to the config O(config_name) of O(config) and carries it out with
    C(nvidia-smi) (see the C(mig_apply) module utility for the order of the commands).
  - Per GPU, the config entry that applies is the last one whose C(devices) and C(device-filter) match it, as
    C(nvidia-mig-parted apply) does; a GPU no entry matches is left alone. GPU instances whose profile and compute
    instances the layout asks for are kept; only the others are destroyed and the missing ones created.
  - A GPU with running processes that the plan must reset, or whose GPU instances it must destroy, is refused with
    the processes named, and nothing is changed on any GPU.
  - Before the first change it stops those of O(stop_services) that are active, and starts them again afterwards,
    also when a step failed.
  - Where the MIG mode changes it resets the GPU (C(nvidia-smi -i N -r)), unless C(nvidia-smi -i N -mig) said the
    mode took effect (the driver resets an idle GPU itself). A reset refused because a process started
    on the GPU since the read fails the module (a reboot would stop the job too). Where the reset is otherwise
    refused or impossible, or O(reset=reboot), the new mode is left pending and the module returns
    RV(reboot_required) true and the GPUs in RV(pending_reboot), with RV(converged) false. After the reboot, a
    second run creates their instances.
  - After the changes it reads the state again and fails, naming each GPU and its difference, when the layout is not
    the declared one.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  config:
    description:
      - The MIG layouts, a mig-parted C(v1) config as C(nvidia-mig-parted) reads it (C(version), C(mig-configs)),
        usually the C(gpuops_mig) setting.
    type: dict
    required: true
  config_name:
    description: The config of O(config) to apply, as C(nvidia-mig-parted apply -c) names it (C(gpuops_mig_config)).
    type: str
    required: true
  nvidia_smi_path:
    description: The C(nvidia-smi) to run. Default the one on the C(PATH).
    type: path
  stop_services:
    description:
      - The systemd units holding the GPUs that are stopped, where active, before the first change, in this order,
        and started again in the reverse order afterwards.
      - The defaults are the DCGM Exporter and the DCGM host engine units of NVIDIA's packages.
    type: list
    elements: str
    default: [nvidia-dcgm-exporter, nvidia-dcgm]
  reset:
    description:
      - V(gpu) resets a GPU whose MIG mode changes (C(nvidia-smi -i N -r)); a refused reset leaves the mode pending
        and asks for a reboot (RV(reboot_required)).
      - V(reboot) never resets a GPU; a mode change is left pending for the next boot (or driver load).
    type: str
    choices: [gpu, reboot]
    default: gpu
  profile_set:
    description:
      - The node's GPU model's MIG profile set, as C(matrix/mig_profiles.yml) records it under C(profile_sets)
        (C(profiles), a list of each profile's C(name), C(id), C(compute), C(memory) and C(placements); other keys
        are ignored); the filter C(gpuops.cluster.mig_profile_set) gives it for the host's C(gpuops_gpu).
      - With it, new GPU instances are placed beside kept ones where they fit and created by profile id; without it,
        a GPU that needs new instances beside kept ones is rebuilt whole, and profiles are created by name.
    type: dict
  command_timeout:
    description: Seconds each C(nvidia-smi) or C(systemctl) command may run; one that runs longer fails the module.
    type: int
    default: 120
extends_documentation_fragment:
  - gpuops.cluster.attributes
  - gpuops.cluster.attributes.platform
attributes:
  check_mode:
    support: full
    details: Reads and plans; RV(plan) and RV(actions) say what a run would do, nothing is stopped or changed.
  diff_mode:
    support: full
    details: The diff is each GPU's layout (MIG mode and MIG devices) before and after.
notes:
  - The role gpuops.cluster.mig_layout (playbooks/mig_layout.yml) calls this module and keeps the layout at every
    boot with a oneshot unit that runs the same code on the node (C(gpuops-mig-apply)); this module itself writes
    no unit and regenerates no CDI specification.
  - Not yet built in this collection, so not done by this module - Slurm's MIG C(gres.conf) lines, and MPS.
seealso:
  - name: NVIDIA MIG user guide
    description: Modes, GPU and compute instances, and the commands this module runs.
    link: https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
  - name: nvidia-mig-parted
    description: The config format this module reads.
    link: https://github.com/NVIDIA/mig-parted
"""

EXAMPLES = r"""
- name: Apply the host's declared MIG layout
  gpuops.cluster.gpu_mig:
    config: "{{ gpuops_mig }}"
    config_name: "{{ gpuops_mig_config }}"
    profile_set: "{{ gpuops_gpu | gpuops.cluster.mig_profile_set }}"
  register: mig

- name: Reboot where a GPU could not be reset
  ansible.builtin.reboot:
  when: mig.reboot_required

- name: One GPU of seven 1g.10gb instances, the others whole, predicted only
  gpuops.cluster.gpu_mig:
    config:
      version: v1
      mig-configs:
        inference:
          - devices: [0]
            mig-enabled: true
            mig-devices: {"1g.10gb": 7}
          - devices: [1, 2, 3, 4, 5, 6, 7]
            mig-enabled: false
    config_name: inference
  check_mode: true
  diff: true
"""

RETURN = r"""
plan:
  description: The plan of each GPU (C(mig_plan)), what the run did or, in check mode, would do.
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "uuid": "GPU-5a3c...", "untouched": false, "set_mode": true, "reset": true, "destroy": [],
            "grow": [], "create": [{"profile": "1g.10gb", "profile_id": 19, "default_compute_instance": true,
            "compute_instances": [{"compute": 1, "profile_id": 0}]}], "refused": null}]
actions:
  description: What is done (or would be) to each changed GPU, in words, keyed by C(GPU <index> (<uuid>)).
  returned: always
  type: dict
  sample: {"GPU 0 (GPU-5a3c...)": ["set MIG mode on", "reset the GPU", "create 1g.10gb (compute instances 1c)"]}
layout:
  description: Each GPU's layout as read after the run (in check mode, as read before it).
  returned: always
  type: dict
  sample: {"GPU 0 (GPU-5a3c...)": {"mig_enabled": true, "pending_mig": true, "mig_devices": {"1g.10gb": 7}}}
commands:
  description: The commands run, each an argv list (none in check mode).
  returned: always
  type: list
  elements: list
  sample: [["/usr/bin/nvidia-smi", "-i", "0", "-mig", "1"], ["/usr/bin/nvidia-smi", "-i", "0", "-r"]]
stopped_services:
  description: The units of O(stop_services) that were active, stopped and started again.
  returned: always
  type: list
  elements: str
  sample: ["nvidia-dcgm-exporter", "nvidia-dcgm"]
reboot_required:
  description: A GPU's new MIG mode is pending and takes effect only at a reboot (or the driver's next load).
  returned: always
  type: bool
  sample: false
pending_reboot:
  description: The GPUs waiting for the reboot, each with why the reset did not happen.
  returned: always
  type: dict
  sample: {"GPU 1 (GPU-77e1...)": "nvidia-smi -r: Resetting GPU 00000000:2A:00.0 is not supported."}
converged:
  description: The node's layout is the declared one (false while a reboot is pending).
  returned: always
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_run


def main():
    module = AnsibleModule(
        argument_spec={
            "config": {"type": "dict", "required": True},
            "config_name": {"type": "str", "required": True},
            "nvidia_smi_path": {"type": "path"},
            "stop_services": {"type": "list", "elements": "str", "default": list(mig_run.STOP_SERVICES)},
            "reset": {"type": "str", "choices": ["gpu", "reboot"], "default": "gpu"},
            "profile_set": {"type": "dict"},
            "command_timeout": {"type": "int", "default": mig_run.COMMAND_TIMEOUT},
        },
        supports_check_mode=True,
    )
    use_c_locale(module)
    result, failure = mig_run.apply(module, module.params, module.check_mode, module._diff)
    if failure:
        module.fail_json(msg=failure, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
