"""modprobe_blacklist: the nouveau blacklist file (render, check, diff, idempotence, absent, bad names)."""

from __future__ import annotations

import stat

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import modprobe_blacklist as mb
from ansible_collections.gpuops.cluster.plugins.modules import modprobe_blacklist as module

from tests.unit.module_harness import make_run_module

PATH = "etc/modprobe.d/gpuops-blacklist-nouveau.conf"


@pytest.fixture
def run_module(monkeypatch):
    return make_run_module(monkeypatch)


def test_render_default():
    text = mb.render(["nouveau"], {"nouveau": "modeset=0"})
    assert text.startswith("# Managed by gpuops.cluster.modprobe_blacklist")
    assert text.endswith("blacklist nouveau\noptions nouveau modeset=0\n")


@pytest.mark.parametrize(
    ("modules", "options", "bad"),
    [(["nouveau; rm"], {}, "module name 'nouveau; rm'"), (["nouveau"], {"nouveau": "a\nb"}, "options of nouveau")],
)
def test_render_refuses_what_is_not_a_module_or_option(modules, options, bad):
    with pytest.raises(ValueError, match=bad):
        mb.render(modules, options)


def test_check_then_write_then_nothing_to_do(tmp_path, run_module):
    checked = run_module(module, {"root": str(tmp_path)}, check_mode=True, diff=True)
    assert checked["changed"] is True
    assert checked["diff"][0]["after"].endswith("blacklist nouveau\noptions nouveau modeset=0\n")
    assert not (tmp_path / PATH).exists()
    written = run_module(module, {"root": str(tmp_path)})
    assert written["changed"] is True
    assert written["path"] == str(tmp_path / PATH)
    assert stat.S_IMODE((tmp_path / PATH).stat().st_mode) == 0o644
    again = run_module(module, {"root": str(tmp_path)}, diff=True)
    assert again["changed"] is False
    assert again["diff"] == []
    assert again["_commands"] == []


def test_an_edited_file_is_put_back(tmp_path, run_module):
    run_module(module, {"root": str(tmp_path)})
    (tmp_path / PATH).write_text("blacklist nouveau\n")
    result = run_module(module, {"root": str(tmp_path)}, diff=True)
    assert result["changed"] is True
    assert result["diff"][0]["before"] == "blacklist nouveau\n"
    assert (tmp_path / PATH).read_text() == mb.render(["nouveau"], {"nouveau": "modeset=0"})


def test_absent_removes_the_file(tmp_path, run_module):
    run_module(module, {"root": str(tmp_path)})
    assert run_module(module, {"root": str(tmp_path), "state": "absent"}, check_mode=True)["changed"] is True
    assert (tmp_path / PATH).exists()
    assert run_module(module, {"root": str(tmp_path), "state": "absent"})["changed"] is True
    assert not (tmp_path / PATH).exists()
    assert run_module(module, {"root": str(tmp_path), "state": "absent"})["changed"] is False


def test_bad_input_fails_and_writes_nothing(tmp_path, run_module):
    result = run_module(module, {"root": str(tmp_path), "modules": ["nouveau", "bad name"]})
    assert result["_failed"] is True
    assert (
        result["msg"] == "not a kernel module name or option string: module name 'bad name'; fix the module arguments"
    )
    assert run_module(module, {"root": str(tmp_path), "name": "x.conf"})["_failed"] is True
    assert not (tmp_path / "etc").exists()
