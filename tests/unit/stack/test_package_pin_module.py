"""package_pin through its argument spec: files, holds, check and diff mode, idempotence, dnf locks."""

import os
import stat
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import package_pin

PACKAGES = [
    {"name": "nvidia-driver-550", "version": "550.127.08-1", "component": "driver"},
    {"name": "nvidia-fabricmanager-550", "version": "550.127.08-1", "component": "fabricmanager"},
    # the resolver adds the install spec; the module accepts and ignores it
    {"name": "libnccl2", "version": "2.21.5-1+cuda12.4", "component": "nccl", "spec": "libnccl2=2.21.5-1+cuda12.4"},
]
PINS = [{"component": "driver", "names": ["nvidia-driver-550", "libnvidia-*-550"], "version": "550.127.08-1"}]


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "preferences.d").mkdir()
    (tmp_path / "apt.conf.d").mkdir()
    (tmp_path / "dnf").mkdir()
    return {
        "preferences_path": str(tmp_path / "preferences.d" / "gpuops-nvidia.pref"),
        "unattended_upgrades_path": str(tmp_path / "apt.conf.d" / "51gpuops-nvidia-blacklist"),
        "versionlock_path": str(tmp_path / "dnf" / "versionlock.list"),
    }


def args(paths, **extra):
    return {**paths, "packages": PACKAGES, "pins": PINS, **extra}


def hold_calls(node):
    return [call for call in node.calls if call[1] in ("hold", "unhold")]


def test_present_writes_files_and_holds_in_one_call(run_module, node, paths):
    node.held = {"libc6"}
    result = run_module(package_pin.main, args(paths))
    assert result["changed"] is True
    assert result["package_manager"] == "apt"
    assert result["held"] == ["libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"]
    assert result["unheld"] == []
    assert hold_calls(node) == [
        ["/usr/bin/apt-mark", "hold", "libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"]
    ]
    assert node.held == {"libc6", "libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"}
    pref = Path(paths["preferences_path"]).read_text()
    assert "Package: libnvidia-*-550 nvidia-driver-550\nPin: version 550.127.08-1\nPin-Priority: 1001\n" in pref
    assert "Package: libnccl2\nPin: version 2.21.5-1+cuda12.4\n" in pref
    blacklist = Path(paths["unattended_upgrades_path"]).read_text()
    assert '    "libnvidia-(?!container).*-550$";' in blacklist
    assert '    "nvidia-driver-550$";' in blacklist
    assert '    "nvidia-";' not in blacklist  # only what the collection pins, by default
    for path in (paths["preferences_path"], paths["unattended_upgrades_path"]):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_second_run_is_idempotent(run_module, node, paths):
    run_module(package_pin.main, args(paths))
    node.calls.clear()
    result = run_module(package_pin.main, args(paths))
    assert result["changed"] is False
    assert result["held"] == result["unheld"] == result["files"] == result["commands"] == []
    assert node.calls == [["/usr/bin/apt-mark", "showhold"]]


def test_check_mode_changes_nothing_and_reports_the_plan(run_module, node, paths):
    result = run_module(package_pin.main, args(paths), check=True, diff=True)
    assert result["changed"] is True
    assert result["held"] == ["libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"]
    assert result["files"] == [paths["preferences_path"], paths["unattended_upgrades_path"]]
    assert node.calls == [["/usr/bin/apt-mark", "showhold"]]
    assert node.held == set()
    assert not os.path.exists(paths["preferences_path"])
    diff = {entry["before_header"]: entry for entry in result["diff"]}
    assert diff[paths["preferences_path"]]["before"] == ""
    assert "Pin-Priority: 1001" in diff[paths["preferences_path"]]["after"]
    assert diff["holds"] == {
        "before_header": "holds",
        "after_header": "holds",
        "before": "",
        "after": "libnccl2\nnvidia-driver-550\nnvidia-fabricmanager-550\n",
    }


def test_check_mode_on_converged_node_reports_no_change(run_module, node, paths):
    run_module(package_pin.main, args(paths))
    result = run_module(package_pin.main, args(paths), check=True, diff=True)
    assert result["changed"] is False
    assert all(entry["before"] == entry["after"] for entry in result["diff"])


