# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kernel command line arguments: GRUB_CMDLINE_LINUX, /proc/cmdline and grubby.

An argument is ``key`` or ``key=value``; its key is the text before the first
``=``. Adding ``key=value`` replaces every other ``key=...``; giving one key
several times (``console=tty0``, ``console=ttyS0``) keeps exactly those, in
that order. Removing ``key`` drops every ``key`` and ``key=...``; removing
``key=value`` drops only that exact argument.
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection, managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import (
    CHANGE_LIMIT,
    run_bounded,
    run_checked,
)

VARIABLE = "GRUB_CMDLINE_LINUX"
_ASSIGNMENT = re.compile(r"^(?P<lead>\s*(?:export\s+)?)GRUB_CMDLINE_LINUX=(?P<value>.*?)(?P<trail>\s*(?:#.*)?)$")
_UNSAFE = re.compile(r"[$`\\]")
# An argument also must not hold what GRUB's script or a shell reads as a separator or redirection.
_UNSAFE_IN_ARG = re.compile(r"[$`\\;&|<>]")


class CmdlineError(ValueError):
    """The grub file or an argument cannot be handled safely."""


def arg_key(arg: str) -> str:
    return arg.split("=", 1)[0]


def split_args(text: str) -> list:
    """Split a command line into arguments, keeping ``key="a b"`` together as the kernel does."""
    args, current, quoted = [], [], False
    for char in text.strip():
        if char == '"':
            quoted = not quoted
        if char.isspace() and not quoted:
            if current:
                args.append("".join(current))
                current = []
            continue
        current.append(char)
    if current:
        args.append("".join(current))
    return args


def validate_args(args) -> list:
    """Return the arguments stripped; raise CmdlineError on empty ones or ones with whitespace or shell syntax."""
    result = []
    for arg in args or []:
        text = str(arg).strip()
        if not text or arg_key(text) == "":
            raise CmdlineError(f"kernel argument {arg!r} is empty or has no key")
        if any(c.isspace() for c in text) or _UNSAFE_IN_ARG.search(text) or "'" in text or '"' in text:
            raise CmdlineError(
                f"kernel argument {arg!r} holds whitespace, quotes or shell syntax; give plain key=value"
            )
        result.append(text)
    return result


def _matches(arg: str, removal: str) -> bool:
    """A removal ``key=value`` matches that exact argument; a bare ``key`` matches every value of the key."""
    return arg == removal if "=" in removal else arg_key(arg) == removal


def apply_changes(current: list, add: list, remove: list) -> list:
    """Return the arguments after adding/replacing ``add`` and dropping ``remove``; the rest keep their order."""
    result = list(current)
    for arg in remove:
        result = [a for a in result if not _matches(a, arg)]
    wanted = {}
    for arg in add:
        wanted.setdefault(arg_key(arg), []).append(arg)
    for key, values in wanted.items():
        present = [a for a in result if arg_key(a) == key]
        if present == values:
            continue
        positions = [i for i, a in enumerate(result) if arg_key(a) == key]
        if positions:
            first = positions[0]
            result = [a for a in result if arg_key(a) != key]
            result[first:first] = values
        else:
            result.extend(values)
    return result


def satisfied(args: list, add: list, remove: list) -> bool:
    """True when the argument list already holds ``add`` and none of ``remove``."""
    return apply_changes(args, add, remove) == list(args)


def pending(running: list, add: list, remove: list) -> list:
    """Managed arguments whose state on the running kernel differs from the request (what a reboot would change)."""
    result = []
    wanted = {}
    for arg in add:
        wanted.setdefault(arg_key(arg), []).append(arg)
    for key, values in wanted.items():
        if [a for a in running if arg_key(a) == key] != values:
            result.extend(values)
    for arg in remove:
        if any(_matches(a, arg) for a in running):
            result.append(f"-{arg}")
    return result


def parse_proc_cmdline(text: str) -> list:
    return split_args(text)


