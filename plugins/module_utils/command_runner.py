# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every module of the collection runs a command on the node.

``use_c_locale`` is called once, right after ``AnsibleModule(...)``: every
``run_command`` of that module then runs with ``LC_ALL=C`` (parsers read
English, untranslated output), without repeating ``environ_update`` per call.

Every command is bounded: ``run_bounded`` runs an argv list under coreutils
``timeout`` (SIGTERM at the limit, SIGKILL :data:`KILL_AFTER` seconds later),
and a command that runs out of time fails the module, saying which command and
after how long; it is never read as an empty or a passing answer. A node
without ``timeout`` (coreutils) fails the module rather than run a command
without a bound. ``run_checked`` also fails the module when the command exits
non-zero, with one message that says what failed, with rc, stdout and stderr
attached.
"""

from __future__ import annotations

C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}
READ_LIMIT = 60  # s: a read of the node's state (nvidia-smi, lspci, systemctl, dpkg-query, sinfo)
CHANGE_LIMIT = 600  # s: a change that may read repositories or rebuild boot files (dnf, grubby, update-grub)
KILL_AFTER = 5  # s between SIGTERM and SIGKILL
TIMED_OUT_RCS = (124, 137)  # coreutils timeout: the limit was reached (137: killed after the grace)


def use_c_locale(module):
    """Make every later ``module.run_command`` run with the C locale; returns ``module``."""
    module.run_command_environ_update = dict(C_LOCALE)
    return module


def first_line(*texts):
    """The first non-blank line of the first of ``texts`` (a command's stderr, stdout) that has one, stripped; ""."""
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""


def bounded_argv(module, argv, seconds=READ_LIMIT):
    """``argv`` under coreutils ``timeout``: ``[timeout, -k, 5, seconds, *argv]``; fails the module without it."""
    limiter = module.get_bin_path("timeout")
    if not limiter:
        module.fail_json(
            msg="coreutils timeout was not found on the node, and gpuops.cluster runs no command without a time "
            "limit: install coreutils (it provides timeout), or put its directory on the PATH",
            cmd=list(argv),
        )
    return [limiter, "-k", str(KILL_AFTER), str(int(seconds)), *argv]


def run_bounded(module, argv, what, seconds=READ_LIMIT, hint="", **kwargs):
    """``(rc, stdout, stderr)`` of ``argv`` (a list, never a shell string), bounded by ``seconds``.

    A command that did not finish in time fails the module: ``what`` names the step ("read the GPUs with
    nvidia-smi"), ``hint`` says what to do next.
    """
    full = bounded_argv(module, argv, seconds)
    rc, out, err = module.run_command(full, **kwargs)
    if rc in TIMED_OUT_RCS:
        module.fail_json(
            msg="could not %s: %s did not finish in %d s and was stopped%s"
            % (what, argv[0], int(seconds), (". " + hint) if hint else ""),
            rc=rc,
            stdout=out,
            stderr=err,
            cmd=full,
            timed_out=True,
        )
    return rc, out, err


def run_checked(module, argv, what, hint="", seconds=READ_LIMIT, **kwargs):
    """Run ``argv`` bounded by ``seconds`` (:func:`run_bounded`); fail the module when it exits non-zero.

    ``what`` names the step in the failure ("reload the sysctl drop-in"), ``hint`` says what to
    do next. Returns ``(stdout, stderr)``.
    """
    rc, out, err = run_bounded(module, list(argv), what, seconds, hint, **kwargs)
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
