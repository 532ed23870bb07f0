# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A modprobe.d file that keeps kernel modules (nouveau) off the GPUs: render it, and the module's work.

``render`` is pure; ``run(module)`` is the ``modprobe_blacklist`` module's work on an AnsibleModule
or a part (module_utils/module_parts.py), through ``owned_files.sync_file`` (check, diff, 0644 root).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils import managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import owned_files

HEADER = (
    "# Managed by gpuops.cluster.modprobe_blacklist: edits here are overwritten.\n"
    "# The NVIDIA driver cannot bind GPUs that another module holds; rebuild the initramfs when this file changes.\n"
)
_MODULE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_OPTIONS = re.compile(r"^[A-Za-z0-9_.,=:/ -]+$")

MODULE_KWARGS = dict(
    argument_spec=dict(
        name=dict(type="str", default="gpuops-blacklist-nouveau"),
        modules=dict(type="list", elements="str", default=["nouveau"]),
        options=dict(type="dict", default={"nouveau": "modeset=0"}),
        directory=dict(type="path", default="/etc/modprobe.d"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        root=dict(type="path", default="/"),
    ),
    supports_check_mode=True,
)


def render(modules, options) -> str:
    """The file's text: one ``blacklist`` line per module, then one ``options`` line per module given options."""
    problems = [f"module name {name!r}" for name in modules if not _MODULE_NAME.match(str(name))]
    problems += [f"options key {name!r}" for name in options if not _MODULE_NAME.match(str(name))]
    problems += [f"options of {name} {value!r}" for name, value in options.items() if not _OPTIONS.match(str(value))]
    if problems:
        raise ValueError("not a kernel module name or option string: " + ", ".join(problems))
    lines = [f"blacklist {name}" for name in modules]
    lines += [f"options {name} {str(options[name]).strip()}" for name in sorted(options)]
    return HEADER + "\n".join(lines) + "\n"


def run(module) -> dict:
    """The modprobe_blacklist module's work: its result dict."""
    params = module.params
    name = params["name"]
    if not name or "/" in name or name.endswith(".conf"):
        module.fail_json(msg=f"name {name!r} must be a plain file name without .conf, such as gpuops-blacklist-nouveau")
    path = os.path.join(managed_file.under(params["root"], params["directory"]), name + ".conf")
    result = dict(changed=False, path=path)
    diff = [] if module._diff else None
    if params["state"] == "absent":
        result["changed"] = managed_file.remove(module, path, diff)
    else:
        try:
            content = render(params["modules"], params["options"] or {})
        except ValueError as exc:
            module.fail_json(msg=f"{exc}; fix the module arguments")
        result["changed"] = owned_files.sync_file(module, path, content, 0o644, diff)
    if diff is not None:
        result["diff"] = diff
    return result
