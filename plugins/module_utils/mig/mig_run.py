# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Apply a declared MIG layout on the node: read, plan, stop the GPU clients, carry the plan out, read again.

The one flow of the ``gpuops.cluster.gpu_mig`` module and of the node command ``gpuops-mig-apply`` (the boot unit's
command, :mod:`mig_node_command`). ``host`` is the module's ``AnsibleModule``, or on the node without Ansible a
``local_host.LocalHost``: its ``run_command``, ``get_bin_path`` and ``fail_json`` (a command that could not be run
or read, a timeout). :func:`apply` returns ``(result, failure)``: the module's result and, when the layout was not
applied, one message naming each GPU and what to do (None when it was, or is pending a reboot: ``reboot_required``).
The order of the ``nvidia-smi`` commands is :mod:`mig_apply`'s.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_bounded
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_apply, mig_layout, mig_plan, mig_state

# nvidia-smi mig -lgi/-lci with nothing to list exits non-zero: "No MIG-enabled devices found.",
# "No GPU instances found: Not Found" (tests/fixtures/mig/lgi-mig-disabled.txt, lgi-none-a30.txt)
# nvidia-smi -i N -mig 1 where the driver could not reset the GPU itself (MIG user guide):
# "Warning: MIG mode is in pending enable state for GPU 00000000:07:00.0:In use by another client"
PENDING = re.compile(r"pending (enable|disable) state", re.IGNORECASE)
# nvidia-smi -r on a GPU a process holds: "GPU 00000000:18:00.0 is currently in use by another process."
IN_USE = re.compile(r"is currently in use by another process", re.IGNORECASE)
NOTHING_LISTED = re.compile(r"^No (MIG-enabled devices|GPU instances|compute instances) found", re.IGNORECASE)
# NVIDIA's packaged units: nvidia-dcgm-exporter.service (NVIDIA/dcgm-exporter packaging/config-files/systemd,
# Wants/After nvidia-dcgm.service) and the host engine's nvidia-dcgm.service
STOP_SERVICES = ("nvidia-dcgm-exporter", "nvidia-dcgm")
COMMAND_TIMEOUT = 120


class StepFailed(Exception):
    """A command that changes the node exited non-zero."""

    def __init__(self, argv, rc, out, err, why=None):
        lines = (err or out or "").strip().splitlines()
        super().__init__(why or "%s exited %d%s" % (" ".join(argv), rc, (": " + lines[-1]) if lines else ""))
        self.details = {"cmd": argv, "rc": rc, "stdout": out, "stderr": err}


