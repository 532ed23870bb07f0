# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RDMA drop-ins of a GPU node: memlock limits (PAM sessions and systemd services) and nvidia-peermem at boot.

Pure renderers: :func:`plan` returns the files for the areas asked for, each
``{'area', 'path', 'content'}`` with the path as on the node. The content is
what the kernel_tuning role's templates rendered, byte for byte.

The module's work is :data:`MODULE_KWARGS` and :func:`run` (see ``module_parts``), so it can
also run as a part of another module.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils import managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import owned_files

LIMITS_PATH = "/etc/security/limits.d/90-gpuops-memlock.conf"
SYSTEMD_PATH = "/etc/systemd/system.conf.d/90-gpuops-memlock.conf"
PEERMEM_PATH = "/etc/modules-load.d/nvidia-peermem.conf"
# The first line the role's templates carried ({{ ansible_managed }}): kept so nodes see no change.
HEADER = "# Ansible managed"


def check_memlock_limit(limit) -> str:
    """``'unlimited'`` or a number of kB greater than 0, as a string; anything else raises ValueError."""
    text = str(limit).strip()
    if text == "unlimited" or (text.isdigit() and int(text) > 0):
        return text
    raise ValueError(f"memlock_limit must be unlimited or a number of kB greater than 0, not {limit!r}")


def systemd_memlock_value(limit) -> str:
    """DefaultLimitMEMLOCK for a memlock limit: ``infinity`` for unlimited, else the kB with a K suffix."""
    text = check_memlock_limit(limit)
    return "infinity" if text == "unlimited" else f"{text}K"


def render_limits_memlock(limit) -> str:
    """limits.d drop-in: soft and hard memlock for every user and for root ("*" does not cover root)."""
    text = check_memlock_limit(limit)
    return (
        f"{HEADER}\n"
        '# Locked memory for RDMA (memory registration); "*" does not cover root.\n'
        f"*    soft memlock {text}\n"
        f"*    hard memlock {text}\n"
        f"root soft memlock {text}\n"
        f"root hard memlock {text}\n"
    )


def render_systemd_memlock(limit) -> str:
    """system.conf.d drop-in: DefaultLimitMEMLOCK for services (limits.d covers PAM sessions only)."""
    return (
        f"{HEADER}\n"
        "# Locked memory for RDMA in services started by systemd (limits.d covers PAM sessions only).\n"
        "[Manager]\n"
        f"DefaultLimitMEMLOCK={systemd_memlock_value(limit)}\n"
    )


def render_peermem() -> str:
    """modules-load.d file loading nvidia-peermem at boot (GPUDirect RDMA)."""
    return "# Managed by gpuops.cluster.kernel_tuning: GPUDirect RDMA\nnvidia-peermem\n"


def plan(memlock_limit=None, peermem=False) -> list:
    """The files for the areas asked for: memlock (two files) when ``memlock_limit`` is set, peermem when true.

    Each is ``{'area': 'limits' | 'systemd' | 'peermem', 'path': str, 'content': str}``; an area not asked
    for is absent (its files are left alone, whatever they hold).
    """
    files = []
    if memlock_limit is not None:
        files.append({"area": "limits", "path": LIMITS_PATH, "content": render_limits_memlock(memlock_limit)})
        files.append({"area": "systemd", "path": SYSTEMD_PATH, "content": render_systemd_memlock(memlock_limit)})
    if peermem:
        files.append({"area": "peermem", "path": PEERMEM_PATH, "content": render_peermem()})
    return files


MODULE_KWARGS = dict(
    argument_spec=dict(
        memlock_limit=dict(type="str"),
        peermem=dict(type="bool", default=False),
        root=dict(type="path", default="/"),
    ),
    supports_check_mode=True,
)


def run(module) -> dict:
    """The rdma_dropins module's work on ``module`` (an AnsibleModule or a part): its result dict."""
    params = module.params
    try:
        planned = plan(params["memlock_limit"], params["peermem"])
    except ValueError as exc:
        module.fail_json(msg=f"{exc}; fix the module arguments")
    diff = [] if module._diff else None
    result = dict(
        changed=False,
        files=[],
        changed_files=[],
        changed_limits=False,
        changed_systemd=False,
        changed_peermem=False,
    )
    for item in planned:
        path = managed_file.under(params["root"], item["path"])
        result["files"].append(path)
        if owned_files.sync_file(module, path, item["content"], 0o644, diff):
            result["changed_files"].append(path)
            result[f"changed_{item['area']}"] = True
    result["changed"] = bool(result["changed_files"])
    if diff is not None:
        result["diff"] = diff
    return result
