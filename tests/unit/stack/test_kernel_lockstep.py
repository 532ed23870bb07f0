"""Kernel lockstep: the kernel packages held with a DKMS stack, the kernel gpuops_kernel moves to, its verdict.

Package listings are real (tests/fixtures/kernel/, see the README there): ``dpkg -l`` rows become the
``dpkg-query -W`` lines the modules read by a mechanical map of the two-letter state. ``dkms status`` output is
tests/fixtures/dkms/ (its README); the node is a fake ``/lib/modules`` and ``/boot`` tree under ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import kernel_modules
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import apt_pinning, kernel_lockstep, pin_plan

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
STATUS = {"ii": "install ok installed", "rc": "deinstall ok config-files", "hi": "hold ok installed"}


def dpkg_query(name):
    """A ``dpkg -l`` listing as ``dpkg-query -W -f='${Package}\\t${Version}\\t${Status}\\n'`` prints it."""
    lines = []
    for row in (FIXTURES / "kernel" / name).read_text(encoding="utf-8").splitlines():
        state, package, version = row.split()[:3]
        lines.append("%s\t%s\t%s" % (package.split(":")[0], version, STATUS[state]))
    return "\n".join(lines) + "\n"


def installed(name):
    return apt_pinning.parse_dpkg_query(dpkg_query(name))


DEBIAN = "debian12-dpkg-list-linux-image-headers.txt"
UBUNTU_HWE = "ubuntu2004-hwe-dpkg-list-linux.txt"
# The kernel lines of tests/fixtures/stack/rpm_q.txt with the architecture field the kernel query adds.
RPM_KERNELS = "".join(
    "%s\tx86_64\n" % line
    for line in (FIXTURES / "stack" / "rpm_q.txt").read_text(encoding="utf-8").splitlines()
    if line.startswith("kernel\t")
)


# --- the request --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["latest", "6.1.0-28-amd64", "6.8.0-51-generic", "6.12.69+deb13-amd64", "5.14.0-503.15.1.el9_5.x86_64", "6.1.0-28"],
)
def test_a_kernel_release_or_latest_is_a_request(value):
    assert kernel_lockstep.request_problem(value) is None


@pytest.mark.parametrize(
    "value", ["", "newest", "6", "linux-image-6.1.0-28-amd64", "6.1.0-28 amd64", "6.1;reboot", True]
)
def test_anything_else_is_refused_with_what_to_set(value):
    problem = kernel_lockstep.request_problem(value)
    assert problem
    assert "latest" in problem
    assert "uname -r" in problem


@pytest.mark.parametrize(
    ("kver", "flavour"),
    [
        ("6.1.0-39-amd64", "amd64"),
        ("6.1.0-18-cloud-amd64", "cloud-amd64"),
        ("5.13.0-51-generic", "generic"),
        ("6.12.69+deb13-amd64", "amd64"),
        ("5.14.0-427.42.1.el9_4.x86_64", None),
        ("6.1.0-28", None),
    ],
)
def test_the_flavour_of_a_release(kver, flavour):
    assert kernel_lockstep.kernel_flavour(kver) == flavour


# --- what is held -------------------------------------------------------------------------------------------


def test_debian_holds_every_installed_image_and_headers_package_and_their_metas():
    assert kernel_lockstep.apt_kernel_holds(installed(DEBIAN)) == [
        "linux-headers-6.1.0-39-amd64",
        "linux-headers-6.1.0-39-common",
        "linux-headers-amd64",
        "linux-image-5.10.0-35-amd64",
        "linux-image-6.1.0-39-amd64",
        "linux-image-amd64",
    ]  # the rc (removed) kernels 4.19.0-27 and 4.19.0-9 are not installed: apt-mark would refuse them


def test_ubuntu_hwe_holds_the_flavour_meta_chain_and_the_abi_packages_but_no_userspace_package():
    holds = kernel_lockstep.apt_kernel_holds(installed(UBUNTU_HWE))
    assert holds == [
        "linux-generic-hwe-20.04",
        "linux-headers-5.13.0-51-generic",
        "linux-headers-generic-hwe-20.04",
        "linux-image-5.13.0-51-generic",
        "linux-image-generic-hwe-20.04",
        "linux-modules-5.13.0-51-generic",
        "linux-modules-extra-5.13.0-51-generic",
    ]
    assert not {"linux-libc-dev", "linux-base", "linux-firmware", "linux-sound-base"} & set(holds)


def test_rpm_kernels_every_installed_version_locked():
    packages = kernel_lockstep.parse_rpm_kernels(RPM_KERNELS + "package kernel-modules-core is not installed\n")
    assert [package["kver"] for package in packages] == ["5.14.0-427.40.1.el9_4.x86_64", "5.14.0-427.42.1.el9_4.x86_64"]
    assert kernel_lockstep.rpm_kernel_locks(packages) == [
        "kernel-0:5.14.0-427.40.1.el9_4.*",
        "kernel-0:5.14.0-427.42.1.el9_4.*",
    ]


def test_a_malformed_rpm_line_is_refused():
    with pytest.raises(kernel_lockstep.LockstepError, match="unexpected rpm -q line"):
        kernel_lockstep.parse_rpm_kernels("kernel\t0\t5.14.0\n")


APT_REQUEST = {
    "state": "present",
    "priority": 1001,
    "hold": True,
    "preferences_path": "/etc/apt/preferences.d/gpuops-nvidia.pref",
    "unattended_upgrades": True,
    "unattended_upgrades_path": "/etc/apt/apt.conf.d/51gpuops-nvidia-blacklist",
    "unattended_upgrades_patterns": [],
}
PINS = [{"component": "driver", "names": ["nvidia-driver-580"], "version": "580.95.05-1"}]


def test_the_pin_plan_holds_the_kernel_with_the_stack_and_records_it():
    kernel = kernel_lockstep.apt_kernel_holds(installed(DEBIAN))
    plan = pin_plan.apt_plan(APT_REQUEST, PINS, ["nvidia-driver-580"], None, None, set(), "apt-mark", kernel)
    assert plan["hold_commands"] == [["apt-mark", "hold", *sorted([*kernel, "nvidia-driver-580"])]]
    preferences = plan["files"][0]["after"]
    assert kernel_lockstep.recorded_holds(preferences) == kernel
    # converged: the same reading again changes nothing (no command, no file)
    again = pin_plan.apt_plan(
        APT_REQUEST, PINS, ["nvidia-driver-580"], preferences, plan["files"][1]["after"],
        set(kernel) | {"nvidia-driver-580"}, "apt-mark", kernel,
    )  # fmt: skip
    assert pin_plan.changes(again)[2] is False


def test_opting_out_releases_only_the_kernel_holds_the_collection_recorded():
    kernel = kernel_lockstep.apt_kernel_holds(installed(DEBIAN))
    first = pin_plan.apt_plan(APT_REQUEST, PINS, ["nvidia-driver-580"], None, None, set(), "apt-mark", kernel)
    held = set(kernel) | {"nvidia-driver-580", "linux-image-5.10.0-35-amd64-operator-hold-is-not-ours"}
    plan = pin_plan.apt_plan(
        APT_REQUEST, PINS, ["nvidia-driver-580"], first["files"][0]["after"], None, held, "apt-mark", []
    )
    assert plan["hold_commands"] == [["apt-mark", "unhold", *kernel]]
    assert kernel_lockstep.recorded_holds(plan["files"][0]["after"]) == []


def test_the_dnf_plan_locks_every_installed_kernel_beside_the_stack_and_drops_them_on_opt_out():
    locks = kernel_lockstep.rpm_kernel_locks(kernel_lockstep.parse_rpm_kernels(RPM_KERNELS))
    request = {"state": "present", "hold": True, "versionlock_path": "/etc/dnf/plugins/versionlock.list"}
    pins = [{"component": "driver", "names": ["nvidia-driver"], "version": "3:580.95.05-1.el9"}]
    plan = pin_plan.dnf_plan(request, pins, None, (), locks)
    text = plan["files"][0]["after"]
    assert all(lock in text for lock in locks)
    assert "nvidia-driver-3:580.95.05-1.el9.*" in text
    released = pin_plan.dnf_plan(request, pins, text, (), [])
    assert not any(lock in released["files"][0]["after"] for lock in locks)
    assert released["unheld"] == ["kernel"]


# --- where gpuops_kernel moves ------------------------------------------------------------------------------

# What `apt-cache pkgnames linux-` lists on that Debian node once the index offers 6.1.0-40 (names as the Debian
# archive spells them: the handbook's linux-image-<abiname>-<flavour>, its -unsigned twin and the cloud flavour).
DEBIAN_INDEX = "\n".join(
    [
        "linux-image-amd64",
        "linux-image-6.1.0-39-amd64",
        "linux-image-6.1.0-39-amd64-unsigned",
        "linux-image-6.1.0-40-amd64",
        "linux-image-6.1.0-40-amd64-unsigned",
        "linux-image-6.1.0-40-cloud-amd64",
        "linux-headers-6.1.0-39-amd64",
        "linux-headers-6.1.0-40-amd64",
        "linux-headers-6.1.0-40-common",
    ]
)


def test_a_release_without_its_flavour_takes_the_running_kernels():
    target = kernel_lockstep.apt_target("6.1.0-40", "6.1.0-39-amd64", installed(DEBIAN), DEBIAN_INDEX)
    assert target == {
        "kver": "6.1.0-40-amd64",
        "packages": ["linux-headers-6.1.0-40-amd64", "linux-image-6.1.0-40-amd64"],
    }


def test_latest_is_the_kernel_the_flavour_metapackage_depends_on():
    record = (FIXTURES / "kernel" / "ubuntu1604-dpkg-s-linux-image-generic.txt").read_text(encoding="utf-8")
    assert kernel_lockstep.meta_release(record) == "4.4.0-128-generic"


def test_the_new_kernel_gets_what_the_running_one_has_beside_it():
    """Ubuntu: linux-modules-extra (NIC drivers live there) follows; the headers come with DKMS."""
    index = "\n".join(
        ["linux-image-5.15.0-41-generic", "linux-headers-5.15.0-41-generic", "linux-modules-5.15.0-41-generic",
         "linux-modules-extra-5.15.0-41-generic", "linux-image-generic-hwe-20.04"]
    )  # fmt: skip
    hwe = installed(UBUNTU_HWE)
    assert kernel_lockstep.apt_meta(hwe, "5.13.0-51-generic") == "linux-image-generic-hwe-20.04"
    target = kernel_lockstep.apt_target("5.15.0-41-generic", "5.13.0-51-generic", hwe, index)
    assert target["packages"] == [
        "linux-headers-5.15.0-41-generic",
        "linux-image-5.15.0-41-generic",
        "linux-modules-5.15.0-41-generic",
        "linux-modules-extra-5.15.0-41-generic",
    ]


def test_a_kernel_the_index_lacks_is_refused_with_the_newest_it_has():
    with pytest.raises(kernel_lockstep.LockstepError, match=r"no linux-image-6.1.0-41.*6.1.0-40-amd64.*apt-get update"):
        kernel_lockstep.apt_target("6.1.0-41", "6.1.0-39-amd64", installed(DEBIAN), DEBIAN_INDEX)


def test_a_kernel_without_headers_in_the_index_is_refused_for_dkms():
    index = DEBIAN_INDEX.replace("linux-headers-6.1.0-40-amd64\n", "")
    with pytest.raises(kernel_lockstep.LockstepError, match=r"no linux-headers-6\.1\.0-40-amd64"):
        kernel_lockstep.apt_target("6.1.0-40-amd64", "6.1.0-39-amd64", installed(DEBIAN), index)
    no_dkms = kernel_lockstep.apt_target("6.1.0-40-amd64", "6.1.0-39-amd64", installed(DEBIAN), index, dkms=False)
    assert no_dkms["packages"] == ["linux-image-6.1.0-40-amd64"]


def test_latest_without_a_flavour_metapackage_says_to_name_a_release():
    with pytest.raises(kernel_lockstep.LockstepError, match="set gpuops_kernel to a kernel release"):
        kernel_lockstep.apt_target("latest", "6.1.0-39-amd64", {}, DEBIAN_INDEX, None)


REPOQUERY = "5.14.0-427.40.1.el9_4.x86_64\n5.14.0-427.42.1.el9_4.x86_64\n5.14.0-503.15.1.el9_5.x86_64\n"
RPM_RUNNING = "5.14.0-427.42.1.el9_4.x86_64"


def test_rpm_latest_and_a_release_without_the_arch():
    packages = kernel_lockstep.parse_rpm_kernels(RPM_KERNELS)
    latest = kernel_lockstep.rpm_target("latest", RPM_RUNNING, packages, REPOQUERY)
    assert latest == {
        "kver": "5.14.0-503.15.1.el9_5.x86_64",
        "packages": [
            "kernel-5.14.0-503.15.1.el9_5",
            "kernel-core-5.14.0-503.15.1.el9_5",
            "kernel-devel-5.14.0-503.15.1.el9_5",
        ],
    }
    assert kernel_lockstep.rpm_target("5.14.0-503.15.1.el9_5", RPM_RUNNING, packages, REPOQUERY) == latest
    assert kernel_lockstep.rpm_target_locks(latest, packages) == [
        "kernel-0:5.14.0-503.15.1.el9_5.*",
        "kernel-core-0:5.14.0-503.15.1.el9_5.*",
        "kernel-devel-0:5.14.0-503.15.1.el9_5.*",
    ]
    with pytest.raises(kernel_lockstep.LockstepError, match=r"no kernel-core 5\.14\.0-570"):
        kernel_lockstep.rpm_target("5.14.0-570", RPM_RUNNING, packages, REPOQUERY)


# --- the verdict before any reboot --------------------------------------------------------------------------


def make_node(root, kernels, with_module=(), dkms=True):
    for kver in kernels:
        base = root / "lib/modules" / kver
        base.mkdir(parents=True)
        listed = []
        if kver in with_module:
            (base / "updates/dkms").mkdir(parents=True)
            (base / "updates/dkms/nvidia.ko").write_bytes(b"\x7fELF")
            listed.append("updates/dkms/nvidia.ko:")
        (base / "modules.dep").write_text("\n".join(listed) + "\n")
        (root / "boot").mkdir(exist_ok=True)
        (root / "boot" / ("vmlinuz-" + kver)).write_bytes(b"MZ")
    if dkms:
        (root / "var/lib/dkms/nvidia/580.95.05").mkdir(parents=True)
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text(kernels[0] + "\n")
    return str(root)


def reading(root, dkms_fixture):
    text = (FIXTURES / "dkms" / dkms_fixture).read_text(encoding="utf-8")
    return kernel_modules.with_commands(kernel_modules.read(root), dkms_status=text)


def test_a_kernel_with_its_module_passes_and_boots_next(tmp_path):
    root = make_node(tmp_path, ["6.1.0-27-amd64", "6.1.0-28-amd64"], with_module=("6.1.0-27-amd64", "6.1.0-28-amd64"))
    found = reading(root, "dkms-3.0.10-all-installed.txt")
    assert kernel_lockstep.module_verdict(found, "6.1.0-28-amd64") == (
        True,
        "kernel 6.1.0-28-amd64 has the NVIDIA module: updates/dkms/nvidia.ko",
    )
    assert kernel_lockstep.boot_verdict(found, "6.1.0-28-amd64")[0] is True


def test_a_module_built_but_not_installed_fails_with_the_dkms_install_fix(tmp_path):
    root = make_node(tmp_path, ["6.1.0-27-amd64", "6.1.0-28-amd64"], with_module=("6.1.0-27-amd64",))
    ok, detail = kernel_lockstep.module_verdict(reading(root, "dkms-3.0.10-built-not-installed.txt"), "6.1.0-28-amd64")
    assert ok is False
    assert "kernel 6.1.0-28-amd64" in detail
    assert "dkms install nvidia/580.95.05 -k 6.1.0-28-amd64" in detail


def test_a_kernel_that_did_not_install_fails(tmp_path):
    root = make_node(tmp_path, ["6.1.0-27-amd64"], with_module=("6.1.0-27-amd64",))
    ok, detail = kernel_lockstep.module_verdict(reading(root, "dkms-3.0.10-all-installed.txt"), "6.1.0-28-amd64")
    assert ok is False
    assert "is not installed" in detail


def test_moving_back_below_a_newer_installed_kernel_fails_on_grub_order(tmp_path):
    root = make_node(tmp_path, ["6.1.0-27-amd64", "6.1.0-28-amd64"], with_module=("6.1.0-27-amd64", "6.1.0-28-amd64"))
    ok, detail = kernel_lockstep.boot_verdict(reading(root, "dkms-3.0.10-all-installed.txt"), "6.1.0-27-amd64")
    assert ok is False
    assert "would boot 6.1.0-28-amd64 next" in detail


def test_missing_packages_are_those_not_installed():
    target = {"kver": "6.1.0-39-amd64", "packages": ["linux-headers-6.1.0-39-amd64", "linux-image-6.1.0-39-amd64"]}
    names = {name for name, info in installed(DEBIAN).items() if info["installed"]}
    assert kernel_lockstep.missing_packages(target, names) == []
    assert kernel_lockstep.missing_packages(dict(target, packages=["linux-image-6.1.0-40-amd64"]), names) == [
        "linux-image-6.1.0-40-amd64"
    ]


# --- validation, before any host is contacted ---------------------------------------------------------------


def validation_problems(values):
    import datetime

    from ansible_collections.gpuops.cluster.plugins.module_utils.host_validation import findings

    host = {"gpuops_stack": {"driver": "580", "cuda": "13.0"}, "gpuops_gpu": "h100-sxm", **values}
    found = findings(
        host, names=list(host), checks=[], os_name="Ubuntu", os_version="22.04", today=datetime.date(2026, 12, 4)
    )
    return [problem for problem in found["problems"] if "kernel" in problem]


def test_validation_refuses_a_gpuops_kernel_that_is_no_release_nor_latest():
    (problem,) = validation_problems({"gpuops_kernel": "newest"})
    assert problem.startswith("gpuops_kernel is 'newest': set latest, or a kernel release as uname -r prints it")
    (role_problem,) = validation_problems({"nvidia_stack_kernel_version": "6.1.0-28 amd64"})
    assert role_problem.startswith("nvidia_stack_kernel_version is '6.1.0-28 amd64': set latest")


def test_validation_passes_a_release_latest_and_unset():
    assert validation_problems({"gpuops_kernel": "6.1.0-28-amd64", "gpuops_kernel_hold": False}) == []
    assert validation_problems({"gpuops_kernel": "latest"}) == []
    assert validation_problems({"nvidia_stack_kernel_version": ""}) == []
    (problem,) = validation_problems({"gpuops_kernel_hold": "maybe"})
    assert problem.startswith("gpuops_kernel_hold is 'maybe'; set true or false")


# --- captured on a Debian 12 lab node (tests/fixtures/kernel/README.md, "Captured on a lab node") -------------


def lab(name):
    return (FIXTURES / "kernel" / ("debian12-lab-" + name)).read_text(encoding="utf-8")


def test_lab_node_holds_the_real_kernel_packages_and_not_kbuild_or_what_is_not_installed():
    assert kernel_lockstep.apt_kernel_holds(apt_pinning.parse_dpkg_query(lab("dpkg-query-linux.txt"))) == [
        "linux-headers-6.1.0-50-amd64",
        "linux-headers-6.1.0-50-common",
        "linux-headers-amd64",
        "linux-image-6.1.0-50-amd64",
        "linux-image-amd64",
    ]


def test_lab_node_latest_is_what_the_real_metapackage_depends_on():
    node = apt_pinning.parse_dpkg_query(lab("dpkg-query-linux.txt"))
    assert kernel_lockstep.apt_meta(node, "6.1.0-50-amd64") == "linux-image-amd64"
    target = kernel_lockstep.apt_target(
        "latest",
        "6.1.0-47-amd64",
        node,
        lab("apt-cache-pkgnames-linux.txt"),
        lab("apt-cache-show-linux-image-amd64.txt"),
    )
    assert target == {
        "kver": "6.1.0-50-amd64",
        "packages": ["linux-headers-6.1.0-50-amd64", "linux-image-6.1.0-50-amd64"],
    }


def test_lab_index_releases_leave_out_unsigned_and_debug_images():
    releases = kernel_lockstep.apt_available_releases(lab("apt-cache-pkgnames-linux.txt"))
    assert releases == [
        "6.1.0-47-amd64",
        "6.1.0-47-cloud-amd64",
        "6.1.0-47-rt-amd64",
        "6.1.0-50-amd64",
        "6.1.0-50-cloud-amd64",
        "6.1.0-50-rt-amd64",
    ]


def test_lab_dkms_status_after_a_failed_build_fails_the_kernel_with_the_autoinstall_fix(tmp_path):
    root = make_node(tmp_path, ["6.1.0-50-amd64"])
    reading_ = kernel_modules.with_commands(
        kernel_modules.read(root), dkms_status=lab("dkms-status-added-after-failed-build.txt")
    )
    ok, detail = kernel_lockstep.module_verdict(reading_, "6.1.0-50-amd64")
    assert ok is False
    assert "DKMS did not build it" in detail
    assert "dkms autoinstall -k 6.1.0-50-amd64" in detail
    built = make_node(tmp_path / "built", ["6.1.0-50-amd64"], with_module=("6.1.0-50-amd64",))
    found = kernel_modules.with_commands(kernel_modules.read(built), dkms_status=lab("dkms-status-installed.txt"))
    assert kernel_lockstep.module_verdict(found, "6.1.0-50-amd64")[0] is True