class Node:
    """The node's nvidia-smi, bounded by ``timeout`` seconds a command; records what changed it."""

    def __init__(self, host, smi, timeout):
        self.host = host
        self.smi = smi
        self.timeout = timeout
        self.commands = []

    def read(self, argv, what, listing=False):
        rc, out, err = run_bounded(self.host, [self.smi, *argv], what, self.timeout)
        if rc != 0 and not (listing and NOTHING_LISTED.match((out or "").strip())):
            detail = (err or out or "").strip()
            self.host.fail_json(
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
            self.host.fail_json(msg="could not read the node's MIG state, so nothing was changed: %s" % exc)
        return None

    def change(self, argv):
        """Run a changing command; ``(rc, out, err)``, recorded."""
        full = [self.smi, *argv]
        self.commands.append(full)
        return run_bounded(self.host, full, "run " + " ".join(full), self.timeout)

    def must(self, argv):
        rc, out, err = self.change(argv)
        if rc != 0:
            raise StepFailed([self.smi, *argv], rc, out, err)
        return out


def active_units(host, systemctl, units, timeout):
    """Those of ``units`` that are active (``systemctl is-active`` prints one word per unit)."""
    if not units or not systemctl:
        return []
    rc, out, err = run_bounded(host, [systemctl, "is-active", *units], "ask systemd which GPU clients run", timeout)
    words = out.split()
    if len(words) != len(units):
        host.fail_json(
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


def problems(params):
    """``(profile set for the planner, problems)`` of the options (gpu_mig's names), before anything is read."""
    found = mig_layout.selection_problems(params["config"], params["config_name"], ("config", "config_name"))
    profile_set, set_problems = mig_apply.profile_set_of(params.get("profile_set"))
    found.extend(set_problems)
    timeout = params.get("command_timeout", COMMAND_TIMEOUT)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        found.append("command_timeout is %r: give seconds, 1 or more" % (timeout,))
    return profile_set, found


def apply(host, params, check_mode=False, diff=False):
    """Apply ``params`` (gpu_mig's options); ``(result, failure message or None)``. See the module's RETURN."""
    profile_set, found = problems(params)
    if found:
        return {"changed": False}, "; ".join(found)
    entries = params["config"]["mig-configs"][params["config_name"]]
    smi = params.get("nvidia_smi_path") or host.get_bin_path("nvidia-smi", required=True)
    node = Node(host, smi, params.get("command_timeout", COMMAND_TIMEOUT))

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
    if diff:
        result["diff"] = {"before": before, "after": after}
    if plan["refused"]:
        result["changed"] = False
        return result, (
            "MIG layout %s not applied, nothing was changed: %s. Stop or drain the jobs on these GPUs, then re-run"
            % (params["config_name"], "; ".join(plan["refused"]))
        )
    if check_mode or not changing:
        return result, None

    systemctl = host.get_bin_path("systemctl")
    stopped, failure, restart_failures = [], None, []
    try:
        for unit in active_units(host, systemctl, list(params.get("stop_services", STOP_SERVICES)), node.timeout):
            rc, out, err = run_bounded(host, [systemctl, "stop", unit], "stop " + unit, node.timeout)
            if rc != 0:
                raise StepFailed([systemctl, "stop", unit], rc, out, err)
            stopped.append(unit)
        for gpu_plan in changing:
            why = apply_gpu(node, gpu_plan, params.get("reset", "gpu"))
            if why:
                result["pending_reboot"][mig_apply.gpu_key(gpu_plan)] = why
    except StepFailed as exc:
        failure = exc
    finally:
        # --no-block from the boot unit's command: a GPU client ordered after that unit (DCGM, its exporter) would
        # wait for the unit's start, which waits for this command: deadlocked until the unit's start timeout
        # (seen in the lab on `systemctl restart gpuops-mig-layout.service`); queued, it starts once the unit has.
        start = [systemctl, "start", "--no-block"] if params.get("start_no_block") else [systemctl, "start"]
        for unit in reversed(stopped):
            rc, out, err = run_bounded(host, [*start, unit], "start " + unit, node.timeout)
            if rc != 0:
                restart_failures.append("%s (systemctl start exited %d: %s)" % (unit, rc, (err or out).strip()))
    result["commands"] = node.commands
    result["stopped_services"] = stopped
    if failure is not None:
        result.update(failure.details)
        return result, (
            "MIG layout %s half applied: %s; the node's state is re-read on the next run, which continues from it%s"
            % (params["config_name"], failure, _restart_note(restart_failures))
        )

    final = node.state()
    result["layout"] = mig_apply.current_layout_of(final)
    pending = {gpu["index"] for gpu in changing if mig_apply.gpu_key(gpu) in result["pending_reboot"]}
    wrong = mig_apply.differences(final, after, only={gpu["index"] for gpu in changing} - pending)
    wrong.extend(mig_apply.pending_differences(final, after, pending))
    if wrong or restart_failures:
        return result, "MIG layout %s: %s%s" % (
            params["config_name"],
            "; ".join(wrong) if wrong else "applied",
            _restart_note(restart_failures),
        )
    result["reboot_required"] = bool(pending)
    result["converged"] = not pending
    return result, None


def _restart_note(failures):
    return ("; could not start again: %s" % ", ".join(failures)) if failures else ""
