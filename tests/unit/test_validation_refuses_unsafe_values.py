"""The validation play refuses, before any host, the inventory values that would reach a root write unchecked
(issue 25): a sysctl key that names a path outside /proc/sys, a package name or version that apt or dnf cannot
take (one ending in a newline breaks the pin file), and a plain-http EPEL release URL."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.host_validation import findings
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    apt_pinning,
    package_syntax,
    rpm_versionlock,
    stack_resolver,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import MatrixError, load_matrix

TODAY = datetime.date(2026, 12, 2)
HOST = {"gpuops_stack": {"driver": "580", "cuda": "13.0"}, "gpuops_gpu": "h100-sxm"}
MATRIX = Path(__file__).resolve().parents[2] / "matrix" / "nvidia_stack.yml"
ESCAPING_KEY = "kernel.//.//.//.etc.cron/d.x"  # /proc/sys/kernel/../../../etc/cron.d/x


def problems(values, checks=()):
    return findings(values, names=list(values), checks=list(checks), os_name="Ubuntu", os_version="22.04", today=TODAY)[
        "problems"
    ]


# ------------------------------------------------------------------ sysctl keys
@pytest.mark.parametrize("name", ["kernel_tuning_sysctl_extra", "kernel_tuning_sysctls", "kernel_tuning_rdma_sysctls"])
def test_a_sysctl_key_that_leaves_proc_sys_is_refused(name):
    (problem,) = problems({name: {"vm.swappiness": 1, ESCAPING_KEY: "* * * * * root sh"}})
    assert problem.startswith(
        "%s is {vm.swappiness: 1, kernel.//.//.//.etc.cron/d.x: '* * * * * root sh'}: key "
        "'kernel.//.//.//.etc.cron/d.x' has the part '//', which names the directory itself or its parent ('..')" % name
    )
    assert problem.endswith(
        "write the name of a /proc/sys entry with dots between its parts, such as net.core.rmem_max (a slash "
        "stands for a dot inside a part, as in net.ipv4.conf.eth0/100.forwarding); no part may be empty, '.' or '..'"
    )


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("kernel..x", "has an empty part"),
        ("kernel.x\n", "has the part 'x\\n', with a character no /proc/sys entry name has"),
        ("net.ipv4.tcp_rmem = 1", "has the part 'tcp_rmem = 1', with a character"),
    ],
)
def test_every_malformed_sysctl_key_is_named(key, problem):
    (found,) = problems({"kernel_tuning_sysctl_extra": {key: 1}})
    assert ("key %r %s" % (key, problem)) in found


def test_good_sysctl_keys_pass():
    values = {"kernel_tuning_sysctl_extra": {"net.ipv4.conf.eth0/100.forwarding": 1, "vm.max_map_count": 1048576}}
    assert problems(values) == []


def test_a_profile_s_sysctl_key_is_checked_too():
    profiles = {"custom": {"sysctls": {"vm.swappiness": 1}, "rdma_sysctls": {"net..core": 1}}}
    (problem,) = problems({"kernel_tuning_profiles": profiles})
    assert problem.startswith("kernel_tuning_profiles is {custom: ")
    assert "custom.rdma_sysctls: key 'net..core' has an empty part" in problem


# ------------------------------------------------------------------ EPEL release URL
def test_a_plain_http_epel_release_url_is_refused_like_the_other_urls():
    url = "http://mirror.example.com/epel/epel-release-latest-9.noarch.rpm"
    (problem,) = problems({"nvidia_stack_epel_release_url": url})
    assert problem == (
        "nvidia_stack_epel_release_url is %r: a plain http:// URL, which lets anyone on the path replace the "
        "repository or its key; use https:// (or set nvidia_stack_repo_allow_http: true for a mirror inside a "
        "trusted network)" % url
    )
    assert problems({"nvidia_stack_epel_release_url": url, "nvidia_stack_repo_allow_http": True}) == []
    assert problems({"nvidia_stack_epel_release_url": "https://" + url[len("http://") :]}) == []
    assert problems({"nvidia_stack_epel_release_url": ""}) == []
    (problem,) = problems({"nvidia_stack_epel_release_url": "ftp://mirror.example.com/epel-release.rpm"})
    assert problem.endswith("not an https:// URL")


# ------------------------------------------------------------------ package names and versions
@pytest.mark.parametrize(
    ("manager", "name", "ok"),
    [
        ("apt", "nvidia-driver-580", True),
        ("apt", "libnccl2", True),
        ("apt", "g++", True),
        ("apt", "nvidia-driver-580\n", False),
        ("apt", "Nvidia-driver", False),
        ("apt", "x", False),
        ("apt", "-driver", False),
        ("apt", "nvidia driver", False),
        ("dnf", "kmod-nvidia-open-dkms", True),
        ("dnf", "libnccl-devel", True),
        ("dnf", "nvidia-driver\n", False),
        ("dnf", "nvidia driver", False),
    ],
)
def test_package_names_follow_debian_and_rpm_syntax(manager, name, ok):
    assert (package_syntax.name_problem(name, manager) is None) is ok


@pytest.mark.parametrize(
    ("manager", "version", "ok"),
    [
        ("apt", "580.126.09-1ubuntu1", True),
        ("apt", "1:4.1.1-1", True),
        ("apt", "2.21.5-1+cuda12.4", True),
        ("apt", "580.126.09-1\n", False),
        ("apt", "580.126.09-", False),
        ("apt", "a580", False),
        ("apt", "580 1", False),
        ("apt", "x:580", False),
        ("dnf", "3:580.126.09-1.el9", True),
        ("dnf", "580.126.09", True),
        ("dnf", "3:580.126.09-1.el9\n", False),
        ("dnf", "580-1-2", False),
    ],
)
def test_package_versions_follow_debian_and_rpm_syntax(manager, version, ok):
    assert (package_syntax.version_problem(version, manager) is None) is ok


def test_a_version_pattern_may_hold_a_star_but_no_newline():
    assert package_syntax.version_problem("2.21.5-*+cuda13.0", "apt", pattern=True) is None
    assert package_syntax.version_problem("2.21.5-*+cuda13.0\n", "apt", pattern=True).endswith("(* allowed)")


def test_the_pin_file_and_the_versionlock_refuse_a_trailing_newline():
    with pytest.raises(apt_pinning.PinningError, match="is not a Debian package name"):
        apt_pinning.normalize_pins([], [{"name": "nvidia-driver-580\n", "version": "580.126.09-1"}])
    with pytest.raises(apt_pinning.PinningError, match="is not an exact Debian version"):
        apt_pinning.normalize_pins([], [{"name": "nvidia-driver-580", "version": "580.126.09-1\n"}])
    with pytest.raises(rpm_versionlock.VersionlockError, match="is not an RPM package name"):
        rpm_versionlock.lock_entry("nvidia-driver\n", "3:580.126.09-1.el9")


def _matrix_with(tmp_path, old, new):
    text = MATRIX.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "nvidia_stack.yml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return str(path)


def test_a_matrix_version_ending_in_a_newline_is_refused(tmp_path):
    path = _matrix_with(tmp_path, 'version: "{driver}"}', 'version: "{driver}\\n"}')
    with pytest.raises(MatrixError, match="is not a package version"):
        load_matrix(path)
    (problem,) = problems(dict(HOST, gpuops_matrix_path=path), checks=("stack",))
    assert problem.startswith("gpuops_matrix_path: compatibility matrix %s is invalid" % path)
    assert "'{driver}\\n' is not a package version: letters, digits" in problem


def test_a_matrix_package_name_ending_in_a_newline_is_refused(tmp_path):
    path = _matrix_with(tmp_path, '{name: "nvidia-driver-{branch}",', '{name: "nvidia-driver-{branch}\\n",')
    with pytest.raises(MatrixError, match="is not a valid package name"):
        load_matrix(path)


def test_a_resolved_package_apt_cannot_take_is_a_violation(tmp_path):
    # Upper case passes the matrix's own check (an RPM name may have it), not Debian policy.
    path = _matrix_with(tmp_path, '{name: "libnccl2",', '{name: "LibNCCL2",')
    found = problems(dict(HOST, gpuops_matrix_path=path), checks=("stack",))
    assert any(
        "the compatibility matrix's nccl packaging for ubuntu2204 gives a package that apt cannot install: "
        "'LibNCCL2' is not a Debian package name"
        in problem
        and problem.endswith("fix the packaging rule in the matrix (gpuops_matrix_path, or matrix/nvidia_stack.yml)")
        for problem in found
    ), found
    with pytest.raises(stack_resolver.StackViolations):
        stack_resolver.resolve(
            HOST["gpuops_stack"], "Ubuntu", "22.04", "h100-sxm", matrix=load_matrix(path), today=TODAY
        )
