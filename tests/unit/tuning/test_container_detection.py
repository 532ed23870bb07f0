"""container_detection: markers under a root, systemd-detect-virt output, and the apply_live rule."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection as cd


def test_bare_tree_is_no_container(tmp_path):
    markers = cd.read_markers(str(tmp_path))
    assert markers == {"containerenv": False, "dockerenv": False, "pid1_container": None}
    assert cd.decide(markers) is None
    assert cd.decide(markers, "none\n") is None


def test_markers_in_order(tmp_path):
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/1/environ").write_bytes(b"PATH=/bin\0container=lxc\0TERM=xterm\0")
    assert cd.decide(cd.read_markers(str(tmp_path))) == "lxc"
    (tmp_path / ".dockerenv").write_text("")
    assert cd.decide(cd.read_markers(str(tmp_path))) == "docker"
    (tmp_path / "run").mkdir()
    (tmp_path / "run/.containerenv").write_text("")
    assert cd.decide(cd.read_markers(str(tmp_path))) == "podman"


def test_detect_virt_output_used_last():
    assert cd.decide({}, "systemd-nspawn\n") == "systemd-nspawn"


@pytest.mark.parametrize(
    ("apply_live", "container", "expected"),
    [("auto", None, True), ("auto", "podman", False), ("always", "podman", True), ("never", None, False)],
)
def test_should_apply_live(apply_live, container, expected):
    assert cd.should_apply_live(apply_live, container) is expected


def test_should_apply_live_rejects_unknown():
    with pytest.raises(ValueError, match="apply_live"):
        cd.should_apply_live("sometimes", None)


def test_detect_skips_systemd_detect_virt_for_a_tree(tmp_path):
    class Module:
        def get_bin_path(self, name):
            raise AssertionError("must not look for systemd-detect-virt under a test root")

    assert cd.detect(Module(), str(tmp_path)) is None


@pytest.mark.parametrize(
    ("apply_live", "root", "container", "reason"),
    [
        ("never", "/", None, "apply_live is never"),
        ("auto", "/tmp/tree", None, "root is /tmp/tree, not the running system"),
        ("auto", "/", "podman", "in a container (podman)"),
        ("auto", "/", None, None),
        ("always", "/", "podman", None),
    ],
)
def test_skip_live_reason(apply_live, root, container, reason):
    assert cd.skip_live_reason(apply_live, root, container) == reason
