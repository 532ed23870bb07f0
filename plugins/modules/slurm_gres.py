#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_gres
short_description: Tell Slurm the node's GPUs and MIG devices in gres.conf, and the Gres= its node needs
version_added: 0.5.0
description:
  - Reads the node once (C(nvidia-smi -q -x); C(nvidia-smi mig -lgi) and C(-lci) and
    C(/proc/driver/nvidia-caps/mig-minors) where a GPU has MIG on) and writes this node's GPU lines in O(path),
    in a marked block, every other line of the file kept.
  - Where Slurm's NVML GPU plugin (C(gpu_nvml.so)) is installed the block is C(AutoDetect=nvml), and slurmd finds
    the GPUs and MIG devices itself (C(AutoDetect=nvidia) of Slurm 24.11 does not detect MIG devices, so it is
    never used). Otherwise one line per device as the NVML plugin would find it, C(Name=gpu Type=<type>
    File=/dev/nvidia<minor>) for a whole GPU and C(Name=gpu Type=<MIG device> MultipleFiles=/dev/nvidia<minor>,
    /dev/nvidia-caps/nvidia-cap<GI>,/dev/nvidia-caps/nvidia-cap<CI>) for a MIG device.
  - RV(gres) is the C(Gres=) slurm.conf must give the node (C(gpu:<type>:<count>) per type); slurm.conf is the
    controller's and is not changed. RV(gres_changed) says it changed, for which gres.conf(5) wants the node
    drained before slurmd reads the file. The block's first line records RV(gres) (a comment), so a later run
    knows the devices changed even with C(AutoDetect=nvml).
  - A GPU line for this node outside the block (C(Name=gpu), C(AutoDetect=)) fails the module, naming it,
    before anything is written. Commands run as argument lists under coreutils C(timeout).
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  path:
    description: gres.conf.
    type: path
    default: /etc/slurm/gres.conf
  nvml:
    description:
      - V(auto) writes C(AutoDetect=nvml) where C(gpu_nvml.so) is found in O(plugin_dirs); V(always) and V(never)
        decide without looking.
    type: str
    choices: [auto, always, never]
    default: auto
  plugin_dirs:
    description: Where Slurm's plugins are installed (Debian and Ubuntu, multiarch; RHEL; a source install).
    type: list
    elements: path
    default:
      - /usr/lib/x86_64-linux-gnu/slurm-wlm
      - /usr/lib/aarch64-linux-gnu/slurm-wlm
      - /usr/lib64/slurm
      - /usr/lib/slurm
      - /usr/local/lib/slurm
  gpu_type:
    description: The GRES type of a whole GPU; unset, its product name in lower case (C(h100_80gb_hbm3)).
    type: str
  node_names:
    description: This node's names in Slurm, to tell its own gres.conf lines from other nodes' (C(NodeName=)).
    type: list
    elements: str
    default: []
  nvidia_smi_path:
    description: The nvidia-smi to run; unset, found in the PATH.
    type: path
  mig_minors_path:
    description: The driver's list of MIG capability minors.
    type: path
    default: /proc/driver/nvidia-caps/mig-minors
  command_timeout:
    description: Seconds each nvidia-smi command may take.
    type: int
    default: 60
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - slurmd reads gres.conf when it starts; restart it after a change (the C(mig_layout) role's handler does, only
    when slurmd runs).
seealso:
  - module: gpuops.cluster.gpu_mig
"""

EXAMPLES = r"""
- name: Write this node's GPU lines in gres.conf
  gpuops.cluster.slurm_gres:
    node_names: ["{{ gpuops_upgrade_slurm_node_name | default(inventory_hostname) }}"]
  register: gres
"""

RETURN = r"""
lines:
  description: The block's lines (RV(gres) as a comment first).
  type: list
  elements: str
  returned: always
  sample:
    - "# slurm.conf for this node: Gres=gpu:3g.40gb:1"
    - Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap30,/dev/nvidia-caps/nvidia-cap31
gres:
  description: The Gres= of the node in slurm.conf for these devices.
  type: str
  returned: always
  sample: gpu:1g.10gb:2,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:7
nvml:
  description: Whether the block is C(AutoDetect=nvml).
  type: bool
  returned: always
gres_changed:
  description:
    - RV(gres) differs from the one the block was written for (or there was no block), so the node's GPU records
      change, so drain the node before slurmd reads the file, and give slurm.conf the new C(Gres=).
  type: bool
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.managed_file import read_text, write_atomic
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block, gres_sync, mig_gres, mig_run


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": gres_sync.GRES_CONF},
            "nvml": {"type": "str", "choices": list(gres_sync.NVML_MODES), "default": "auto"},
            "plugin_dirs": {"type": "list", "elements": "path", "default": list(gres_sync.PLUGIN_DIRS)},
            "gpu_type": {"type": "str"},
            "node_names": {"type": "list", "elements": "str", "default": []},
            "nvidia_smi_path": {"type": "path"},
            "mig_minors_path": {"type": "path", "default": mig_gres.MIG_MINORS},
            "command_timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    use_c_locale(module)
    params = module.params
    smi = params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi", required=True)
    state = mig_run.Node(module, smi, params["command_timeout"]).state()
    minors_text = read_text(params["mig_minors_path"], "") if gres_sync.any_mig(state["gpus"]) else ""
    nvml = gres_sync.nvml_installed(params["nvml"], params["plugin_dirs"])
    before = read_text(params["path"], "")
    try:
        planned = gres_sync.plan(state["gpus"], minors_text, nvml, params["gpu_type"], before, params["node_names"])
    except mig_gres.GresError as exc:
        module.fail_json(msg="cannot name the node's GPUs for Slurm, nothing was changed: %s" % exc)
    except gres_conf_block.BlockError as exc:
        module.fail_json(msg="%s: %s; nothing was changed" % (params["path"], exc))
    after, changed = planned["after"], planned["changed"]
    result = {"changed": changed, **{key: planned[key] for key in ("lines", "gres", "nvml", "gres_changed")}}
    if module._diff:
        result["diff"] = {
            "before_header": params["path"],
            "after_header": params["path"],
            "before": before,
            "after": after,
        }
    if changed and not module.check_mode:
        write_atomic(module, params["path"], after, mode=0o644, create_parent=True)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
