#!/usr/bin/python
# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: package_pin
short_description: Pin the NVIDIA stack to exact package versions (apt preferences, holds, dnf versionlock)
version_added: 0.1.0
description:
  - Owns everything that keeps the installed NVIDIA packages at the requested versions.
  - On the apt family it writes one apt preferences file (one stanza per pin, C(Pin-Priority) 1001 or more on the
    exact version), holds the exact package names with C(apt-mark), and writes an unattended-upgrades drop-in that
    blacklists the pinned packages.
  - On the dnf family it keeps a marked block of C(name-epoch:version-release.*) entries in the versionlock plugin's
    list, removing other locks on the same names, and can enable or switch a dnf module stream.
  - A held or locked package cannot be moved to another version, so an upgrade runs
    O(state=released) (drop holds and locks, keep the apt preferences) then installs the exact new versions, then
    O(state=present) with the new list. The preferences stay in place during that window, so nothing else
    (unattended-upgrades, a concurrent C(apt-get upgrade)) can move a package; an explicit
    C(apt-get install name=version) is not affected by pins.
  - Holds are changed with one C(apt-mark hold) and one C(apt-mark unhold) call, each only for the names that change.
    Holds and locks on packages this module never pinned are not touched.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  packages:
    description:
      - Exact packages to pin, as the stack resolver returns them.
      - Each becomes its own pin unless O(pins) already pins that name at the same version.
      - When given, only these packages are held (apt) or locked (dnf); the other names of O(pins) are pinned in the
        preferences file but not held, since C(apt-mark hold) fails on packages the repository does not have. On dnf
        the locks are these exact packages, and the driver's module stream (O(dnf_module_stream)) covers the globs of
        O(pins).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Package name.
        type: str
        required: true
      version:
        description:
          - Exact version. Debian versions as C(dpkg-query) shows them (C(550.127.08-1), C(1:4.1.1-1)); RPM versions
            as C([epoch:]version-release) (C(3:550.127.08-1.el9)).
        type: str
        required: true
      component:
        description: Stack component the package belongs to (C(driver), C(fabricmanager), ...); written as a comment.
        type: str
        default: ''
      spec:
        description:
          - The install spec the stack resolver adds (C(name=version)); accepted so the resolver's list can be
            passed as is, and not used.
        type: str
  pins:
    description:
      - Pins over several names at one version, as the stack resolver returns them.
      - On apt, names may be apt globs (C(libnvidia-*-550)); globs are pinned and blacklisted but never held.
      - On dnf, names must be exact.
    type: list
    elements: dict
    default: []
    suboptions:
      component:
        description: Stack component the pin belongs to; written as a comment.
        type: str
        default: ''
      names:
        description: Package names or apt globs.
        type: list
        elements: str
        required: true
      version:
        description: Exact version for every name.
        type: str
        required: true
  state:
    description:
      - V(present) writes the pin files, holds (if O(hold)) and locks the requested packages, and drops holds and
        locks on packages this module pinned before but that are no longer requested.
      - V(released) drops every hold and dnf lock this module owns (the ones requested now and the ones in the
        current preferences file) and leaves the apt preferences and the unattended-upgrades drop-in as they are.
        Use it right before installing new exact versions.
      - V(absent) removes the preferences file and the unattended-upgrades drop-in, and drops the holds and locks
        this module owns.
    type: str
    choices: [present, released, absent]
    default: present
  priority:
    description: C(Pin-Priority) of every stanza. Below 1001 apt could keep a newer installed version, so it is refused.
    type: int
    default: 1001
  preferences_path:
    description: The apt preferences file this module owns.
    type: path
    default: /etc/apt/preferences.d/gpuops-nvidia.pref
  hold:
    description:
      - Hold the exact package names (C(apt-mark hold)) or, on dnf, lock them in the versionlock list.
      - V(false) with O(state=present) writes the files but drops the holds and locks this module owns.
    type: bool
    default: true
  unattended_upgrades:
    description:
      - Write the unattended-upgrades drop-in at O(unattended_upgrades_path) (apt only).
      - V(false) removes the drop-in if this module wrote one.
    type: bool
    default: true
  unattended_upgrades_path:
    description: The apt.conf drop-in with the C(Unattended-Upgrade::Package-Blacklist) entries.
    type: path
    default: /etc/apt/apt.conf.d/51gpuops-nvidia-blacklist
  unattended_upgrades_patterns:
    description:
      - Extra blacklist entries besides the exact pinned names. unattended-upgrades matches each with Python
        C(re.match), so an entry is a regular expression anchored at the start of the package name.
      - The default keeps unattended-upgrades away from every NVIDIA driver, library, CUDA, NCCL and DCGM package,
        pinned or not; C(nvidia-) also covers C(nvidia-container-toolkit), whose updates then come through this
        collection. Set V([]) to blacklist only the pinned names.
    type: list
    elements: str
    default: [nvidia-, libnvidia-, libnccl, cuda-, datacenter-gpu-manager]
  versionlock_path:
    description: The dnf versionlock plugin's list (its C(locklist) setting).
    type: path
    default: /etc/dnf/plugins/versionlock.list
  dnf_module_stream:
    description:
      - A dnf module stream to enable (or switch to) with O(state=present) on dnf,
        for example C(nvidia-driver:550-dkms).
      - Ignored on apt.
    type: str
  package_manager:
    description: V(auto) picks V(apt) when C(apt-mark) exists, else V(dnf) when C(dnf) exists.
    type: str
    choices: [auto, apt, dnf]
    default: auto
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: One entry per file (preferences, unattended-upgrades drop-in or versionlock list) and one for the holds.
notes:
  - RPM versions for O(packages) need the release (C(550.127.08-1.el9)); the epoch defaults to C(0) in the lock.
