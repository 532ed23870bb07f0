# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DCGM Exporter's systemd drop-in: render it, and the work of node_stack's ``dcgm_exporter`` part.

The packaged ``nvidia-dcgm-exporter.service`` runs ``/usr/bin/dcgm-exporter -f
/etc/dcgm-exporter/default-counters.csv`` (NVIDIA/dcgm-exporter packaging/config-files/systemd); a flag wins over
its environment variable (pkg/cmd/app.go), so the drop-in replaces ``ExecStart`` with the collectors file, the
listen port and, with a host engine, ``-r <host:port>``: the exporter then reads the node's nv-hostengine instead of
embedding a second one, and ``PartOf=nvidia-dcgm.service`` makes systemd restart or stop it whenever the host engine
restarts or stops (an exporter bound to a host engine that restarted serves stale values). ``Restart=on-failure``:
the packaged unit restarts only on an abort.

``render`` is pure; ``run(module)`` works on an AnsibleModule or a part (module_utils/module_parts.py), through
``owned_files.sync_file`` (check, diff, 0644 root, parent directory made).
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils import managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import owned_files

PATH = "/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuops.conf"
HOSTENGINE_UNIT = "nvidia-dcgm.service"
HEADER = (
    "# Managed by gpuops.cluster (nvidia_stack, node_stack part dcgm_exporter): edits here are overwritten.\n"
    "# The DCGM Exporter's port and collectors file, and the host engine it reads and restarts with.\n"
)
_PATH_RE = re.compile(r"^/[A-Za-z0-9_.+/-]+$")
_HOSTENGINE_RE = re.compile(r"^(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}$")

MODULE_KWARGS = dict(
    argument_spec=dict(
        port=dict(type="int", default=9400),
        collectors=dict(type="str", default="/etc/dcgm-exporter/default-counters.csv"),
        hostengine=dict(type="str", default="localhost:5555"),
        path=dict(type="path", default=PATH),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        root=dict(type="path", default="/"),
    ),
    supports_check_mode=True,
)


def render(port, collectors, hostengine) -> str:
    """The drop-in's text; ``hostengine`` empty: the exporter embeds its own host engine (no ``-r``, no ``PartOf``).

    Raises ValueError naming what is not a port, an absolute path or a ``host:port``.
    """
    problems = []
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        problems.append("port %r is not a TCP port (1-65535)" % (port,))
    if not _PATH_RE.match(str(collectors)):
        problems.append("collectors %r is not an absolute path without spaces" % (collectors,))
    if hostengine and not _HOSTENGINE_RE.match(str(hostengine)):
        problems.append("hostengine %r is not host:port (localhost:5555, [::1]:5555)" % (hostengine,))
    if problems:
        raise ValueError("; ".join(problems))
    argv = "/usr/bin/dcgm-exporter -f %s -a :%d" % (collectors, port)
    lines = [HEADER.rstrip("\n")]
    if hostengine:
        argv += " -r %s" % hostengine
        lines += ["[Unit]", "PartOf=%s" % HOSTENGINE_UNIT, "After=%s" % HOSTENGINE_UNIT, ""]
    lines += ["[Service]", "ExecStart=", "ExecStart=%s" % argv, "Restart=on-failure", "RestartSec=5"]
    return "\n".join(lines) + "\n"


def run(module) -> dict:
    """The part's work: its result dict (``changed``, ``path``)."""
    params = module.params
    path = managed_file.under(params["root"], params["path"])
    result = dict(changed=False, path=path)
    diff = [] if module._diff else None
    if params["state"] == "absent":
        result["changed"] = managed_file.remove(module, path, diff)
    else:
        try:
            content = render(params["port"], params["collectors"], params["hostengine"])
        except ValueError as exc:
            module.fail_json(msg="%s: fix gpuops_dcgm_exporter_port / gpuops_dcgm_exporter_collectors" % exc)
        result["changed"] = owned_files.sync_file(module, path, content, 0o644, diff)
    if diff is not None:
        result["diff"] = diff
    return result
