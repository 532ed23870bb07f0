"""kernel_runtime: THP, hugepages and governor readers, the planner, tmpfiles rendering and the module."""

from __future__ import annotations

import json
import shutil

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import use_c_locale
from ansible_collections.gpuops.cluster.plugins.module_utils.module_parts import Part, PartFailed, validate
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import kernel_runtime as kr
from ansible_collections.gpuops.cluster.plugins.modules import kernel_runtime as module

from tests.unit.module_harness import ModuleHarness, set_module_args


def current(root, governors=True):
    return {
        "thp": kr.read_thp(str(root)),
        "hugepages": kr.read_hugepages(str(root), 2048),
        "governors": kr.read_governors(str(root)) if governors else {},
    }


@pytest.mark.parametrize(
    ("text", "selected"), [("always [madvise] never", "madvise"), ("1024", "1024"), (None, None), ("[never]", "never")]
)
def test_parse_selected(text, selected):
    assert kr.parse_selected(text) == selected


def test_readers_two_socket(make_tree):
    root, _unused = make_tree("two_socket")
    assert kr.read_thp(str(root)) == {"enabled": "always", "defrag": "madvise"}
    assert kr.read_hugepages(str(root), 2048) == {"total": 0, "nodes": {0: 0, 1: 0}}
    assert kr.read_hugepages(str(root), 1048576) == {"total": None, "nodes": {0: None, 1: None}}
    governors = kr.read_governors(str(root))
    assert len(governors) == 64
    assert governors[1] == {"governor": "powersave", "available": ["performance", "powersave"]}


def test_readers_numa_less(make_tree):
    root, _unused = make_tree("numa_less")
    assert kr.read_hugepages(str(root), 2048) == {"total": 0, "nodes": {}}
    assert kr.read_governors(str(root)) == {}


def test_plan_thp_and_total_hugepages(make_tree):
    root, _unused = make_tree("one_socket")
    decided = kr.plan(current(root), {"thp_enabled": "madvise", "thp_defrag": "madvise", "hugepages": 512})
    assert [(w["knob"], w["before"], w["after"]) for w in decided["writes"]] == [
        ("thp_enabled", "always", "madvise"),
        ("hugepages", "0", "512"),
    ]
    assert ("sys/kernel/mm/transparent_hugepage/defrag", "madvise") in decided["persist"]
    assert decided["unavailable"] == []


def test_plan_per_node_and_missing_node(make_tree):
    root, _unused = make_tree("two_socket")
    decided = kr.plan(current(root), {"hugepages_per_node": {"0": 1024, 1: 0, 3: 8}})
    assert [w["path"] for w in decided["writes"]] == [
        "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"
    ]
    assert decided["unavailable"] == [{"name": "hugepages node3", "reason": "NUMA node 3 does not exist"}]
    with pytest.raises(ValueError, match="not both"):
        kr.plan(current(root), {"hugepages": 1, "hugepages_per_node": {0: 1}})


def test_plan_governor(make_tree):
    root, _unused = make_tree("one_socket")
    decided = kr.plan(current(root), {"governor": "performance"})
    assert len(decided["writes"]) == 8
    assert decided["persist"] == [("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor", "performance")]
    with pytest.raises(ValueError, match="schedutil"):
        kr.plan(current(root), {"governor": "schedutil"})
    root2, _unused = make_tree("numa_less")
    assert kr.plan(current(root2), {"governor": "performance"})["unavailable"][0]["name"] == "governor"


def test_plan_rejects_bad_thp_mode(make_tree):
    root, _unused = make_tree("one_socket")
    with pytest.raises(ValueError, match="thp_enabled"):
        kr.plan(current(root), {"thp_enabled": "sometimes"})


def test_render_tmpfiles():
    text = kr.render_tmpfiles([("sys/kernel/mm/transparent_hugepage/enabled", "never")])
    assert text == kr.TMPFILES_HEADER + "w /sys/kernel/mm/transparent_hugepage/enabled - - - - never\n"


# ------------------------------------------------------------------ module
def test_module_applies_persists_and_is_idempotent(make_tree, run_module):
    root, _unused = make_tree("two_socket")
    args = {
        "name": "gpuops-thp",
        "thp_enabled": "never",
        "thp_defrag": "never",
        "root": str(root),
        "apply_live": "always",
    }
    first = run_module(module, args, diff=True)
    assert first["changed"] is True
    assert (root / "sys/kernel/mm/transparent_hugepage/enabled").read_text().strip() == "never"
    tmpfiles = (root / "etc/tmpfiles.d/gpuops-thp.conf").read_text()
    assert "w /sys/kernel/mm/transparent_hugepage/defrag - - - - never\n" in tmpfiles
    assert first["diff"][0]["after"] == tmpfiles
    second = run_module(module, args)
    assert second["changed"] is False
    assert second["drift"] == {}


