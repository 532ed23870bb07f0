# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A sysctl profile: one drop-in file under /etc/sysctl.d holding a whole dict of keys.

Pure functions: render the drop-in from a dict, parse an existing drop-in, read
the live values under a root path (``<root>/proc/sys``), compare live with
desired per key, and say which keys are safe to write inside a container
(per network/IPC/UTS namespace) and which are host-global.

``MODULE_KWARGS`` and :func:`run` are the module ``sysctl_profile`` itself (its ``AnsibleModule``
arguments and its work), so the same work can also run as a part of another module
(see ``module_parts``).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection, managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_bounded

HEADER = (
    "# Managed by gpuops.cluster.sysctl_profile: edits here are overwritten.\n"
    "# Change the profile in the inventory instead.\n"
)

# One part of a sysctl key: letters, digits, _ @ + -, and / standing for a dot inside the part (an interface
# name such as eth0.100 is written eth0/100).
_KEY_PART = re.compile(r"[A-Za-z0-9_@+/-]+")
KEY_RULE = (
    "write the name of a /proc/sys entry with dots between its parts, such as net.core.rmem_max (a slash stands for "
    "a dot inside a part, as in net.ipv4.conf.eth0/100.forwarding); no part may be empty, '.' or '..'"
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


def key_problem(key) -> str | None:
    """Why ``key`` is not the name of a ``/proc/sys`` entry (a sentence without the key), or None.

    A key is parts separated by dots, each part letters, digits, ``_ @ + -`` and ``/`` (a dot inside the
    part); no part is empty, and none is ``.`` or ``..`` once its slashes are dots, so the path the key names
    never leaves ``/proc/sys`` (``kernel.//.//.//.etc.cron/d.x`` would name ``/etc/cron.d/x``).
    """
    text = key if isinstance(key, str) else str(key)
    if not text.strip():
        return "is empty"
    for part in text.split("."):
        if not part:
            return "has an empty part (two dots in a row, or a dot at either end)"
        if not _KEY_PART.fullmatch(part):
            return "has the part %r, with a character no /proc/sys entry name has (whitespace, =, quotes ...)" % part
        if not part.strip("/"):
            dots = part.replace("/", ".")
            return "has the part %r, which names the directory itself or its parent (%r)" % (part, dots)
    return None


def check_key(key) -> str:
    """``key`` when it names a ``/proc/sys`` entry (:func:`key_problem`); ValueError saying what to fix otherwise."""
    problem = key_problem(key)
    if problem:
        raise ValueError("sysctl key %r %s: %s" % (key, problem, KEY_RULE))
    return key


def normalise(sysctls: dict) -> dict:
    """Normalise every value of a sysctl dict and strip the keys; a key that names no /proc/sys entry is refused."""
    result = {}
    for key, value in sysctls.items():
        name = str(key).strip()
        if not name:
            raise ValueError("empty sysctl key in profile")
        check_key(name)
        if value is None:
            raise ValueError(f"sysctl {name} has no value: give a value or drop the key")
        result[name] = normalise_value(value)
    return result


def key_to_path(key: str) -> str:
    """Map a sysctl key to its path below /proc/sys (dots are separators, a slash stands for a dot).

    A key that would name a path outside /proc/sys is refused (ValueError, :func:`check_key`).
    """
    return check_key(key).replace(".", "\0").replace("/", ".").replace("\0", "/")


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


# ------------------------------------------------------------------ the module's work
MODULE_KWARGS = dict(
    argument_spec=dict(
        sysctls=dict(type="dict"),
        name=dict(type="str", default="90-gpuops-tuning"),
        directory=dict(type="path", default="/etc/sysctl.d"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        apply_live=dict(type="str", choices=list(container_detection.APPLY_LIVE_CHOICES), default="auto"),
        root=dict(type="path", default="/"),
    ),
    required_if=[("state", "present", ("sysctls",))],
    supports_check_mode=True,
)


def _write_proc(root, keys, desired):
    errors = []
    for key in keys:
        target = os.path.join(root, "proc", "sys", key_to_path(key))
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(desired[key] + "\n")
        except OSError as exc:
            errors.append(f"{key}: {exc.strerror}")
    return (1 if errors else 0), "", "\n".join(errors)


def _live_keys(apply_live, container, root, drifting):
    """Split drifting keys into those to write live and (key, reason) pairs that are not."""
    if apply_live == "never":
        return [], [(k, "apply_live is never") for k in drifting]
    if apply_live == "auto" and not container_detection.is_running_system(root):
        return [], [(k, f"root is {root}, not the running system") for k in drifting]
    if container_detection.should_apply_live(apply_live, container):
        return list(drifting), []
    namespaced, host_global = split_by_scope(drifting)
    return namespaced, [(k, f"host-global key in a container ({container})") for k in host_global]


def run(module) -> dict:
    """What the module does on ``module`` (an ``AnsibleModule`` or a ``module_parts.Part``).

    Returns the module's result (``changed`` and ``diff`` included); errors go to ``module.fail_json``.
    """
    params = module.params
    root = params["root"]
    if "/" in params["name"] or not params["name"]:
        module.fail_json(
            msg=f"name {params['name']!r} must be a plain file name without .conf, such as 90-gpuops-tuning"
        )
    path = os.path.join(root, params["directory"].lstrip("/"), params["name"] + ".conf")
    before = managed_file.read_text(path)
    container = container_detection.detect(module, root)
    result = dict(
        changed=False,
        path=path,
        drift={},
        drift_after={},
        applied_live=[],
        not_applied_live=[],
        file_changed=False,
        reloaded=False,
        command=[],
        container=container,
    )

    if params["state"] == "absent":
        result["file_changed"] = before is not None
        if before is not None and not module.check_mode:
            os.unlink(path)
        result["changed"] = result["file_changed"]
        if module._diff:
            result["diff"] = dict(before=before or "", after="", before_header=path, after_header=path)
        return result

    try:
        desired = normalise(params["sysctls"])
        content = render(desired)
    except ValueError as exc:
        module.fail_json(msg=f"cannot render the sysctl profile: {exc}; fix the sysctls dict")
    live = read_live(root, desired)
    drifting = drift(live, desired)
    result["drift"] = drifting
    result["file_changed"] = before != content
    to_apply, skipped = _live_keys(params["apply_live"], container, root, drifting)
    result["not_applied_live"] = [dict(name=k, reason=r) for k, r in skipped]

    if to_apply and container_detection.is_running_system(root):
        sysctl = module.get_bin_path("sysctl", required=True)
        if len(to_apply) == len(drifting) and not skipped:
            command = [sysctl, "-p", path]
        else:
            command = [sysctl, "-w"] + [f"{k}={desired[k]}" for k in to_apply]
        result["command"] = command

    if module.check_mode:
        result["applied_live"] = list(to_apply)
        result["drift_after"] = {k: v for k, v in drifting.items() if k not in to_apply}
        result["changed"] = result["file_changed"] or bool(to_apply)
    else:
        if result["file_changed"]:
            managed_file.write_atomic(module, path, content, create_parent=True)
        if to_apply:
            if result["command"]:
                rc, out, err = run_bounded(module, result["command"], "apply the sysctls live")
            else:
                # apply_live=always under another root (a chroot with its own /proc mounted): write its
                # /proc/sys directly. sysctl itself would act on the machine running this module.
                rc, out, err = _write_proc(root, to_apply, desired)
            result["reloaded"] = True
            after = drift(read_live(root, desired), desired)
            result["drift_after"] = after
            result["applied_live"] = [k for k in to_apply if k not in after]
            failed = [k for k in to_apply if k in after]
            if failed and container is None:
                module.fail_json(
                    msg=(
                        f"sysctl could not set {', '.join(failed)} (rc={rc}); check the key names exist on this "
                        f"kernel (a missing module?) and the values are valid, or drop them from the profile"
                    ),
                    rc=rc,
                    stdout=out,
                    stderr=err,
                    **result,
                )
            for key in failed:
                result["not_applied_live"].append(dict(name=key, reason=f"write refused in container ({container})"))
            if failed:
                module.warn(f"sysctl keys not applied live in this container: {', '.join(failed)}")
        else:
            result["drift_after"] = drifting
        result["changed"] = result["file_changed"] or bool(result["applied_live"])

    if module._diff:
        result["diff"] = dict(before=before or "", after=content, before_header=path, after_header=path)
    return result
