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
  - Not yet built in this collection, so not done by this module - a boot unit that re-applies the layout after the
    driver loads, the re-apply in the rolling upgrade, Slurm's MIG C(gres.conf) lines, and MPS.
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

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_bounded, use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_apply, mig_layout, mig_plan, mig_state

# nvidia-smi mig -lgi/-lci with nothing to list exits non-zero: "No MIG-enabled devices found.",
# "No GPU instances found: Not Found" (tests/fixtures/mig/lgi-mig-disabled.txt, lgi-none-a30.txt)
# nvidia-smi -i N -mig 1 where the driver could not reset the GPU itself (MIG user guide):
# "Warning: MIG mode is in pending enable state for GPU 00000000:07:00.0:In use by another client"
PENDING = re.compile(r"pending (enable|disable) state", re.IGNORECASE)
# nvidia-smi -r on a GPU a process holds: "GPU 00000000:18:00.0 is currently in use by another process."
IN_USE = re.compile(r"is currently in use by another process", re.IGNORECASE)
NOTHING_LISTED = re.compile(r"^No (MIG-enabled devices|GPU instances|compute instances) found", re.IGNORECASE)


class StepFailed(Exception):
    """A command that changes the node exited non-zero."""

    def __init__(self, argv, rc, out, err, why=None):
        lines = (err or out or "").strip().splitlines()
        super().__init__(why or "%s exited %d%s" % (" ".join(argv), rc, (": " + lines[-1]) if lines else ""))
        self.details = {"cmd": argv, "rc": rc, "stdout": out, "stderr": err}


class Node:
    """The node's nvidia-smi and systemctl, bounded by the module's timeout; records what changed it."""

    def __init__(self, module, smi):
        self.module = module
        self.smi = smi
        self.timeout = module.params["command_timeout"]
        self.commands = []

    def read(self, argv, what, listing=False):
        rc, out, err = run_bounded(self.module, [self.smi, *argv], what, self.timeout)
        if rc != 0 and not (listing and NOTHING_LISTED.match((out or "").strip())):
            detail = (err or out or "").strip()
            self.module.fail_json(
                msg="could not %s: nvidia-smi %s exited %d%s. Check the driver is loaded (nvidia-smi runs)"
                % (what, " ".join(argv), rc, (": " + detail.splitlines()[-1]) if detail else ""),
                rc=rc,
                stdout=out,
                stderr=err,
                cmd=[self.smi, *argv],
            )
        return out

    def state(self):
        query = self.read(["-q", "-x"], "read the GPUs with nvidia-smi -q -x")
        try:
            first = mig_state.node_state(query)
            if not any(gpu["mig"].get("current") for gpu in first["gpus"]):
                return first
            lgi = self.read(["mig", "-lgi"], "list the GPU instances", listing=True)
            lci = self.read(["mig", "-lci"], "list the compute instances", listing=True)
            return mig_state.node_state(query, lgi, lci)
        except mig_state.MigStateError as exc:
            self.module.fail_json(msg="could not read the node's MIG state, so nothing was changed: %s" % exc)
        return None

    def change(self, argv):
        """Run a changing command; ``(rc, out, err)``, recorded."""
        full = [self.smi, *argv]
        self.commands.append(full)
        return run_bounded(self.module, full, "run " + " ".join(full), self.timeout)

    def must(self, argv):
        rc, out, err = self.change(argv)
        if rc != 0:
            raise StepFailed([self.smi, *argv], rc, out, err)
        return out


def active_units(module, systemctl, units, timeout):
    """Those of ``units`` that are active (``systemctl is-active`` prints one word per unit)."""
    if not units or not systemctl:
        return []
    rc, out, err = run_bounded(module, [systemctl, "is-active", *units], "ask systemd which GPU clients run", timeout)
    words = out.split()
    if len(words) != len(units):
        module.fail_json(
            msg="could not tell which of %s are active: systemctl is-active printed %r"
            % (", ".join(units), out.strip()),
            rc=rc,
            stdout=out,
            stderr=err,
        )
    return [unit for unit, word in zip(units, words) if word == "active"]


def apply_gpu(node, gpu_plan, reset_mode):
    """Carry out one GPU's plan; returns why a reboot is needed, or None."""
    for argv in mig_apply.destroy_commands(gpu_plan):
        node.must(argv)
    mode = mig_apply.mode_command(gpu_plan)
    reset = mig_apply.reset_command(gpu_plan)
    if mode:
        out = node.must(mode)
        if reset and not PENDING.search(out):
            reset = None  # the driver reset the GPU itself: "Enabled MIG Mode for GPU ..." (MIG user guide)
    if reset:
        if reset_mode == "reboot":
            return "reset=reboot: the new MIG mode takes effect at the next boot"
        rc, out, err = node.change(reset)
        if rc != 0 and IN_USE.search(out + err):
            # a process started since the read: never ask for a reboot under a job
            raise StepFailed(
                [node.smi, *reset],
                rc,
                out,
                err,
                "GPU %d was not reset, a process started on it since the read (%s); its new MIG mode is pending: run "
                "again once the GPU is free" % (gpu_plan["index"], IN_USE.search(out + err).group(0)),
            )
        if rc != 0:
            lines = (err or out or "").strip().splitlines()
            return "nvidia-smi -r exited %d%s" % (rc, (": " + lines[0]) if lines else "")
    for argv in mig_apply.grow_commands(gpu_plan):
        node.must(argv)
    for argv, compute_instances in mig_apply.create_batches(gpu_plan):
        out = node.must(argv)
        if compute_instances is None:
            continue
        created = mig_apply.created_gpu_instances(out)
        if len(created) != 1:
            raise StepFailed([node.smi, *argv], 0, out, "nvidia-smi printed no new GPU instance id")
        node.must(mig_apply.compute_command(gpu_plan["index"], created[0], compute_instances))
    return None


