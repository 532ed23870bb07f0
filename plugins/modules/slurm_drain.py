#!/usr/bin/python
# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_drain
short_description: Drain a Slurm node for maintenance and resume it, never touching someone else's drain
version_added: 0.1.0
description:
  - Drains a node with C(scontrol update nodename=N state=drain reason=...), the reason starting with
    O(reason_prefix), the run id in brackets and a colon (C(gpuops-upgrade[r1]:)), so that the drain is recognised as
    ours later, also by a re-run after an abort. Optionally waits, bounded by O(wait_timeout), until no job runs on the
    node any more.
  - A node already drained (or down) with a reason that is not ours belongs to someone else; it is left as it is,
    reason untouched, reported with RV(pre_existing=true), and O(state=resumed) never resumes it.
  - Reads the node with C(sinfo --json) (Slurm 22.05 and later), or C(sinfo -N -O) text when JSON is not available.
  - Run it where the Slurm client commands work, usually the controller, with C(delegate_to).
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  node:
    description: The Slurm node name (NodeName in C(slurm.conf)).
    type: str
    required: true
  state:
    description:
      - V(drained) drains the node (ours) and, with O(wait), waits for its jobs to end.
      - V(resumed) resumes the node when its drain is ours; a drain of someone else is kept.
      - V(status) only reports.
    type: str
    choices: [drained, resumed, status]
    default: status
  reason_prefix:
    description:
      - The start of every reason this module sets. A reason starting with it, a run id in brackets and a colon is ours.
    type: str
    default: gpuops-upgrade
  run_id:
    description:
      - The run's id, put in the reason (letters, digits, dots, underscores, colons, dashes).
      - Required with O(state=drained).
    type: str
  reason:
    description:
      - The text after the prefix and run id. When the node is already drained by us with another text, the reason
        is updated (to say, for example, that the drain timed out).
    type: str
    default: upgrading the NVIDIA stack
  wait:
    description: With O(state=drained), wait until no job runs on the node (state drained, not draining).
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait for the jobs. On timeout the node stays drained and the module returns RV(timed_out=true)
        without failing, so the playbook applies its policy.
    type: int
    default: 3600
  poll_interval:
    description: Seconds between two reads of the node while waiting.
    type: int
    default: 10
  resume_wait:
    description:
      - With O(state=resumed) and O(wait), the most seconds to wait, reading the node every 2 seconds, until Slurm
        has it back in service (responding, not down, not drained). A node rebooted by its upgrade may still be
        not responding, and one resumed before its C(slurmd) registered is downed by Slurm as "Node unexpectedly
        rebooted" when it does (ReturnToService=1); such a node is resumed again. When the time runs out the
        result says RV(timed_out); the node is left as Slurm has it.
    type: int
    default: 120
  sinfo_path:
    description: Path of C(sinfo). Default is the one on C(PATH).
    type: path
  scontrol_path:
    description: Path of C(scontrol). Default is the one on C(PATH).
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
    details: Reads the node and reports what it would do; no scontrol call and no waiting.
  diff_mode:
    support: full
    details: The diff is the node's state and reason before and after.
notes:
  - Slurm 22.05 ignores C(-n) with C(--json), so every node is read and the node is picked from them.
  - A rebooted node that was drained comes back as C(down+drain) with its reason kept (ReturnToService=1); resuming
    it makes it idle.
seealso:
  - name: scontrol update
    description: Slurm's documentation of node states and drain reasons.
    link: https://slurm.schedmd.com/scontrol.html
"""

EXAMPLES = r"""
- name: Drain the node for the upgrade and wait up to an hour for its jobs
  gpuops.cluster.slurm_drain:
    node: "{{ inventory_hostname }}"
    state: drained
    run_id: "{{ gpuops_upgrade_run_id }}"
    wait_timeout: 3600
  delegate_to: "{{ gpuops_upgrade_slurm_controller }}"
  register: gpuops_upgrade_drain

- name: Resume the node only when the drain was ours
  gpuops.cluster.slurm_drain:
    node: "{{ inventory_hostname }}"
    state: resumed
  delegate_to: "{{ gpuops_upgrade_slurm_controller }}"
  when: gpuops_upgrade_drain.ours
