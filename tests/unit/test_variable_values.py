"""Values of the collection's variables, checked against the registry and the roles' argument specs."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import variable_registry, variable_values
from ansible_collections.gpuops.cluster.plugins.module_utils.variable_values import check, problems, show

SPECS = variable_registry.load_specs()


def one(name, value, **others):
    """The problems of ``name`` set to ``value`` (with ``others`` set too), by the shipped specs."""
    return [p for p in problems({name: value, **others}, SPECS) if p.startswith(name)]


def test_specs_come_from_argument_specs_and_registry():
    # type and choices of a role variable: its argument spec
    assert SPECS["kernel_tuning_thp_mode"] == {"type": "str", "choices": ["always", "madvise", "never"]}
    # min of a role variable: the registry's role_variable_rules
    assert SPECS["nvidia_stack_pin_priority"] == {"type": "int", "min": 1001}
    # a collection variable: the registry alone
    assert SPECS["gpuops_reboot"] == {"type": "str", "choices": ["auto", "never", "always"]}


def test_every_registry_format_is_known():
    formats = {spec["format"] for spec in SPECS.values() if "format" in spec}
    assert formats <= set(variable_values.FORMATS)
    assert {"cpulist", "kernel_arguments", "repository_url", "repositories"} <= formats


def test_a_rule_for_a_variable_no_role_has_is_refused(tmp_path):
    (tmp_path / "playbooks" / "vars").mkdir(parents=True)
    (tmp_path / "playbooks" / "vars" / "gpuops_variables.yml").write_text(
        "role_variable_rules:\n  demo_gone: {min: 1}\ngpuops_variables: {}\n"
    )
    (tmp_path / "roles" / "demo" / "meta").mkdir(parents=True)
    (tmp_path / "roles" / "demo" / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      demo_count: {type: int}\n"
    )
    with pytest.raises(ValueError, match="role_variable_rules names demo_gone"):
        variable_registry.load_specs(tmp_path)


def test_every_role_default_passes_its_own_checks():
    import yaml

    for defaults in sorted(variable_registry.COLLECTION_ROOT.glob("roles/*/defaults/main.yml")):
        values = yaml.safe_load(defaults.read_text())
        plain = {name: value for name, value in values.items() if not (isinstance(value, str) and "{{" in value)}
        assert problems(plain, SPECS) == [], defaults


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("gpuops_reboot", "sometimes", "gpuops_reboot is 'sometimes'; set one of: auto, never, always"),
        ("nvidia_stack_pin_priority", 500, "nvidia_stack_pin_priority is 500; set a whole number, at least 1001"),
        ("kernel_tuning_hugepages", -1, "kernel_tuning_hugepages is -1; set a whole number, at least 0"),
        ("kernel_tuning_thp_mode", "on", "kernel_tuning_thp_mode is 'on'; set one of: always, madvise, never"),
        ("kernel_tuning_thp_mode", True, "kernel_tuning_thp_mode is true; set one of: always, madvise, never"),
        (
            "kernel_tuning_profile",
            "trainig",
            "kernel_tuning_profile is 'trainig'; set one of: training, inference, none",
        ),
        ("gpuops_health_level", "full", "gpuops_health_level is 'full'; set one of: quick, standard, extended"),
        (
            "gpuops_health_expected_gpu_count",
            "eight",
            "gpuops_health_expected_gpu_count is 'eight'; set a whole number",
        ),
        (
            "gpuops_health_expected_gpu_count",
            0,
            "gpuops_health_expected_gpu_count is 0; set a whole number, at least 1",
        ),
        ("gpuops_upgrade_canary_soak_seconds", True, "gpuops_upgrade_canary_soak_seconds is true; set a whole number"),
        (
            "gpuops_validate",
            ["stack", "upgrde"],
            "gpuops_validate has 'upgrde'; every item must be one of: stack, upgrade",
        ),
        (
            "nvidia_stack_extra_repositories",
            ["x"],
            "nvidia_stack_extra_repositories has the item 'x'; every item must be a mapping",
        ),
        # a unit name the upgrade stops, an InfiniBand port, a check name: each item a string, refused before any host
        (
            "gpuops_upgrade_stop_services",
            ["nvidia-dcgm", {"name": "x"}],
            "gpuops_upgrade_stop_services has the item {name: 'x'}; every item must be a string",
        ),
        (
            "gpuops_health_skip_checks",
            [["xid"]],
            "gpuops_health_skip_checks has the item ['xid']; every item must be a string",
        ),
        (
            "gpuops_health_expected_ib_ports",
            [{"mlx5_0": 1}],
            "gpuops_health_expected_ib_ports has the item {mlx5_0: 1}; every item must be a string",
        ),
    ],
)
def test_type_choices_and_range(name, value, expected):
    assert one(name, value) == [expected]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("gpuops_reboot", "never"),
        ("nvidia_stack_pin_priority", "1001"),  # -e gives strings: converted as role validation does
        ("kernel_tuning_hugepages", 0),
        ("gpuops_health_expected_gpu_count", "8"),
        ("kernel_tuning_irq_housekeeping_cpus", "0-3,8,10-11"),
        ("kernel_tuning_irq_housekeeping_cpus", ""),
        ("kernel_tuning_cmdline_extra_args", ["iommu=pt", "nokaslr", "hugepagesz=1G"]),
        ("kernel_tuning_memlock_limit", "unlimited"),
        ("kernel_tuning_memlock_limit", "1048576"),
        ("kernel_tuning_hugepages_per_node", {0: 1024, "1": 0}),
        ("nvidia_stack_repo_url", "https://mirror.example.com/cuda/"),
        ("nvidia_stack_repo_key_url", ""),  # empty: NVIDIA's key in the repository
        ("nvidia_stack_initramfs_command", ["/usr/bin/dracut", "-f"]),
        ("nvidia_stack_kernel_headers", True),
        ("gpuops_stack", {"driver": "580", "cuda": "13.0"}),
    ],
)
def test_good_values_pass(name, value):
    assert one(name, value) == []


def test_cpulist_must_parse():
    (found,) = one("kernel_tuning_irq_housekeeping_cpus", "0-")
    assert found.startswith("kernel_tuning_irq_housekeeping_cpus is '0-': not a CPU list")
    assert one("kernel_tuning_irq_housekeeping_cpus", "3-1")


def test_kernel_arguments_one_per_item_without_shell_syntax():
    (found,) = one("kernel_tuning_cmdline_extra_args", "iommu=pt nokaslr")
    assert "a single string; give a list with one kernel argument per item, e.g. ['iommu=pt', 'nokaslr']" in found
    for bad in (['dyndbg="x"'], ["quiet;reboot"], ["a b"]):
        (found,) = one("kernel_tuning_cmdline_args", bad)
        assert "holds whitespace, quotes or shell syntax" in found


def test_numa_counts_and_memlock():
    assert one("kernel_tuning_hugepages_per_node", {"node0": 10})
    assert one("kernel_tuning_hugepages_per_node", {0: -1})
    assert one("kernel_tuning_memlock_limit", "lots") == [
        "kernel_tuning_memlock_limit is 'lots': set unlimited or a number of kB greater than 0"
    ]


def test_http_urls_need_the_explicit_switch():
    url = "http://repo.lab/cuda/"
    (found,) = one("nvidia_stack_repo_url", url)
    assert "a plain http:// URL" in found
    assert "nvidia_stack_repo_allow_http: true" in found
    assert one("nvidia_stack_repo_url", url, nvidia_stack_repo_allow_http=True) == []
    assert one("nvidia_stack_repo_base_url", "ftp://mirror/") == [
        "nvidia_stack_repo_base_url is 'ftp://mirror/': not an https:// URL"
    ]


def test_extra_repositories_need_a_name_and_a_signing_key():
    (found,) = one("nvidia_stack_extra_repositories", [{"name": "dcgm", "url": "https://m/dcgm/"}])
    assert "item 0 (dcgm): key_url is empty" in found
    (found,) = one("nvidia_stack_extra_repositories", [{"url": "https://m/", "key_url": "http://m/key"}])
    assert "item 0 (no name) has no name" in found
    assert "item 0 (no name): key_url is a plain http:// URL" in found


def test_initramfs_command_starts_with_an_absolute_path():
    (found,) = one("nvidia_stack_initramfs_command", ["dracut", "-f"])
    assert "first item is an absolute path" in found


def test_unset_and_unknown_names_are_not_checked_here():
    assert problems({"gpuops_reboot": None, "gpuops_not_a_variable": 3, "ansible_host": "x"}, SPECS) == []


def test_show_writes_values_as_yaml_does_never_a_class_name():
    class Tagged(str):
        pass

    assert show(Tagged("on")) == "'on'"
    assert show([True, None, {"a": 1}]) == "[true, null, {a: 1}]"
    assert check("x", Tagged("eight"), {"type": "int"}) == ["x is 'eight'; set a whole number"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"temperature_wran": 80}, "unknown temperature_wran (known: ecc_aggregate_uncorrectable"),
        ({"temperature_warn": "hot"}, "temperature_warn is 'hot', not an integer"),
        ({"nvlink_errors": -1}, "nvlink_errors is -1: a limit is 0 or more"),
    ],
)
def test_health_thresholds_take_only_the_tables_names_and_numbers(value, problem):
    (found,) = one("gpuops_health_thresholds", value)
    assert problem in found
    assert one("gpuops_health_thresholds", {"temperature_warn": 80, "temperature_fail": None}) == []


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"gpu0": {"width": 16, "gen": 5}}, "'gpu0' is not a PCI bus id with {width, gen}"),
        ({"0000:18:00.0": 16}, "is not a PCI bus id with {width, gen}"),
        ({"0000:18:00.0": {"width": "x16"}}, "0000:18:00.0 width is 'x16', not a whole number of at least 1"),
        ({"0000:18:00.0": {"width": 16, "speed": 5}}, "0000:18:00.0 has speed; give only width and gen"),
    ],
)
def test_a_pcie_baseline_is_bus_ids_with_width_and_gen(value, problem):
    (found,) = one("gpuops_health_pcie_baseline", value)
    assert problem in found
    assert one("gpuops_health_pcie_baseline", {"00000000:18:00.0": {"width": 16, "gen": None}}) == []


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("gpuops_health_expected_nvlinks", "eighteen", "gpuops_health_expected_nvlinks is 'eighteen'; set a whole"),
        ("gpuops_health_expected_nvlinks", -1, "gpuops_health_expected_nvlinks is -1; set a whole number, at least 0"),
        (
            "gpuops_health_expected_pcie_width",
            0,
            "gpuops_health_expected_pcie_width is 0; set a whole number, at least",
        ),
        ("gpuops_health_expected_pcie_gen", 0, "gpuops_health_expected_pcie_gen is 0; set a whole number, at least 1"),
    ],
)
def test_the_platform_numbers_are_checked(name, value, problem):
    (found,) = one(name, value)
    assert found.startswith(problem)
    assert one(name, 1) == []
