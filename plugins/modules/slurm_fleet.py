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
  - Reads every node once with C(scontrol show nodes --json) (Slurm 23.02 and later), or with C(sinfo --json) when
    C(scontrol) does not know C(--json) (Slurm 22.05), and every job once with C(squeue --json), and returns the
    O(nodes) as the sliding-window planner reads them. Changes nothing.
  - Tested on the real output of Slurm 22.05.8 and 24.11.5, and of the data_parser versions v0.0.40 and v0.0.41
    (those of Slurm 23.11 and 24.05) as Slurm 24.11 writes them. Slurm 23.02 (data_parser v0.0.39) is read by the
    same rules but was not tested. Output the module cannot read fails with the Slurm version the output names.
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
  scontrol_path:
    description: Path of C(scontrol). Default is the one on C(PATH).
    type: path
  sinfo_path:
    description:
      - Path of C(sinfo), run only when C(scontrol) does not know C(--json) (Slurm 22.05). Default is the one on
        C(PATH).
    type: path
  squeue_path:
    description: Path of C(squeue). Default is the one on C(PATH).
    type: path
  command_timeout:
    description:
      - Seconds each Slurm command may take (under coreutils C(timeout), which the host must have); the module fails,
        saying so, when one takes longer.
    type: int
    default: 60
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
  - Every node is read and the O(nodes) are picked from them (Slurm 22.05 ignores C(-n) with C(--json)).
  - C(sinfo --json) of Slurm 23.02 and later is not used, because it groups the nodes of one state under one reason
    (Slurm 24.11 put a node drained for a hardware ticket and a node drained by the upgrade in one record, with the
    ticket as reason), so whose drain a node has cannot be told from it.
  - C(squeue) runs with C(--all), so that jobs in hidden partitions count too. Only running, completing and
    configuring jobs count. A job without a time limit has no known end (Slurm writes its start plus a year as end).
  - A node whose gres names no GPU has RV(nodes[].gpus=0).
seealso:
  - module: gpuops.cluster.slurm_drain
  - name: scontrol
    description: Slurm's documentation of node states and flags.
    link: https://slurm.schedmd.com/scontrol.html
  - name: squeue
    description: Slurm's documentation of job states.
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
    gres:
      description:
        - The node's generic resources as Slurm has them (C(gres) of C(scontrol show nodes --json), with socket
          bindings), null where Slurm gives none. gpuops.cluster.slurm_gres_differs compares it with a gres.conf's.
      type: str
      sample: gpu:h100:8(S:0-1)
    state:
      description: The planner's state of the node.
      type: str
      choices: [idle, busy, drained_by_others, down]
      sample: busy
    job_end:
      description:
        - With RV(nodes[].state=busy), when the last job on the node ends, in epoch seconds; null when a job has no
          known end (no time limit). A job past its end (completing) gives RV(now), and so does a node busy in
          Slurm's node read that no job of its job read holds (the job ended between the two reads).
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
slurm:
  description: The Slurm that answered, as its JSON output names itself, and the command the nodes were read with.
  returned: when O(nodes) is not empty
  type: dict
  contains:
    release:
      description: The Slurm release (C(meta.slurm.release)); null when the output does not say.
      type: str
      sample: 24.11.5
    data_parser:
      description: The JSON data_parser plugin (C(v0.0.38) is the openapi plugin of Slurm 22.05).
      type: str
      sample: v0.0.42
    nodes_command:
      description: C(scontrol show nodes --json), or C(sinfo --json) on Slurm 22.05.
      type: str
      sample: scontrol show nodes --json
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_bounded, use_c_locale
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
    return "%s %s not known to Slurm (Slurm lists %s): set nodes to Slurm NodeNames (NodeName in slurm.conf)" % (
        "node" if len(missing) == 1 else "nodes",
        ", ".join(missing) + (" is" if len(missing) == 1 else " are"),
        shown,
    )