def _unquote(raw: str):
    """Return (value, quote) of a shell word: double, single or no quotes."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        quote, inner = raw[0], raw[1:-1]
        if quote in inner:
            raise CmdlineError(f"{VARIABLE} holds a nested {quote}; edit it by hand once to a single quoted string")
        if quote == '"' and _UNSAFE.search(inner):
            raise CmdlineError(f"{VARIABLE} uses shell expansion ({inner!r}); it cannot be edited safely")
        return inner, quote
    if _UNSAFE.search(raw) or any(c in raw for c in "\"'"):
        raise CmdlineError(f"{VARIABLE} is not a plain quoted string ({raw!r}); edit it by hand once")
    return raw, ""


def parse_grub_default(text: str) -> list:
    """Return the arguments of the last GRUB_CMDLINE_LINUX assignment in /etc/default/grub (shell semantics)."""
    value = None
    for line in text.splitlines():
        match = _ASSIGNMENT.match(line)
        if match:
            value, _quote = _unquote(match.group("value"))
    return split_args(value) if value else []


def edit_grub_default(text: str, add: list, remove: list) -> str:
    """Return /etc/default/grub content with GRUB_CMDLINE_LINUX edited; other lines and the quoting style kept.

    Only the last assignment is edited (the one the shell keeps); a file without one gets one appended.
    """
    lines = text.splitlines(keepends=True)
    index = None
    for i, line in enumerate(lines):
        if _ASSIGNMENT.match(line.rstrip("\n")):
            index = i
    if index is None:
        args = apply_changes([], add, remove)
        if not args:
            return text
        prefix = text if not text or text.endswith("\n") else text + "\n"
        return prefix + f'{VARIABLE}="{" ".join(args)}"\n'
    line = lines[index]
    ending = "\n" if line.endswith("\n") else ""
    match = _ASSIGNMENT.match(line.rstrip("\n"))
    value, quote = _unquote(match.group("value"))
    current = split_args(value)
    args = apply_changes(current, add, remove)
    if args == current:
        return text
    joined = " ".join(args)
    if not quote:
        quote = '"'
    if quote == "'" and "'" in joined:
        quote = '"'
    lines[index] = f"{match.group('lead')}{VARIABLE}={quote}{joined}{quote}{match.group('trail')}{ending}"
    return "".join(lines)


def overriding_dropins(dropins: dict) -> list:
    """Names of /etc/default/grub.d/*.cfg files that reassign GRUB_CMDLINE_LINUX without keeping its value."""
    names = []
    for name in sorted(dropins):
        for line in dropins[name].splitlines():
            match = _ASSIGNMENT.match(line)
            if match and "$GRUB_CMDLINE_LINUX" not in match.group("value") and "${GRUB_CMDLINE_LINUX}" not in line:
                names.append(name)
                break
    return names


def parse_grubby_info(text: str) -> list:
    """Parse ``grubby --info=ALL`` into ``[{'index': int, 'kernel': str, 'args': [...]}]``."""
    entries, entry = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if "=" not in line:
            continue
        key, _unused, value = line.partition("=")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if key == "index":
            entry = {"index": int(value), "kernel": None, "args": []}
            entries.append(entry)
        elif entry is not None and key == "kernel":
            entry["kernel"] = value
        elif entry is not None and key == "args":
            entry["args"] = split_args(value)
    return entries


def grubby_plan(grubby: str, entries: list, add: list, remove: list) -> list:
    """The grubby argv that brings every boot entry to the request, or [] when all entries already match."""
    if entries and all(satisfied(e["args"], add, remove) for e in entries):
        return []
    argv = [grubby, "--update-kernel=ALL"]
    if remove:
        argv.append("--remove-args=" + " ".join(remove))
    if add:
        argv.append("--args=" + " ".join(add))
    return argv if len(argv) > 2 else []


# ---------------------------------------------------------------- the module's work
# What gpuops.cluster.kernel_cmdline passes to AnsibleModule; run() is its work, also runnable as a part
# (module_utils/module_parts.py).
MODULE_KWARGS = dict(
    argument_spec=dict(
        args=dict(type="list", elements="str", default=[]),
        remove_args=dict(type="list", elements="str", default=[]),
        bootloader=dict(type="str", choices=["auto", "grub_default", "grubby"], default="auto"),
        grub_file=dict(type="path", default="/etc/default/grub"),
        apply_live=dict(type="str", choices=list(container_detection.APPLY_LIVE_CHOICES), default="auto"),
        root=dict(type="path", default="/"),
    ),
    supports_check_mode=True,
)


def _live_reason(module, root, container):
    apply_live = module.params["apply_live"]
    if apply_live == "never":
        return "apply_live is never"
    if not container_detection.is_running_system(root):
        # update-grub and grubby act on the machine running the module, never on another root.
        return f"root is {root}, not the running system"
    if not container_detection.should_apply_live(apply_live, container):
        return f"in a container ({container})"
    return None


def _grub_default(module, root, add, remove, result, skip_reason):
    path = os.path.join(root, module.params["grub_file"].lstrip("/"))
    before = managed_file.read_text(path, "")
    try:
        result["args_before"] = parse_grub_default(before)
        after = edit_grub_default(before, add, remove)
    except CmdlineError as exc:
        module.fail_json(msg=f"cannot edit {path}: {exc}")
    result["args_after"] = parse_grub_default(after)
    dropins = {}
    for name in glob.glob(os.path.join(os.path.dirname(path), "grub.d", "*.cfg")):
        dropins[os.path.basename(name)] = managed_file.read_text(name, "")
    for name in overriding_dropins(dropins):
        module.warn(f"grub.d/{name} reassigns GRUB_CMDLINE_LINUX and may override these arguments; review it")
    changed = before != after
    if changed:
        command = []
        if skip_reason:
            result["not_applied_live"].append(dict(name="update-grub", reason=skip_reason))
        else:
            update = module.get_bin_path("update-grub")
            mkconfig = module.get_bin_path("grub2-mkconfig") or module.get_bin_path("grub-mkconfig")
            if update:
                command = [update]
            elif mkconfig:
                target = "/boot/grub2/grub.cfg" if "grub2" in os.path.basename(mkconfig) else "/boot/grub/grub.cfg"
                command = [mkconfig, "-o", target]
            else:
                module.fail_json(
                    msg="neither update-grub nor grub-mkconfig is installed: install grub2-common, "
                    "or set apply_live=never to only edit the grub file",
                    **result,
                )
        result["command"] = command
        if not module.check_mode:
            managed_file.write_atomic(module, path, after, mode=None, create_parent=True)
            if command:
                rc, out, err = run_bounded(
                    module,
                    command,
                    "rebuild the grub configuration",
                    CHANGE_LIMIT,
                    hint=f"{path} is already edited: check the grub configuration and rerun",
                )
                if rc != 0:
                    module.fail_json(
                        msg=f"{' '.join(command)} failed (rc={rc}); {path} is already edited: fix the grub "
                        "configuration and rerun",
                        rc=rc,
                        stdout=out,
                        stderr=err,
                        **result,
                    )
    if module._diff:
        result["diff"] = dict(before=before, after=after, before_header=path, after_header=path)
    return changed


def _grubby(module, root, add, remove, result, skip_reason):
    if not container_detection.is_running_system(root):
        module.fail_json(
            msg=f"bootloader=grubby reads the running system's /boot, not {root}; use root / or grub_default"
        )
    grubby = module.get_bin_path("grubby", required=True)
    out, _err = run_checked(module, [grubby, "--info=ALL"], "list the boot entries", hint="check /boot/loader/entries")
    entries = parse_grubby_info(out)
    if not entries:
        module.fail_json(
            msg="grubby lists no boot entries; install a kernel or use bootloader=grub_default", stdout=out
        )
    result["args_before"] = list(entries[0]["args"])
    result["args_after"] = apply_changes(entries[0]["args"], add, remove)
    command = grubby_plan(grubby, entries, add, remove)
    if module._diff:
        result["diff"] = dict(
            before="".join(f"{e['kernel']}: {' '.join(e['args'])}\n" for e in entries),
            after="".join(f"{e['kernel']}: {' '.join(apply_changes(e['args'], add, remove))}\n" for e in entries),
        )
    if not command:
        return False
    if skip_reason:
        result["not_applied_live"].append(dict(name="grubby", reason=skip_reason))
        return False
    result["command"] = command
    if not module.check_mode:
        run_checked(
            module, command, "change the kernel arguments", hint="check the arguments and /boot", seconds=CHANGE_LIMIT
        )
    return True


def run(module) -> dict:
    """Everything gpuops.cluster.kernel_cmdline does after ``AnsibleModule`` and ``use_c_locale``: the result."""
    root = module.params["root"]
    try:
        add = validate_args(module.params["args"])
        remove = validate_args(module.params["remove_args"])
    except CmdlineError as exc:
        module.fail_json(msg=str(exc))
    both = {arg_key(a) for a in add} & {a for a in remove if "=" not in a}
    if both:
        module.fail_json(msg=f"{', '.join(sorted(both))} is both added and removed; keep it in one list")
    container = container_detection.detect(module, root)
    bootloader = module.params["bootloader"]
    if bootloader == "auto":
        has_bls = os.path.isdir(os.path.join(root, "boot", "loader", "entries"))
        bootloader = "grubby" if has_bls and module.get_bin_path("grubby") else "grub_default"
    running = parse_proc_cmdline(managed_file.read_text(os.path.join(root, "proc", "cmdline"), ""))
    result = dict(
        changed=False,
        bootloader=bootloader,
        args_before=[],
        args_after=[],
        running=running,
        command=[],
        not_applied_live=[],
        container=container,
    )
    skip_reason = _live_reason(module, root, container)
    if bootloader == "grubby":
        result["changed"] = _grubby(module, root, add, remove, result, skip_reason)
    else:
        result["changed"] = _grub_default(module, root, add, remove, result, skip_reason)
    result["pending_reboot"] = pending(running, add, remove)
    result["reboot_required"] = bool(result["pending_reboot"])
    return result
