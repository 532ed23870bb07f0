# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpuops-mig-apply``: apply the node's declared MIG layout on the node itself, as the boot unit runs it.

The role gpuops.cluster.mig_layout writes the declared layout to ``/etc/gpuops/mig-layout.json`` (the
``gpuops.cluster.gpu_mig`` options: ``config``, the mig-parted v1 config, ``config_name``, ``profile_set``, ...,
keys :data:`LAYOUT_KEYS`), lays this package out under ``/usr/local/lib/gpuops-mig`` and installs the launcher
``/usr/local/sbin/gpuops-mig-apply`` that calls :func:`main`, run by the oneshot unit ``gpuops-mig-layout.service``
after the driver loads and before slurmd, kubelet and DCGM start. No ansible-core on the node: the same flow as the
module (:func:`mig_run.apply`) through :class:`local_host.LocalHost`, every command an argv list under a timeout.

After a run that changed the layout it regenerates the CDI specification (``nvidia-ctk cdi generate
--output=<cdi_output>``, ``/var/run/cdi/nvidia.yaml`` as the nvidia_stack role and the toolkit's refresh unit
write it) where ``nvidia-ctk`` is installed: the toolkit's refresh unit does not follow MIG changes
(``cdi_spec.MIG_REFRESH_NOTE``), and it runs after ``multi-user.target``, so starting it from this unit would wait
on this unit itself.

It fails closed, with one line saying what to do: exit :data:`EXIT_APPLIED` (0) when the node's layout is the
declared one (``--check``: is already), :data:`EXIT_NOT_APPLIED` (1) when it is not (refused for a GPU's processes,
half applied, a step or the driver failed, a GPU waiting for a reboot, the CDI specification not regenerated, or
with ``--check`` a change is due), :data:`EXIT_CONFIG` (2) when the layout file is missing or wrong.

On a node that runs slurmd the layout file also holds ``slurm_gres`` (``gpuops.cluster.slurm_gres``'s options, keys
:data:`GRES_KEYS`): once the layout is in place the command writes the node's block in gres.conf from the devices the
boot left (:func:`sync_gres`, the module's flow, :mod:`gres_sync`), before slurmd starts (the unit is ordered
``Before=slurmd.service``), so the GRES records slurmd reads at boot name the MIG devices the boot created. A block
it cannot write (an operator's GPU line outside it, a device without its capability minor) fails the command (exit
1, nothing written); ``--check`` fails where the block is not the one the devices give.
"""

from __future__ import annotations

# gpuops-mig-apply runs on the node without Ansible: commands go through local_host.LocalHost (subprocess).
# pylint: disable=ansible-bad-function
import argparse
import json
import os
import subprocess
import sys

from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_bounded
from ansible_collections.gpuops.cluster.plugins.module_utils.health import cdi_spec
from ansible_collections.gpuops.cluster.plugins.module_utils.local_host import HostError, LocalHost
from ansible_collections.gpuops.cluster.plugins.module_utils.managed_file import read_text, replace_file
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block, gres_sync, mig_gres, mig_run

PROG = "gpuops-mig-apply"
LAYOUT_PATH = "/etc/gpuops/mig-layout.json"
# The CDI specification the nvidia_stack role (nvidia_container_runtime's cdi_output) and the toolkit's
# nvidia-cdi-refresh.service (NVIDIA_CTK_CDI_OUTPUT_FILE_PATH) write.
CDI_OUTPUT = cdi_spec.SPEC_DIRS[0] + "/" + cdi_spec.SPEC_NAMES[0]
EXIT_APPLIED = 0
EXIT_NOT_APPLIED = 1
EXIT_CONFIG = 2
# key: (default, type); "config" and "config_name" are required. gpu_mig's option names.
LAYOUT_KEYS = {
    "config": (None, dict),
    "config_name": (None, str),
    "profile_set": (None, dict),
    "stop_services": (list(mig_run.STOP_SERVICES), list),
    "reset": ("gpu", str),
    "command_timeout": (mig_run.COMMAND_TIMEOUT, int),
    "nvidia_smi_path": (None, str),
    "cdi_output": (CDI_OUTPUT, str),
    "nvidia_ctk": (None, str),
    "slurm_gres": (None, dict),
}
RESETS = ("gpu", "reboot")
# slurm_gres: the gpuops.cluster.slurm_gres options the boot writes gres.conf with (key: (default, type)).
GRES_KEYS = {
    "path": (gres_sync.GRES_CONF, str),
    "nvml": ("auto", str),
    "plugin_dirs": (list(gres_sync.PLUGIN_DIRS), list),
    "gpu_type": (None, str),
    "node_names": ([], list),
    "mig_minors_path": (mig_gres.MIG_MINORS, str),
}


class LayoutError(Exception):
    """The layout file is missing or wrong (exit 2)."""


def load_layout(path):
    """The layout file's options, every key of :data:`LAYOUT_KEYS` (defaults filled); raises :class:`LayoutError`."""
    try:
        with open(path, encoding="utf-8") as handle:
            given = json.load(handle)
    except FileNotFoundError as error:
        raise LayoutError("%s: no such file; the role gpuops.cluster.mig_layout writes it" % path) from error
    except (OSError, ValueError) as error:
        raise LayoutError("%s: %s" % (path, error)) from error
    if not isinstance(given, dict):
        raise LayoutError("%s: a JSON object is expected" % path)
    found = [
        "unknown key %r (known: %s)" % (key, ", ".join(sorted(LAYOUT_KEYS))) for key in given if key not in LAYOUT_KEYS
    ]
    found.extend("%s is missing" % key for key in ("config", "config_name") if given.get(key) is None)
    layout = {}
    for key, (default, kind) in LAYOUT_KEYS.items():
        value = given.get(key, default)
        wrong = isinstance(value, bool) if kind is int else False
        if value is not None and (wrong or not isinstance(value, kind)):
            found.append("%s must be a %s, not %r" % (key, kind.__name__, value))
        layout[key] = value
    if layout["reset"] not in RESETS:
        found.append("reset must be one of %s, not %r" % (", ".join(RESETS), layout["reset"]))
    if isinstance(layout["slurm_gres"], dict):
        layout["slurm_gres"] = _gres_options(layout["slurm_gres"], found)
    if not found:
        _profile_set, found = mig_run.problems(layout)
    if found:
        raise LayoutError("%s: %s" % (path, "; ".join(found)))
    return layout


