"""rdma_dropins: the memlock and nvidia-peermem renderers, and the module (check, diff, idempotence, root)."""

from __future__ import annotations

import hashlib
import json
import stat

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.module_parts import Part, PartFailed, validate
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import rdma_dropins as rd
from ansible_collections.gpuops.cluster.plugins.modules import rdma_dropins as module

from tests.unit.module_harness import ModuleHarness, set_module_args

# sha256 of what the role's templates (limits-memlock.conf.j2, systemd-memlock.conf.j2) rendered: nodes that
# ran the template tasks see no change when the module takes over.
TEMPLATES = {
    ("limits", "unlimited"): "f86aebdef314e6388df57a5574e7096fb50d01fd2e99fb165e14c9e6ec9e2839",
    ("limits", "1048576"): "662de93a872803ec99924251e59d3ea9f1dc857469ee3ab4ffc616a9be7934f1",
    ("systemd", "unlimited"): "305b22156ccb4cc46a48976e621139fa79f5649dff7ad1c5a9c5d9bc3c2399c8",
    ("systemd", "1048576"): "30fb2416caf4312bffa612389691e5a83013cbd848c3dafc19aabbfe9c11a9cc",
}
LIMITS = "etc/security/limits.d/90-gpuops-memlock.conf"
SYSTEMD = "etc/systemd/system.conf.d/90-gpuops-memlock.conf"
PEERMEM = "etc/modules-load.d/nvidia-peermem.conf"


@pytest.mark.parametrize(("area", "limit"), sorted(TEMPLATES))
def test_renderers_equal_the_former_templates(area, limit):
    render = rd.render_limits_memlock if area == "limits" else rd.render_systemd_memlock
    assert hashlib.sha256(render(limit).encode()).hexdigest() == TEMPLATES[(area, limit)]


def test_renderers_content():
    assert "DefaultLimitMEMLOCK=infinity\n" in rd.render_systemd_memlock("unlimited")
    assert "DefaultLimitMEMLOCK=1024K\n" in rd.render_systemd_memlock(1024)
    assert "root hard memlock 1024\n" in rd.render_limits_memlock(" 1024 ")
    assert rd.render_peermem() == "# Managed by gpuops.cluster.kernel_tuning: GPUDirect RDMA\nnvidia-peermem\n"


@pytest.mark.parametrize("limit", ["0", "-1", "infinity", "1G", "", "12.5"])
def test_bad_memlock_limit(limit):
    with pytest.raises(ValueError, match="unlimited or a number of kB"):
        rd.check_memlock_limit(limit)


def test_plan_areas():
    assert rd.plan() == []
    assert [f["area"] for f in rd.plan("unlimited")] == ["limits", "systemd"]
    assert [f["area"] for f in rd.plan(peermem=True)] == ["peermem"]
    assert [f["path"] for f in rd.plan("8", True)] == ["/" + LIMITS, "/" + SYSTEMD, "/" + PEERMEM]


def test_module_check_mode_then_write_then_idempotent(tmp_path, run_module):
    args = {"memlock_limit": "unlimited", "peermem": True, "root": str(tmp_path)}
    checked = run_module(module, args, check_mode=True, diff=True)
    assert checked["changed"] is True
    assert [checked[f"changed_{area}"] for area in ("limits", "systemd", "peermem")] == [True, True, True]
    assert checked["changed_files"] == [str(tmp_path / p) for p in (LIMITS, SYSTEMD, PEERMEM)]
    assert list(tmp_path.iterdir()) == [], "check mode writes nothing, not even a directory"
    assert [d["after"] for d in checked["diff"]] == [
        rd.render_limits_memlock("unlimited"),
        rd.render_systemd_memlock("unlimited"),
        rd.render_peermem(),
    ]
    assert all(d["before"] == "" for d in checked["diff"])

    first = run_module(module, args, diff=True)
    assert first["changed_files"] == checked["changed_files"]
    assert first["files"] == checked["changed_files"]
    for path, content in (
        (LIMITS, rd.render_limits_memlock("unlimited")),
        (SYSTEMD, rd.render_systemd_memlock("unlimited")),
        (PEERMEM, rd.render_peermem()),
    ):
        assert (tmp_path / path).read_text() == content
        assert stat.S_IMODE((tmp_path / path).stat().st_mode) == 0o644
    for directory in ("etc/security/limits.d", "etc/systemd/system.conf.d", "etc/modules-load.d", "etc/systemd"):
        assert stat.S_IMODE((tmp_path / directory).stat().st_mode) == 0o755

    second = run_module(module, args, diff=True)
    assert second["changed"] is False
    assert second["changed_files"] == []
    assert [second[f"changed_{area}"] for area in ("limits", "systemd", "peermem")] == [False, False, False]
    assert second["diff"] == []


