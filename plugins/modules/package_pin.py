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
        the locks are these exact packages and the installed packages O(pins) name (globs included) at the pin's
        version (one C(rpm -qa) call), such as C(nvidia-kmod-common), since the driver's module stream
        (O(dnf_module_stream)) offers every release of its branch, so it holds none of them.
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
          - The install spec (C(name=version)) the node's package index gave; accepted so the list can be passed as
            is, and not used.
        type: str
      follows_driver:
        description: Whether the version is the driver release; accepted so the list can be passed as is, and not used.
        type: bool
        default: false
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
      follows_driver:
        description: Whether the version is the driver release; accepted so the list can be passed as is, and not used.
        type: bool
        default: false
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
  unattended_upgrades_patterns:
    description:
      - Extra blacklist entries besides the pinned names (exact names, and the globs of the pins). unattended-upgrades
        matches each with Python C(re.match), so an entry is a regular expression anchored at the start of the
        package name.
      - By default the blacklist covers what this collection pins and nothing else, so an NVIDIA package the
        operator installed by hand (a Container Toolkit outside gpuops_stack) keeps its unattended security
        updates. V([nvidia-, libnvidia-, libnccl, cuda-, datacenter-gpu-manager]) keeps unattended-upgrades away
        from every such package, pinned or not.
    type: list
    elements: str
    default: []
  dnf_module_stream:
    description:
      - A dnf module stream to enable (or switch to) with O(state=present) on dnf,
        for example C(nvidia-driver:550-dkms).
      - Ignored on apt.
    type: str
  kernel_hold:
    description:
      - Hold the installed kernel packages with the stack (kernel lockstep, for a driver built by DKMS), so that no
        upgrade installs a kernel the NVIDIA module was not built for; M(gpuops.cluster.kernel_package) moves the
        kernel on purpose.
      - On apt, C(apt-mark hold) on every installed C(linux-image-*), C(linux-headers-*), C(linux-modules-*) package
        and the C(linux-<flavour>) metapackage of an installed C(linux-image-<flavour>) (one C(dpkg-query) in the
        same execution); the held names are recorded in O(preferences_path), so that V(false) later releases
        exactly those.
      - On dnf, a versionlock line for every installed version of C(kernel), C(kernel-core), C(kernel-modules),
        C(kernel-modules-core), C(kernel-modules-extra) and C(kernel-devel) (one C(rpm -q)), in the managed block.
      - Only with O(state=present) and O(hold=true).
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.cluster.attributes
  - gpuops.cluster.attributes.platform
  - gpuops.cluster.stack_files
attributes:
  check_mode:
    support: full
  diff_mode:
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
kernel_holds:
  description: The kernel packages held (apt names) or locked (dnf versionlock lines) with the stack (O(kernel_hold)).
  returned: always
  type: list
  elements: str
  sample: ["linux-headers-6.1.0-39-amd64", "linux-headers-amd64", "linux-image-6.1.0-39-amd64", "linux-image-amd64"]
diff:
  description: Before and after of every file and of the owned holds.
  returned: when diff mode is on
  type: list
  elements: dict
  sample: [{"before_header": "holds", "after_header": "holds", "before": "", "after": "nvidia-driver-550\n"}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import package_pin


def main():
    module = AnsibleModule(**package_pin.MODULE_KWARGS)
    use_c_locale(module)
    module.exit_json(**package_pin.run(module))


if __name__ == "__main__":
    main()
