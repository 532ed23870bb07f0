"""rpm_versionlock: lock specs, the lock list, rpm -q parsing and planned dnf commands."""

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import rpm_versionlock as rv

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "stack"


@pytest.mark.parametrize(
    ("name", "evr", "entry"),
    [
        ("nvidia-driver", "3:550.127.08-1.el9", "nvidia-driver-3:550.127.08-1.el9.*"),
        # dnf writes the epoch even when it is 0 (pkgtup2spec)
        ("nvidia-fabricmanager", "550.127.08-1", "nvidia-fabricmanager-0:550.127.08-1.*"),
        ("libnccl", "2.21.5-1+cuda12.4", "libnccl-0:2.21.5-1+cuda12.4.*"),
        ("datacenter-gpu-manager-4-cuda12", "1:4.1.1-1", "datacenter-gpu-manager-4-cuda12-1:4.1.1-1.*"),
    ],
)
def test_lock_entry_format(name, evr, entry):
    assert rv.lock_entry(name, evr) == entry
    parsed = rv.parse_lock_entry(entry)
    assert parsed["name"] == name
    assert f"{parsed['version']}-{parsed['release']}" == evr.split(":")[-1]


def test_lock_entry_needs_a_release():
    with pytest.raises(rv.VersionlockError, match="needs the release"):
        rv.lock_entry("nvidia-driver", "3:550.127.08")


@pytest.mark.parametrize(("name", "evr"), [("nvidia driver", "1-1"), ("nvidia-driver", "x:1-1"), ("a", "")])
def test_lock_entry_rejects_bad_input(name, evr):
    with pytest.raises(rv.VersionlockError):
        rv.lock_entry(name, evr)


def test_parse_lock_entry_forms():
    assert rv.parse_lock_entry("!nvidia-driver-cuda-3:560.28.03-1.el9.*") == {
        "name": "nvidia-driver-cuda",
        "epoch": "3",
        "version": "560.28.03",
        "release": "1.el9",
        "exclude": True,
    }
    assert rv.parse_lock_entry("kernel-5.14.0-427.42.1.el9_4.x86_64")["name"] == "kernel"
    assert rv.parse_lock_entry("# a comment") is None
    assert rv.parse_lock_entry("nonevra") is None


def test_render_replaces_foreign_locks_on_our_names_and_keeps_others():
    current = (FIXTURES / "versionlock.list").read_text()
    entries = rv.desired_entries(
        [
            {"name": "nvidia-driver", "version": "3:550.127.08-1.el9"},
            {"name": "nvidia-driver-cuda", "version": "3:550.127.08-1.el9"},
        ]
    )
    text = rv.render_versionlock_list(current, entries)
    assert text == (
        "# Added lock on Tue Nov 12 10:00:00 2024\n"
        "kernel-0:5.14.0-427.42.1.el9_4.*\n"
        "\n"
        "# Added lock on Tue Nov 12 10:00:01 2024\n"
        "\n"
        f"{rv.BLOCK_BEGIN}\n"
        "nvidia-driver-3:550.127.08-1.el9.*\n"
        "nvidia-driver-cuda-3:550.127.08-1.el9.*\n"
        f"{rv.BLOCK_END}\n"
    )
    # rendering again from the result is stable
    assert rv.render_versionlock_list(text, entries) == text
    assert rv.parse_versionlock_list(text)["managed"] == entries


def test_render_without_entries_removes_the_block_and_owned_locks():
    current = rv.render_versionlock_list("kernel-0:5.14.0-1.el9.*\n", ["nvidia-driver-3:550.127.08-1.el9.*"])
    assert rv.render_versionlock_list(current, [], owned_names=["nvidia-driver"]) == "kernel-0:5.14.0-1.el9.*\n"
    assert rv.render_versionlock_list("", []) == ""


def test_locked_versions_reads_managed_and_foreign_locks():
    text = rv.render_versionlock_list(
        (FIXTURES / "versionlock.list").read_text(), ["nvidia-fabricmanager-0:550.127.08-1.*"]
    )
    assert rv.locked_versions(text) == {
        "kernel": "0:5.14.0-427.42.1.el9_4",
        "nvidia-driver": "3:550.90.07-1.el9",
        "nvidia-fabricmanager": "0:550.127.08-1",
    }


