import os
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.filter.variables import unknown_variables as unknown_filter
from ansible_collections.gpuops.cluster.plugins.module_utils import variable_registry

KNOWN = {"gpuops_": {"gpuops_stack", "gpuops_gpu"}, "nvidia_stack_": {"nvidia_stack_repo_url"}}


def test_typo_gets_closest_known_name():
    problems = variable_registry.unknown_variables(["gpuops_stak", "gpuops_stack"], KNOWN)
    assert problems == [{"name": "gpuops_stak", "suggestion": "gpuops_stack"}]


def test_role_prefix_is_checked_against_its_argument_spec():
    problems = variable_registry.unknown_variables(["nvidia_stack_repo_ulr", "nvidia_stack_repo_url"], KNOWN)
    assert problems == [{"name": "nvidia_stack_repo_ulr", "suggestion": "nvidia_stack_repo_url"}]


def test_unmanaged_names_are_ignored():
    assert variable_registry.unknown_variables(["ansible_host", "stack", "my_gpuops_x"], KNOWN) == []


def test_far_name_has_no_suggestion_and_message_says_where_to_look():
    (problem,) = variable_registry.unknown_variables(["gpuops_completely_else"], KNOWN)
    assert problem["suggestion"] is None
    assert "gpuops_variables.yml" in variable_registry.describe(problem)


def test_shipped_registry_knows_the_stack_variables():
    known = variable_registry.load_known_variables()
    assert {"gpuops_stack", "gpuops_gpu", "gpuops_os", "gpuops_variables"} <= known["gpuops_"]


def test_role_argument_specs_are_read(tmp_path: Path):
    (tmp_path / "playbooks" / "vars").mkdir(parents=True)
    (tmp_path / "playbooks" / "vars" / "gpuops_variables.yml").write_text("gpuops_variables:\n  gpuops_stack: {}\n")
    spec_dir = tmp_path / "roles" / "demo" / "meta"
    spec_dir.mkdir(parents=True)
    (spec_dir / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      demo_enabled: {type: bool}\n"
    )
    known = variable_registry.load_known_variables(tmp_path)
    assert known["demo_"] == {"demo_enabled"}
    assert variable_registry.unknown_variables(["demo_enabeld"], known)[0]["suggestion"] == "demo_enabled"


def test_filter_adds_message_and_accepts_lists():
    result = unknown_filter(["gpuops_gpuu"], known={"gpuops_": ["gpuops_gpu"]})
    assert result == [
        {
            "name": "gpuops_gpuu",
            "suggestion": "gpuops_gpu",
            "message": "unknown variable gpuops_gpuu: did you mean gpuops_gpu?",
        }
    ]


def test_filter_rejects_bad_known():
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.unknown_variables"):
        unknown_filter(["gpuops_x"], known=["not", "a", "mapping"])


def test_facts_roles_set_for_later_plays_are_known():
    known = variable_registry.load_known_variables()
    assert "nvidia_stack_report" in known["nvidia_stack_"]
    assert "kernel_tuning_report" in known["kernel_tuning_"]


def test_registry_is_parsed_once_per_file_version(tmp_path: Path):
    registry = tmp_path / "playbooks" / "vars" / "gpuops_variables.yml"
    registry.parent.mkdir(parents=True)
    registry.write_text("gpuops_variables:\n  gpuops_stack: {}\n")
    (tmp_path / "roles").mkdir()
    first = variable_registry.load_known_variables(tmp_path)
    assert variable_registry._read_yaml(registry) is variable_registry._read_yaml(registry)
    registry.write_text("gpuops_variables:\n  gpuops_stack: {}\n  gpuops_gpu: {}\n")
    os.utime(registry, ns=(registry.stat().st_atime_ns, registry.stat().st_mtime_ns + 1_000_000))
    assert variable_registry.load_known_variables(tmp_path)["gpuops_"] == first["gpuops_"] | {"gpuops_gpu"}


def test_a_removed_alias_of_a_rolling_upgrade_setting_names_the_setting():
    known = variable_registry.load_known_variables()
    problems = variable_registry.unknown_variables(["rolling_upgrade_barrier", "rolling_upgrade_windw"], known)
    assert problems == [
        {"name": "rolling_upgrade_barrier", "suggestion": "gpuops_upgrade_barrier"},
        {"name": "rolling_upgrade_windw", "suggestion": "rolling_upgrade_window_entry"},
    ]