def test_no_diff_key_without_diff_mode(run_module, node, paths):
    assert "diff" not in run_module(package_pin.main, args(paths))


def test_upgrade_sequence_release_then_present(run_module, node, paths):
    run_module(package_pin.main, args(paths))
    pref_before = Path(paths["preferences_path"]).read_text()
    new = [dict(package, version="550.144.03-1") if "550" in package["name"] else package for package in PACKAGES]
    new_pins = [dict(PINS[0], version="550.144.03-1")]

    released = run_module(package_pin.main, dict(paths, packages=new, pins=new_pins, state="released"))
    assert released["unheld"] == ["libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"]
    assert released["files"] == []
    assert Path(paths["preferences_path"]).read_text() == pref_before
    assert node.held == set()

    node.calls.clear()
    present = run_module(package_pin.main, dict(paths, packages=new, pins=new_pins))
    assert present["held"] == ["libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"]
    assert "Pin: version 550.144.03-1" in Path(paths["preferences_path"]).read_text()
    assert "Pin: version 550.127.08-1" not in Path(paths["preferences_path"]).read_text()
    assert len(hold_calls(node)) == 1


def test_branch_change_moves_holds_to_the_new_names(run_module, node, paths):
    run_module(package_pin.main, args(paths))
    node.calls.clear()
    new = [{"name": "nvidia-driver-570", "version": "570.133.20-1", "component": "driver"}, PACKAGES[2]]
    result = run_module(package_pin.main, dict(paths, packages=new))
    assert result["held"] == ["nvidia-driver-570"]
    assert result["unheld"] == ["nvidia-driver-550", "nvidia-fabricmanager-550"]
    assert hold_calls(node) == [
        ["/usr/bin/apt-mark", "hold", "nvidia-driver-570"],
        ["/usr/bin/apt-mark", "unhold", "nvidia-driver-550", "nvidia-fabricmanager-550"],
    ]


def test_hold_false_drops_owned_holds_only(run_module, node, paths):
    run_module(package_pin.main, args(paths))
    node.held.add("libc6")
    result = run_module(package_pin.main, args(paths, hold=False))
    assert result["unheld"] == ["libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"]
    assert node.held == {"libc6"}


def test_absent_removes_files_and_holds(run_module, node, paths):
    run_module(package_pin.main, args(paths))
    result = run_module(package_pin.main, dict(paths, state="absent"), diff=True)
    assert result["changed"] is True
    assert result["unheld"] == ["libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"]
    assert not os.path.exists(paths["preferences_path"])
    assert not os.path.exists(paths["unattended_upgrades_path"])
    assert run_module(package_pin.main, dict(paths, state="absent"))["changed"] is False


def test_absent_keeps_a_file_it_did_not_write(run_module, node, paths):
    with open(paths["preferences_path"], "w") as handle:
        handle.write("Package: foo\nPin: version 1\nPin-Priority: 1001\n")
    result = run_module(package_pin.main, dict(paths, state="absent"))
    assert result["changed"] is False
    assert os.path.exists(paths["preferences_path"])


def test_unattended_upgrades_false_removes_our_drop_in(run_module, node, paths):
    run_module(package_pin.main, args(paths))
    result = run_module(package_pin.main, args(paths, unattended_upgrades=False))
    assert result["files"] == [paths["unattended_upgrades_path"]]
    assert not os.path.exists(paths["unattended_upgrades_path"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"priority": 990}, "too low"),
        ({"packages": [{"name": "nvidia-driver-550", "version": "550.90.07-1"}]}, "both"),
        ({"packages": [{"name": "Bad Name", "version": "1-1"}]}, "not a Debian package name"),
    ],
)
def test_bad_requests_fail_with_a_next_step(run_module, node, paths, extra, message):
    with pytest.raises(run_module.Fail, match=message):
        run_module(package_pin.main, args(paths, **extra))
    assert node.held == set()


def test_present_without_packages_fails(run_module, node, paths):
    with pytest.raises(run_module.Fail, match="needs packages or pins"):
        run_module(package_pin.main, dict(paths))