def _gres_options(given, found):
    """``slurm_gres`` with its defaults filled; a wrong key or type is added to ``found``."""
    found.extend(
        "slurm_gres: unknown key %r (known: %s)" % (key, ", ".join(sorted(GRES_KEYS)))
        for key in given
        if key not in GRES_KEYS
    )
    options = {}
    for key, (default, kind) in GRES_KEYS.items():
        value = given.get(key, default)
        if value is not None and not isinstance(value, kind):
            found.append("slurm_gres: %s must be a %s, not %r" % (key, kind.__name__, value))
        options[key] = value
    if options["nvml"] not in gres_sync.NVML_MODES:
        found.append("slurm_gres: nvml must be one of %s, not %r" % (", ".join(gres_sync.NVML_MODES), options["nvml"]))
    return options


def sync_gres(host, layout, check=False, exists=os.path.exists, write=replace_file):
    """``(done, note)``: write the node's gres.conf block for the devices in place (``check``: only compare).

    ``done`` False: the block could not be written, or with ``check`` it is not the one the devices give.
    """
    options = layout["slurm_gres"]
    smi = layout["nvidia_smi_path"] or host.get_bin_path("nvidia-smi", required=True)
    gpus = mig_run.Node(host, smi, layout["command_timeout"]).state()["gpus"]
    minors = read_text(options["mig_minors_path"], "") if gres_sync.any_mig(gpus) else ""
    nvml = gres_sync.nvml_installed(options["nvml"], options["plugin_dirs"], exists)
    path = options["path"]
    try:
        planned = gres_sync.plan(gpus, minors, nvml, options["gpu_type"], read_text(path, ""), options["node_names"])
    except (mig_gres.GresError, gres_conf_block.BlockError) as error:
        return False, "gres.conf %s not written: %s" % (path, error)
    gres = "Gres=%s" % planned["gres"]
    if not planned["changed"]:
        return True, "gres.conf %s holds this node's GPUs (%s)" % (path, gres)
    if check:
        return False, "gres.conf %s does not hold the devices in place (%s): run gpuops-mig-apply" % (path, gres)
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        write(path, planned["after"], 0o644)
    except OSError as error:
        return False, "gres.conf %s not written: %s" % (path, error)
    return True, "gres.conf %s written (%s)" % (path, gres)


def nvidia_ctk(layout, exists=os.path.exists):
    """The nvidia-ctk to regenerate the CDI specification with, or None where the toolkit is not installed."""
    if layout["nvidia_ctk"]:
        return layout["nvidia_ctk"] if exists(layout["nvidia_ctk"]) else None
    return next((path for path in cdi_spec.NVIDIA_CTK if exists(path)), None)


