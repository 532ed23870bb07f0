# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""enroot's GPU hook: is it there, enabled, and able to run? (Slurm with pyxis runs GPU containers through it.)

enroot reads no CDI and has no runtime configuration to write: its GPU support is the pre-start hook
``98-nvidia.sh`` that enroot itself ships in ``$ENROOT_SYSCONF_PATH/hooks.d`` (NVIDIA/enroot ``Makefile``: HOOKS
installed with ``install -m 755`` to ``$(sysconfdir)/enroot/hooks.d``; the deb and rpm build with ``prefix=``, so
``/etc/enroot``; a source install's default prefix is ``/usr/local``, so ``/usr/local/etc/enroot``). The hook runs
``nvidia-container-cli --user configure ...`` for a container whose ``NVIDIA_VISIBLE_DEVICES`` is set (every CUDA
image sets it) and fails the container with "Command not found: nvidia-container-cli" when the CLI is missing
(``conf/hooks/98-nvidia.sh``). enroot only *suggests* ``libnvidia-container-tools`` (``pkg/deb/control``), so an
enroot node without the toolkit starts no GPU container.

enroot runs a hook only when it is executable (``common::runparts``: ``[ -x "${file}" ]``): an operator disables
one with ``chmod -x``, and a GPU container then starts without GPUs and without an error. ``ENROOT_SYSCONF_PATH``
may be set in ``enroot.conf`` or ``enroot.conf.d/*.conf`` beside it (``config::init`` in ``enroot.in``).

:func:`read` reads the node's files (no command); :func:`problems` says what the hook lacks, each with its fix.
"""

from __future__ import annotations

import glob
import os
import re

HOOK_NAME = "98-nvidia.sh"
# The CLI the hook calls, from libnvidia-container-tools (its deb and rpm install it in /usr/bin).
CLI_PATHS = ("/usr/bin/nvidia-container-cli", "/usr/local/bin/nvidia-container-cli")
HOOK_MODE = 0o755  # as enroot's Makefile installs it
_SYSCONF_LINE = re.compile(r"^\s*ENROOT_SYSCONF_PATH[ \t=]+(\S+)\s*$")


def default_sysconf(enroot_binary):
    """enroot's configuration directory for the binary found: ``/usr/local/etc/enroot`` for a source install."""
    if enroot_binary and enroot_binary.startswith("/usr/local/"):
        return "/usr/local/etc/enroot"
    return "/etc/enroot"


def sysconf_path(enroot_binary, read, find=glob.glob):
    """The hook directory's parent: ``ENROOT_SYSCONF_PATH`` from enroot.conf (the last drop-in that sets it wins,
    as enroot loads them after the file), else :func:`default_sysconf`. ``read(path)`` returns text or None;
    ``find`` lists the drop-ins (glob.glob)."""
    base = default_sysconf(enroot_binary)
    found = None
    for path in [os.path.join(base, "enroot.conf"), *sorted(find(os.path.join(base, "enroot.conf.d", "*.conf")))]:
        for line in (read(path) or "").splitlines():
            match = _SYSCONF_LINE.match(line)
            if match:
                found = match.group(1).strip("\"'")
    return found or base


def read(enroot_binary, read_text, exists=os.path.exists, stat=os.stat, find=glob.glob, sysconf=None):
    """``{hook, hook_mode, cli}``: the hook's path, its permission bits (None when absent) and the CLI found;
    ``sysconf`` the operator's enroot configuration directory, None to find it (:func:`sysconf_path`)."""
    hook = os.path.join(sysconf or sysconf_path(enroot_binary, read_text, find), "hooks.d", HOOK_NAME)
    try:
        mode = stat(hook).st_mode & 0o7777
    except OSError:
        mode = None
    cli = next((path for path in CLI_PATHS if exists(path)), None)
    return {"hook": hook, "hook_mode": mode, "cli": cli}


def problems(reading, mode=True):
    """What stops enroot from giving a container its GPUs, each with its fix (empty: nothing); without ``mode``,
    a hook that is only not executable is left out (the module makes it executable)."""
    found = []
    if reading["hook_mode"] is None:
        found.append(
            "enroot's GPU hook %s is missing: GPU containers start without GPUs; reinstall enroot (it ships the hook)"
            % reading["hook"]
        )
    elif mode and needs_mode_fix(reading):
        found.append(
            "enroot's GPU hook %s is not executable, so enroot skips it and GPU containers start without GPUs; "
            "chmod 0755 %s" % (reading["hook"], reading["hook"])
        )
    if reading["cli"] is None:
        found.append(
            "nvidia-container-cli is not installed: enroot's GPU hook fails every GPU container; "
            "install libnvidia-container-tools (gpuops_stack.container_toolkit)"
        )
    return found


def needs_mode_fix(reading):
    """Whether the only thing to do is to make the present hook executable again (the module does that)."""
    return reading["hook_mode"] is not None and not reading["hook_mode"] & 0o100
