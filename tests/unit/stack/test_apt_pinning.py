"""apt_pinning: preferences, unattended-upgrades blacklist, dpkg-query/apt-mark parsing, hold plans."""

import re
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import apt_pinning as ap

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "stack"

PINS = [
    {"component": "nccl", "names": ["libnccl2", "libnccl-dev"], "version": "2.21.5-1+cuda12.4"},
    {"component": "driver", "names": ["nvidia-driver-550", "nvidia-kernel-common-550"], "version": "550.127.08-1"},
]


def test_render_preferences_is_exact_and_sorted():
    text = ap.render_preferences(PINS)
    assert text == (
        "# managed by gpuops.cluster: exact versions of the NVIDIA stack.\n"
        "# Changes here are overwritten; change the requested stack instead.\n"
        "\n"
        "# component: driver\n"
        "Package: nvidia-driver-550 nvidia-kernel-common-550\n"
        "Pin: version 550.127.08-1\n"
        "Pin-Priority: 1001\n"
        "\n"
        "# component: nccl\n"
        "Package: libnccl-dev libnccl2\n"
        "Pin: version 2.21.5-1+cuda12.4\n"
        "Pin-Priority: 1001\n"
    )


def test_render_preferences_ignores_input_order():
    shuffled = [dict(pin, names=list(reversed(pin["names"]))) for pin in reversed(PINS)]
    assert ap.render_preferences(shuffled) == ap.render_preferences(PINS)


@pytest.mark.parametrize("priority", [1000, 500, -1, True])
def test_priority_below_1001_is_refused(priority):
    with pytest.raises(ap.PinningError, match="1001"):
        ap.render_preferences(PINS, priority=priority)


def test_custom_priority_is_written():
    assert "Pin-Priority: 1500\n" in ap.render_preferences(PINS, priority=1500)


def test_preferences_round_trip():
    stanzas = ap.parse_preferences(ap.render_preferences(PINS, priority=1200))
    assert stanzas == [
        {
            "names": ["nvidia-driver-550", "nvidia-kernel-common-550"],
            "version": "550.127.08-1",
            "priority": 1200,
            "component": "driver",
        },
        {"names": ["libnccl-dev", "libnccl2"], "version": "2.21.5-1+cuda12.4", "priority": 1200, "component": "nccl"},
    ]


def test_parse_foreign_preferences_keeps_release_pins_apart():
    stanzas = ap.parse_preferences((FIXTURES / "preferences_foreign.pref").read_text())
    assert stanzas[0] == {"names": ["linux-image-*"], "version": None, "priority": -1, "component": ""}
    assert ap.pinned_versions(stanzas) == {
        "nvidia-driver-550": "550.90.07-1",
        "nvidia-kernel-common-550": "550.90.07-1",
    }


def test_packages_become_pins_and_merge_with_pins():
    pins = ap.normalize_pins(
        PINS,
        [
            {"name": "nvidia-driver-550", "version": "550.127.08-1", "component": "driver"},
            {"name": "nvidia-fabricmanager-550", "version": "550.127.08-1", "component": "fabricmanager"},
        ],
    )
    assert [pin["names"] for pin in pins] == [
        ["nvidia-driver-550", "nvidia-kernel-common-550"],
        ["nvidia-fabricmanager-550"],
        ["libnccl-dev", "libnccl2"],
    ]


def test_one_name_two_versions_is_an_error():
    with pytest.raises(ap.PinningError, match=r"both 550\.127\.08-1 and 550\.90\.07-1"):
        ap.normalize_pins(PINS, [{"name": "nvidia-driver-550", "version": "550.90.07-1"}])


@pytest.mark.parametrize(
    ("pin", "message"),
    [
        ({"component": "x", "names": ["Nvidia Driver"], "version": "1-1"}, "not a Debian package name"),
        ({"component": "x", "names": ["nvidia-driver-550"], "version": "550 or newer"}, "not an exact Debian version"),
        ({"component": "x", "names": ["nvidia-driver-550"], "version": None}, "not an exact Debian version"),
        ({"component": "x", "names": [], "version": "1-1"}, "has no names"),
    ],
)
def test_bad_pins_are_refused(pin, message):
    with pytest.raises(ap.PinningError, match=message):
        ap.render_preferences([pin])


def test_pin_for_exact_then_glob():
    pinned = {"nvidia-driver-550": "1", "libnvidia-*": "2"}
    assert ap.pin_for("nvidia-driver-550", pinned) == "1"
    assert ap.pin_for("libnvidia-compute-550", pinned) == "2"
    assert ap.pin_for("libnccl2", pinned) is None


@pytest.mark.parametrize(
    ("name", "entry"),
    [
        ("libnccl2", "libnccl2$"),
        ("nvidia-driver-550", "nvidia-driver-550$"),
        ("libstdc++6", "libstdc\\+\\+6$"),
        ("cuda-toolkit-12.4", "cuda-toolkit-12\\.4$"),
    ],
)
def test_blacklist_entry_matches_exactly_with_re_match(name, entry):
    assert ap.blacklist_entry(name) == entry
    # unattended-upgrades uses re.match: the entry must not match a longer name
    assert re.match(entry, name)
    assert not re.match(entry, name + "-dev")
    assert not re.match(entry, "x" + name)


def test_blacklist_entry_for_a_glob():
    entry = ap.blacklist_entry("libnvidia-*-550")
    assert entry == "libnvidia-(?!container).*-550$"
    assert re.match(entry, "libnvidia-compute-550")
    assert not re.match(entry, "libnvidia-compute-570")


