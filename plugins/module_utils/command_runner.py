# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every module of the collection runs a command on the node.

``use_c_locale`` is called once, right after ``AnsibleModule(...)``: every
``run_command`` of that module then runs with ``LC_ALL=C`` (parsers read
English, untranslated output), without repeating ``environ_update`` per call.
``run_checked`` runs an argv list and fails the module with one message that
says what failed, with rc, stdout and stderr attached.
"""

from __future__ import annotations

C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}


def use_c_locale(module):
    """Make every later ``module.run_command`` run with the C locale; returns ``module``."""
    module.run_command_environ_update = dict(C_LOCALE)
    return module


def run_checked(module, argv, what, hint="", **kwargs):
    """Run ``argv`` (a list, never a shell string); fail the module when it exits non-zero.

    ``what`` names the step in the failure ("reload the sysctl drop-in"), ``hint`` says what to
    do next. Returns ``(stdout, stderr)``.
    """
    rc, out, err = module.run_command(list(argv), **kwargs)
    if rc != 0:
        detail = (err or out or "").strip().splitlines()
        module.fail_json(
            msg="could not %s: %s exited %d%s%s"
            % (what, argv[0], rc, (": " + detail[-1]) if detail else "", (". " + hint) if hint else ""),
            rc=rc,
            stdout=out,
            stderr=err,
            cmd=list(argv),
        )
    return out, err
