"""Fixtures for the kernel tuning tests: fake /sys and /proc trees and a module runner."""

from __future__ import annotations

import json

import pytest

from .sysfs_tree import build


@pytest.fixture
def make_tree(tmp_path):
    """Build a topology from tests/fixtures/sysfs under a fresh directory; returns (root, spec)."""

    def _make(name: str):
        root = tmp_path / name
        spec = build(name, root)
        return root, spec

    return _make


class ModuleExit(Exception):
    def __init__(self, result, failed):
        super().__init__(result.get("msg", ""))
        self.result = result
        self.failed = failed


@pytest.fixture
def run_module(monkeypatch):
    """Run a module's main() with args, capturing exit_json/fail_json; run_command is a callable given by the test.

    ``commands`` collects every argv passed to run_command. ``bins`` maps binary name -> path or None.
    """
    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args

    def _run(module, args, run_command=None, bins=None, check_mode=False, diff=False):
        commands = []
        bins = bins if bins is not None else {}

        def fake_exit(self, **kwargs):
            raise ModuleExit(json.loads(json.dumps(kwargs)), False)

        def fake_fail(self, msg, **kwargs):
            kwargs["msg"] = msg
            raise ModuleExit(json.loads(json.dumps(kwargs, default=str)), True)

        def fake_bin(self, name, required=False, opt_dirs=None):
            path = bins.get(name)
            if path is None and required:
                self.fail_json(msg=f"{name} not found")
            return path

        def fake_run(self, argv, **kwargs):
            commands.append(list(argv))
            # The C locale: set once per module (command_runner.use_c_locale) or per call (older helpers).
            environ = dict(
                getattr(self, "run_command_environ_update", None) or {}, **(kwargs.get("environ_update") or {})
            )
            assert environ.get("LC_ALL") == "C", f"{argv} would run in the node's locale"
            if run_command is None:
                return 0, "", ""
            return run_command(list(argv))

        monkeypatch.setattr(basic.AnsibleModule, "exit_json", fake_exit)
        monkeypatch.setattr(basic.AnsibleModule, "fail_json", fake_fail)
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", fake_bin)
        monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run)
        full = dict(args)
        if check_mode:
            full["_ansible_check_mode"] = True
        if diff:
            full["_ansible_diff"] = True
        with patch_module_args(full), pytest.raises(ModuleExit) as caught:
            module.main()
        caught.value.result["_commands"] = commands
        caught.value.result["_failed"] = caught.value.failed
        return caught.value.result

    return _run


@pytest.fixture
def as_running_system(monkeypatch):
    """Let a module treat the test tree as the running system so its command path (sysctl, update-grub,
    grubby) is exercised; run_command is always mocked by run_module, so nothing runs for real."""
    from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection

    monkeypatch.setattr(container_detection, "is_running_system", lambda root: True)