def test_the_drivers_library_glob_leaves_the_container_toolkits_libraries_out():
    entry = ap.blacklist_entry("libnvidia-*")  # Debian's driver pins
    assert re.match(entry, "libnvidia-ml1")
    assert not re.match(entry, "libnvidia-container1")
    assert not re.match(entry, "libnvidia-container-tools")
    assert ap.blacklist_covers("libnvidia-container1", [entry, ap.blacklist_entry("libnvidia-container1")])


def test_render_blacklist_and_parse_it_back():
    text = ap.render_unattended_blacklist(["nvidia-driver-550", "libnccl2", "libnccl2"], ["nvidia-", "libnvidia-"])
    assert text.splitlines()[2:] == [
        "Unattended-Upgrade::Package-Blacklist {",
        '    "libnccl2$";',
        '    "libnvidia-";',
        '    "nvidia-";',
        '    "nvidia-driver-550$";',
        "};",
    ]
    assert ap.parse_unattended_blacklist(text) == ["libnccl2$", "libnvidia-", "nvidia-", "nvidia-driver-550$"]


@pytest.mark.parametrize("pattern", ["", 'a"b', "a b", "nvidia-(", None])
def test_bad_blacklist_patterns_are_refused(pattern):
    with pytest.raises(ap.PinningError):
        ap.render_unattended_blacklist(["libnccl2"], [pattern])


def test_parse_distribution_blacklist_skips_comments():
    entries = ap.parse_unattended_blacklist((FIXTURES / "50unattended-upgrades").read_text())
    assert entries == ["libc6$", "libstdc\\+\\+6$"]


def test_blacklist_covers_uses_prefix_semantics():
    entries = ["nvidia-", "libnccl2$"]
    assert ap.blacklist_covers("nvidia-container-toolkit", entries)
    assert ap.blacklist_covers("libnccl2", entries)
    assert not ap.blacklist_covers("libnccl-dev", entries)
    assert not ap.blacklist_covers("libnvidia-compute-550", entries)


def test_parse_dpkg_query_fixture():
    parsed = ap.parse_dpkg_query((FIXTURES / "dpkg_query.txt").read_text())
    assert parsed["nvidia-driver-550"] == {
        "version": "550.127.08-1",
        "installed": True,
        "held": True,
        "status": "hold ok installed",
    }
    # the installed architecture wins over a not-installed foreign one
    assert parsed["libnvidia-compute-550"]["installed"] is True
    # config-files only: not installed, no version
    assert parsed["nvidia-fabricmanager-550"]["version"] is None
    assert parsed["nvidia-fabricmanager-550"]["installed"] is False
    assert parsed["cuda-toolkit-12-4"] == {
        "version": None,
        "installed": False,
        "held": False,
        "status": "unknown ok not-installed",
    }
    assert parsed["datacenter-gpu-manager-4-cuda12"]["version"] == "1:4.1.1-1"
    assert {name for name, entry in parsed.items() if entry["held"]} == {"nvidia-driver-550", "libnccl2"}


def test_parse_dpkg_query_rejects_other_formats():
    with pytest.raises(ap.PinningError, match="expected name, version and status"):
        ap.parse_dpkg_query("ii  nvidia-driver-550  550.127.08-1  amd64  NVIDIA driver\n")


def test_parse_showhold_drops_arch():
    assert ap.parse_showhold((FIXTURES / "apt_mark_showhold.txt").read_text()) == {
        "libnccl2",
        "nvidia-driver-550",
        "libc6",
    }
    assert ap.parse_showhold("") == set()


def test_managed_names_skip_globs():
    pins = [{"component": "", "names": ["libnvidia-*", "nvidia-driver-550"], "version": "1"}]
    assert ap.managed_names(pins) == ["nvidia-driver-550"]


def test_plan_holds_only_what_changes():
    plan = ap.plan_holds(
        desired=["libnccl2", "nvidia-driver-550", "nvidia-kernel-common-550"],
        held={"libnccl2", "libc6"},
        owned=["libnccl2", "nvidia-driver-550", "nvidia-kernel-common-550"],
        hold=True,
    )
    assert plan == {"hold": ["nvidia-driver-550", "nvidia-kernel-common-550"], "unhold": []}


def test_plan_holds_converged_is_empty():
    names = ["libnccl2", "nvidia-driver-550"]
    assert ap.plan_holds(names, set(names) | {"libc6"}, names, hold=True) == {"hold": [], "unhold": []}


def test_plan_holds_release_drops_only_owned_holds():
    plan = ap.plan_holds(
        desired=["nvidia-driver-570"],
        held={"nvidia-driver-550", "libnvidia-compute-550", "libc6"},
        owned=["nvidia-driver-570", "nvidia-driver-550", "libnvidia-*"],
        hold=False,
    )
    assert plan == {"hold": [], "unhold": ["libnvidia-compute-550", "nvidia-driver-550"]}


def test_plan_holds_branch_change_moves_the_hold():
    plan = ap.plan_holds(
        desired=["nvidia-driver-570"],
        held={"nvidia-driver-550"},
        owned=["nvidia-driver-550", "nvidia-driver-570"],
        hold=True,
    )
    assert plan == {"hold": ["nvidia-driver-570"], "unhold": ["nvidia-driver-550"]}
