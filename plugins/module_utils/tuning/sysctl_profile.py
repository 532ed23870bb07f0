# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A sysctl profile: one drop-in file under /etc/sysctl.d holding a whole dict of keys.

Pure functions: render the drop-in from a dict, parse an existing drop-in, read
the live values under a root path (``<root>/proc/sys``), compare live with
desired per key, and say which keys are safe to write inside a container
(per network/IPC/UTS namespace) and which are host-global.
"""

from __future__ import annotations

import os

HEADER = (
    "# Managed by gpuops.cluster.sysctl_profile: edits here are overwritten.\n"
    "# Change the profile in the inventory instead.\n"
)

# net.core keys that exist per network namespace; every other net.core key is
# registered for the host's namespace only (net/core/sysctl_net_core.c).
_NET_CORE_PER_NAMESPACE = frozenset(("net.core.somaxconn", "net.core.xfrm_acq_expires", "net.core.xfrm_aevent_etime"))
# net.ipv4 keys in the global ipv4_table rather than the per-namespace table.
_NET_IPV4_GLOBAL = frozenset(
    ("net.ipv4.tcp_mem", "net.ipv4.udp_mem", "net.ipv4.tcp_max_orphans", "net.ipv4.route.flush")
)
# kernel.* keys owned by the IPC and UTS namespaces.
_KERNEL_PER_NAMESPACE = frozenset(
    (
        "kernel.shmmax",
        "kernel.shmall",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
        "kernel.msgmax",
        "kernel.msgmni",
        "kernel.msgmnb",
        "kernel.sem",
        "kernel.hostname",
        "kernel.domainname",
    )
)


def normalise_value(value) -> str:
    """Return the value as sysctl prints it: booleans as 0/1, lists and runs of whitespace as one space."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return " ".join(normalise_value(item) for item in value)
    return " ".join(str(value).split())


def normalise(sysctls: dict) -> dict:
    """Normalise every value of a sysctl dict and strip the keys."""
    result = {}
    for key, value in sysctls.items():
        name = str(key).strip()
        if not name:
            raise ValueError("empty sysctl key in profile")
        if value is None:
            raise ValueError(f"sysctl {name} has no value: give a value or drop the key")
        result[name] = normalise_value(value)
    return result


def key_to_path(key: str) -> str:
    """Map a sysctl key to its path below /proc/sys (dots are separators, a slash stands for a dot)."""
    return key.replace(".", "\0").replace("/", ".").replace("\0", "/")


def render(sysctls: dict, header: str = HEADER) -> str:
    """Render drop-in content: the header, then ``key = value`` lines sorted by key, deterministic."""
    values = normalise(sysctls)
    lines = [f"{key} = {values[key]}" for key in sorted(values)]
    return header + "\n".join(lines) + ("\n" if lines else "")


def parse_dropin(text: str) -> dict:
    """Parse sysctl.d content into ``{key: value}``; comments, blank lines and the ``-`` prefix are dropped."""
    result = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if "=" not in line:
            continue
        key, _unused, value = line.partition("=")
        key = key.strip().lstrip("-").strip()
        if key:
            result[key] = normalise_value(value)
    return result


def read_live(root: str, keys) -> dict:
    """Read the live value of each key from ``<root>/proc/sys``; a key the kernel lacks reads as None."""
    base = os.path.join(root, "proc", "sys")
    result = {}
    for key in keys:
        path = os.path.join(base, key_to_path(key))
        try:
            with open(path, encoding="utf-8") as handle:
                result[key] = normalise_value(handle.read())
        except OSError:
            result[key] = None
    return result


def drift(live: dict, desired: dict) -> dict:
    """Per key whose live value differs from the desired one: ``{key: {'live': ..., 'desired': ...}}``."""
    wanted = normalise(desired)
    result = {}
    for key in sorted(wanted):
        current = live.get(key)
        if current != wanted[key]:
            result[key] = {"live": current, "desired": wanted[key]}
    return result


def is_namespaced(key: str) -> bool:
    """True when the key belongs to a network, IPC or UTS namespace, so a container may set its own copy."""
    if key.startswith("net.core."):
        return key in _NET_CORE_PER_NAMESPACE
    if key.startswith(("net.ipv4.", "net.ipv6.", "net.unix.", "net.netfilter.", "net.mptcp.")):
        return key not in _NET_IPV4_GLOBAL
    return key in _KERNEL_PER_NAMESPACE


def split_by_scope(keys) -> tuple:
    """Split keys into (namespaced, host_global), each sorted."""
    keys = sorted(keys)
    return [k for k in keys if is_namespaced(k)], [k for k in keys if not is_namespaced(k)]
