import os
import stat

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import managed_file


class FakeModule:
    """Stands in for AnsibleModule.atomic_move (a rename is what it does for us)."""

    def atomic_move(self, src, dest):
        os.replace(src, dest)


class FailingModule:
    def atomic_move(self, src, dest):
        raise OSError("disk full")


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_new_file_is_0644_and_no_temp_file_is_left(tmp_path):
    target = tmp_path / "etc" / "sysctl.d" / "90-gpuops.conf"
    managed_file.write_atomic(FakeModule(), str(target), "vm.swappiness = 10\n", create_parent=True)
    assert target.read_text() == "vm.swappiness = 10\n"
    assert mode(target) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["90-gpuops.conf"]


def test_mode_none_keeps_the_existing_mode(tmp_path):
    target = tmp_path / "grub"
    target.write_text("old\n")
    target.chmod(0o600)
    managed_file.write_atomic(FakeModule(), str(target), "new\n", mode=None)
    assert target.read_text() == "new\n"
    assert mode(target) == 0o600


def test_missing_parent_is_an_error_unless_asked_to_create(tmp_path):
    with pytest.raises(FileNotFoundError):
        managed_file.write_atomic(FakeModule(), str(tmp_path / "missing" / "f"), "x")


def test_failed_move_removes_the_temp_file(tmp_path):
    with pytest.raises(OSError, match="disk full"):
        managed_file.write_atomic(FailingModule(), str(tmp_path / "f"), "x")
    assert list(tmp_path.iterdir()) == []


def test_read_text_and_under(tmp_path):
    assert managed_file.read_text(str(tmp_path / "absent"), "") == ""
    assert managed_file.under("/tmp/root", "/etc/default/grub") == "/tmp/root/etc/default/grub"