"""

RETURN = r"""
node:
  description: The node as read after the change (or as it would be, in check mode).
  returned: always
  type: dict
  sample:
    name: gpu-a01
    state: idle
    state_flags: [drain]
    drain: true
    drained: true
    jobs_running: false
    reason: "gpuops-upgrade[20261202T101500-ab12]: upgrading the NVIDIA stack"
    reason_set_by_user: root
    boot_time: 1764670000
ours:
  description: True when the node's drain is (or, after O(state=drained), becomes) ours.
  returned: always
  type: bool
  sample: true
pre_existing:
  description: True when someone else had drained (or downed) the node; it was left untouched.
  returned: always
  type: bool
  sample: false
action:
  description: What was done (V(drain), V(update_reason), V(resume) or V(none)).
  returned: always
  type: str
  sample: drain
drained:
  description: True when no job runs on the node any more and it is drained.
  returned: always
  type: bool
  sample: true
timed_out:
  description: >-
    True when O(wait_timeout) passed with jobs still running, or, for O(state=resumed), when O(resume_wait) passed
    before the node was back in service.
  returned: always
  type: bool
  sample: false
waited:
  description: Seconds spent waiting for jobs, or for the resumed node to be back in service.
  returned: always
  type: float
  sample: 42.0
resumed_again:
  description: >-
    How many times a node resumed by this call was resumed again after Slurm downed it as "Node unexpectedly
    rebooted" (its slurmd registered after the resume; at most 3).
  returned: always
  type: int
  sample: 0
commands:
  description: Every scontrol command run (sinfo reads are not listed).
  returned: always
  type: list
  elements: str
  sample:
    - "/usr/bin/scontrol update nodename=gpu-a01 state=drain reason=gpuops-upgrade[r1]: upgrading the NVIDIA stack"
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_bounded, use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import slurm_node

SLURM_HINT = "check slurmctld (scontrol ping) from this host, or raise command_timeout"


class SlurmReader:
    """Reads one node through sinfo, JSON first, text when JSON is not available."""

    def __init__(self, module, sinfo):
        self.module = module
        self.sinfo = sinfo
        self.use_json = True

    def run(self, argv):
        return run_bounded(
            self.module, argv, "read the node with sinfo", self.module.params["command_timeout"], hint=SLURM_HINT
        )

    def read(self, name):
        if self.use_json:
            rc, out, err = self.run(slurm_node.sinfo_json_argv(self.sinfo))
            if rc == 0:
                try:
                    nodes = slurm_node.parse_sinfo_json(out)
                except slurm_node.SlurmParseError:
                    self.use_json = False
                else:
                    return self._pick(nodes, name, out)
            else:
                self.use_json = False
        argv = slurm_node.sinfo_text_argv(self.sinfo, name)
        rc, out, err = self.run(argv)
        if rc != 0:
            self.module.fail_json(
                msg="%s failed: check that Slurm's client works on this host (munge, slurm.conf) and run the task "
                "where it does (delegate_to the controller)" % " ".join(argv),
                rc=rc,
                stdout=out,
                stderr=err,
            )
        try:
            return self._pick(slurm_node.parse_sinfo_text(out), name, out)
        except slurm_node.SlurmParseError as exc:
            self.module.fail_json(msg=str(exc), stdout=out)

    def _pick(self, nodes, name, out):
        if name not in nodes:
            self.module.fail_json(
                msg="node %s is not known to Slurm (sinfo lists %s): set node to the Slurm NodeName"
                % (name, ", ".join(sorted(nodes)) or "no node"),
                stdout=out,
            )
        return nodes[name]


def _scontrol(module, argv, commands):
    commands.append(" ".join(argv))
    rc, out, err = run_bounded(module, argv, "run scontrol", module.params["command_timeout"], hint=SLURM_HINT)
    if rc != 0:
        module.fail_json(
            msg="%s failed: check the node name and that this host may run scontrol as a Slurm operator"
            % " ".join(argv),
            rc=rc,
            stdout=out,
            stderr=err,
            commands=commands,
        )