seealso:
  - module: gpuops.cluster.gpu_stack_facts
  - name: apt_preferences(5)
    description: Pin priorities and stanza format.
    link: https://manpages.debian.org/stable/apt/apt_preferences.5.en.html
"""

EXAMPLES = r"""
- name: Pin the resolved stack after installing it
  gpuops.cluster.package_pin:
    packages: "{{ nvidia_stack_resolved.packages }}"
    pins: "{{ nvidia_stack_resolved.pins }}"
    state: present

- name: Release holds before installing new exact versions
  gpuops.cluster.package_pin:
    packages: "{{ nvidia_stack_resolved.packages }}"
    state: released

- name: Pin the driver on Rocky 9 and enable its module stream
  gpuops.cluster.package_pin:
    packages:
      - name: nvidia-driver
        version: "3:550.127.08-1.el9"
        component: driver
    dnf_module_stream: nvidia-driver:550-dkms

- name: Remove every pin this collection set
  gpuops.cluster.package_pin:
    state: absent
"""

RETURN = r"""
package_manager:
  description: The package manager the module worked with.
  returned: always
  type: str
  sample: apt
pins:
  description: The merged, sorted pins the module wrote (apt) or locked (dnf).
  returned: always
  type: list
  elements: dict
  sample: [{"component": "driver", "names": ["nvidia-driver-550"], "version": "550.127.08-1"}]
held:
  description: Names this run held (apt) or locked (dnf); in check mode, the names it would.
  returned: always
  type: list
  elements: str
  sample: ["nvidia-driver-550"]
unheld:
  description: Names this run released; in check mode, the names it would.
  returned: always
  type: list
  elements: str
  sample: ["nvidia-driver-535"]
files:
  description: Files this run wrote or removed; in check mode, the files it would.
  returned: always
  type: list
  elements: str
  sample: ["/etc/apt/preferences.d/gpuops-nvidia.pref"]
commands:
  description: Commands this run ran to change state (argv lists); in check mode, the ones it would.
  returned: always
  type: list
  elements: list
  sample: [["apt-mark", "hold", "nvidia-driver-550"]]
diff:
  description: Before and after of every file and of the owned holds.
  returned: when diff mode is on
  type: list
  elements: dict
  sample: [{"before_header": "holds", "after_header": "holds", "before": "", "after": "nvidia-driver-550\n"}]
"""

import fnmatch
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils import managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import apt_pinning, rpm_versionlock

LC = {"LC_ALL": "C"}


def read_text(module, path):
    """The file's text, or None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        module.fail_json(msg=f"cannot read {path}: {exc}; check the path and permissions")


def write_text(module, path, content):
    """Write content atomically (mode 0644) or remove the file when content is None."""
    if content is None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            module.fail_json(msg=f"cannot remove {path}: {exc}")
        return
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        module.fail_json(msg=f"{directory} does not exist: install apt/dnf (or set the path option) and run again")
    managed_file.write_atomic(module, path, content)
    module.set_mode_if_different(path, "0644", False)


def run(module, argv, what):
    rc, out, err = module.run_command(argv, environ_update=LC)
    if rc != 0:
        module.fail_json(
            msg=f"{' '.join(argv[:3])} failed while {what}: {(err or out).strip()}; "
            "check that the packages exist in the configured repositories and run again",
            rc=rc,
            stdout=out,
            stderr=err,
            cmd=argv,
        )
    return out


def detect_package_manager(module):
    wanted = module.params["package_manager"]
    if wanted != "auto":
        return wanted
    if module.get_bin_path("apt-mark"):
        return "apt"
    if module.get_bin_path("dnf"):
        return "dnf"
    module.fail_json(msg="neither apt-mark nor dnf found: this module supports the apt and dnf families only")
    return None


