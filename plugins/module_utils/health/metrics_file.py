# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write gpu_health's node_exporter textfile (``prometheus_textfile.render_prometheus``) on the node, atomically.

The run's timestamp line is left out of the comparison, so a verdict that did not change is no change.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils import managed_file


def _comparable_text(text):
    return "\n".join(line for line in (text or "").splitlines() if "_last_run_timestamp_seconds " not in line)


def write_textfile(module, path, content):
    """Atomically write ``content`` to ``path``; returns (changed, before)."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        module.fail_json(
            msg="directory %s of prometheus_textfile does not exist: create it or point prometheus_textfile at "
            "node_exporter's --collector.textfile.directory" % directory
        )
    before = None
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            before = handle.read()
    changed = _comparable_text(before) != _comparable_text(content) or before is None
    if module.check_mode:
        return changed, before
    managed_file.write_atomic(module, path, content)
    return changed, before