def test_module_changed_systemd_only_for_the_systemd_drop_in(tmp_path, run_module):
    args = {"memlock_limit": "unlimited", "root": str(tmp_path)}
    run_module(module, args)
    (tmp_path / LIMITS).write_text("edited\n")
    limits_only = run_module(module, args)
    assert (limits_only["changed_limits"], limits_only["changed_systemd"]) == (True, False)
    new_limit = run_module(module, dict(args, memlock_limit="1048576"), diff=True)
    assert (new_limit["changed_limits"], new_limit["changed_systemd"]) == (True, True)
    systemd_diff = new_limit["diff"][1]
    assert "DefaultLimitMEMLOCK=infinity" in systemd_diff["before"]
    assert "DefaultLimitMEMLOCK=1048576K" in systemd_diff["after"]
    (tmp_path / SYSTEMD).chmod(0o600)
    mode_only = run_module(module, dict(args, memlock_limit="1048576"))
    assert (mode_only["changed_limits"], mode_only["changed_systemd"]) == (False, True)
    assert stat.S_IMODE((tmp_path / SYSTEMD).stat().st_mode) == 0o644


def test_module_areas_left_alone(tmp_path, run_module):
    (tmp_path / "etc/modules-load.d").mkdir(parents=True)
    (tmp_path / PEERMEM).write_text("somebody's\n")
    memlock_only = run_module(module, {"memlock_limit": "64", "root": str(tmp_path)})
    assert memlock_only["files"] == [str(tmp_path / LIMITS), str(tmp_path / SYSTEMD)]
    assert (tmp_path / PEERMEM).read_text() == "somebody's\n"
    peermem_only = run_module(module, {"peermem": True, "root": str(tmp_path)})
    assert peermem_only["changed_files"] == [str(tmp_path / PEERMEM)]
    assert (tmp_path / LIMITS).read_text() == rd.render_limits_memlock("64")
    nothing = run_module(module, {"root": str(tmp_path)})
    assert nothing["changed"] is False
    assert nothing["files"] == []


def test_module_bad_limit_fails_with_hint(tmp_path, run_module):
    result = run_module(module, {"memlock_limit": "lots", "root": str(tmp_path)})
    assert result["_failed"] is True
    assert "unlimited or a number of kB" in result["msg"]
    assert list(tmp_path.iterdir()) == []


def test_module_replaces_a_symlink_with_a_file(tmp_path, run_module):
    elsewhere = tmp_path / "elsewhere.conf"
    elsewhere.write_text("x\n")
    (tmp_path / "etc/modules-load.d").mkdir(parents=True)
    (tmp_path / PEERMEM).symlink_to(elsewhere)
    result = run_module(module, {"peermem": True, "root": str(tmp_path)})
    assert result["changed_peermem"] is True
    assert not (tmp_path / PEERMEM).is_symlink()
    assert elsewhere.read_text() == "x\n"


def run_part(monkeypatch, options, check_mode=False, diff=False):
    """``rd.run`` as a part of another module: a real AnsibleModule of its own, the part's params validated."""
    ModuleHarness(monkeypatch)
    with set_module_args({}, check_mode=check_mode, diff=diff):
        outer = AnsibleModule(argument_spec={}, supports_check_mode=True)
    use_c_locale(outer)
    params, errors = validate(rd.MODULE_KWARGS, options)
    assert errors == []
    return json.loads(json.dumps(rd.run(Part(outer, params))))


def test_run_as_a_part_returns_what_the_module_returns(tmp_path, monkeypatch, run_module):
    args = {"memlock_limit": "unlimited", "peermem": True, "root": str(tmp_path)}
    expected = run_module(module, args, check_mode=True, diff=True)
    assert run_part(monkeypatch, args, check_mode=True, diff=True) == {
        key: value for key, value in expected.items() if not key.startswith("_")
    }
    assert list(tmp_path.iterdir()) == []
    written = run_part(monkeypatch, args)
    assert written["changed_files"] == expected["changed_files"]
    assert "diff" not in written
    assert run_module(module, args)["changed"] is False
    with pytest.raises(PartFailed, match="unlimited or a number of kB"):
        run_part(monkeypatch, dict(args, memlock_limit="lots"))
