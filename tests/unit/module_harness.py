"""Run a module's ``main()`` in-process: the one harness of the collection's module tests.

community.general's ``tests/unit/plugins/modules/utils.py`` pattern:

- the arguments go in through ``ansible.module_utils.testing.patch_module_args``
  (:func:`set_module_args`), with ``check_mode``/``diff`` as the
  ``_ansible_check_mode``/``_ansible_diff`` flags;
- ``exit_json``/``fail_json`` raise :class:`AnsibleExitJson`/:class:`AnsibleFailJson`
  carrying the result, which must be JSON (as Ansible would send it back);
- ``run_command`` is a :class:`FakeCommands` that answers by argv and records every call,
  checks that commands are argv lists and that they run in the C locale (whether the module
  called ``command_runner.use_c_locale`` once or passes ``environ_update`` per call); with
  ``inside_timeout=True`` an answer written for a command also answers it run under coreutils
  ``timeout`` (``command_runner.run_bounded``); :func:`unbounded` gives a fallback the command inside;
- ``get_bin_path`` is a :class:`FakeBins`.

Typical use, in a conftest or a test::

    @pytest.fixture
    def harness(monkeypatch):
        return ModuleHarness(monkeypatch, commands=FakeCommands({"nvidia-smi -q -x": (0, xml, "")}))

    def test_x(harness):
        result = harness.run(gpu_health, {"level": "quick"}, check_mode=True)
        failure = harness.fail(gpu_health, {"since": "bad"})

:func:`make_run_module` serves the older ``run_module(module, args, run_command=None, bins=None,
check_mode=False, diff=False)`` signature of the kernel tuning tests.
"""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

C_LOCALE_KEY = "LC_ALL"


class ModuleExit(Exception):
    """The module ended; ``result`` is what it returned (JSON round-tripped)."""

    failed = False

    def __init__(self, result):
        super().__init__(result.get("msg", ""))
        self.result = result


class AnsibleExitJson(ModuleExit):
    """``exit_json`` was called."""


class AnsibleFailJson(ModuleExit):
    """``fail_json`` was called; ``result`` carries ``msg`` and ``failed: true``."""

    failed = True


def _as_json(result):
    """What Ansible would send back: the result must serialise, and comes back as plain JSON types."""
    return json.loads(json.dumps(result))


def exit_json(module, **kwargs):
    raise AnsibleExitJson(_as_json(kwargs))


def fail_json(module, msg, **kwargs):
    kwargs["msg"] = msg
    kwargs["failed"] = True
    raise AnsibleFailJson(_as_json(kwargs))


def set_module_args(args=None, check_mode=False, diff=False):
    """Context manager giving ``args`` to the next ``AnsibleModule``, with the check and diff flags."""
    full = dict(args or {})
    if check_mode:
        full["_ansible_check_mode"] = True
    if diff:
        full["_ansible_diff"] = True
    return patch_module_args(full)


def unbounded(argv):
    """The command inside a coreutils ``timeout`` wrapper (``timeout [-k N] N argv...``); other argv as given."""
    argv = list(argv)
    if not argv or os.path.basename(argv[0]) != "timeout":
        return argv
    rest = argv[1:]
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] in ("-k", "-s", "--kill-after", "--signal") else rest[1:]
    return rest[1:]


def bound_of(argv):
    """The seconds of the coreutils ``timeout`` wrapping ``argv``, or None when it runs without a time limit."""
    argv = list(argv)
    if not argv or os.path.basename(argv[0]) != "timeout":
        return None
    inner = unbounded(argv)
    return int(argv[len(argv) - len(inner) - 1])


def _key(command):
    return tuple(command.split()) if isinstance(command, str) else tuple(command)


class FakeCommands:
    """A ``run_command`` that answers by argv and records every call.

    ``answers`` maps a command to its answer. The command is a string (split on spaces) or a
    sequence; its first word matches the binary's base name or its full path, the other words the
    start of the arguments, and the longest match wins (``"nvidia-smi nvlink -s"`` before
    ``"nvidia-smi"``). An answer is ``(rc, stdout, stderr)``, a string (stdout with rc 0), or a
    callable taking the argv and returning either. Commands no answer matches go to ``fallback``
    (a callable taking the argv), else get ``default`` when it is set, else fail the test.

    ``calls`` lists every argv; ``environments`` the environment each call ran with (the module's
    ``run_command_environ_update`` updated by the call's ``environ_update``).
    """

    def __init__(self, answers=None, fallback=None, default=None, require_c_locale=True, inside_timeout=False):
        self.answers = {}
        self.inside_timeout = inside_timeout
        self.fallback = fallback
        self.default = default
        self.require_c_locale = require_c_locale
        self.calls = []
        self.environments = []
        for command, answer in (answers or {}).items():
            self.add(command, answer)

    def add(self, command, answer):
        self.answers[_key(command)] = answer
        return self

    def _lookup(self, argv):
        best = None
        for key, answer in self.answers.items():
            if not key or key[0] not in (argv[0], os.path.basename(argv[0])):
                continue
            if tuple(argv[1 : len(key)]) != key[1:]:
                continue
            if best is None or len(key) > len(best[0]):
                best = (key, answer)
        return best

    def answer(self, argv):
        """The ``(rc, stdout, stderr)`` for ``argv``; with ``inside_timeout``, a command under ``timeout`` takes
        the answer of the one inside unless an answer names ``timeout`` itself (a fallback gets ``argv`` as run)."""
        found = self._lookup(argv)
        if found is None and self.inside_timeout and bound_of(argv) is not None:
            found = self._lookup(unbounded(argv))
        if found is not None:
            answer = found[1]
        elif self.fallback is not None:
            answer = self.fallback
        elif self.default is not None:
            answer = self.default
        else:
            raise AssertionError("unexpected command %s" % argv)
        if callable(answer):
            answer = answer(list(argv))
        if isinstance(answer, str):
            return 0, answer, ""
        return tuple(answer)

    def __call__(self, module, args, check_rc=False, environ_update=None, **kwargs):
        assert isinstance(args, list), "commands are argv lists, not %r" % (args,)
        environment = dict(getattr(module, "run_command_environ_update", None) or {})
        environment.update(environ_update or {})
        if self.require_c_locale:
            assert environment.get(C_LOCALE_KEY) == "C", "%s ran without LC_ALL=C: call use_c_locale(module)" % args
        self.calls.append(list(args))
        self.environments.append(environment)
        rc, out, err = self.answer(list(args))
        if check_rc and rc != 0:
            module.fail_json(msg=err or out, rc=rc, stdout=out, stderr=err, cmd=list(args))
        return rc, out, err

    def of(self, tool):
        """The calls of one binary (by base name; a call under ``timeout`` by the command inside)."""
        return [
            call
            for call in self.calls
            if os.path.basename(call[0]) == tool or os.path.basename((unbounded(call) or [""])[0]) == tool
        ]


