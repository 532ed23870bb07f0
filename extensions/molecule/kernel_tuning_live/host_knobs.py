"""Record, restore and check the HOST's kernel knobs around the privileged kernel_tuning_live node.

The node is privileged, so what the role writes there lands on the host. prepare records the host's
values once; an existing record is kept, because it holds the values from before an earlier run that
was never restored. cleanup and destroy restore them (idempotent: only a knob that differs is
written; no record, nothing to do); destroy then checks and forgets the record. Only the files in
KNOBS are ever read or written; a knob the host lacks (no THP) is recorded as absent and skipped.

    python3 host_knobs.py record|restore|check|forget [--record FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys

KNOBS = {
    # What the scenario applies live.
    "vm.nr_hugepages": "/proc/sys/vm/nr_hugepages",
    "kernel.numa_balancing": "/proc/sys/kernel/numa_balancing",
    "thp_enabled": "/sys/kernel/mm/transparent_hugepage/enabled",
    "thp_defrag": "/sys/kernel/mm/transparent_hugepage/defrag",
    # Guards: the scenario must leave these alone (the role's profile is none; the node runs no systemd,
    # whose PID 1 raises fs.file-max and fs.nr_open and whose systemd-sysctl applies sysctl.d at boot).
    "vm.swappiness": "/proc/sys/vm/swappiness",
    "net.core.rmem_max": "/proc/sys/net/core/rmem_max",
    "fs.file-max": "/proc/sys/fs/file-max",
    "fs.nr_open": "/proc/sys/fs/nr_open",
    "kernel.pid_max": "/proc/sys/kernel/pid_max",
}
ABSENT = "absent"
DEFAULT_RECORD = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    ".lab",
    "kernel_tuning_live",
    "host-knobs.json",
)


def read(path: str) -> str:
    """The knob's value: the selected word of a THP file (``always [madvise] never``), else the text."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read().strip()
    except FileNotFoundError:
        return ABSENT
    match = re.search(r"\[([^\]]+)\]", text)
    return match.group(1) if match else " ".join(text.split())


def read_all() -> dict:
    return {name: read(path) for name, path in KNOBS.items()}


def load(record: str):
    try:
        with open(record, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def differences(recorded: dict) -> dict:
    """Knobs whose current value differs from the recorded one (absent ones are skipped)."""
    result = {}
    for name, value in sorted(recorded.items()):
        if name not in KNOBS or value == ABSENT:
            continue
        current = read(KNOBS[name])
        if current != value:
            result[name] = {"recorded": value, "now": current}
    return result


def record(path: str) -> int:
    if load(path) is not None:
        print(json.dumps({"record": path, "action": "kept", "values": load(path)}))
        return 0
    os.makedirs(os.path.dirname(path), exist_ok=True)
    values = read_all()
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(values, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
    print(json.dumps({"record": path, "action": "recorded", "values": values}))
    return 0


def restore(path: str) -> int:
    recorded = load(path)
    if recorded is None:
        print(json.dumps({"record": path, "action": "nothing recorded"}))
        return 0
    to_write = differences(recorded)
    for name in to_write:
        try:
            with open(KNOBS[name], "w", encoding="utf-8") as handle:
                handle.write(recorded[name] + "\n")
        except OSError as exc:
            to_write[name]["error"] = exc.strerror
    left = differences(recorded)
    print(json.dumps({"record": path, "action": "restored", "written": to_write, "still_different": left}))
    return 1 if left else 0


def check(path: str) -> int:
    recorded = load(path)
    if recorded is None:
        print(json.dumps({"record": path, "action": "nothing recorded"}))
        return 0
    left = differences(recorded)
    print(json.dumps({"record": path, "action": "checked", "recorded": recorded, "different": left}))
    return 1 if left else 0


def forget(path: str) -> int:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    print(json.dumps({"record": path, "action": "forgotten"}))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["record", "restore", "check", "forget"])
    parser.add_argument("--record", default=DEFAULT_RECORD, help=f"record file (default {DEFAULT_RECORD})")
    args = parser.parse_args(argv)
    return {"record": record, "restore": restore, "check": check, "forget": forget}[args.action](args.record)


if __name__ == "__main__":
    sys.exit(main())
