"""package_pin's decisions on plain data: no module, no file, no command."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import apt_pinning, pin_plan, rpm_versionlock

PREF = "/etc/apt/preferences.d/gpuops-nvidia.pref"
UU = "/etc/apt/apt.conf.d/51gpuops-nvidia-blacklist"
LOCKS = "/etc/dnf/plugins/versionlock.list"
PACKAGES = [
    {"name": "nvidia-driver-550", "version": "550.127.08-1", "component": "driver"},
    {"name": "libnccl2", "version": "2.21.5-1+cuda12.4", "component": "nccl"},
]
PINS = [{"component": "driver", "names": ["nvidia-driver-550", "libnvidia-*-550"], "version": "550.127.08-1"}]


def request(**overrides):
    return {
        "state": "present",
        "priority": 1001,
        "hold": True,
        "preferences_path": PREF,
        "unattended_upgrades": True,
        "unattended_upgrades_path": UU,
        "unattended_upgrades_patterns": ["nvidia-"],
        "versionlock_path": LOCKS,
        **overrides,
    }


def apt_pins():
    return pin_plan.request_pins("apt", PINS, PACKAGES)


def test_request_pins_merges_on_apt_and_takes_exact_packages_on_dnf():
    pins, installed = apt_pins()
    assert installed == ["libnccl2", "nvidia-driver-550"]
    assert [pin["names"] for pin in pins] == [["libnvidia-*-550", "nvidia-driver-550"], ["libnccl2"]]
    dnf_pins, _installed = pin_plan.request_pins("dnf", PINS, PACKAGES)
    assert [pin["names"] for pin in dnf_pins] == [["nvidia-driver-550"], ["libnccl2"]]
    with pytest.raises(pin_plan.PlanError, match=r"cannot pin the requested stack: .*both"):
        pin_plan.request_pins("apt", PINS, [{"name": "nvidia-driver-550", "version": "550.90.07-1"}])


def test_apt_plan_on_a_fresh_node_writes_both_files_and_holds_once():
    pins, installed = apt_pins()
    plan = pin_plan.apt_plan(request(), pins, installed, None, None, {"libc6"}, "/usr/bin/apt-mark")
    assert [(c["path"], c["before"], c["changed"]) for c in plan["files"]] == [(PREF, None, True), (UU, None, True)]
    assert "Pin: version 550.127.08-1" in plan["files"][0]["after"]
    assert plan["hold_commands"] == [["/usr/bin/apt-mark", "hold", "libnccl2", "nvidia-driver-550"]]
    assert plan["held"] == ["libnccl2", "nvidia-driver-550"]
    assert plan["unheld"] == []
    assert plan["holds_diff"]["before"] == ""
    assert plan["holds_diff"]["after"] == "libnccl2\nnvidia-driver-550\n"
    changed_files, commands, changed = pin_plan.changes(plan)
    assert changed is True
    assert len(changed_files) == 2
    assert commands == plan["hold_commands"]


def test_apt_plan_on_a_converged_node_changes_nothing():
    pins, installed = apt_pins()
    first = pin_plan.apt_plan(request(), pins, installed, None, None, set())
    pref, uu = (change["after"] for change in first["files"])
    again = pin_plan.apt_plan(request(), pins, installed, pref, uu, set(first["held"]))
    assert pin_plan.changes(again) == ([], [], False)


def test_released_keeps_the_files_and_drops_only_owned_holds():
    pins, installed = apt_pins()
    pref = apt_pinning.render_preferences(pins)
    held = {"libc6", "libnccl2", "nvidia-driver-550"}
    plan = pin_plan.apt_plan(request(state="released"), pins, installed, pref, "uu\n", held, "apt-mark")
    assert not any(change["changed"] for change in plan["files"])
    assert plan["hold_commands"] == [["apt-mark", "unhold", "libnccl2", "nvidia-driver-550"]]


def test_a_package_dropped_from_the_stack_loses_its_hold():
    old_pins, _installed = pin_plan.request_pins("apt", [], [{"name": "nvidia-driver-535", "version": "535.1-1"}])
    pref = apt_pinning.render_preferences(old_pins)
    pins, installed = apt_pins()
    plan = pin_plan.apt_plan(request(), pins, installed, pref, None, {"nvidia-driver-535"})
    assert plan["unheld"] == ["nvidia-driver-535"]
    assert plan["held"] == ["libnccl2", "nvidia-driver-550"]


def test_absent_keeps_files_it_did_not_write():
    pins, installed = apt_pins()
    foreign = "Package: foo\nPin: version 1\nPin-Priority: 1001\n"
    plan = pin_plan.apt_plan(request(state="absent"), pins, installed, foreign, None, set())
    assert plan["files"][0]["after"] == foreign
    assert plan["files"][0]["changed"] is False


def test_unattended_upgrades_false_removes_only_our_drop_in():
    pins, _installed = apt_pins()
    ours = apt_pinning.render_unattended_blacklist(["x"])
    assert pin_plan.apt_files(request(unattended_upgrades=False), pins, None, ours)[1] is None
    assert pin_plan.apt_files(request(unattended_upgrades=False), pins, None, "theirs\n")[1] == "theirs\n"


def test_low_priority_is_a_plan_error():
    pins, installed = apt_pins()
    with pytest.raises(pin_plan.PlanError, match="too low"):
        pin_plan.apt_plan(request(priority=990), pins, installed, None, None, set())


RPM = [{"component": "driver", "names": ["nvidia-driver"], "version": "3:550.127.08-1.el9"}]


def test_dnf_plan_writes_the_block_and_replaces_foreign_locks_on_our_names():
    before = "nvidia-driver-0:535.1-1.el9.*\nkernel-0:5.14-1.el9.*\n"
    plan = pin_plan.dnf_plan(request(), RPM, before, [["/usr/bin/dnf", "-y", "module", "enable", "nvidia-driver:550"]])
    after = plan["files"][0]["after"]
    assert "nvidia-driver-0:535" not in after
    assert "kernel-0:5.14-1.el9.*" in after
    assert rpm_versionlock.BLOCK_BEGIN in after
    assert "nvidia-driver-3:550.127.08-1.el9.*" in after
    assert plan["held"] == ["nvidia-driver"]
    assert plan["unheld"] == []
    assert pin_plan.changes(plan)[1] == [["/usr/bin/dnf", "-y", "module", "enable", "nvidia-driver:550"]]


def test_dnf_released_and_nothing_to_lock_on_an_empty_node():
    plan = pin_plan.dnf_plan(request(state="released"), RPM, None)
    assert plan["files"][0]["after"] is None
    assert pin_plan.changes(plan) == ([], [], False)


def test_dnf_refusals():
    with pytest.raises(pin_plan.PlanError, match="exact package names"):
        pin_plan.dnf_plan(request(), [{"names": ["nvidia-*"], "version": "1-1"}], None)
    with pytest.raises(pin_plan.PlanError, match=r"cannot lock the requested stack: .*needs the release"):
        pin_plan.dnf_plan(request(), [{"names": ["x"], "version": "1.0"}], None)
    with pytest.raises(pin_plan.PlanError, match="not a dnf module stream"):
        pin_plan.dnf_stream_commands("nvidia-driver", {})


def test_stream_commands_enable_switch_or_nothing():
    assert pin_plan.dnf_stream_commands("nvidia-driver:550-dkms", {}, "/usr/bin/dnf") == [
        ["/usr/bin/dnf", "-y", "module", "enable", "nvidia-driver:550-dkms"]
    ]
    assert pin_plan.dnf_stream_commands("nvidia-driver:570-open", {"nvidia-driver": "550-dkms"})[0][3] == "switch-to"
    assert pin_plan.dnf_stream_commands("nvidia-driver:550-dkms", {"nvidia-driver": "550-dkms"}) == []


def test_result_lists_what_changes_and_the_diff_on_request():
    pins, installed = apt_pins()
    plan = pin_plan.apt_plan(request(), pins, installed, None, None, set(), "apt-mark")
    returned = pin_plan.result("apt", pins, plan)
    assert returned["files"] == [PREF, UU]
    assert returned["commands"] == [["apt-mark", "hold", "libnccl2", "nvidia-driver-550"]]
    assert "diff" not in returned
    with_diff = pin_plan.result("apt", pins, plan, diff=True)
    assert [entry["before_header"] for entry in with_diff["diff"]] == [PREF, UU, "holds"]


# The lab's dnf node (Rocky 9, real dnf 4): kmod-nvidia-open-dkms requires nvidia-kmod-common at its own version,
# which the resolved stack does not name; left unlocked, `dnf upgrade` took the stream's newer release and failed
# ("cannot install the best update candidate for package nvidia-kmod-common-3:580.95.05-1.el9.noarch").
RHEL_PACKAGES = [
    {"name": "nvidia-driver", "version": "3:580.95.05-1.el9", "component": "driver"},
    {"name": "kmod-nvidia-open-dkms", "version": "3:580.95.05-1.el9", "component": "driver"},
    {"name": "libnccl", "version": "2.21.5-1+cuda12.4", "component": "nccl"},
]
RHEL_PINS = [
    {
        "component": "driver",
        "names": ["nvidia-driver", "kmod-nvidia-*", "nvidia-kmod-common"],
        "version": "3:580.95.05-1.el9",
    },
    {"component": "nccl", "names": ["libnccl", "libnccl-devel"], "version": "2.21.5-*+cuda12.4"},
]


def rpm_rows(rows):
    return rpm_versionlock.parse_rpm_query("".join(f"{n}\t{e}\t{v}\t{r}\n" for n, e, v, r in rows))


def test_dnf_locks_the_installed_dependency_a_pin_names_at_the_driver_version():
    installed = rpm_rows(
        [
            ("nvidia-driver", "3", "580.95.05", "1.el9"),
            ("kmod-nvidia-open-dkms", "3", "580.95.05", "1.el9"),
            ("nvidia-kmod-common", "3", "580.95.05", "1.el9"),
            ("libnccl", "0", "2.21.5", "1+cuda12.4"),
        ]
    )
    pins, _installed = pin_plan.request_pins("dnf", RHEL_PINS, RHEL_PACKAGES, installed)
    assert [(pin["names"], pin["version"]) for pin in pins] == [
        (["nvidia-driver"], "3:580.95.05-1.el9"),
        (["kmod-nvidia-open-dkms"], "3:580.95.05-1.el9"),
        (["libnccl"], "2.21.5-1+cuda12.4"),
        (["nvidia-kmod-common"], "3:580.95.05-1.el9"),
    ]
    plan = pin_plan.dnf_plan(request(), pins, None)
    assert "nvidia-kmod-common-3:580.95.05-1.el9.*" in plan["files"][0]["after"]


def test_dnf_does_not_lock_a_dependency_left_at_another_release_during_a_move():
    """Before the install of a new release (move.yml) the old nvidia-kmod-common is no pin's version: unlocked."""
    installed = rpm_rows(
        [("nvidia-kmod-common", "3", "580.65.06", "1.el9"), ("nvidia-settings", "3", "580.95.05", "1.el9")]
    )
    pins, _installed = pin_plan.request_pins("dnf", RHEL_PINS, RHEL_PACKAGES, installed)
    assert [pin["names"] for pin in pins] == [["nvidia-driver"], ["kmod-nvidia-open-dkms"], ["libnccl"]]