def test_module_check_mode_writes_nothing(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    args = {"name": "gpuops-hugepages", "hugepages_per_node": {0: 64}, "root": str(root), "apply_live": "always"}
    result = run_module(module, args, check_mode=True)
    assert result["changed"] is True
    assert result["applied_live"] == ["/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"]
    assert not (root / "etc/tmpfiles.d/gpuops-hugepages.conf").exists()
    assert (root / "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages").read_text().strip() == "0"


def test_module_not_live_persists_and_lists(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    result = run_module(module, {"name": "gpuops-gov", "governor": "performance", "root": str(root)})
    assert result["file_changed"] is True
    assert result["applied_live"] == []
    assert {i["name"] for i in result["not_applied_live"]} == {"governor"}
    assert len(result["not_applied_live"]) == 1
    assert (root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor").read_text().strip() == "powersave"


def test_module_mutually_exclusive_hugepages(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    result = run_module(module, {"hugepages": 1, "hugepages_per_node": {0: 1}, "root": str(root)})
    assert result["_failed"] is True
    assert "mutually exclusive" in result["msg"]


def test_module_nothing_requested_removes_file(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    path = root / "etc/tmpfiles.d/gpuops-kernel-runtime.conf"
    path.parent.mkdir(parents=True)
    path.write_text("w /x - - - - 1\n")
    result = run_module(module, {"root": str(root)})
    assert result["changed"] is True
    assert not path.exists()


# ------------------------------------------------------------------ areas in one drop-in
@pytest.mark.parametrize(
    ("path", "area"),
    [
        ("/sys/kernel/mm/transparent_hugepage/enabled", "thp"),
        ("sys/kernel/mm/transparent_hugepage/defrag", "thp"),
        ("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "hugepages"),
        ("sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages", "hugepages"),
        ("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor", "governor"),
        ("sys/devices/system/cpu/cpu3/cpufreq/scaling_governor", "governor"),
        ("sys/kernel/something", "other"),
    ],
)
def test_area_of(path, area):
    assert kr.area_of(path) == area


def test_changed_areas():
    thp = kr.render_tmpfiles([("sys/kernel/mm/transparent_hugepage/enabled", "never")])
    both = kr.render_tmpfiles(
        [
            ("sys/kernel/mm/transparent_hugepage/enabled", "never"),
            ("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor", "performance"),
        ]
    )
    assert kr.persisted_by_area(both) == {
        "thp": ["w /sys/kernel/mm/transparent_hugepage/enabled - - - - never"],
        "governor": ["w /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor - - - - performance"],
    }
    assert kr.persisted_by_area(None) == {}
    assert kr.changed_areas(both, both) == []
    assert kr.changed_areas(thp, both) == ["governor"]
    assert kr.changed_areas(None, thp) == ["thp"]
    assert kr.changed_areas(both, both, removed=[thp]) == ["thp"]
    assert kr.changed_areas(both, both, written=["sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"]) == [
        "hugepages"
    ]
    assert kr.is_managed(thp)
    assert not kr.is_managed("w /x - - - - 1\n")
    assert not kr.is_managed(None)


THREE_AREAS = {
    "name": "gpuops-kernel-runtime",
    "replaces": ["gpuops-thp", "gpuops-hugepages", "gpuops-governor"],
    "thp_enabled": "madvise",
    "thp_defrag": "defer+madvise",
    "hugepages_per_node": {0: 16},
    "governor": "performance",
    "apply_live": "always",
}


def test_module_three_areas_in_one_call_replaces_the_old_drop_ins(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    tmpfiles = root / "etc/tmpfiles.d"
    tmpfiles.mkdir(parents=True)
    old_thp = kr.render_tmpfiles([("sys/kernel/mm/transparent_hugepage/enabled", "always")])
    (tmpfiles / "gpuops-thp.conf").write_text(old_thp)
    (tmpfiles / "gpuops-governor.conf").write_text("# someone else's\nw /x - - - - 1\n")
    args = dict(THREE_AREAS, root=str(root))

    checked = run_module(module, args, check_mode=True, diff=True)
    assert checked["changed"] is True
    assert checked["removed"] == [str(tmpfiles / "gpuops-thp.conf")]
    assert checked["changed_areas"] == ["thp", "hugepages", "governor"]
    assert (tmpfiles / "gpuops-thp.conf").read_text() == old_thp
    assert not (tmpfiles / "gpuops-kernel-runtime.conf").exists()
    assert (root / "sys/kernel/mm/transparent_hugepage/enabled").read_text().strip() != "madvise"

    first = run_module(module, args, diff=True)
    assert first["changed"] is True
    assert first["changed_areas"] == ["thp", "hugepages", "governor"]
    assert not (tmpfiles / "gpuops-thp.conf").exists()
    assert (tmpfiles / "gpuops-governor.conf").exists(), "a file without the module's header is not its to remove"
    text = (tmpfiles / "gpuops-kernel-runtime.conf").read_text()
    assert sorted(kr.persisted_by_area(text)) == ["governor", "hugepages", "thp"]
    assert "w /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages - - - - 16\n" in text
    removed = [d for d in first["diff"] if d["before_header"] == str(tmpfiles / "gpuops-thp.conf")]
    assert removed == [
        dict(
            before=old_thp, after="", before_header=removed[0]["before_header"], after_header=removed[0]["after_header"]
        )
    ]

    second = run_module(module, args, diff=True)
    assert second["changed"] is False
    assert second["changed_areas"] == []
    assert second["removed"] == []


def test_module_area_switched_off_is_not_persisted(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    run_module(module, dict(THREE_AREAS, root=str(root), apply_live="never"))
    args = dict(THREE_AREAS, root=str(root), apply_live="never")
    del args["governor"]
    result = run_module(module, args)
    assert result["changed_areas"] == ["governor"]
    text = (root / "etc/tmpfiles.d/gpuops-kernel-runtime.conf").read_text()
    assert sorted(kr.persisted_by_area(text)) == ["hugepages", "thp"]
    assert result["applied_live"] == []


def test_module_live_write_counts_as_area_change(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    args = {"thp_enabled": "never", "root": str(root), "apply_live": "always"}
    run_module(module, args)
    (root / "sys/kernel/mm/transparent_hugepage/enabled").write_text("always [madvise] never\n")
    drifted = run_module(module, args)
    assert drifted["file_changed"] is False
    assert drifted["changed_areas"] == ["thp"]


def test_module_rejects_replacing_itself(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    result = run_module(module, {"name": "a", "replaces": ["a"], "root": str(root)})
    assert result["_failed"] is True
    assert "replaces" in result["msg"]
    result = run_module(module, {"replaces": ["../x"], "root": str(root)})
    assert result["_failed"] is True


def test_run_as_a_part_returns_what_the_module_returns(make_tree, run_module, monkeypatch):
    """kr.run on a module_parts.Part over a real AnsibleModule: the same result as the module; fail_json raises."""
    root, _unused = make_tree("one_socket")
    tmpfiles = root / "etc/tmpfiles.d"
    tmpfiles.mkdir(parents=True)
    (tmpfiles / "gpuops-thp.conf").write_text(kr.render_tmpfiles([("sys/kernel/mm/transparent_hugepage/enabled", "x")]))
    options = dict(THREE_AREAS, root=str(root))
    ModuleHarness(monkeypatch)
    with set_module_args({}, diff=True):
        execution = use_c_locale(basic.AnsibleModule(argument_spec={}, supports_check_mode=True))
    params, errors = validate(kr.MODULE_KWARGS, options)
    assert errors == []
    as_part = json.loads(json.dumps(kr.run(Part(execution, params))))
    assert as_part["changed"] is True
    assert as_part["removed"] == [str(tmpfiles / "gpuops-thp.conf")]
    with pytest.raises(PartFailed, match="replaces"):
        kr.run(Part(execution, validate(kr.MODULE_KWARGS, {"name": "a", "replaces": ["a"], "root": str(root)})[0]))

    shutil.rmtree(root)
    root, _unused = make_tree("one_socket")  # the same tree again, at the same path
    tmpfiles.mkdir(parents=True)
    (tmpfiles / "gpuops-thp.conf").write_text(kr.render_tmpfiles([("sys/kernel/mm/transparent_hugepage/enabled", "x")]))
    as_module = run_module(module, options, diff=True)
    assert as_module.pop("_failed") is False
    assert as_module.pop("_commands") == []
    assert as_part == as_module


# ------------------------------------------------------------------ check mode predicts the run (issue 26 item 9)
THP_ONLY = {"thp_enabled": "madvise", "thp_defrag": "defer+madvise"}
THP_DEFRAG_PATH = "sys/kernel/mm/transparent_hugepage/defrag"


def test_live_writes_is_one_decision_for_each_write():
    writes = [
        {"knob": "thp_enabled", "path": "sys/kernel/mm/transparent_hugepage/enabled", "before": "x", "after": "y"},
        {"knob": "thp_defrag", "path": THP_DEFRAG_PATH, "before": "madvise", "after": "defer+madvise"},
    ]
    everywhere = kr.live_writes(writes, None, lambda path: True)
    assert everywhere == {"apply": writes, "skip": []}
    in_container = kr.live_writes(writes, "in a container (podman)", lambda path: True)
    assert in_container["apply"] == []
    assert in_container["skip"] == [
        {"name": "thp_enabled", "reason": "in a container (podman)"},
        {"name": "thp_defrag", "reason": "in a container (podman)"},
    ]
    read_only = kr.live_writes(writes, None, lambda path: path != THP_DEFRAG_PATH)
    assert read_only["apply"] == writes[:1]
    assert read_only["skip"] == [{"name": "thp_defrag", "reason": f"/{THP_DEFRAG_PATH} is read-only here"}]


def converged_then_drifted(root, run_module, args):
    """Converge ``args`` (drop-in written, THP enabled madvise), then set THP defrag back to the kernel default."""
    run_module(module, dict(args, apply_live="never"))
    (root / "sys/kernel/mm/transparent_hugepage/enabled").write_text("always [madvise] never\n")
    (root / THP_DEFRAG_PATH).write_text("always defer defer+madvise [madvise] never\n")


def check_then_run(run_module, args):
    checked = run_module(module, args, check_mode=True, diff=True)
    ran = run_module(module, args, diff=True)
    for key in ("changed", "applied_live", "not_applied_live", "changed_areas", "file_changed", "diff"):
        assert checked[key] == ran[key], key
    return checked, ran


def test_check_mode_predicts_the_run_in_a_container(make_tree, run_module, as_running_system):
    """A converged node in a podman container: check mode predicts no THP write, and the run makes none."""
    del as_running_system
    root, _unused = make_tree("one_socket")
    (root / "run").mkdir(exist_ok=True)
    (root / "run/.containerenv").write_text("engine=podman\n")
    args = dict(THP_ONLY, root=str(root), apply_live="auto")
    converged_then_drifted(root, run_module, args)

    checked, ran = check_then_run(run_module, args)
    assert checked["container"] == ran["container"] == "podman"
    assert checked["changed"] is False
    assert checked["applied_live"] == []
    assert {"name": "thp_defrag", "reason": "in a container (podman)"} in checked["not_applied_live"]
    assert checked["changed_areas"] == []
    sysfs = [d for d in checked["diff"] if d["before_header"] == "sysfs"]
    assert sysfs == [dict(before="", after="", before_header="sysfs", after_header="sysfs")]
    assert kr.read_thp(str(root))["defrag"] == "madvise", "the host-global knob is left alone"


def test_check_mode_predicts_the_run_on_a_host(make_tree, run_module, as_running_system):
    """The same node on a host: check mode predicts the THP defrag write, and the run makes exactly it."""
    del as_running_system
    root, _unused = make_tree("one_socket")
    args = dict(THP_ONLY, root=str(root), apply_live="auto")
    converged_then_drifted(root, run_module, args)

    checked = run_module(module, args, check_mode=True, diff=True)
    assert kr.read_thp(str(root))["defrag"] == "madvise", "check mode writes nothing"
    ran = run_module(module, args, diff=True)
    for key in ("changed", "applied_live", "not_applied_live", "changed_areas", "file_changed", "diff"):
        assert checked[key] == ran[key], key
    assert checked["container"] is None
    assert checked["changed"] is True
    assert checked["applied_live"] == [f"/{THP_DEFRAG_PATH}"]
    assert checked["changed_areas"] == ["thp"]
    assert kr.read_thp(str(root))["defrag"] == "defer+madvise"
    again = run_module(module, args, check_mode=True)
    assert again["changed"] is False
    assert again["applied_live"] == []


def test_check_mode_predicts_a_read_only_sys(make_tree, run_module, monkeypatch):
    """apply_live always where /sys is read-only (a container's default): predicted skipped, and skipped."""
    root, _unused = make_tree("one_socket")
    args = dict(THP_ONLY, root=str(root), apply_live="always")
    converged_then_drifted(root, run_module, args)
    real_access = kr.os.access
    monkeypatch.setattr(kr.os, "access", lambda path, mode: "/sys/" not in path and real_access(path, mode))

    checked, ran = check_then_run(run_module, args)
    assert checked["changed"] is False
    assert checked["applied_live"] == []
    assert {"name": "thp_defrag", "reason": f"/{THP_DEFRAG_PATH} is read-only here"} in ran["not_applied_live"]
    assert kr.read_thp(str(root))["defrag"] == "madvise"
