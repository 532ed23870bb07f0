#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: modprobe_blacklist
short_description: Keep kernel modules such as nouveau off the GPUs with one modprobe.d file
version_added: 0.1.0
description:
  - Writes C(<directory>/<name>.conf) with one C(blacklist) line per module of O(modules) and one C(options)
    line per entry of O(options), by default C(blacklist nouveau) and C(options nouveau modeset=0), so the
    NVIDIA driver can bind the GPUs at the next boot.
  - One remote execution, where a template task makes two (stat, then file). The file is 0644 and root-owned
    (when the module runs as root), written atomically below O(root).
  - The initramfs carries modprobe.d; rebuild it when the task changed (the C(nvidia_stack) role's handler
    does).
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  name:
    description: The file name in O(directory), without C(.conf).
    type: str
    default: gpuops-blacklist-nouveau
  modules:
    description: Kernel modules to blacklist.
    type: list
    elements: str
    default: [nouveau]
  options:
    description: Module parameters, one C(options) line per module.
    type: dict
    default: {nouveau: modeset=0}
  directory:
    description: The modprobe.d directory.
    type: path
    default: /etc/modprobe.d
  state:
    description: V(absent) removes the file.
    type: str
    choices: [present, absent]
    default: present
  root:
    description: Root directory prefixed to the path written. For image builds, chroots and tests.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - A blacklisted module that is loaded now stays loaded until the next boot.
seealso:
  - module: gpuops.cluster.gpu_stack_facts
"""

EXAMPLES = r"""
- name: Blacklist nouveau
  gpuops.cluster.modprobe_blacklist:
  notify: Rebuild the initramfs
"""

RETURN = r"""
path:
  description: The modprobe.d file.
  returned: always
  type: str
  sample: /etc/modprobe.d/gpuops-blacklist-nouveau.conf
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import modprobe_blacklist


def main():
    module = AnsibleModule(**modprobe_blacklist.MODULE_KWARGS)
    use_c_locale(module)
    module.exit_json(**modprobe_blacklist.run(module))


if __name__ == "__main__":
    main()