class SlurmCommands:
    """Runs Slurm's clients as argv lists, each bounded by ``timeout`` seconds (``command_runner.run_bounded``)."""

    def __init__(self, module, seconds):
        self.module = module
        self.seconds = seconds

    def run(self, argv, label):
        """``(rc, out, err)`` of ``argv``; fails the module, naming ``label``, when it ran past the timeout."""
        return run_bounded(
            self.module,
            argv,
            "run %s" % label,
            self.seconds,
            hint="check slurmctld (scontrol ping), or raise command_timeout",
        )

    def checked(self, argv, label, what):
        """Stdout of ``argv``; fails the module (:meth:`fail`) when it exits non-zero."""
        rc, out, err = self.run(argv, label)
        if rc != 0:
            self.fail(argv, rc, out, err, what)
        return out

    def fail(self, argv, rc, out, err, what):
        """One message: what failed, the last line Slurm wrote, what to do; rc, stdout and stderr attached."""
        detail = (err or out or "").strip().splitlines()
        self.module.fail_json(
            msg="could not %s: %s exited %d%s. %s"
            % (what, argv[0], rc, (": " + detail[-1]) if detail else "", SLURM_CLIENT_HINT),
            rc=rc,
            stdout=out,
            stderr=err,
            cmd=list(argv),
        )


def read_nodes(module, commands, params):
    """``(nodes, slurm)`` from scontrol show nodes --json, or sinfo --json where scontrol has no --json (22.05)."""
    scontrol = params["scontrol_path"] or module.get_bin_path("scontrol", required=True)
    argv = slurm_node.scontrol_nodes_json_argv(scontrol)
    command = "scontrol show nodes --json"
    rc, out, err = commands.run(argv, command)
    if rc != 0 and slurm_node.json_unsupported(err, out):
        sinfo = params["sinfo_path"] or module.get_bin_path("sinfo", required=True)
        argv = slurm_node.sinfo_json_argv(sinfo)
        command = "sinfo --json"
        out = commands.checked(argv, command, "read the nodes with sinfo --json (scontrol has no --json)")
    elif rc != 0:
        commands.fail(argv, rc, out, err, "read the nodes with scontrol show nodes --json")
    try:
        parsed = slurm_node.parse_nodes_json(out, command)
    except slurm_node.SlurmParseError as exc:
        module.fail_json(msg=str(exc), stdout=out, cmd=argv)
    return parsed["nodes"], dict(parsed["slurm"], nodes_command=command)


def main():
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "list", "elements": "str", "required": True},
            "reason_prefix": {"type": "str", "default": "gpuops-upgrade"},
            "scontrol_path": {"type": "path"},
            "sinfo_path": {"type": "path"},
            "squeue_path": {"type": "path"},
            "command_timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    use_c_locale(module)
    params = module.params
    names = list(dict.fromkeys(params["nodes"]))
    if not all(names):
        module.fail_json(msg="nodes holds an empty name: list Slurm node names")
    if params["command_timeout"] < 1:
        module.fail_json(msg="command_timeout must be at least 1 second")
    if not names:
        module.exit_json(changed=False, nodes=[], now=int(time.time()))

    squeue = params["squeue_path"] or module.get_bin_path("squeue", required=True)
    commands = SlurmCommands(module, params["command_timeout"])
    nodes_info, slurm = read_nodes(module, commands, params)
    missing = slurm_node.unknown_nodes(nodes_info, names)
    if missing:
        module.fail_json(msg=_unknown_message(missing, nodes_info), missing=missing, slurm=slurm)

    now = int(time.time())
    squeue_argv = slurm_node.squeue_json_argv(squeue)
    out = commands.checked(squeue_argv, "squeue --json", "list the jobs with squeue --json")
    try:
        jobs = slurm_node.parse_squeue_json(out)["jobs"]
    except slurm_node.SlurmParseError as exc:
        module.fail_json(msg=str(exc), stdout=out, cmd=squeue_argv)

    fleet = slurm_node.survey(nodes_info, slurm_node.job_ends(jobs, now), names, params["reason_prefix"], now)
    module.exit_json(changed=False, nodes=fleet, now=now, slurm=slurm)


if __name__ == "__main__":
    main()
