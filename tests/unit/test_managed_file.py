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


def _record_syncs(monkeypatch, events):
    """Record ``('fsync', what)`` for every fsync (the file's descriptor or the directory's) and ``('move', dest)``."""
    real_fsync = os.fsync

    def fsync(fd):
        target = os.readlink("/proc/self/fd/%d" % fd)
        events.append(("fsync", "dir" if os.path.isdir(target) else "file"))
        return real_fsync(fd)

    monkeypatch.setattr(managed_file.os, "fsync", fsync)


def test_the_content_is_on_the_disk_before_the_rename_and_the_rename_after(tmp_path, monkeypatch):
    events = []
    _record_syncs(monkeypatch, events)

    class Recording(FakeModule):
        def atomic_move(self, src, dest):
            with open(src, encoding="utf-8") as handle:
                assert handle.read() == "new\n"
            events.append(("move", os.path.basename(dest)))
            super().atomic_move(src, dest)

    target = tmp_path / "gpuops-nvidia.pref"
    managed_file.write_atomic(Recording(), str(target), "new\n")
    assert events == [("fsync", "file"), ("move", "gpuops-nvidia.pref"), ("fsync", "dir")]
    events.clear()
    managed_file.replace_file(str(target), "again\n")
    assert events == [("fsync", "file"), ("fsync", "dir")]
    assert target.read_text() == "again\n"


def test_a_failed_flush_of_the_content_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "90-gpuops.conf"
    target.write_text("old\n")

    def fsync(_fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(managed_file.os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output error"):
        managed_file.write_atomic(FakeModule(), str(target), "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["90-gpuops.conf"]


def test_a_filesystem_that_cannot_flush_a_directory_is_let_be(tmp_path, monkeypatch):
    real_fsync = os.fsync

    def fsync(fd):
        if os.path.isdir(os.readlink("/proc/self/fd/%d" % fd)):
            raise OSError(22, "Invalid argument")
        return real_fsync(fd)

    monkeypatch.setattr(managed_file.os, "fsync", fsync)
    target = tmp_path / "x.conf"
    managed_file.write_atomic(FakeModule(), str(target), "new\n")
    assert target.read_text() == "new\n"


def test_a_link_replaced_in_place_is_flushed_with_its_directory(tmp_path, monkeypatch):
    from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import owned_files

    synced = []
    monkeypatch.setattr(managed_file, "sync_directory", synced.append)

    class Module:
        check_mode = False

        def fail_json(self, **kwargs):
            raise AssertionError(kwargs)

    link = tmp_path / "irqbalance.conf"
    assert owned_files.sync_link(Module(), str(link), "/etc/gpuops/irqbalance") is True
    assert os.readlink(link) == "/etc/gpuops/irqbalance"
    assert synced == [str(tmp_path)]