def test_desired_entries_refuse_two_versions_of_one_name():
    with pytest.raises(rv.VersionlockError, match="both"):
        rv.desired_entries([{"name": "libnccl", "version": "2.21.5-1"}, {"name": "libnccl", "version": "2.22.3-1"}])


def test_parse_rpm_query_fixture():
    parsed = rv.parse_rpm_query((FIXTURES / "rpm_q.txt").read_text())
    assert parsed["nvidia-driver"] == {
        "epoch": "3",
        "version": "550.127.08",
        "release": "1.el9",
        "evr": "3:550.127.08-1.el9",
    }
    assert parsed["nvidia-fabricmanager"]["evr"] == "550.127.08-1"
    assert parsed["libnccl"]["evr"] == "2.21.5-1+cuda12.4"
    assert parsed["cuda-toolkit-12-4"] is None
    assert parsed["kernel"]["release"] == "427.42.1.el9_4"


def test_parse_rpm_query_rejects_default_format():
    with pytest.raises(rv.VersionlockError, match="unexpected rpm -q line"):
        rv.parse_rpm_query("nvidia-driver-550.127.08-1.el9.x86_64\n")


@pytest.mark.parametrize(
    ("requested", "installed", "expected"),
    [
        ("3:550.127.08-1.el9", "3:550.127.08-1.el9", True),
        ("550.127.08-1.el9", "3:550.127.08-1.el9", True),
        ("550.127.08", "3:550.127.08-1.el9", True),
        ("3:550.127.08-1.el9", "550.127.08-1.el9", False),
        ("0:550.127.08-1", "550.127.08-1", True),
        ("550.127.08-1.el9", "3:550.90.07-1.el9", False),
        ("550.127.08-2.el9", "3:550.127.08-1.el9", False),
        ("550.127.08-1.el9", None, False),
    ],
)
def test_evr_matches(requested, installed, expected):
    assert rv.evr_matches(requested, installed) is expected


def test_parse_module_list():
    assert rv.parse_module_list((FIXTURES / "dnf_module_list_enabled.txt").read_text()) == {
        "nvidia-driver": "550-dkms",
        "nodejs": "18",
    }
    assert rv.parse_module_list((FIXTURES / "dnf_module_list_none.txt").read_text()) == {}


def test_plan_module_stream():
    assert rv.plan_module_stream("nvidia-driver:550-dkms", {"nvidia-driver": "550-dkms"}) == []
    assert rv.plan_module_stream("nvidia-driver:550-dkms", {}) == [
        ["dnf", "-y", "module", "enable", "nvidia-driver:550-dkms"]
    ]
    assert rv.plan_module_stream("nvidia-driver:570-open", {"nvidia-driver": "550-dkms"}) == [
        ["dnf", "-y", "module", "switch-to", "nvidia-driver:570-open"]
    ]


@pytest.mark.parametrize("spec", ["nvidia-driver", "nvidia-driver:", ":550", "nvidia-driver:550;rm"])
def test_plan_module_stream_rejects_bad_specs(spec):
    with pytest.raises(rv.VersionlockError, match="not a dnf module stream"):
        rv.plan_module_stream(spec, {})


def test_plan_versionlock_commands():
    current = ["nvidia-driver-3:550.90.07-1.el9.*", "libnccl-0:2.21.5-1+cuda12.4.*"]
    desired = ["nvidia-driver-3:550.127.08-1.el9.*", "libnccl-0:2.21.5-1+cuda12.4.*"]
    assert rv.plan_versionlock_commands(current, desired) == [
        ["dnf", "versionlock", "delete", "nvidia-driver-3:550.90.07-1.el9.*"],
        ["dnf", "versionlock", "add", "--raw", "nvidia-driver-3:550.127.08-1.el9.*"],
    ]
    assert rv.plan_versionlock_commands(desired, desired) == []