def _view(node):
    return {"state": "+".join([node["state"], *node["state_flags"]]), "reason": node.get("reason")}


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["drained", "resumed", "status"], "default": "status"},
            "reason_prefix": {"type": "str", "default": "gpuops-upgrade"},
            "run_id": {"type": "str"},
            "reason": {"type": "str", "default": "upgrading the NVIDIA stack"},
            "wait": {"type": "bool", "default": True},
            "wait_timeout": {"type": "int", "default": 3600},
            "poll_interval": {"type": "int", "default": 10},
            "resume_wait": {"type": "int", "default": 120},
            "sinfo_path": {"type": "path"},
            "scontrol_path": {"type": "path"},
            "command_timeout": {"type": "int", "default": 60},
        },
        required_if=[("state", "drained", ["run_id"])],
        supports_check_mode=True,
    )
    use_c_locale(module)
    params = module.params
    name, state, prefix = params["node"], params["state"], params["reason_prefix"]
    if params["wait_timeout"] < 0 or params["poll_interval"] < 1:
        module.fail_json(msg="wait_timeout must be >= 0 and poll_interval >= 1")
    if params["command_timeout"] < 1:
        module.fail_json(msg="command_timeout must be at least 1 second")
    try:
        reason = slurm_node.make_reason(prefix, params["run_id"], params["reason"]) if state == "drained" else None
    except ValueError as exc:
        module.fail_json(msg="cannot build the drain reason: %s" % exc)

    sinfo = params["sinfo_path"] or module.get_bin_path("sinfo", required=True)
    reader = SlurmReader(module, sinfo)
    before = reader.read(name)
    commands: list[str] = []

    if state == "drained":
        decision = slurm_node.decide_drain(before, prefix, reason)
    elif state == "resumed":
        decision = slurm_node.decide_resume(before, prefix)
    else:
        owner = slurm_node.ownership(before, prefix)
        decision = {"action": "none", "ours": owner == "ours", "pre_existing": owner == "other"}

    action = decision["action"]
    after = dict(before)
    if action != "none":
        if module.check_mode:
            if action in ("drain", "update_reason"):
                after.update(drain=True, reason=reason, drained=not before["jobs_running"])
            else:
                after.update(drain=False, drained=False, reason=None)
        else:
            scontrol = params["scontrol_path"] or module.get_bin_path("scontrol", required=True)
            if action in ("drain", "update_reason"):
                _scontrol(module, slurm_node.drain_argv(scontrol, name, reason), commands)
            else:
                _scontrol(module, slurm_node.resume_argv(scontrol, name), commands)
            after = reader.read(name)

    waited = 0.0
    timed_out = False
    resumed_again = 0
    if state == "resumed" and action == "resume" and params["wait"] and not module.check_mode:
        # Back in service before the slot is given back: a node rebooted by its upgrade may still be not
        # responding, and one resumed before its slurmd registered is downed by Slurm when it does.
        start = time.monotonic()
        while not slurm_node.in_service(after):
            if slurm_node.downed_for_our_reboot(after) and resumed_again < 3:
                _scontrol(module, slurm_node.resume_argv(scontrol, name), commands)
                resumed_again += 1
            waited = time.monotonic() - start
            if waited >= params["resume_wait"]:
                timed_out = True
                break
            time.sleep(min(2, max(params["resume_wait"] - waited, 0.001)))
            after = reader.read(name)
        waited = round(time.monotonic() - start, 3)
    if state == "drained" and params["wait"] and not module.check_mode:
        start = time.monotonic()
        while after["jobs_running"]:
            waited = time.monotonic() - start
            if waited >= params["wait_timeout"]:
                timed_out = True
                break
            time.sleep(min(params["poll_interval"], max(params["wait_timeout"] - waited, 0.001)))
            after = reader.read(name)
        waited = round(time.monotonic() - start, 3)

    result = {
        "changed": action != "none",
        "node": after,
        "ours": decision["ours"],
        "pre_existing": decision["pre_existing"],
        "action": action,
        "drained": bool(after["drain"] and not after["jobs_running"]),
        "timed_out": timed_out,
        "waited": waited,
        "resumed_again": resumed_again,
        "commands": commands,
    }
    if module._diff:
        result["diff"] = {"before": _view(before), "after": _view(after)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
