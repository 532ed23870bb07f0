# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a node is a container, and so whether host-global kernel knobs may be written live.

Evidence, first match wins: ``/run/.containerenv`` (podman), ``/.dockerenv``
(docker), the ``container=`` variable in PID 1's environment (systemd, LXC,
podman set it), then the output of ``systemd-detect-virt --container``.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_bounded

APPLY_LIVE_CHOICES = ("auto", "always", "never")


def read_markers(root: str) -> dict:
    """Read the container markers under root; returns plain data for :func:`decide`."""
    markers = {
        "containerenv": os.path.exists(os.path.join(root, "run", ".containerenv")),
        "dockerenv": os.path.exists(os.path.join(root, ".dockerenv")),
        "pid1_container": None,
    }
    try:
        with open(os.path.join(root, "proc", "1", "environ"), "rb") as handle:
            environ = handle.read()
    except OSError:
        environ = b""
    for item in environ.split(b"\0"):
        if item.startswith(b"container="):
            markers["pid1_container"] = item.split(b"=", 1)[1].decode("utf-8", "replace") or None
    return markers


def decide(markers: dict, detect_virt_output=None):
    """Return the container kind (``podman``, ``docker``, ``lxc``...) or None on bare metal or a VM."""
    if markers.get("containerenv"):
        return "podman"
    if markers.get("dockerenv"):
        return "docker"
    if markers.get("pid1_container"):
        return markers["pid1_container"]
    answer = (detect_virt_output or "").strip()
    if answer and answer != "none":
        return answer
    return None


def is_running_system(root: str) -> bool:
    """True when root is the running system's /, so commands such as sysctl or update-grub act on it.

    Under any other root (a test tree, a chroot, an image) modules must never run those commands:
    they act on the machine running the module, not on the root.
    """
    return os.path.realpath(root) == "/"


def should_apply_live(apply_live: str, container) -> bool:
    """``always`` and ``never`` are what they say; ``auto`` applies live only outside a container."""
    if apply_live not in APPLY_LIVE_CHOICES:
        raise ValueError(f"apply_live must be one of {', '.join(APPLY_LIVE_CHOICES)}, not {apply_live!r}")
    if apply_live == "always":
        return True
    if apply_live == "never":
        return False
    return container is None


def skip_live_reason(apply_live: str, root: str, container):
    """Why a host-global knob must not be written live, or None when it may be.

    ``never`` never writes; ``auto`` writes only on the running system (root ``/``)
    and outside a container; ``always`` writes even in a container.
    """
    if apply_live == "never":
        return "apply_live is never"
    if apply_live == "auto" and not is_running_system(root):
        return f"root is {root}, not the running system"
    if not should_apply_live(apply_live, container):
        return f"in a container ({container})"
    return None


def detect(module, root: str):
    """Detect from a running module: markers under root, then systemd-detect-virt when root is /."""
    found = decide(read_markers(root))
    if found or not is_running_system(root):
        return found
    binary = module.get_bin_path("systemd-detect-virt")
    if not binary:
        return None
    _rc, out, _err = run_bounded(module, [binary, "--container"], "detect a container", environ_update={"LC_ALL": "C"})
    return decide({}, out)