class FakeBins:
    """A ``get_bin_path``: ``bins`` is None (every binary at ``prefix``), a dict (name -> path or None),
    a collection of names found at ``prefix``, or a callable (name -> path or None).
    A missing binary with ``required=True`` fails the module as Ansible does."""

    def __init__(self, bins=None, prefix="/usr/bin/"):
        self.bins = bins
        self.prefix = prefix
        self.asked = []

    def path(self, name):
        if self.bins is None:
            return self.prefix + name
        if callable(self.bins):
            return self.bins(name)
        if isinstance(self.bins, dict):
            return self.bins.get(name)
        return self.prefix + name if name in self.bins else None

    def __call__(self, module, name, required=False, opt_dirs=None):
        self.asked.append(name)
        path = self.path(name)
        if path is None and required:
            module.fail_json(msg="Failed to find required executable %s" % name)
        return path


def _main_of(module):
    return module.main if hasattr(module, "main") else module


class ModuleHarness:
    """Patches ``AnsibleModule`` for one test (through ``monkeypatch``) and runs modules.

    ``commands``: a :class:`FakeCommands`, or a dict of answers for a new one. ``bins``: what
    :class:`FakeBins` takes. Both stay reachable as ``harness.commands`` and ``harness.bins``.
    """

    def __init__(self, monkeypatch, commands=None, bins=None):
        self.commands = commands if isinstance(commands, FakeCommands) else FakeCommands(commands)
        self.bins = bins if isinstance(bins, FakeBins) else FakeBins(bins)
        harness = self

        # through the harness, so a test may replace harness.commands or harness.bins later
        def run_command(module, *args, **kwargs):
            return harness.commands(module, *args, **kwargs)

        def get_bin_path(module, *args, **kwargs):
            return harness.bins(module, *args, **kwargs)

        monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
        monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
        monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)

    def outcome(self, module, args=None, check_mode=False, diff=False):
        """Run ``module.main()`` (or a ``main`` callable); the :class:`ModuleExit` it ended with."""
        with set_module_args(args, check_mode=check_mode, diff=diff), pytest.raises(ModuleExit) as ended:
            _main_of(module)()
        return ended.value

    def run(self, module, args=None, check_mode=False, diff=False):
        """The result of a run that must end in ``exit_json``; ``fail_json`` raises :class:`AnsibleFailJson`."""
        with set_module_args(args, check_mode=check_mode, diff=diff), pytest.raises(AnsibleExitJson) as ended:
            _main_of(module)()
        return ended.value.result

    def fail(self, module, args=None, check_mode=False, diff=False):
        """The result of a run that must end in ``fail_json``."""
        with set_module_args(args, check_mode=check_mode, diff=diff), pytest.raises(AnsibleFailJson) as ended:
            _main_of(module)()
        return ended.value.result


def make_run_module(monkeypatch):
    """The kernel tuning tests' ``run_module(module, args, run_command=None, bins=None, check_mode=False,
    diff=False)``: ``run_command`` answers every argv (default ``(0, "", "")``), ``bins`` maps names to
    paths (default: none found but coreutils ``timeout``, which every node has); the result carries
    ``_commands`` (each command as the module asked for it, without its ``timeout`` wrapper) and
    ``_failed``, failures included. Every command must run under ``timeout``."""

    def run_module(module, args, run_command=None, bins=None, check_mode=False, diff=False):
        fallback = (lambda argv: run_command(unbounded(argv))) if run_command else None
        commands = FakeCommands(fallback=fallback, default=(0, "", ""), inside_timeout=True)
        harness = ModuleHarness(monkeypatch, commands=commands, bins={"timeout": "/usr/bin/timeout", **(bins or {})})
        ended = harness.outcome(module, args, check_mode=check_mode, diff=diff)
        unbounded_calls = [call for call in commands.calls if bound_of(call) is None]
        assert not unbounded_calls, "commands run without a time limit: %s" % unbounded_calls
        result = dict(ended.result)
        result["_commands"] = [unbounded(call) for call in commands.calls]
        result["_failed"] = ended.failed
        return result

    return run_module
