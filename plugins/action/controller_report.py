# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a run's JSON report on the controller, in the controller's process.

``ansible.builtin.copy`` on localhost runs two Python modules (stat, then copy) for a file the
controller could write itself; this action writes it directly: pretty JSON, atomically (a
temporary file in the same directory, then ``os.replace``), 0644 unless told, changed only
when the text differs, nothing written in check mode, a before/after in diff mode.
The file is written by the collection's one atomic writer (module_utils/managed_file.replace_file).
"""

from __future__ import annotations

import os

from ansible.plugins.action import ActionBase
from ansible.plugins.filter.core import to_nice_json
from ansible_collections.gpuops.cluster.plugins.module_utils.managed_file import replace_file


def report_text(data) -> str:
    """The report as written: what ``to_nice_json`` gives (indented, sorted keys), one trailing newline."""
    return to_nice_json(data) + "\n"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "data", "mode"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        path = self._task.args.get("path")
        if not isinstance(path, str) or not path:
            result.update(failed=True, msg="path is required: the report file on the controller")
            return result
        path = os.path.abspath(os.path.expanduser(path))
        mode_arg = self._task.args.get("mode", "0644")
        try:
            # An unquoted YAML 0644 arrives as the int 420: take an int as the mode itself.
            mode = mode_arg if isinstance(mode_arg, int) and not isinstance(mode_arg, bool) else int(str(mode_arg), 8)
        except ValueError:
            mode = -1
        if not 0 <= mode <= 0o777 or mode & 0o002:
            result.update(
                failed=True, msg=f"mode {mode_arg!r}: give an octal string such as '0644', not world-writable"
            )
            return result
        if "data" not in self._task.args:
            result.update(failed=True, msg="data is required: what the report holds")
            return result
        try:
            text = report_text(self._task.args["data"])
        except (TypeError, ValueError) as exc:
            result.update(failed=True, msg=f"data cannot be written as JSON: {exc}")
            return result
        if not os.path.isdir(os.path.dirname(path)):
            result.update(failed=True, msg=f"the directory of {path} does not exist on the controller: create it first")
            return result
        try:
            with open(path, encoding="utf-8") as handle:
                before = handle.read()
            current_mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            before, current_mode = None, None
        changed = before != text or current_mode != mode
        result.update(changed=changed, path=path)
        if changed and self._task.diff:
            result["diff"] = dict(before=before or "", after=text, before_header=path, after_header=path)
        if changed and not self._task.check_mode:
            try:
                replace_file(path, text, mode)
            except OSError as exc:
                result.update(failed=True, msg=f"could not write {path}: {exc.strerror or exc}")
        return result
