"""The kernel_module check: every installed kernel has the NVIDIA module, the one the node boots next above all.

``dkms status`` output is real (tests/fixtures/dkms/, see the README there); the node is a fake ``/lib/modules``
and ``/boot`` tree under ``tmp_path``.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import health_checks, kernel_modules, node_reader

from .conftest import FIXTURES
from .test_node_reader import StandIn

OLD, RUNNING, NEW = "6.1.0-26-amd64", "6.1.0-27-amd64", "6.1.0-28-amd64"  # the kernels of the dkms fixtures
DKMS_KO = "updates/dkms/nvidia.ko"


def dkms_text(name):
    return (FIXTURES / "dkms" / name).read_text(encoding="utf-8")


def make_node(root, kernels, modules=None, dkms=(), running=None, loaded=False, leftovers=()):
    """A node tree: each kernel with its image in /boot and a modules.dep listing ``modules[kernel]`` (files made).

    ``dkms``: DKMS modules under /var/lib/dkms; ``leftovers``: /lib/modules dirs of removed kernels (no image).
    """
    modules = modules or {}
    for kver in kernels:
        base = root / "lib/modules" / kver
        (base / "kernel/drivers/net").mkdir(parents=True)
        (base / "kernel/drivers/net/e1000e.ko").write_bytes(b"\x7fELF")
        listed = ["kernel/drivers/net/e1000e.ko:"]
        for path in modules.get(kver, ()):
            (base / path).parent.mkdir(parents=True, exist_ok=True)
            (base / path).write_bytes(b"\x7fELF")
            listed.append("%s: kernel/drivers/net/e1000e.ko" % path)
        (base / "modules.dep").write_text("\n".join(listed) + "\n")
        (root / "boot").mkdir(exist_ok=True)
        (root / "boot" / ("vmlinuz-" + kver)).write_bytes(b"MZ")
    for kver in leftovers:
        (root / "lib/modules" / kver / "updates/dkms").mkdir(parents=True)
        (root / "lib/modules" / kver / "updates/dkms/nvidia.ko").write_bytes(b"\x7fELF")
    for name in dkms:
        (root / "var/lib/dkms" / name / "580.95.05").mkdir(parents=True)
    (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/osrelease").write_text((running or kernels[-1]) + "\n")
    if loaded:
        (root / "sys/module/nvidia").mkdir(parents=True)
    return str(root)


def judged(reading):
    """The kernel_module checks of a verdict on this reading alone."""
    verdict = health_checks.evaluate({"kernel_modules": reading})
    return [check for check in verdict["checks"] if check["name"] == "kernel_module"], verdict


# --- the parser -----------------------------------------------------------------------------------


def test_dkms_3_0_states_and_the_old_suffixes():
    parsed = kernel_modules.parse_dkms_status(dkms_text("dkms-3.0.10-extras.txt"))
    assert parsed["warnings"] == []
    assert [(e["module"], e["version"], e["kernel"], e["arch"], e["state"]) for e in parsed["entries"]] == [
        ("nvidia", "580.95.05", OLD, "x86_64", "installed"),
        ("nvidia", "580.95.05", RUNNING, "x86_64", "installed"),
        ("nvidia", "580.95.05", NEW, "x86_64", "built"),
    ]
    assert parsed["entries"][0]["notes"] == [
        "original_module exists",
        "WARNING! Diff between built and installed module!",
    ]
    added = kernel_modules.parse_dkms_status(dkms_text("dkms-3.0.10-added.txt"))["entries"][0]
    assert (added["module"], added["version"], added["kernel"], added["state"]) == (
        "nvidia",
        "580.105.08",
        None,
        "added",
    )


def test_dkms_before_2_8_6_writes_commas():
    parsed = kernel_modules.parse_dkms_status(dkms_text("dkms-2.8.4-old-format.txt"))
    assert parsed["warnings"] == []
    assert [(e["version"], e["kernel"], e["state"]) for e in parsed["entries"]] == [
        ("580.105.08", None, "added"),
        ("580.95.05", OLD, "installed"),
        ("580.95.05", RUNNING, "installed"),
        ("580.95.05", NEW, "built"),
    ]
    assert parsed["entries"][1]["notes"][0] == "original_module exists"


def test_dkms_3_1_3_suffixes_broken_and_installed_weak():
    parsed = kernel_modules.parse_dkms_status(dkms_text("dkms-3.4.3-broken-and-built.txt"))
    assert parsed["entries"][0] == {
        "module": "nvidia", "version": "580.105.08", "kernel": None, "arch": None, "state": "broken",
        "built_for": None, "notes": [],
    }  # fmt: skip
    assert parsed["entries"][1]["notes"] == [
        "Original modules exist",
        "Differences between built and installed modules",
    ]
    weak = kernel_modules.parse_dkms_status(dkms_text("rhel9-installed-weak.txt"))["entries"][1]
    assert (weak["kernel"], weak["state"], weak["built_for"]) == (
        "5.14.0-503.11.1.el9_5.x86_64",
        "installed-weak",
        "5.14.0-427.13.1.el9_4.x86_64",
    )
    missing = kernel_modules.parse_dkms_status(
        "nvidia/580.95.05, 6.8.0-51-generic, x86_64: installed (Built modules are missing in the kernel modules folder)"
    )["entries"][0]
    assert missing["notes"] == ["Built modules are missing in the kernel modules folder"]


def test_no_module_and_lines_that_are_no_status():
    assert kernel_modules.parse_dkms_status(dkms_text("dkms-3.0.10-no-modules.txt")) == {"entries": [], "warnings": []}
    parsed = kernel_modules.parse_dkms_status("Error! Could not locate dkms.conf file.\nnvidia/1.0: added\n")
    assert parsed["warnings"] == ["Error! Could not locate dkms.conf file."]
    assert len(parsed["entries"]) == 1


def test_driver_module_names():
    assert all(map(kernel_modules.is_driver_module, ("nvidia", "nvidia-open", "nvidia-srv", "nvidia-current")))
    assert not any(map(kernel_modules.is_driver_module, ("nvidia-fs", "nvidia-peermem", "zfs", "")))


# --- the node's files -----------------------------------------------------------------------------


def test_kernels_in_version_order_and_leftover_module_dirs_are_no_kernel(tmp_path):
    root = make_node(tmp_path, ["6.8.0-51-generic", "6.8.0-100-generic", "6.8.0-9-generic"], leftovers=["6.8.0-8-x"])
    assert kernel_modules.installed_kernels(root) == ["6.8.0-9-generic", "6.8.0-51-generic", "6.8.0-100-generic"]
    assert (
        sorted(["5.14.0-503.11.1.el9_5.x86_64", "5.14.0-427.13.1.el9_4.x86_64"], key=kernel_modules.version_key)[-1]
        == "5.14.0-503.11.1.el9_5.x86_64"
    )
    assert kernel_modules.installed_kernels(str(tmp_path / "nowhere")) == []


def test_module_files_are_those_modules_dep_lists_and_that_exist(tmp_path):
    root = make_node(tmp_path, [NEW], {NEW: ["updates/dkms/nvidia.ko.zst", "updates/dkms/nvidia-uvm.ko.zst"]})
    assert kernel_modules.module_files(root, NEW) == ["updates/dkms/nvidia.ko.zst"]
    (tmp_path / "lib/modules" / NEW / "updates/dkms/nvidia.ko.zst").unlink()  # listed, gone: modprobe fails
    assert kernel_modules.module_files(root, NEW) == []
    (tmp_path / "lib/modules" / NEW / "modules.dep").unlink()
    (tmp_path / "lib/modules" / NEW / "kernel/nvidia-580srv").mkdir()
    (tmp_path / "lib/modules" / NEW / "kernel/nvidia-580srv/nvidia.ko").write_bytes(b"\x7fELF")
    assert kernel_modules.module_files(root, NEW) == ["kernel/nvidia-580srv/nvidia.ko"]  # no modules.dep: searched


def test_next_boot_is_grubby_default_else_the_newest():
    kernels = [OLD, RUNNING, NEW]
    assert kernel_modules.next_boot_kernel(kernels) == (NEW, "the newest installed kernel, GRUB's default entry")
    assert kernel_modules.next_boot_kernel(kernels, "/boot/vmlinuz-%s\n" % RUNNING) == (
        RUNNING,
        "grubby --default-kernel",
    )
    boots, how = kernel_modules.next_boot_kernel(kernels, "failed (rc=1): no default kernel")
    assert boots == NEW
    assert "grubby --default-kernel gave" in how
    assert kernel_modules.next_boot_kernel([]) == (None, "no installed kernel")


# --- the check ------------------------------------------------------------------------------------


def test_the_kernel_booted_next_without_a_module_fails_naming_it_and_the_fix(tmp_path):
    root = make_node(tmp_path, [OLD, RUNNING, NEW], {OLD: [DKMS_KO], RUNNING: [DKMS_KO]}, dkms=["nvidia"],
                     running=RUNNING, loaded=True)  # fmt: skip
    reading = kernel_modules.with_commands(
        kernel_modules.read(root), dkms_status=dkms_text("dkms-3.0.10-built-not-installed.txt")
    )
    checks, verdict = judged(reading)
    assert [check["status"] for check in checks] == ["fail"]
    assert checks[0]["detail"] == (
        "kernel 6.1.0-28-amd64, which the node boots next (the newest installed kernel, GRUB's default entry), has "
        "no NVIDIA module: DKMS built nvidia/580.95.05 for it but did not install it: run dkms install "
        "nvidia/580.95.05 -k 6.1.0-28-amd64; fix it before the node reboots, or it comes up without a GPU driver"
    )
    assert not verdict["healthy"]
    assert any(line.startswith("kernel_module: kernel 6.1.0-28-amd64") for line in verdict["summary"]["failed"])


def test_another_kernel_without_a_module_warns(tmp_path):
    root = make_node(tmp_path, [OLD, RUNNING, NEW], {RUNNING: [DKMS_KO], NEW: [DKMS_KO]}, dkms=["nvidia"])
    checks, verdict = judged(kernel_modules.read(root))  # level quick: dkms status not run
    assert [check["status"] for check in checks] == ["warn"]
    assert checks[0]["detail"] == (
        "installed kernel 6.1.0-26-amd64 has no NVIDIA module: install its headers (linux-headers-6.1.0-26-amd64, "
        "or kernel-devel-6.1.0-26-amd64 on RHEL) and run dkms autoinstall -k 6.1.0-26-amd64, or remove the kernel"
    )
    assert not any(line.startswith("kernel_module") for line in verdict["summary"]["failed"])


def test_every_kernel_with_its_module_passes_naming_them(tmp_path):
    root = make_node(tmp_path, [OLD, RUNNING, NEW], {kver: [DKMS_KO] for kver in (OLD, RUNNING, NEW)}, dkms=["nvidia"],
                     running=RUNNING, loaded=True)  # fmt: skip
    reading = kernel_modules.with_commands(
        kernel_modules.read(root), dkms_status=dkms_text("dkms-3.0.10-all-installed.txt")
    )
    checks, _verdict = judged(reading)
    assert [(check["status"], check["detail"]) for check in checks] == [
        (
            "pass",
            "NVIDIA module present for every installed kernel: 6.1.0-26-amd64, 6.1.0-27-amd64 (running), "
            "6.1.0-28-amd64 (boots next); boots next by the newest installed kernel, GRUB's default entry",
        )
    ]


def test_older_dkms_format_without_a_build_for_the_next_kernel(tmp_path):
    # dkms 2.8.4 lists builds for 6.1.0-26..28; the node also has 6.1.0-29, which DKMS never built (no headers)
    kernels = [OLD, RUNNING, NEW, "6.1.0-29-amd64"]
    root = make_node(tmp_path, kernels, {OLD: [DKMS_KO], RUNNING: [DKMS_KO]}, dkms=["nvidia"], running=RUNNING)
    reading = kernel_modules.with_commands(
        kernel_modules.read(root), dkms_status=dkms_text("dkms-2.8.4-old-format.txt")
    )
    checks, _verdict = judged(reading)
    assert [check["status"] for check in checks] == ["fail", "warn"]
    assert checks[0]["detail"].startswith(
        "kernel 6.1.0-29-amd64, which the node boots next (the newest installed kernel, GRUB's default entry), has "
        "no NVIDIA module: DKMS did not build it: install its headers (linux-headers-6.1.0-29-amd64, or "
        "kernel-devel-6.1.0-29-amd64 on RHEL), then run dkms autoinstall -k 6.1.0-29-amd64;"
    )
    assert "dkms install nvidia/580.95.05 -k 6.1.0-28-amd64" in checks[1]["detail"]


def test_a_failed_build_with_the_headers_installed_asks_for_the_build_log_not_the_headers(tmp_path):
    # the same node, and 6.1.0-29's headers are installed (its build tree is there): the build itself failed
    kernels = [OLD, RUNNING, NEW, "6.1.0-29-amd64"]
    root = make_node(tmp_path, kernels, {OLD: [DKMS_KO], RUNNING: [DKMS_KO]}, dkms=["nvidia"], running=RUNNING)
    (tmp_path / "lib/modules/6.1.0-29-amd64/build").mkdir()
    reading = kernel_modules.with_commands(
        kernel_modules.read(root), dkms_status=dkms_text("dkms-2.8.4-old-format.txt")
    )
    checks, _verdict = judged(reading)
    assert checks[0]["status"] == "fail"
    assert (
        "has no NVIDIA module: DKMS did not build it although its headers are installed: run dkms autoinstall -k "
        "6.1.0-29-amd64 and read the build's make.log under /var/lib/dkms" in checks[0]["detail"]
    )
    assert "install its headers" not in checks[0]["detail"]


def test_a_broken_dkms_module_is_named_with_its_fix(tmp_path):
    root = make_node(tmp_path, [RUNNING, NEW], {RUNNING: [DKMS_KO]}, dkms=["nvidia"], running=RUNNING)
    broken_only = dkms_text("dkms-3.4.3-broken-and-built.txt").splitlines()[0] + "\n"  # nvidia/580.105.08: broken
    checks, _verdict = judged(kernel_modules.with_commands(kernel_modules.read(root), dkms_status=broken_only))
    assert checks[0]["status"] == "fail"
    assert (
        "DKMS module nvidia/580.105.08 is broken (its source is missing): reinstall the driver's DKMS package, then "
        "run dkms autoinstall -k 6.1.0-28-amd64" in checks[0]["detail"]
    )
    # built for the kernel and another version broken: install the build, and deal with the broken one
    reading = kernel_modules.with_commands(
        kernel_modules.read(root), dkms_status=dkms_text("dkms-3.4.3-broken-and-built.txt")
    )
    detail = judged(reading)[0][0]["detail"]
    assert "run dkms install nvidia/580.95.05 -k 6.1.0-28-amd64; DKMS module nvidia/580.105.08 is broken" in detail


def test_precompiled_modules_count_and_the_fix_is_their_package(tmp_path):
    ubuntu = ["6.8.0-50-generic", "6.8.0-51-generic"]
    root = make_node(tmp_path / "ubuntu", ubuntu, {"6.8.0-51-generic": ["kernel/nvidia-580srv/nvidia.ko"]})
    checks, _verdict = judged(kernel_modules.read(root))
    assert [check["status"] for check in checks] == ["warn"]
    assert checks[0]["detail"] == (
        "installed kernel 6.8.0-50-generic has no NVIDIA module: install its precompiled NVIDIA module package "
        "(Ubuntu linux-modules-nvidia-<branch>-6.8.0-50-generic, RHEL kmod-nvidia for this kernel), or remove the "
        "kernel"
    )
    rhel = ["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64"]
    root = make_node(tmp_path / "rhel", rhel, {kver: ["extra/nvidia.ko.xz"] for kver in rhel})
    checks, _verdict = judged(kernel_modules.with_commands(kernel_modules.read(root), "/boot/vmlinuz-%s\n" % rhel[0]))
    assert checks[0]["status"] == "pass"
    assert "5.14.0-427.13.1.el9_4.x86_64 (boots next)" in checks[0]["detail"]
    assert checks[0]["detail"].endswith("boots next by grubby --default-kernel")


def test_installed_weak_on_rhel_counts_as_a_module(tmp_path):
    kernels = ["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64"]
    root = make_node(tmp_path, kernels, {kernels[0]: ["extra/nvidia.ko"], kernels[1]: ["weak-updates/nvidia.ko"]},
                     dkms=["nvidia"])  # fmt: skip
    reading = kernel_modules.with_commands(kernel_modules.read(root), dkms_status=dkms_text("rhel9-installed-weak.txt"))
    assert [check["status"] for check in judged(reading)[0]] == ["pass"]


def test_no_driver_installed_by_dkms_or_package_skips(tmp_path):
    root = make_node(tmp_path / "bare", ["6.1.0-28-amd64"])
    checks, verdict = judged(kernel_modules.read(root))
    assert [(check["status"], check["detail"]) for check in checks] == [
        ("skip", "no NVIDIA driver installed by DKMS or a kernel module package: nothing to check")
    ]
    assert not any(line.startswith("kernel_module") for line in verdict["summary"]["failed"])
    container = make_node(tmp_path / "container", ["6.1.0-28-amd64"], loaded=True)  # a driver container's module
    assert "driver container" in judged(kernel_modules.read(container))[0][0]["detail"]
    assert judged(kernel_modules.read(str(tmp_path / "empty")))[0][0]["status"] == "skip"


def test_the_running_kernel_is_judged_by_its_files_not_by_the_loaded_module(tmp_path):
    # the driver is loaded, but its file was removed: the next boot of this (only) kernel has no driver
    root = make_node(tmp_path, [RUNNING], dkms=["nvidia"], loaded=True)
    checks, _verdict = judged(kernel_modules.read(root))
    assert checks[0]["status"] == "fail"
    assert "the module loaded now does not survive a reboot" in checks[0]["detail"]


def test_skip_checks_and_a_reading_not_taken(tmp_path):
    offline = "offline triage: the node's kernels are not read"
    verdict = health_checks.evaluate({"unavailable": {"kernel_modules": offline}})
    checks = [check for check in verdict["checks"] if check["name"] == "kernel_module"]
    assert [(c["status"], c["detail"]) for c in checks] == [("skip", offline)]
    reading = kernel_modules.read(make_node(tmp_path, [RUNNING], dkms=["nvidia"]))
    verdict = health_checks.evaluate({"kernel_modules": reading}, {"skip_checks": ["kernel_module"]})
    assert [c["detail"] for c in verdict["checks"] if c["name"] == "kernel_module"] == ["skipped by skip_checks"]
    assert "kernel_module" in health_checks.CHECKS


# --- the reader -----------------------------------------------------------------------------------


@pytest.fixture
def dkms_node(tmp_path):
    return make_node(tmp_path, [OLD, RUNNING, NEW], {OLD: [DKMS_KO], RUNNING: [DKMS_KO]}, dkms=["nvidia"])


def test_reader_runs_grubby_and_dkms_status_from_standard(dkms_node):
    module = StandIn(
        answers={
            "timeout -k 5 60 /usr/bin/grubby --default-kernel": (0, "/boot/vmlinuz-%s\n" % RUNNING, ""),
            "timeout -k 5 60 /usr/bin/dkms status": (0, dkms_text("dkms-3.0.10-built-not-installed.txt"), ""),
        },
        bins=("grubby", "dkms", "timeout"),
        level="standard",
    )
    reader = node_reader.NodeReader(module, root=dkms_node)
    reading = reader.kernel_modules(offline=False)
    assert reader.commands == [
        "/usr/bin/timeout -k 5 60 /usr/bin/grubby --default-kernel",
        "/usr/bin/timeout -k 5 60 /usr/bin/dkms status",
    ]
    assert (reading["next_boot"], reading["next_boot_rule"]) == (RUNNING, "grubby --default-kernel")
    checks = judged(reading)[0]
    assert [check["status"] for check in checks] == ["warn"]  # 6.1.0-28 is not booted next here: a warning
    assert "run dkms install nvidia/580.95.05 -k 6.1.0-28-amd64" in checks[0]["detail"]


def test_reader_at_quick_reads_files_only_and_nothing_without_a_driver(dkms_node, tmp_path_factory):
    module = StandIn(bins=("dkms", "timeout"))
    reader = node_reader.NodeReader(module, root=dkms_node)
    assert judged(reader.kernel_modules(offline=False))[0][0]["status"] == "fail"  # 6.1.0-28, the newest
    assert module.calls == []
    bare = make_node(tmp_path_factory.mktemp("bare"), [NEW])
    module = StandIn(bins=("grubby", "dkms", "timeout"), level="standard")
    node_reader.NodeReader(module, root=bare).kernel_modules(offline=False)
    assert module.calls == []  # no driver: grubby and dkms are not worth running


def test_reader_dkms_failure_leaves_the_files_to_decide(dkms_node):
    module = StandIn(
        answers={"timeout -k 5 60 /usr/bin/dkms status": (124, "", "")}, bins=("dkms", "timeout"), level="standard"
    )
    reading = node_reader.NodeReader(module, root=dkms_node).kernel_modules(offline=False)
    checks = judged(reading)[0]
    assert checks[0]["status"] == "fail"
    assert "(dkms status failed (rc=124): did not finish in 60 s (stopped))" in checks[0]["detail"]


def test_reader_offline_and_skipped(dkms_node):
    module = StandIn(nvidia_smi_xml=str(FIXTURES / "nvidia-smi/h100-sxm-8x-healthy.xml"))
    reader = node_reader.NodeReader(module, root=dkms_node)
    inputs = reader.read_all(offline=True, since=None)
    assert inputs["kernel_modules"] is None
    assert inputs["unavailable"]["kernel_modules"] == "offline triage: the node's kernels are not read"
    checks = [c for c in health_checks.evaluate(inputs)["checks"] if c["name"] == "kernel_module"]
    assert [c["status"] for c in checks] == ["skip"]
    skipping = node_reader.NodeReader(StandIn(skip_checks=["kernel_module"]), root=dkms_node)
    assert skipping.kernel_modules(offline=False) is None
