# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The declared MPS of a host (``gpuops_mps``): checked before any host is contacted, then made whole.

NVIDIA's Multi-Process Service runs one control daemon, ``nvidia-cuda-mps-control -d``, that starts an MPS server
for the user of the first client (NVIDIA, "Multi-Process Service", docs.nvidia.com/deploy/mps, Appendix: Tools and
Interface Reference). The settings:

- ``devices``: ``all`` or the GPU indexes MPS shares (default ``all``);
- ``scheduler``: ``slurm``, ``kubernetes`` or ``none`` (default: ``gpuops_upgrade_drain``, the collection's word
  for what schedules the node, else ``none``). Under Slurm one daemon per GPU is started and stopped around jobs by
  the Prolog and Epilog (SchedMD/slurm ``doc/html/gres.shtml`` "MPS Management", ``etc/prolog.example``); otherwise
  one daemon serves the node's MPS GPUs from boot;
- ``active_thread_percentage``: the default share of each GPU's threads an MPS client may use, 1 to 100; the
  control command ``set_default_active_thread_percentage <percentage>`` (NVIDIA: "The default is 100");
- ``pinned_device_memory_limit``: the default device memory each client may pin on each GPU, a whole number with
  ``M`` or ``G`` (``20G``); the control command ``set_default_device_pinned_mem_limit <dev> <value>``, as
  NVIDIA/k8s-device-plugin ``cmd/mps-control-daemon/mps/daemon.go`` sends it (``<n>M``);
- ``pipe_directory`` and ``log_directory``: ``CUDA_MPS_PIPE_DIRECTORY`` (NVIDIA's default ``/tmp/nvidia-mps``; ours
  ``/run/nvidia-mps``, root's, 0755, out of the reach of /tmp cleaners) and ``CUDA_MPS_LOG_DIRECTORY`` (NVIDIA's
  default ``/var/log/nvidia-mps``); Slurm's daemons use a directory per GPU under each;