def regenerate_cdi(host, layout, exists=os.path.exists):
    """``(done, note)``: regenerate the CDI specification where nvidia-ctk is installed; ``done`` False: it failed."""
    if not layout["cdi_output"]:
        return True, "CDI specification: cdi_output is empty, none regenerated"
    ctk = nvidia_ctk(layout, exists)
    if ctk is None:
        return True, "CDI specification: nvidia-ctk is not installed, none regenerated"
    argv = [ctk, "cdi", "generate", "--output=" + layout["cdi_output"]]
    rc, out, err = run_bounded(host, argv, "regenerate the CDI specification", layout["command_timeout"])
    if rc != 0:
        lines = (err or out or "").strip().splitlines()
        return False, "%s exited %d%s" % (" ".join(argv), rc, (": " + lines[-1]) if lines else "")
    return True, "CDI specification %s regenerated" % layout["cdi_output"]


def summary(result):
    """What the run did, per GPU, in one line."""
    if not result.get("actions"):
        return "nothing to change"
    return "; ".join("%s: %s" % (gpu, ", ".join(words)) for gpu, words in result["actions"].items())


def run(layout, host, check=False, exists=os.path.exists):
    """``(exit code, line, result)`` of one run on the node."""
    name = layout["config_name"]
    try:
        # the unit's command: the GPU clients it stopped are ordered after the unit, so their start is queued
        result, failure = mig_run.apply(host, dict(layout, start_no_block=True), check_mode=check)
    except HostError as error:
        return EXIT_NOT_APPLIED, "MIG layout %s not applied: %s" % (name, error), {}
    if failure:
        return EXIT_NOT_APPLIED, failure, result
    if check:
        if result["changed"]:
            return EXIT_NOT_APPLIED, "MIG layout %s is not the node's: %s" % (name, summary(result)), result
        return _with_gres(host, layout, True, exists, "MIG layout %s is the node's" % name, result)
    if result["reboot_required"]:
        return (
            EXIT_NOT_APPLIED,
            "MIG layout %s not applied: the new MIG mode of %s is pending (%s); reboot the node, this unit applies "
            "the layout at boot"
            % (name, ", ".join(result["pending_reboot"]), "; ".join(result["pending_reboot"].values())),
            result,
        )
    line = "MIG layout %s applied: %s" % (name, summary(result))
    if result["changed"]:
        try:
            done, note = regenerate_cdi(host, layout, exists)
        except HostError as error:
            done, note = False, str(error)
        result["cdi"] = note
        if not done:
            return EXIT_NOT_APPLIED, "%s, but the CDI specification was not regenerated: %s" % (line, note), result
        line = "%s; %s" % (line, note)
    return _with_gres(host, layout, False, exists, line, result)


def _with_gres(host, layout, check, exists, line, result):
    """The run's end where the layout is in place: the gres.conf block too, on a node that runs slurmd."""
    if not layout["slurm_gres"]:
        return EXIT_APPLIED, line, result
    try:
        done, note = sync_gres(host, layout, check, exists)
    except HostError as error:
        done, note = False, "gres.conf not written: %s" % error
    result["gres"] = note
    if not done:
        return EXIT_NOT_APPLIED, "%s, but %s" % (line, note), result
    return EXIT_APPLIED, "%s; %s" % (line, note), result


def main(argv=None, environ=None, runner=subprocess.run, out=None, err=None):
    """The command; returns the exit code. One line on stdout (applied) or stderr (not), ``--json`` the result."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = argparse.ArgumentParser(prog=PROG, description="Apply the node's declared MIG layout (gpuops.cluster).")
    parser.add_argument("--layout", default=LAYOUT_PATH, help="the declared layout (default %(default)s)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when the layout is not the node's")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    args = parser.parse_args(argv)
    try:
        layout = load_layout(args.layout)
    except LayoutError as error:
        err.write("%s: %s\n" % (PROG, error))
        return EXIT_CONFIG
    host = LocalHost(layout, runner=runner, environ=environ)
    try:
        code, line, result = run(layout, host, args.check)
    except Exception as error:  # pylint: disable=broad-exception-caught  # fails closed: not applied, one line
        code, line, result = EXIT_NOT_APPLIED, "internal error: %s: %s" % (type(error).__name__, error), {}
    if args.json:
        out.write(json.dumps(dict(result, exit_code=code, message=line), indent=2, sort_keys=True) + "\n")
    (out if code == EXIT_APPLIED else err).write("%s: %s\n" % (PROG, line))
    return code
