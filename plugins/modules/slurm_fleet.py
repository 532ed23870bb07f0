#!/usr/bin/python
# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_fleet
short_description: Survey Slurm nodes for the rolling upgrade's window, in one call on the controller
version_added: 0.1.0
description:
  - Reads every node once with C(sinfo --json) (Slurm 22.05 and later) and every job that holds nodes once with
    C(squeue), and returns the O(nodes) as the sliding-window planner reads them. Changes nothing.
  - A node is RV(nodes[].state=down) when Slurm cannot reach it (not responding, state unknown or future, powered
    down or powering up), or when it is down or failed by someone else; V(drained_by_others) when it is drained with a
    reason that is not ours; V(busy) when a job holds it, with RV(nodes[].job_end) the end of its last job; V(idle)
    otherwise.
  - A drain that is ours (the reason starts with O(reason_prefix), a run id in brackets and a colon, as
    M(gpuops.cluster.slurm_drain) sets it), left by an aborted earlier run, does not take the node out of the fleet;
    the node is V(idle) or V(busy) like any node the run takes.
  - Run it once, where the Slurm client commands work, usually the controller, with C(delegate_to) and C(run_once).
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  nodes:
    description:
      - The Slurm node names (NodeName in C(slurm.conf)) to survey. A name listed twice is surveyed once.
      - The module fails, naming them, when Slurm does not know some of them.
    type: list
    elements: str
    required: true
  reason_prefix:
    description:
      - The start of every drain reason the upgrade sets, as O(gpuops.cluster.slurm_drain#module:reason_prefix).
        A reason starting with it, a run id in brackets and a colon is ours.
    type: str
    default: gpuops-upgrade
  sinfo_path:
    description: Path of C(sinfo). Default is the one on C(PATH).
    type: path
  squeue_path:
    description: Path of C(squeue). Default is the one on C(PATH).
    type: path
extends_documentation_fragment:
  - gpuops.cluster.attributes
  - gpuops.cluster.attributes.platform
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
    details: Nothing changes, so there is no diff.
notes:
  - Slurm 22.05 ignores C(-n) with C(--json), so every node is read and the O(nodes) are picked from them.
  - C(squeue) runs with C(SLURM_TIME_FORMAT=%s) in its environment, so that end times print as epoch seconds (Slurm
    prints local time without a zone otherwise), and with C(--all), so that jobs in hidden partitions count too.
  - A node whose gres names no GPU has RV(nodes[].gpus=0).
seealso:
  - module: gpuops.cluster.slurm_drain
  - name: sinfo
    description: Slurm's documentation of node states and flags.
    link: https://slurm.schedmd.com/sinfo.html
  - name: squeue
    description: Slurm's documentation of job states and SLURM_TIME_FORMAT.
    link: https://slurm.schedmd.com/squeue.html
"""

EXAMPLES = r"""
- name: Survey the GPU nodes for the sliding window
  gpuops.cluster.slurm_fleet:
    nodes: "{{ ansible_play_hosts_all }}"
  delegate_to: "{{ gpuops_upgrade_slurm_controller }}"
  run_once: true
  register: gpuops_upgrade_fleet

- name: Say which nodes the window will not take
  ansible.builtin.debug:
    msg: "{{ item.name }} is {{ item.state }} ({{ item.slurm_state }}: {{ item.reason }})"
  loop: "{{ gpuops_upgrade_fleet.nodes | rejectattr('state', 'in', ['idle', 'busy']) }}"
  loop_control:
    label: "{{ item.name }}"
  run_once: true
"""

RETURN = r"""
nodes:
  description:
    - The O(nodes), in the order given, as the sliding-window planner reads them.
    - The planner's C(domains), C(canary) and C(done) come from the inventory, not from Slurm, and are not here;
      RV(nodes[].slurm_state), RV(nodes[].reason) and RV(nodes[].owner) are for the report, not for the planner.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The Slurm node name.
      type: str
      sample: gpu-a01
    partitions:
      description: The Slurm partitions the node is in.
      type: list
      elements: str
      sample: [gpu, gpu-long]
    gpus:
      description:
        - The node's GPU count from its gres (C(gpu:h100:8) gives 8, with or without a socket binding after it); 0 when
          its gres names no GPU.
      type: int
      sample: 8
    state:
      description: The planner's state of the node.
      type: str
      choices: [idle, busy, drained_by_others, down]
      sample: busy
    job_end:
      description:
        - With RV(nodes[].state=busy), when the last job on the node ends, in epoch seconds; null when a job has no
          known end (no time limit) or no job was listed. A job past its end (completing) gives RV(now).
        - Null for every other state.
      type: int
      sample: 1796283600
    slurm_state:
      description: The node's state and flags as C(sinfo) writes them (C(idle+drain), C(down+not_responding)).
      type: str
      sample: mixed
    reason:
      description: The node's reason (of its drain or of its being down), null when none.
      type: str
      sample: null
    owner:
      description: Whose drain (or down state) it is, as M(gpuops.cluster.slurm_drain) tells it.
      type: str
      choices: [none, ours, other]
      sample: none
  sample:
    - name: gpu-a01
      partitions: [gpu]
      gpus: 8
      state: busy
      job_end: 1796283600
      slurm_state: mixed
      reason: null
      owner: none
    - name: gpu-a02
      partitions: [gpu]
      gpus: 8
      state: idle
      job_end: null
      slurm_state: idle+drain
      reason: "gpuops-upgrade[20261202T101500-ab12]: upgrading the NVIDIA stack"
      owner: ours
now:
  description: When the jobs were read (just before C(squeue) ran), in epoch seconds; the planner's C(now).
  returned: always
  type: int
  sample: 1796280000
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_checked, use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import slurm_node

SLURM_CLIENT_HINT = (
    "check that Slurm's client works on this host (munge, slurm.conf) and run the task where it does "
    "(delegate_to the controller)"
)
# At most this many of the known names in the message about unknown ones.
KNOWN_NAMES_SHOWN = 20


def _unknown_message(missing, nodes_info):
    known = sorted(nodes_info)
    shown = ", ".join(known[:KNOWN_NAMES_SHOWN]) or "no node"
    if len(known) > KNOWN_NAMES_SHOWN:
        shown += " and %d more" % (len(known) - KNOWN_NAMES_SHOWN)
    return "%s %s not known to Slurm (sinfo lists %s): set nodes to Slurm NodeNames (NodeName in slurm.conf)" % (
        "node" if len(missing) == 1 else "nodes",
        ", ".join(missing) + (" is" if len(missing) == 1 else " are"),
        shown,
    )


def main():
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "list", "elements": "str", "required": True},
            "reason_prefix": {"type": "str", "default": "gpuops-upgrade"},
            "sinfo_path": {"type": "path"},
            "squeue_path": {"type": "path"},
        },
        supports_check_mode=True,
    )
    use_c_locale(module)
    params = module.params
    names = list(dict.fromkeys(params["nodes"]))
    if not all(names):
        module.fail_json(msg="nodes holds an empty name: list Slurm node names")
    if not names:
        module.exit_json(changed=False, nodes=[], now=int(time.time()))

    sinfo = params["sinfo_path"] or module.get_bin_path("sinfo", required=True)
    squeue = params["squeue_path"] or module.get_bin_path("squeue", required=True)

    sinfo_argv = slurm_node.sinfo_json_argv(sinfo)
    out, _err = run_checked(
        module,
        sinfo_argv,
        "read the nodes with sinfo --json",
        SLURM_CLIENT_HINT + "; sinfo --json needs Slurm 22.05 or later",
    )
    try:
        nodes_info = slurm_node.parse_sinfo_json(out)
    except slurm_node.SlurmParseError as exc:
        module.fail_json(msg=str(exc), stdout=out, cmd=sinfo_argv)
    missing = slurm_node.unknown_nodes(nodes_info, names)
    if missing:
        module.fail_json(msg=_unknown_message(missing, nodes_info), missing=missing)

    now = int(time.time())
    squeue_argv = slurm_node.squeue_argv(squeue)
    out, _err = run_checked(
        module,
        squeue_argv,
        "list the running jobs with squeue",
        SLURM_CLIENT_HINT,
        environ_update={"SLURM_TIME_FORMAT": "%s"},
    )
    try:
        job_ends = slurm_node.parse_squeue(out, now)
    except slurm_node.SlurmParseError as exc:
        module.fail_json(msg=str(exc), stdout=out, cmd=squeue_argv)

    fleet = slurm_node.survey(nodes_info, job_ends, names, params["reason_prefix"])
    module.exit_json(changed=False, nodes=fleet, now=now)


if __name__ == "__main__":
    main()