def file_change(path, before, after):
    return {"path": path, "before": before, "after": after, "changed": before != after}


def diff_entry(header, before, after):
    return {
        "before_header": header,
        "after_header": header,
        "before": before if before is not None else "",
        "after": after if after is not None else "",
    }


def holds_text(names):
    return "".join(f"{name}\n" for name in sorted(names))


def apt_plan(module, pins, installed=None):
    """Read the node and compute the apt files, holds and commands for the request.

    Every exact pin name is pinned in the preferences file; only the names in
    ``installed`` (the packages option), when given, are held.
    """
    params = module.params
    state = params["state"]
    pref_path, uu_path = params["preferences_path"], params["unattended_upgrades_path"]
    pref_before = read_text(module, pref_path)
    uu_before = read_text(module, uu_path)

    owned = {name for pin in pins for name in pin["names"]}
    if pref_before and apt_pinning.MANAGED_HEADER in pref_before:
        for stanza in apt_pinning.parse_preferences(pref_before):
            if stanza.get("version") is not None:
                owned.update(stanza["names"])

    try:
        if state == "present":
            pref_after = apt_pinning.render_preferences(pins, params["priority"])
            names = [name for pin in pins for name in pin["names"]]
            if params["unattended_upgrades"]:
                uu_after = apt_pinning.render_unattended_blacklist(names, params["unattended_upgrades_patterns"])
            else:
                uu_after = uu_before if uu_before and apt_pinning.MANAGED_HEADER not in uu_before else None
        elif state == "released":
            pref_after, uu_after = pref_before, uu_before
        else:
            pref_after = pref_before if pref_before and apt_pinning.MANAGED_HEADER not in pref_before else None
            uu_after = uu_before if uu_before and apt_pinning.MANAGED_HEADER not in uu_before else None
    except apt_pinning.PinningError as exc:
        module.fail_json(msg=f"cannot pin the requested stack: {exc}")

    apt_mark = module.get_bin_path("apt-mark", required=True)
    held = apt_pinning.parse_showhold(run(module, [apt_mark, "showhold"], "reading holds"))
    keep_holds = state == "present" and params["hold"]
    to_hold = [name for name in apt_pinning.managed_names(pins) if not installed or name in installed]
    plan = apt_pinning.plan_holds(to_hold, held, sorted(owned), keep_holds)

    commands = []
    if plan["hold"]:
        commands.append([apt_mark, "hold", *plan["hold"]])
    if plan["unhold"]:
        commands.append([apt_mark, "unhold", *plan["unhold"]])

    def owned_held(names):
        return {name for name in names if any(name == p or fnmatch.fnmatchcase(name, p) for p in owned)}

    holds_before = owned_held(held)
    holds_after = (holds_before | set(plan["hold"])) - set(plan["unhold"])
    return {
        "files": [file_change(pref_path, pref_before, pref_after), file_change(uu_path, uu_before, uu_after)],
        "stream_commands": [],
        "hold_commands": commands,
        "held": plan["hold"],
        "unheld": plan["unhold"],
        "holds_diff": diff_entry("holds", holds_text(holds_before), holds_text(holds_after)),
    }


