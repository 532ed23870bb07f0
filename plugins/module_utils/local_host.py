# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a module_utils reader or writer needs of an ``AnsibleModule``, on a node without Ansible.

The node commands (``gpuops-gpu-health``, ``gpuops-mig-apply``) run the same module_utils the modules run, with
the node's bare Python: :class:`LocalHost` gives them ``get_bin_path``, ``run_command`` and ``fail_json``, so that
``command_runner.run_bounded`` and the readers work unchanged. Commands run as argv lists in the C locale, stdin
closed, each bounded twice: by coreutils ``timeout`` (``run_bounded`` wraps them) and by ``subprocess`` a few
seconds after that limit. ``fail_json`` raises ``error`` (:class:`HostError`, or the command's own exception).
"""

from __future__ import annotations

# The node commands run without Ansible (no AnsibleModule, so no run_command): their tools go through
# subprocess, as argv lists, in the C locale, each under a timeout.
# pylint: disable=ansible-bad-function
import os
import shutil
import subprocess

from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import KILL_AFTER

SEARCH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


class HostError(Exception):
    """``fail_json`` was called: the message says what could not be done."""


class LocalHost:
    """``get_bin_path``, ``run_command`` and ``fail_json`` of an ``AnsibleModule``, on the node itself."""

    def __init__(self, params, runner=subprocess.run, environ=None, error=HostError):
        self.params = params
        self.runner = runner
        self.error = error
        self.environ = dict(os.environ if environ is None else environ, LC_ALL="C", LANG="C")
        self.path = self.environ.get("PATH", "")

    def get_bin_path(self, name, required=False, opt_dirs=None):
        dirs = [d for d in self.path.split(os.pathsep) if d] + list(opt_dirs or []) + list(SEARCH_DIRS)
        found = shutil.which(name, path=os.pathsep.join(dirs))
        if found is None and required:
            self.fail_json(msg="%s not found in %s" % (name, os.pathsep.join(dirs)))
        return found

    def run_command(self, argv):
        limit = self.params.get("command_timeout") or 30
        if os.path.basename(argv[0]) == "timeout" and len(argv) > 3 and argv[3].isdigit():
            limit = int(argv[3])
        try:
            done = self.runner(
                argv, stdin=subprocess.DEVNULL, capture_output=True, env=self.environ, timeout=limit + KILL_AFTER + 5,
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return 124, "", "did not finish in %d s (killed)" % limit
        except OSError as error:
            return 127, "", str(error)
        return done.returncode, _text(done.stdout), _text(done.stderr)

    def fail_json(self, msg, **kwargs):
        raise self.error(msg)


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value or ""