def test_apt_mark_failure_is_reported_with_rc(run_module, node, paths):
    node.fail["apt-mark hold"] = (100, "", "E: Unable to locate package nvidia-driver-550\n")
    with pytest.raises(run_module.Fail) as failed:
        run_module(package_pin.main, args(paths))
    assert failed.value.result["rc"] == 100
    assert "Unable to locate package" in failed.value.result["msg"]


def test_no_package_manager_fails(run_module, node, paths):
    node.binaries = set()
    with pytest.raises(run_module.Fail, match="neither apt-mark nor dnf"):
        run_module(package_pin.main, args(paths))


RPM_PACKAGES = [
    {"name": "nvidia-driver", "version": "3:550.127.08-1.el9", "component": "driver"},
    {"name": "nvidia-fabricmanager", "version": "550.127.08-1", "component": "fabricmanager"},
]


def dnf_args(paths, **extra):
    return {**paths, "packages": RPM_PACKAGES, "package_manager": "dnf", **extra}


def test_dnf_locks_and_stream(run_module, node, paths):
    node.binaries = {"dnf", "rpm"}
    with open(paths["versionlock_path"], "w") as handle:
        handle.write("kernel-0:5.14.0-427.42.1.el9_4.*\nnvidia-driver-3:550.90.07-1.el9.*\n")
    result = run_module(package_pin.main, dnf_args(paths, dnf_module_stream="nvidia-driver:550-dkms"), diff=True)
    assert result["changed"] is True
    assert result["held"] == ["nvidia-driver", "nvidia-fabricmanager"]
    assert result["commands"] == [["/usr/bin/dnf", "-y", "module", "enable", "nvidia-driver:550-dkms"]]
    assert node.enabled_streams == {"nvidia-driver": "550-dkms"}
    text = Path(paths["versionlock_path"]).read_text()
    assert text.startswith("kernel-0:5.14.0-427.42.1.el9_4.*\n")
    assert "nvidia-driver-3:550.90.07-1.el9.*" not in text
    assert "nvidia-driver-3:550.127.08-1.el9.*\nnvidia-fabricmanager-0:550.127.08-1.*\n" in text
    locks = next(entry for entry in result["diff"] if entry["before_header"] == "versionlocks")
    assert locks["after"] == "nvidia-driver-3:550.127.08-1.el9.*\nnvidia-fabricmanager-0:550.127.08-1.*\n"

    node.calls.clear()
    again = run_module(package_pin.main, dnf_args(paths, dnf_module_stream="nvidia-driver:550-dkms"))
    assert again["changed"] is False
    assert node.calls == [["/usr/bin/dnf", "-q", "module", "list", "--enabled", "nvidia-driver"]]


def test_dnf_stream_switch_in_check_mode_runs_nothing(run_module, node, paths):
    node.binaries = {"dnf"}
    node.enabled_streams = {"nvidia-driver": "550-dkms"}
    result = run_module(package_pin.main, dnf_args(paths, dnf_module_stream="nvidia-driver:570-open"), check=True)
    assert result["commands"] == [["/usr/bin/dnf", "-y", "module", "switch-to", "nvidia-driver:570-open"]]
    assert node.enabled_streams == {"nvidia-driver": "550-dkms"}
    assert not os.path.exists(paths["versionlock_path"])


def test_dnf_released_removes_only_our_locks_and_keeps_the_file(run_module, node, paths):
    node.binaries = {"dnf"}
    with open(paths["versionlock_path"], "w") as handle:
        handle.write("kernel-0:5.14.0-427.42.1.el9_4.*\n")
    run_module(package_pin.main, dnf_args(paths))
    result = run_module(package_pin.main, dnf_args(paths, state="released"))
    assert result["unheld"] == ["nvidia-driver", "nvidia-fabricmanager"]
    assert Path(paths["versionlock_path"]).read_text() == "kernel-0:5.14.0-427.42.1.el9_4.*\n"


def test_dnf_refuses_globs_and_missing_release(run_module, node, paths):
    node.binaries = {"dnf"}
    with pytest.raises(run_module.Fail, match="exact package names"):
        run_module(
            package_pin.main,
            dict(paths, package_manager="dnf", pins=[{"names": ["nvidia-*"], "version": "550.127.08-1"}]),
        )
    with pytest.raises(run_module.Fail, match="needs the release"):
        run_module(package_pin.main, dict(paths, package_manager="dnf", packages=[{"name": "x", "version": "1.0"}]))