def dnf_plan(module, pins):
    """Read the node and compute the versionlock list, module stream commands and lock changes."""
    params = module.params
    path = params["versionlock_path"]
    before = read_text(module, path)
    current = before or ""
    packages = []
    for pin in pins:
        for name in pin["names"]:
            if any(ch in name for ch in "*?[]"):
                module.fail_json(msg=f"dnf versionlock needs exact package names, not the glob {name!r}")
            packages.append({"name": name, "version": pin["version"]})
    try:
        wanted = rpm_versionlock.desired_entries(packages)
    except rpm_versionlock.VersionlockError as exc:
        module.fail_json(msg=f"cannot lock the requested stack: {exc}")

    old_entries = rpm_versionlock.parse_versionlock_list(current)["managed"]
    old_names = {entry["name"] for entry in map(rpm_versionlock.parse_lock_entry, old_entries) if entry}
    owned = sorted(old_names | {package["name"] for package in packages})
    entries = wanted if params["state"] == "present" and params["hold"] else []
    after = rpm_versionlock.render_versionlock_list(current, entries, owned)
    if before is None and not after:
        after = None

    commands = []
    stream = params["dnf_module_stream"]
    if stream and params["state"] == "present":
        dnf = module.get_bin_path("dnf", required=True)
        module_name = stream.partition(":")[0]
        rc, out, err = module.run_command([dnf, "-q", "module", "list", "--enabled", module_name], environ_update=LC)
        if rc != 0 and "No matching Modules" not in (out + err):
            module.fail_json(
                msg=f"dnf module list failed: {(err or out).strip()}; check the repository for {module_name}",
                rc=rc,
                stdout=out,
                stderr=err,
            )
        try:
            planned = rpm_versionlock.plan_module_stream(stream, rpm_versionlock.parse_module_list(out))
        except rpm_versionlock.VersionlockError as exc:
            module.fail_json(msg=str(exc))
        commands = [[dnf, *argv[1:]] for argv in planned]

    new_names = {entry["name"] for entry in map(rpm_versionlock.parse_lock_entry, entries) if entry}
    changed_old = {e for e in old_entries if e not in entries}
    changed_new = {e for e in entries if e not in old_entries}
    held = sorted({rpm_versionlock.parse_lock_entry(e)["name"] for e in changed_new})
    unheld = sorted({rpm_versionlock.parse_lock_entry(e)["name"] for e in changed_old} - new_names)
    locks_before = holds_text(old_entries)
    return {
        "files": [file_change(path, before, after)],
        "stream_commands": commands,
        "hold_commands": [],
        "held": held,
        "unheld": unheld,
        "holds_diff": diff_entry("versionlocks", locks_before, holds_text(entries)),
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "name": {"type": "str", "required": True},
                    "version": {"type": "str", "required": True},
                    "component": {"type": "str", "default": ""},
                    "spec": {"type": "str"},
                },
            },
            "pins": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "component": {"type": "str", "default": ""},
                    "names": {"type": "list", "elements": "str", "required": True},
                    "version": {"type": "str", "required": True},
                },
            },
            "state": {"type": "str", "default": "present", "choices": ["present", "released", "absent"]},
            "priority": {"type": "int", "default": 1001},
            "preferences_path": {"type": "path", "default": "/etc/apt/preferences.d/gpuops-nvidia.pref"},
            "hold": {"type": "bool", "default": True},
            "unattended_upgrades": {"type": "bool", "default": True},
            "unattended_upgrades_path": {
                "type": "path",
                "default": "/etc/apt/apt.conf.d/51gpuops-nvidia-blacklist",
            },
            "unattended_upgrades_patterns": {
                "type": "list",
                "elements": "str",
                "default": ["nvidia-", "libnvidia-", "libnccl", "cuda-", "datacenter-gpu-manager"],
            },
            "versionlock_path": {"type": "path", "default": "/etc/dnf/plugins/versionlock.list"},
            "dnf_module_stream": {"type": "str"},
            "package_manager": {"type": "str", "default": "auto", "choices": ["auto", "apt", "dnf"]},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["state"] == "present" and not (params["packages"] or params["pins"]):
        module.fail_json(msg="state=present needs packages or pins: pass the resolved stack, or use state=absent")

    manager = detect_package_manager(module)
    # Holds and locks go on the packages the stack installs; pins may also name
    # packages that are not installed (apt-mark hold fails on those), or globs.
    installed = sorted({package["name"] for package in params["packages"] or []})
    if manager == "dnf" and installed:
        # versionlock takes exact RPM names; the driver's module stream covers the globs.
        pins = [
            {
                "component": package.get("component") or "package",
                "names": [package["name"]],
                "version": package["version"],
            }
            for package in params["packages"]
        ]
        plan = dnf_plan(module, pins)
    else:
        try:
            pins = apt_pinning.normalize_pins(params["pins"], params["packages"])
        except apt_pinning.PinningError as exc:
            module.fail_json(msg=f"cannot pin the requested stack: {exc}")
        plan = apt_plan(module, pins, installed) if manager == "apt" else dnf_plan(module, pins)
    changed_files = [change for change in plan["files"] if change["changed"]]
    commands = plan["stream_commands"] + plan["hold_commands"]
    changed = bool(changed_files or commands)

    if changed and not module.check_mode:
        # module streams before locks; files before holds so a failed hold leaves the pins written
        for argv in plan["stream_commands"]:
            run(module, argv, "switching the dnf module stream")
        for change in changed_files:
            write_text(module, change["path"], change["after"])
        for argv in plan["hold_commands"]:
            run(module, argv, f"running apt-mark {argv[1]}")

    result = {
        "changed": changed,
        "package_manager": manager,
        "pins": pins,
        "held": plan["held"],
        "unheld": plan["unheld"],
        "files": [change["path"] for change in changed_files],
        "commands": commands,
    }
    if module._diff:
        result["diff"] = [diff_entry(change["path"], change["before"], change["after"]) for change in plan["files"]]
        result["diff"].append(plan["holds_diff"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
