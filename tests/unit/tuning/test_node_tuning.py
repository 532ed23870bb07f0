"""node_tuning: several tuning modules in one execution give each module's own result, check and diff."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import kernel_runtime, node_tuning, rdma_dropins, sysctl_profile

from .sysfs_tree import build

SYSCTLS = {"kernel.numa_balancing": 0, "vm.max_map_count": 1048576}


def parts(root):
    return {
        "sysctl_profile": {"sysctls": SYSCTLS, "root": str(root), "apply_live": "never"},
        "kernel_runtime": {
            "name": "gpuops-kernel-runtime",
            "thp_enabled": "never",
            "root": str(root),
            "apply_live": "always",
        },
        "rdma_dropins": {"memlock_limit": "unlimited", "peermem": True, "root": str(root)},
    }


def written(root):
    return sorted(str(path.relative_to(root)) for path in (root / "etc").rglob("*") if path.is_file())


def test_parts_run_in_order_with_each_modules_result_then_nothing_to_do(make_tree, run_module):
    root, _unused = make_tree("two_socket")
    first = run_module(node_tuning, parts(root), diff=True)
    assert first["changed"] is True
    assert first["changed_parts"] == ["sysctl_profile", "kernel_runtime", "rdma_dropins"]
    assert list(first["results"]) == ["sysctl_profile", "kernel_runtime", "rdma_dropins"]
    assert (root / "sys/kernel/mm/transparent_hugepage/enabled").read_text().strip() == "never"
    assert written(root) == [
        "etc/modules-load.d/nvidia-peermem.conf",
        "etc/security/limits.d/90-gpuops-memlock.conf",
        "etc/sysctl.d/90-gpuops-tuning.conf",
        "etc/systemd/system.conf.d/90-gpuops-memlock.conf",
        "etc/tmpfiles.d/gpuops-kernel-runtime.conf",
    ]
    # Diff mode: every part's entries, in the parts' order; no part keeps its own diff.
    headers = [entry["after_header"] for entry in first["diff"]]
    assert headers[0].endswith("etc/sysctl.d/90-gpuops-tuning.conf")
    assert headers[-1].endswith("etc/modules-load.d/nvidia-peermem.conf")
    assert any(header.endswith("etc/tmpfiles.d/gpuops-kernel-runtime.conf") for header in headers)
    assert all("diff" not in result for result in first["results"].values())
    second = run_module(node_tuning, parts(root))
    assert second["changed"] is False
    assert second["changed_parts"] == []
    assert second["results"]["sysctl_profile"]["file_changed"] is False


def test_each_part_returns_what_its_module_returns(tmp_path, run_module):
    combined_root, alone_root = tmp_path / "combined", tmp_path / "alone"
    build("one_socket", combined_root)
    build("one_socket", alone_root)
    combined = run_module(node_tuning, parts(combined_root))["results"]
    for name, module in (
        ("sysctl_profile", sysctl_profile),
        ("kernel_runtime", kernel_runtime),
        ("rdma_dropins", rdma_dropins),
    ):
        alone = run_module(module, parts(alone_root)[name])
        alone.pop("_commands", None)
        alone.pop("_failed", None)
        expected = {key: value for key, value in alone.items() if key != "diff"}
        text = repr(expected).replace(str(alone_root), str(combined_root))
        assert repr(combined[name]) == text, name


def test_check_mode_writes_nothing(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    result = run_module(node_tuning, parts(root), check_mode=True, diff=True)
    assert result["changed_parts"] == ["sysctl_profile", "kernel_runtime", "rdma_dropins"]
    assert len(result["diff"]) >= 5
    assert not (root / "etc").exists() or written(root) == []
    assert (root / "sys/kernel/mm/transparent_hugepage/enabled").read_text().strip() != "never"


def test_a_bad_option_of_any_part_fails_before_the_first_part_runs(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    bad = parts(root)
    bad["rdma_dropins"]["peermem"] = "perhaps"
    bad["kernel_runtime"]["thp_enable"] = "never"
    result = run_module(node_tuning, bad)
    assert result["_failed"] is True
    assert "kernel_runtime: thp_enable. Supported parameters include" in result["msg"]
    assert "rdma_dropins: argument 'peermem' is of type" in result["msg"]
    assert result["msg"].endswith("Nothing was changed.")
    assert not (root / "etc").exists() or written(root) == []


def test_a_failing_part_is_named_with_the_parts_that_ran_before_it(make_tree, run_module):
    root, _unused = make_tree("one_socket")
    failing = parts(root)
    failing["kernel_runtime"]["replaces"] = ["gpuops-kernel-runtime"]
    result = run_module(node_tuning, failing)
    assert result["_failed"] is True
    assert result["failed_part"] == "kernel_runtime"
    assert result["msg"].startswith("kernel_runtime: replaces lists 'gpuops-kernel-runtime'")
    assert list(result["results"]) == ["sysctl_profile"]
    assert result["changed_parts"] == ["sysctl_profile"]
    assert result["changed"] is True
    # rdma_dropins, after the failed part, did not run.
    assert not (root / "etc/modules-load.d/nvidia-peermem.conf").exists()


def test_no_part_asked_changes_nothing(run_module):
    result = run_module(node_tuning, {})
    assert result == {"changed": False, "changed_parts": [], "results": {}, "_commands": [], "_failed": False}


@pytest.mark.parametrize("name", list(node_tuning.PARTS))
def test_every_part_is_documented(name):
    assert f"  {name}:\n    description: The options of M(gpuops.cluster.{name})." in node_tuning.DOCUMENTATION
