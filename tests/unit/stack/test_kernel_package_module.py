"""The kernel_package module on a fake node: install, verify before any reboot, check mode, converged re-run.

The node is a ``/lib/modules`` + ``/boot`` tree under ``tmp_path`` (kernel_package.ROOT); apt-get install and
``dkms autoinstall`` are answered by callables that lay down what the real ones would (a kernel, its modules.dep).
Package listings: tests/fixtures/kernel/ (real ``dpkg -l`` rows, see the README); ``dkms status``: tests/fixtures/dkms/.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import kernel_package

from tests.unit.module_harness import FakeCommands, ModuleHarness, unbounded
from tests.unit.stack.test_kernel_lockstep import DEBIAN_INDEX, dpkg_query

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RUNNING, NEW = "6.1.0-39-amd64", "6.1.0-40-amd64"
ARGS = {"kernel": "6.1.0-40", "package_manager": "apt"}


def add_kernel(root, kver, module=True):
    base = root / "lib/modules" / kver
    base.mkdir(parents=True, exist_ok=True)
    listed = []
    if module:
        (base / "updates/dkms").mkdir(parents=True, exist_ok=True)
        (base / "updates/dkms/nvidia.ko").write_bytes(b"\x7fELF")
        listed.append("updates/dkms/nvidia.ko:")
    (base / "modules.dep").write_text("\n".join(listed) + "\n")
    (root / "boot").mkdir(exist_ok=True)
    (root / "boot" / ("vmlinuz-" + kver)).write_bytes(b"MZ")


@pytest.fixture
def node(tmp_path, monkeypatch):
    add_kernel(tmp_path, RUNNING)
    (tmp_path / "var/lib/dkms/nvidia/580.95.05").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text(RUNNING + "\n")
    monkeypatch.setattr(kernel_package, "ROOT", str(tmp_path))
    return tmp_path


def harness_for(monkeypatch, node, builds=True, autoinstall_builds=False, bins=None):
    dkms_status = "nvidia/580.95.05, %s, x86_64: installed\n" % RUNNING

    def apt_get(argv):
        add_kernel(node, NEW, module=builds)
        return 0, "Setting up linux-image-%s ...\n" % NEW, ""

    def autoinstall(argv):
        if autoinstall_builds:
            add_kernel(node, NEW, module=True)
            return 0, "", ""
        return 10, "", "Error! Bad return status for module build on kernel: %s (x86_64)\n" % NEW

    commands = FakeCommands(
        {
            "dpkg-query": dpkg_query("debian12-dpkg-list-linux-image-headers.txt"),
            "apt-cache pkgnames": DEBIAN_INDEX + "\n",
            "apt-get install": apt_get,
            "dkms status": dkms_status,
            "dkms autoinstall": autoinstall,
        },
        inside_timeout=True,
    )
    default_bins = ["timeout", "dpkg-query", "apt-cache", "apt-get", "dkms"]
    return ModuleHarness(monkeypatch, commands=commands, bins=bins or default_bins)


def test_installs_the_kernel_and_headers_and_verifies_the_module_then_asks_for_the_reboot(monkeypatch, node):
    harness = harness_for(monkeypatch, node)
    result = harness.run(kernel_package, ARGS, diff=True)
    assert result["kernel"] == NEW
    assert result["installed"] == ["linux-headers-6.1.0-40-amd64", "linux-image-6.1.0-40-amd64"]
    assert result["changed"] is True
    assert result["reboot"] is True
    assert result["verified"] == "kernel 6.1.0-40-amd64 has the NVIDIA module: updates/dkms/nvidia.ko"
    assert result["diff"]["after"] == "6.1.0-39-amd64\n6.1.0-40-amd64\n"
    (install,) = harness.commands.of("apt-get")
    assert install[-2:] == ["linux-headers-6.1.0-40-amd64", "linux-image-6.1.0-40-amd64"]
    assert "--allow-change-held-packages" not in install
    assert [unbounded(call)[1:] for call in harness.commands.of("dkms")] == [["status"]]  # module there: no build


def test_a_module_that_does_not_build_fails_the_node_before_any_reboot(monkeypatch, node):
    harness = harness_for(monkeypatch, node, builds=False)
    failure = harness.outcome(kernel_package, ARGS)
    assert failure.failed
    msg = failure.result["msg"]
    assert msg.startswith("gpuops_kernel: kernel 6.1.0-40-amd64")
    assert "dkms autoinstall -k 6.1.0-40-amd64" in msg
    assert "The node was not rebooted and still runs 6.1.0-39-amd64" in msg
    assert [unbounded(call)[1:] for call in harness.commands.of("dkms")][:2] == [["status"], ["autoinstall", "-k", NEW]]


def test_dkms_autoinstall_builds_what_the_install_hook_did_not(monkeypatch, node):
    harness = harness_for(monkeypatch, node, builds=False, autoinstall_builds=True)
    result = harness.run(kernel_package, ARGS)
    assert result["built"] is True
    assert result["changed"] is True
    assert result["verified"].startswith("kernel 6.1.0-40-amd64 has the NVIDIA module")


def test_check_mode_predicts_the_install_and_changes_nothing(monkeypatch, node):
    harness = harness_for(monkeypatch, node)
    result = harness.run(kernel_package, ARGS, check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["installed"] == ["linux-headers-6.1.0-40-amd64", "linux-image-6.1.0-40-amd64"]
    assert result["reboot"] is True
    assert result["diff"]["before"] == "6.1.0-39-amd64\n"
    assert result["diff"]["after"] == "6.1.0-39-amd64\n6.1.0-40-amd64\n"
    assert harness.commands.of("apt-get") == []
    assert not (node / "lib/modules" / NEW).exists()


def test_a_converged_node_on_the_kernel_changes_nothing(monkeypatch, node):
    harness = harness_for(monkeypatch, node)
    result = harness.run(kernel_package, {"kernel": RUNNING, "package_manager": "apt"})
    assert result["changed"] is False
    assert result["reboot"] is False
    assert result["installed"] == []
    assert harness.commands.of("apt-get") == []


def test_a_bad_request_fails_before_any_command(monkeypatch, node):
    harness = harness_for(monkeypatch, node)
    failure = harness.outcome(kernel_package, {"kernel": "newest", "package_manager": "apt"})
    assert failure.failed
    assert "set latest, or a kernel release" in failure.result["msg"]
    assert harness.commands.calls == []


RPM_RUNNING, RPM_NEW = "5.14.0-427.42.1.el9_4.x86_64", "5.14.0-503.15.1.el9_5.x86_64"


def test_dnf_locks_the_target_beside_the_installed_kernels_before_installing_it(monkeypatch, tmp_path):
    add_kernel(tmp_path, RPM_RUNNING)
    (tmp_path / "var/lib/dkms/nvidia/580.95.05").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text(RPM_RUNNING + "\n")
    monkeypatch.setattr(kernel_package, "ROOT", str(tmp_path))
    versionlock = tmp_path / "versionlock.list"
    versionlock.write_text("# BEGIN managed by gpuops.cluster (NVIDIA stack versionlocks)\n"
                           "kernel-0:5.14.0-427.42.1.el9_4.*\n# END managed by gpuops.cluster\n")  # fmt: skip
    seen = {}

    def dnf_install(argv):
        seen["locks"] = versionlock.read_text()
        add_kernel(tmp_path, RPM_NEW)
        return 0, "Complete!\n", ""

    rpm_q = "".join(
        "%s\t0\t5.14.0\t427.42.1.el9_4\tx86_64\n" % name for name in ("kernel", "kernel-core", "kernel-modules")
    )
    commands = FakeCommands(
        {
            "rpm -q": rpm_q + "package kernel-devel is not installed\n",
            "dnf -q repoquery": "5.14.0-427.42.1.el9_4.x86_64\n5.14.0-503.15.1.el9_5.x86_64\n",
            "dnf -y install": dnf_install,
            "dkms status": "",
            "grubby --default-kernel": "/boot/vmlinuz-%s\n" % RPM_NEW,
        },
        inside_timeout=True,
    )
    harness = ModuleHarness(monkeypatch, commands=commands, bins=["timeout", "rpm", "dnf", "dkms", "grubby"])
    result = harness.run(
        kernel_package, {"kernel": "latest", "package_manager": "dnf", "versionlock_path": str(versionlock)}
    )
    assert result["kernel"] == RPM_NEW
    assert result["installed"] == [
        "kernel-5.14.0-503.15.1.el9_5",
        "kernel-core-5.14.0-503.15.1.el9_5",
        "kernel-devel-5.14.0-503.15.1.el9_5",
        "kernel-modules-5.14.0-503.15.1.el9_5",
    ]
    for lock in (
        "kernel-0:5.14.0-427.42.1.el9_4.*",
        "kernel-core-0:5.14.0-503.15.1.el9_5.*",
        "kernel-0:5.14.0-503.15.1.el9_5.*",
    ):
        assert lock in seen["locks"]
    assert "--disableplugin=versionlock" in unbounded(harness.commands.of("dnf")[0])
    assert "--disableplugin=versionlock" not in unbounded(harness.commands.of("dnf")[1])
    assert result["reboot"] is True


# The end of what apt-get printed on the Debian 12 lab node when the stand-in driver did not build on 6.1.0-50
# (tests/fixtures/kernel/README.md, "Captured on a lab node"): dpkg fails the kernel's packages in their DKMS hook.
APT_HOOK_FAILURE = """\
Error! Bad return status for module build on kernel: 6.1.0-50-amd64 (x86_64)
Consult /var/lib/dkms/nvidia/580.95.05/build/make.log for more information.
Error! One or more modules failed to install during autoinstall.
Refer to previous errors for more information.
dkms: autoinstall for kernel: 6.1.0-50-amd64 failed!
run-parts: /etc/kernel/header_postinst.d/dkms exited with return code 11
Failed to process /etc/kernel/header_postinst.d at /var/lib/dpkg/info/linux-headers-6.1.0-50-amd64.postinst line 11.
dpkg: error processing package linux-headers-6.1.0-50-amd64 (--configure):
 installed linux-headers-6.1.0-50-amd64 package post-installation script subprocess returned error exit status 1
Errors were encountered while processing:
 linux-image-6.1.0-50-amd64
 linux-headers-6.1.0-50-amd64
"""


def test_a_build_that_fails_in_the_kernels_install_hook_names_the_module_and_the_half_installed_kernel(
    monkeypatch, node
):
    harness = harness_for(monkeypatch, node, builds=False)

    def apt_get(argv):
        add_kernel(node, NEW, module=False)
        return 100, APT_HOOK_FAILURE, "E: Sub-process /usr/bin/dpkg returned an error code (1)\n"

    harness.commands.add("apt-get install", apt_get)
    failure = harness.outcome(kernel_package, ARGS)
    assert failure.failed
    msg = failure.result["msg"]
    assert msg.startswith("gpuops_kernel: kernel 6.1.0-40-amd64")
    assert "The node was not rebooted and still runs 6.1.0-39-amd64" in msg
    assert "The install of 6.1.0-40-amd64 failed (apt-get exited 100: " in msg
    assert "apt-get purge linux-headers-6.1.0-40-amd64 linux-image-6.1.0-40-amd64" in msg