def main():
    module = AnsibleModule(
        argument_spec={
            "config": {"type": "dict", "required": True},
            "config_name": {"type": "str", "required": True},
            "nvidia_smi_path": {"type": "path"},
            # NVIDIA's packaged units: nvidia-dcgm-exporter.service (NVIDIA/dcgm-exporter
            # packaging/config-files/systemd, Wants/After nvidia-dcgm.service) and the host engine's nvidia-dcgm.service
            "stop_services": {
                "type": "list",
                "elements": "str",
                "default": ["nvidia-dcgm-exporter", "nvidia-dcgm"],
            },
            "reset": {"type": "str", "choices": ["gpu", "reboot"], "default": "gpu"},
            "profile_set": {"type": "dict"},
            "command_timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    use_c_locale(module)
    params = module.params
    problems = mig_layout.selection_problems(params["config"], params["config_name"], ("config", "config_name"))
    profile_set, set_problems = mig_apply.profile_set_of(params["profile_set"])
    problems.extend(set_problems)
    if params["command_timeout"] < 1:
        problems.append("command_timeout is %d: give seconds, 1 or more" % params["command_timeout"])
    if problems:
        module.fail_json(msg="; ".join(problems))
    entries = params["config"]["mig-configs"][params["config_name"]]
    smi = params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi", required=True)
    node = Node(module, smi)

    state = node.state()
    plan = mig_plan.plan(state, entries, profile_set)
    before, after = mig_apply.layouts(state, entries)
    changing = [gpu for gpu in plan["gpus"] if not gpu["untouched"]]
    result = {
        "changed": plan["changed"],
        "plan": plan["gpus"],
        "actions": {mig_apply.gpu_key(gpu): mig_apply.describe(gpu) for gpu in changing},
        "layout": before,
        "commands": [],
        "stopped_services": [],
        "reboot_required": False,
        "pending_reboot": {},
        "converged": not plan["changed"],
    }
    if module._diff:
        result["diff"] = {"before": before, "after": after}
    if plan["refused"]:
        result["changed"] = False
        module.fail_json(
            msg="MIG layout %s not applied, nothing was changed: %s. Stop or drain the jobs on these GPUs, then re-run"
            % (params["config_name"], "; ".join(plan["refused"])),
            **result,
        )
    if module.check_mode or not changing:
        module.exit_json(**result)

    systemctl = module.get_bin_path("systemctl")
    stopped, failure, restart_failures = [], None, []
    try:
        for unit in active_units(module, systemctl, params["stop_services"], node.timeout):
            rc, out, err = run_bounded(module, [systemctl, "stop", unit], "stop " + unit, node.timeout)
            if rc != 0:
                raise StepFailed([systemctl, "stop", unit], rc, out, err)
            stopped.append(unit)
        for gpu_plan in changing:
            why = apply_gpu(node, gpu_plan, params["reset"])
            if why:
                result["pending_reboot"][mig_apply.gpu_key(gpu_plan)] = why
    except StepFailed as exc:
        failure = exc
    finally:
        for unit in reversed(stopped):
            rc, out, err = run_bounded(module, [systemctl, "start", unit], "start " + unit, node.timeout)
            if rc != 0:
                restart_failures.append("%s (systemctl start exited %d: %s)" % (unit, rc, (err or out).strip()))
    result["commands"] = node.commands
    result["stopped_services"] = stopped
    if failure is not None:
        module.fail_json(
            msg="MIG layout %s half applied: %s; the node's state is re-read on the next run, which continues from it%s"
            % (params["config_name"], failure, _restart_note(restart_failures)),
            **dict(result, **failure.details),
        )

    final = node.state()
    result["layout"] = mig_apply.current_layout_of(final)
    pending = {gpu["index"] for gpu in changing if mig_apply.gpu_key(gpu) in result["pending_reboot"]}
    wrong = mig_apply.differences(final, after, only={gpu["index"] for gpu in changing} - pending)
    wrong.extend(mig_apply.pending_differences(final, after, pending))
    if wrong or restart_failures:
        module.fail_json(
            msg="MIG layout %s: %s%s"
            % (
                params["config_name"],
                "; ".join(wrong) if wrong else "applied",
                _restart_note(restart_failures),
            ),
            **result,
        )
    result["reboot_required"] = bool(pending)
    result["converged"] = not pending
    module.exit_json(**result)


def _restart_note(failures):
    return ("; could not start again: %s" % ", ".join(failures)) if failures else ""


if __name__ == "__main__":
    main()
