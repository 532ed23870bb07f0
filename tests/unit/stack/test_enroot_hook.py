"""enroot's GPU hook read from a node's files: where enroot keeps it, and what stops it giving containers GPUs.

Paths and behaviour from NVIDIA/enroot@8ea147d337: ``Makefile`` (HOOKS installed 0755 to $(sysconfdir)/enroot/hooks.d,
prefix /usr/local by default), ``pkg/deb/rules`` (``prefix=``, so /etc/enroot), ``enroot.in`` (config::init reads
enroot.conf then enroot.conf.d/*.conf), ``src/common.sh`` (runparts runs only executable hooks).
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import enroot_hook

HOOK = "/etc/enroot/hooks.d/98-nvidia.sh"


class Node:
    """A node's files: ``{path: (text, mode)}``."""

    def __init__(self, files):
        self.files = files

    def read(self, path):
        entry = self.files.get(path)
        return None if entry is None else entry[0]

    def exists(self, path):
        return path in self.files

    def stat(self, path):
        if path not in self.files:
            raise FileNotFoundError(path)
        return os.stat_result((0o100000 | self.files[path][1], 0, 0, 1, 0, 0, 0, 0, 0, 0))

    def find(self, pattern):
        prefix = pattern[: -len("*.conf")]
        return [path for path in self.files if path.startswith(prefix) and path.endswith(".conf")]

    def reading(self, binary="/usr/bin/enroot", sysconf=None):
        return enroot_hook.read(binary, self.read, self.exists, self.stat, self.find, sysconf)


WORKING = {HOOK: ("#! /usr/bin/env bash\n", 0o755), "/usr/bin/nvidia-container-cli": ("", 0o755)}


def test_a_packaged_enroot_with_the_toolkit_gives_containers_their_gpus():
    reading = Node(WORKING).reading()
    assert reading == {"hook": HOOK, "hook_mode": 0o755, "cli": "/usr/bin/nvidia-container-cli"}
    assert enroot_hook.problems(reading) == []
    assert not enroot_hook.needs_mode_fix(reading)


def test_a_source_install_keeps_its_configuration_under_usr_local():
    files = {"/usr/local/etc/enroot/hooks.d/98-nvidia.sh": ("", 0o755), "/usr/bin/nvidia-container-cli": ("", 0o755)}
    reading = Node(files).reading("/usr/local/bin/enroot")
    assert reading["hook"] == "/usr/local/etc/enroot/hooks.d/98-nvidia.sh"
    assert enroot_hook.problems(reading) == []


def test_enroot_conf_and_its_last_drop_in_move_the_hook_directory():
    files = dict(WORKING)
    files["/etc/enroot/enroot.conf"] = (
        "#ENROOT_SYSCONF_PATH        /usr/etc\nENROOT_SYSCONF_PATH /srv/enroot\n",
        0o644,
    )
    assert Node(files).reading()["hook"] == "/srv/enroot/hooks.d/98-nvidia.sh"
    files["/etc/enroot/enroot.conf.d/20-site.conf"] = ('ENROOT_SYSCONF_PATH="/opt/enroot"\n', 0o644)
    assert Node(files).reading()["hook"] == "/opt/enroot/hooks.d/98-nvidia.sh"
    assert Node(files).reading(sysconf="/etc/enroot")["hook"] == HOOK  # the operator's setting wins


def test_a_hook_made_non_executable_is_skipped_by_enroot_and_can_be_fixed():
    files = dict(WORKING, **{HOOK: ("", 0o644)})
    reading = Node(files).reading()
    assert enroot_hook.needs_mode_fix(reading)
    (problem,) = enroot_hook.problems(reading)
    assert "not executable" in problem
    assert "chmod 0755 " + HOOK in problem
    assert enroot_hook.problems(reading, mode=False) == []


def test_a_missing_hook_or_cli_is_named_with_its_fix():
    reading = Node({}).reading()
    assert not enroot_hook.needs_mode_fix(reading)
    hook, cli = enroot_hook.problems(reading, mode=False)
    assert HOOK + " is missing" in hook
    assert "reinstall enroot" in hook
    assert "nvidia-container-cli is not installed" in cli
    assert "libnvidia-container-tools" in cli