def test_dnf_locks_only_the_packages_when_pins_carry_globs_and_rpm_names(run_module, node, paths):
    """The resolver's RHEL pins name globs (kmod-nvidia-*) and mixed-case RPMs; the locks are the packages."""
    node.binaries = {"dnf", "rpm"}
    pins = [{"component": "driver", "names": ["kmod-nvidia-*", "nvidia-libXNVCtrl"], "version": "3:550.127.08-1.el9"}]
    result = run_module(package_pin.main, dnf_args(paths, pins=pins))
    assert result["held"] == ["nvidia-driver", "nvidia-fabricmanager"]
    locked = Path(paths["versionlock_path"]).read_text()
    assert "kmod-nvidia" not in locked
    assert "nvidia-libXNVCtrl" not in locked


def test_apt_holds_only_the_installed_packages_but_pins_every_name(run_module, node, paths):
    """apt-mark hold fails on names the repository lacks: pins name them, holds do not."""
    pins = [{"component": "driver", "names": ["nvidia-driver", "nvidia-settings"], "version": "550.127.08-1"}]
    packages = [{"name": "nvidia-driver", "version": "550.127.08-1", "component": "driver"}]
    result = run_module(package_pin.main, dict(paths, package_manager="apt", pins=pins, packages=packages))
    assert result["held"] == ["nvidia-driver"]
    preferences = Path(paths["preferences_path"]).read_text()
    assert "nvidia-settings" in preferences
    assert ["/usr/bin/apt-mark", "hold", "nvidia-driver"] in node.calls
    assert node.held == {"nvidia-driver"}


@pytest.mark.parametrize(
    ("package", "message"),
    [
        ({"name": "nvidia-driver-550\n", "version": "550.127.08-1"}, "is not a Debian package name"),
        ({"name": "nvidia-driver-550", "version": "550.127.08-1\n"}, "is not an exact Debian version"),
    ],
)
def test_a_name_or_version_ending_in_a_newline_writes_no_pin_file(run_module, node, paths, package, message):
    # Written, "Package: nvidia-driver-550\n\nPin: ..." ends the stanza early and every apt command exits 100.
    with pytest.raises(run_module.Fail, match=message):
        run_module(package_pin.main, dict(paths, packages=[package], pins=[]))
    assert not os.path.exists(paths["preferences_path"])
    assert hold_calls(node) == []


def test_a_dnf_name_ending_in_a_newline_writes_no_versionlock(run_module, node, paths):
    node.binaries = {"dnf", "rpm"}
    package = {"name": "nvidia-driver\n", "version": "3:550.127.08-1.el9"}
    with pytest.raises(run_module.Fail, match="is not an RPM package name"):
        run_module(package_pin.main, dict(paths, packages=[package], pins=[]))
    assert not os.path.exists(paths["versionlock_path"])


def test_dnf_also_locks_an_installed_dependency_a_pin_names_at_the_driver_version(run_module, node, paths):
    """The lab's dnf node: kmod-nvidia-open-dkms needs nvidia-kmod-common at its own version; a stream does not hold
    it, so unlocked it was `dnf upgrade`'s candidate and the upgrade failed. It is locked, read with one rpm -qa."""
    node.binaries = {"dnf", "rpm"}
    node.rpm = {"nvidia-kmod-common": ("3", "550.127.08", "1.el9"), "nvidia-settings": ("3", "550.90.07", "1.el9")}
    pins = [{"component": "driver", "names": ["kmod-nvidia-*", "nvidia-kmod-common", "nvidia-settings"],
             "version": "3:550.127.08-1.el9"}]  # fmt: skip
    result = run_module(package_pin.main, dnf_args(paths, pins=pins))
    assert result["held"] == ["nvidia-driver", "nvidia-fabricmanager", "nvidia-kmod-common"]
    locked = Path(paths["versionlock_path"]).read_text()
    assert "nvidia-kmod-common-3:550.127.08-1.el9.*" in locked
    assert "nvidia-settings" not in locked  # installed at another release: no pin's version
    assert sum(1 for call in node.calls if call[1:2] == ["-qa"]) == 1
