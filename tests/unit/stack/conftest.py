"""Run the stack modules against a fake node, through the shared module harness (tests/unit/module_harness.py).

The harness's ``run_command`` and ``get_bin_path`` ask a ``FakeNode`` that
answers apt-mark, apt-cache, dpkg-query, rpm, dnf, nvidia-smi and lspci from its state and
records every argv (the command inside its coreutils ``timeout``: every node has coreutils, and every
command must run under it, which ``run_module`` checks); ``exit_json``/``fail_json`` raise so a test reads
the result.
"""

from __future__ import annotations

import fnmatch

import pytest

from tests.unit.module_harness import AnsibleFailJson, FakeCommands, ModuleHarness, bound_of, unbounded


class FakeNode:
    """Package and tool state of one managed node, as the modules' commands see it."""

    def __init__(self, binaries=("apt-mark", "dpkg-query", "lspci", "nvidia-smi")):
        self.binaries = set(binaries)
        self.held: set[str] = set()
        self.dpkg: dict[str, tuple[str, str]] = {}  # name -> (version, status)
        self.rpm: dict[str, tuple[str, str, str]] = {}  # name -> (epoch, version, release)
        self.enabled_streams: dict[str, str] = {}
        self.nvidia_smi = (0, "", "")
        self.lspci = (0, "", "")
        self.units: dict[str, tuple[str, str]] = {}  # service -> (ActiveState, UnitFileState)
        self.madison = ""  # apt-cache madison output
        self.policy = ""  # apt-cache policy output
        self.repoquery = ""  # dnf repoquery output
        self.fail: dict[str, tuple[int, str, str]] = {}
        self.calls: list[list[str]] = []

    def bin_path(self, name):
        return f"/usr/bin/{name}" if name in self.binaries or name == "timeout" else None

    def answer(self, args):
        """The harness's answer to every command (it has checked the argv list and the C locale)."""
        args = unbounded(args)
        self.calls.append(list(args))
        tool = args[0].rsplit("/", 1)[-1]
        key = " ".join([tool, *args[1:2]])
        if key in self.fail:
            return self.fail[key]
        handler = getattr(self, "_" + tool.replace("-", "_"))
        return handler(args[1:])

    def _apt_mark(self, argv):
        if argv[0] == "showhold":
            return 0, "".join(f"{name}\n" for name in sorted(self.held)), ""
        if argv[0] == "hold":
            self.held.update(argv[1:])
            return 0, "".join(f"{name} set on hold.\n" for name in argv[1:]), ""
        if argv[0] == "unhold":
            self.held.difference_update(argv[1:])
            return 0, "".join(f"Canceled hold on {name}.\n" for name in argv[1:]), ""
        raise AssertionError(f"unexpected apt-mark {argv}")

    def _dpkg_query(self, argv):
        assert argv[0] == "-W"
        out, err, rc = [], [], 0
        for pattern in argv[2:]:
            # a glob (dpkg-query -W 'linux-*') lists every package it matches, in name order
            names = sorted(name for name in self.dpkg if fnmatch.fnmatchcase(name, pattern)) or [pattern]
            out_rc = self._dpkg_rows(names, out, err)
            rc = rc or out_rc
        return rc, "".join(out), "".join(err)

    def _dpkg_rows(self, names, out, err):
        rc = 0
        for name in names:
            if name in self.dpkg:
                version, status = self.dpkg[name]
                if name in self.held:
                    status = "hold" + status[status.index(" ") :]
                out.append(f"{name}\t{version}\t{status}\n")
            else:
                err.append(f"dpkg-query: no packages found matching {name}\n")
                rc = 1
        return rc

    def _rpm(self, argv):
        if argv[:2] == ["-qa", "--qf"]:  # the installed packages matching any of the patterns (globs)
            rows = [
                f"{name}\t{epoch}\t{version}\t{release}\n"
                for name, (epoch, version, release) in sorted(self.rpm.items())
                if any(fnmatch.fnmatchcase(name, pattern) for pattern in argv[3:])
            ]
            return 0, "".join(rows), ""
        assert argv[:2] == ["-q", "--qf"]
        out, rc = [], 0
        for name in argv[3:]:
            if name in self.rpm:
                epoch, version, release = self.rpm[name]
                out.append(f"{name}\t{epoch}\t{version}\t{release}\n")
            else:
                out.append(f"package {name} is not installed\n")
                rc += 1
        return rc, "".join(out), ""

    def _dnf(self, argv):
        if argv[0] == "repoquery":
            return 0, self.repoquery, ""
        if argv[:4] == ["-q", "module", "list", "--enabled"]:
            name = argv[4]
            if name not in self.enabled_streams:
                return 1, "", "Error: No matching Modules to list\n"
            stream = self.enabled_streams[name]
            return 0, f"Name Stream Profiles Summary\n{name}  {stream} [e]  default [d], fm  Nvidia driver\n", ""
        if argv[:3] == ["-y", "module", "enable"] or argv[:3] == ["-y", "module", "switch-to"]:
            name, _sep, stream = argv[3].partition(":")
            self.enabled_streams[name] = stream
            return 0, "", ""
        raise AssertionError(f"unexpected dnf {argv}")

    def _apt_cache(self, argv):
        if argv[0] == "madison":
            return 0, self.madison, ""
        if argv == ["policy"]:
            return 0, self.policy, ""
        raise AssertionError(f"unexpected apt-cache {argv}")

    def _nvidia_smi(self, argv):
        return self.nvidia_smi

    def _systemctl(self, argv):
        assert argv[:3] == ["show", "--property=Id,ActiveState,UnitFileState", "--"]
        blocks = []
        for name in argv[3:]:
            active, enabled = self.units.get(name, ("inactive", ""))
            blocks.append(f"Id={name}.service\nActiveState={active}\nUnitFileState={enabled}\n")
        return 0, "\n".join(blocks), ""

    def _lspci(self, argv):
        assert argv == ["-n", "-d", "10de:"]
        return self.lspci


@pytest.fixture
def harness(monkeypatch):
    return ModuleHarness(monkeypatch)


@pytest.fixture
def node(harness):
    fake = FakeNode()
    harness.commands = FakeCommands(fallback=fake.answer)
    harness.bins.bins = fake.bin_path
    return fake


@pytest.fixture
def run_module(harness, node):
    """``run_module(main, args, check=False, diff=False)`` -> result dict; raises ``run_module.Fail`` on fail_json."""

    def run(main, args, check=False, diff=False):
        try:
            return harness.run(main, args, check_mode=check, diff=diff)
        finally:
            unbounded = [call for call in harness.commands.calls if bound_of(call) is None]
            assert not unbounded, "commands run without a time limit: %s" % unbounded

    run.Fail = AnsibleFailJson
    return run
