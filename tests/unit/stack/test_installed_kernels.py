"""installed_packages.query_kernels: one query of the installed kernel packages, and its failure fails the module."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import installed_packages

# rpm -q of names not installed: exit status 2, one line each on stdout (rpm's own words), nothing on stderr
NOT_INSTALLED = "package kernel-modules-extra is not installed\npackage kernel-devel is not installed\n"
KERNEL_CORE = "kernel-core\t0\t5.14.0\t503.15.1.el9_5\tx86_64\n"


class Failed(Exception):
    pass


class Module:
    def __init__(self):
        self.params = {}

    def get_bin_path(self, name, required=False):
        del required  # every tool is there
        return "/usr/bin/" + name

    def fail_json(self, **kwargs):
        raise Failed(kwargs["msg"])


def answering(monkeypatch, rc, out, err):
    monkeypatch.setattr(installed_packages, "run_bounded", lambda *args, **kwargs: (rc, out, err))


def test_rpm_names_not_installed_are_not_a_failure(monkeypatch):
    answering(monkeypatch, 2, KERNEL_CORE + NOT_INSTALLED, "")
    kernels = installed_packages.query_kernels(Module(), "dnf")
    assert [kernel["name"] for kernel in kernels] == ["kernel-core"]


def test_an_rpm_that_fails_fails_the_module_instead_of_reading_no_kernel(monkeypatch):
    answering(monkeypatch, 1, "", "error: cannot open Packages database in /var/lib/rpm\n")
    with pytest.raises(Failed, match="rpm -q failed listing the kernel packages: error: cannot open Packages database"):
        installed_packages.query_kernels(Module(), "dnf")


def test_a_dpkg_query_that_fails_fails_the_module(monkeypatch):
    answering(monkeypatch, 2, "", "dpkg-query: error: parsing file '/var/lib/dpkg/status'\n")
    with pytest.raises(Failed, match="dpkg-query failed listing the kernel packages"):
        installed_packages.query_kernels(Module(), "apt")
