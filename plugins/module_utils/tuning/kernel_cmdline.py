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

import re

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