- ``slurm_count``: the ``gres/mps`` count of each MPS GPU under Slurm (default 100: gres.shtml "the Count parameter
  is translated to a percentage, so the value would typically be a multiple of 100").

MPS on a GPU whose declared MIG layout (``gpuops_mig``) enables MIG is refused under every scheduler:

- Kubernetes: NVIDIA/k8s-device-plugin README "Sharing with MPS is currently not supported on devices with MIG
  enabled" (``internal/plugin/mps.go``: "sharing using MPS is not supported for MIG devices");
- Slurm: gres.conf(5) identifies each MPS GPU by its device file (``File=``), a MIG device by ``MultipleFiles=``
  ("File and MultipleFiles are mutually exclusive"), and gres.shtml's MPS Management and ``etc/prolog.example``
  start one daemon per whole GPU; Slurm documents no gres/mps over MIG devices;
- a node daemon: CUDA runs MPS inside a MIG device only with a control daemon per MIG device (NVIDIA MIG user
  guide, "MIG with CUDA MPS"), which this collection does not build.

MPS on the other GPUs of the same node (``devices`` naming only GPUs whose MIG is off) is allowed.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.mig.mig_profiles import device_id

SCHEDULERS = ("slurm", "kubernetes", "none")
KEYS = (
    "devices",
    "scheduler",
    "active_thread_percentage",
    "pinned_device_memory_limit",
    "pipe_directory",
    "log_directory",
    "slurm_count",
)
DEFAULTS = {
    "devices": "all",
    "active_thread_percentage": None,
    "pinned_device_memory_limit": None,
    "pipe_directory": "/run/nvidia-mps",
    "log_directory": "/var/log/nvidia-mps",
    "slurm_count": 100,
}
MEMORY_LIMIT = re.compile(r"^[1-9][0-9]*[MG]$")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")
WHY_NOT_ON_MIG = {
    "kubernetes": "the Kubernetes device plugin does not support MPS on devices with MIG enabled",
    "slurm": "Slurm's gres/mps names a whole GPU by its device file (File=), never a MIG device (MultipleFiles=)",
    "none": "MPS inside MIG devices needs a control daemon per MIG device, which the collection does not run",
}


class MpsSettingsError(ValueError):
    """``gpuops_mps`` cannot be used as given; the message names the key and the fix."""


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def scheduler_of(spec, drain=None):
    """The scheduler the settings are for: ``scheduler``, else ``drain`` (``gpuops_upgrade_drain``), else none."""
    chosen = (spec or {}).get("scheduler") if isinstance(spec, dict) else None
    return chosen or drain or "none"


def _path_problem(key, value):
    if not isinstance(value, str) or not _SAFE_PATH.match(value) or "/../" in value + "/" or value.rstrip("/") == "":
        return "gpuops_mps %s is %r: give an absolute path of letters, digits, '.', '_', '-' and '/'" % (key, value)
    if value.rstrip("/") in ("/tmp", "/run", "/var/log", "/var/tmp", "/dev/shm"):
        return "gpuops_mps %s is %r: give a directory of its own under it (the daemon owns it, 0755)" % (key, value)
    return None


def structure_problems(spec, drain=None):
    """Problems of the settings themselves, each naming the key and the fix."""
    if not isinstance(spec, dict):
        return ["gpuops_mps is %r: set a mapping such as {devices: all, active_thread_percentage: 50}" % (spec,)]
    found = [
        "gpuops_mps has the unknown key %r (known: %s)" % (key, ", ".join(KEYS)) for key in spec if key not in KEYS
    ]
    devices = spec.get("devices", "all")
    listed = isinstance(devices, list) and devices and all(_whole(i) and i >= 0 for i in devices)
    if devices != "all" and not listed:
        found.append("gpuops_mps devices is %r: give all or a list of GPU indexes such as [0, 1]" % (devices,))
    elif listed and len(set(devices)) != len(devices):
        found.append("gpuops_mps devices %r names a GPU twice" % (devices,))
    scheduler = scheduler_of(spec, drain)
    if scheduler not in SCHEDULERS:
        found.append("gpuops_mps scheduler is %r: give one of %s" % (scheduler, ", ".join(SCHEDULERS)))
    percentage = spec.get("active_thread_percentage")
    if percentage is not None and (not _whole(percentage) or not 1 <= percentage <= 100):
        found.append(
            "gpuops_mps active_thread_percentage is %r: give a whole number from 1 to 100 (the share of each GPU's "
            "threads a client may use; MPS's own default is 100)" % (percentage,)
        )
    limit = spec.get("pinned_device_memory_limit")
    if limit is not None and (not isinstance(limit, str) or not MEMORY_LIMIT.match(limit)):
        found.append(
            "gpuops_mps pinned_device_memory_limit is %r: give a whole number of megabytes or gigabytes with M or "
            "G, such as 512M or 20G" % (limit,)
        )
    for key in ("pipe_directory", "log_directory"):
        if key in spec:
            problem = _path_problem(key, spec[key])
            if problem:
                found.append(problem)
    count = spec.get("slurm_count", DEFAULTS["slurm_count"])
    if not _whole(count) or count < 1:
        found.append(
            "gpuops_mps slurm_count is %r: give the gres/mps count of each GPU, a whole number from 1 "
            "(typically 100)" % (count,)
        )
    directories = [spec.get(key, DEFAULTS[key]) for key in ("pipe_directory", "log_directory")]
    if all(isinstance(d, str) for d in directories) and len({d.rstrip("/") for d in directories}) == 1:
        found.append("gpuops_mps pipe_directory and log_directory are the same: give each its own directory")
    return found


def mig_enabled_devices(mig_spec, mig_config, device_ids=None):
    """Which GPUs the declared MIG layout enables MIG on: ``{"default": bool, "listed": {index: bool}}``.

    ``default`` holds for every GPU no entry lists by index. The entries of the selected config apply in order, a
    later one deciding a GPU an earlier one named (mig-parted's rule). An entry with a ``device-filter`` applies
    only when ``device_ids`` (the host model's PCI device ids) meets it; with ``device_ids`` unknown (None) it is
    taken to apply, so that a doubt refuses rather than passes.
    """
    state = {"default": False, "listed": {}}
    if not isinstance(mig_spec, dict) or not mig_config:
        return state
    entries = (mig_spec.get("mig-configs") or {}).get(mig_config)
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        filters = entry.get("device-filter") or []
        filters = [filters] if isinstance(filters, str) else filters
        wanted = {device_id(item) or item for item in filters}
        if wanted and device_ids is not None and not wanted & {device_id(item) or item for item in device_ids}:
            continue
        on = entry.get("mig-enabled") is True
        if entry.get("devices") == "all":
            state = {"default": on, "listed": {}}
        elif isinstance(entry.get("devices"), list):
            state["listed"].update({index: on for index in entry["devices"]})
    return state


def mig_problems(spec, drain, mig_enabled):
    """MPS on a GPU the declared MIG layout enables MIG on: one problem naming the GPUs and the reason."""
    devices = spec.get("devices", "all")
    listed = mig_enabled["listed"]
    if devices == "all":
        clash = "all" if mig_enabled["default"] else sorted(index for index, on in listed.items() if on)
    else:
        clash = [index for index in devices if listed.get(index, mig_enabled["default"])]
    if not clash:
        return []
    scheduler = scheduler_of(spec, drain)
    shares = "every GPU" if devices == "all" else "GPU %s" % ", ".join(str(i) for i in devices)
    on = "every GPU" if clash == "all" else "GPU %s" % ", ".join(str(i) for i in clash)
    return [
        "gpuops_mps shares %s by MPS, and the MIG layout gpuops_mig_config selects enables MIG on %s: %s (scheduler "
        "%s); give gpuops_mps devices only GPUs whose MIG is off, or disable MIG on them"
        % (shares, on, WHY_NOT_ON_MIG[scheduler], scheduler)
    ]


def problems(spec, drain=None, mig_spec=None, mig_config=None, device_ids=None):
    """Every problem of ``gpuops_mps`` for a host, its declared MIG layout included."""
    if spec is None:
        return []
    found = structure_problems(spec, drain)
    if found:
        return found
    return mig_problems(spec, drain, mig_enabled_devices(mig_spec, mig_config, device_ids))


def settings(spec, drain=None):
    """The whole settings (every key, defaults filled in); raises :class:`MpsSettingsError` on a problem."""
    found = structure_problems(spec, drain)
    if found:
        raise MpsSettingsError("; ".join(found))
    whole = dict(DEFAULTS)
    whole.update(spec)
    whole["scheduler"] = scheduler_of(spec, drain)
    whole["pipe_directory"] = whole["pipe_directory"].rstrip("/")
    whole["log_directory"] = whole["log_directory"].rstrip("/")
    return whole
