"""Count a role's internal state that a reader must chase across files.

Usage: python tests/tooling/role_state_count.py [--list] [ROLE_DIR]   (default: roles/nvidia_stack)

An internal name is ``__<role>_*`` (``__nvidia_stack_before``). A file *writes* a name where the
name is a YAML key (``vars/*.yml``, a ``set_fact``, a task's or block's ``vars:``) or the value of
``register:``; every other occurrence is a *read*. Figures printed:

- names: the internal names in the role's YAML and templates;
- read elsewhere: names read in a file that does not write them (the reader must open another file);
- vars entries: the entries of ``vars/main.yml``, and how many of them are templated (``{{``), which is
  to say not static;
- vars reading registered results: templated ``vars/main.yml`` entries that name a result a task registers.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

KEY = r"^\s*(?:-\s+)?({name}):"
REGISTER = r"\bregister:\s*({name})\b"


def role_files(role: Path):
    return sorted(p for p in role.rglob("*") if p.is_file() and p.suffix in (".yml", ".yaml", ".j2"))


def writes_and_reads(text: str, pattern: str):
    """``(written names, read names)`` of one file's text."""
    name = pattern
    written = set(re.findall(KEY.format(name=name), text, re.M)) | set(re.findall(REGISTER.format(name=name), text))
    spans = [m.span(1) for m in re.finditer(KEY.format(name=name), text, re.M)]
    spans += [m.span(1) for m in re.finditer(REGISTER.format(name=name), text)]
    read = set()
    for match in re.finditer(name, text):
        if match.span() not in spans:
            read.add(match.group(0))
    return written, read


def top_level_entries(text: str) -> dict:
    """``{key: value text}`` of a vars file's top-level mapping, each value with its continuation lines."""
    entries, key = {}, None
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z_]\w*):(.*)$", line)
        if match:
            key = match.group(1)
            entries[key] = match.group(2)
        elif key and (line.startswith(" ") or not line.strip()):
            entries[key] += "\n" + line
        elif not line.startswith("#"):
            key = None
    return entries


def measure(role: Path) -> dict:
    prefix = "__" + role.name + "_"
    pattern = re.escape(prefix) + r"\w+"
    writers, readers = {}, {}
    for path in role_files(role):
        written, read = writes_and_reads(path.read_text(encoding="utf-8"), pattern)
        for name in written:
            writers.setdefault(name, set()).add(path)
        for name in read:
            readers.setdefault(name, set()).add(path)
    names = set(writers) | set(readers)
    elsewhere = sorted(n for n in names if readers.get(n, set()) - writers.get(n, set()))
    registered = {n for p in role_files(role) for n in re.findall(REGISTER.format(name=pattern), p.read_text())}
    vars_main = role / "vars" / "main.yml"
    entries = top_level_entries(vars_main.read_text(encoding="utf-8")) if vars_main.exists() else {}
    templated = sorted(k for k, v in entries.items() if "{{" in v)
    reading_registered = sorted(k for k in templated if set(re.findall(pattern, entries[k])) & registered)
    return {
        "names": len(names),
        "read_elsewhere": elsewhere,
        "vars_entries": len(entries),
        "vars_templated": templated,
        "vars_reading_registered": reading_registered,
    }


def main(argv):
    show = "--list" in argv
    args = [a for a in argv if a != "--list"]
    role = Path(args[0] if args else "roles/nvidia_stack")
    figures = measure(role)
    print(f"{role.name}: {len(figures['read_elsewhere'])} of {figures['names']} internal names read in another file")
    print(
        f"vars/main.yml: {len(figures['vars_templated'])} of {figures['vars_entries']} entries templated (not static), "
        f"{len(figures['vars_reading_registered'])} reading a registered result"
    )
    if show:
        print("read elsewhere:", " ".join(figures["read_elsewhere"]))
        print("templated vars:", " ".join(figures["vars_templated"]))
        print("reading registered:", " ".join(figures["vars_reading_registered"]))


if __name__ == "__main__":
    main(sys.argv[1:])
