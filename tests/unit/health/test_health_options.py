"""health_options: the gpuops_health_* settings as gpu_health options, one table for every caller."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuops.cluster.plugins.lookup.health_options import LookupModule
from ansible_collections.gpuops.cluster.plugins.module_utils import variable_registry
from ansible_collections.gpuops.cluster.plugins.module_utils.health import health_options, node_command
from ansible_collections.gpuops.cluster.plugins.modules import gpu_health


def test_every_option_is_a_gpu_health_option_and_a_registered_setting():
    spec = gpu_health.argument_spec()
    known = variable_registry.load_known_variables()["gpuops_"]
    for option in health_options.OPTIONS:
        assert option in spec, option
        assert health_options.variable(option) in known, option


def test_the_node_command_takes_every_option_but_those_its_role_leaves_out():
    left_out = {"since", "settle_timeout", "prometheus_textfile"}  # roles/gpu_healthcheck/vars/main.yml
    assert set(health_options.OPTIONS) - left_out <= set(node_command.CONFIG_DEFAULTS)


def test_set_values_become_options_null_and_other_variables_do_not():
    variables = {
        "gpuops_health_expected_gpu_count": 8,
        "gpuops_health_expected_ib_port_count": 4,
        "gpuops_health_since": None,
        "gpuops_health_level": "standard",  # the caller's own, not in the table
        "gpuops_target_hosts": "gpu_nodes",
    }
    defaults = {"settle_timeout": 300}  # the gate's wait, when unset
    assert health_options.health_options(variables) == {
        "expected_gpu_count": 8,
        "expected_ib_port_count": 4,
        **defaults,
    }
    assert health_options.health_options(variables, ["expected_gpu_count", "settle_timeout"]) == {
        "expected_ib_port_count": 4
    }
    assert health_options.health_options({"gpuops_health_settle_timeout": 0}, ["since"]) == {"settle_timeout": 0}


@pytest.mark.parametrize(
    ("variables", "exclude", "message"),
    [
        ({}, ["settle_timout"], "exclude names settle_timout, not health options; known: expected_gpu_count"),
        ([], (), "takes the host's variables as a mapping"),
    ],
)
def test_bad_input_is_refused(variables, exclude, message):
    with pytest.raises(ValueError, match=message):
        health_options.health_options(variables, exclude)


def test_the_lookup_templates_only_the_health_settings():
    variables = {
        "gpuops_health_expected_gpu_count": trust_as_template("{{ 4 * 2 }}"),
        "gpuops_health_expected_ib_ports": ["mlx5_0", "mlx5_1"],
        "gpuops_health_settle_timeout": 60,
        "unrelated": trust_as_template("{{ undefined_variable_here }}"),  # never templated
    }
    loader = DataLoader()
    lookup = LookupModule(loader=loader, templar=Templar(loader, variables))
    assert lookup.run([], variables, exclude=["settle_timeout"]) == [
        {"expected_gpu_count": 8, "expected_ib_ports": ["mlx5_0", "mlx5_1"]}
    ]


def test_the_lookup_refuses_terms_and_unknown_keywords():
    lookup = LookupModule(loader=DataLoader(), templar=Templar(DataLoader(), {}))
    with pytest.raises(AnsibleLookupError, match="takes no terms and only exclude"):
        lookup.run([], {}, exlude=["since"])


PLATFORM = {
    "gpuops_health_expected_nvlinks": 0,
    "gpuops_health_expected_pcie_width": 8,
    "gpuops_health_expected_pcie_gen": 4,
    "gpuops_health_pcie_baseline": {"0000:18:00.0": {"width": 8, "gen": 4}},
}


def test_the_platform_settings_reach_the_module_the_gate_and_the_node_command():
    """What the platform gives is a gpuops_health_* setting (issue 26): every caller of the table gets it."""
    expected = {name[len(health_options.PREFIX) :]: value for name, value in PLATFORM.items()}
    assert health_options.health_options(PLATFORM, ["settle_timeout"]) == expected  # playbooks/health_check.yml
    gate = ["expected_driver_version", "prometheus_textfile"]  # roles/rolling_upgrade/vars
    assert health_options.health_options(PLATFORM, gate) == {**expected, "settle_timeout": 300}
    command = health_options.health_options(PLATFORM, ["since", "settle_timeout", "prometheus_textfile"])
    assert command == expected  # roles/gpu_healthcheck/vars/main.yml
    assert set(command) <= set(node_command.CONFIG_DEFAULTS)
    judged = node_command.evaluate_options(node_command.load_config(None, command))  # checked key by key
    assert {key: judged[key] for key in command} == expected
    loader = DataLoader()
    lookup = LookupModule(loader=loader, templar=Templar(loader, PLATFORM))
    assert lookup.run([], PLATFORM, exclude=["settle_timeout"]) == [expected]


def test_each_documented_default_is_the_modules_and_the_node_commands():
    registry = yaml.safe_load((variable_registry.COLLECTION_ROOT / variable_registry.REGISTRY_PATH).read_text())
    entries = registry["gpuops_variables"]
    spec = gpu_health.argument_spec()
    documented = {
        option: entries[health_options.variable(option)]["default"]
        for option in health_options.OPTIONS
        if "default" in entries[health_options.variable(option)]
    }
    assert set(documented) >= {"expected_nvlinks", "expected_pcie_width", "expected_pcie_gen", "pcie_baseline"}
    assert {option: documented[option] for option in health_options.DEFAULTS} == health_options.DEFAULTS
    for option, default in documented.items():
        if option in health_options.DEFAULTS:
            continue  # the variable's own default (the gate's settle wait), not the module's: one source, above
        assert spec[option].get("default") == default, option
        assert node_command.CONFIG_DEFAULTS[option][0] == default, option


def test_the_gate_waits_the_documented_settle_timeout_unless_set():
    """The rolling upgrade's gate options: gpuops_health_settle_timeout, 300 when unset (its one source)."""
    gate = ["expected_driver_version", "prometheus_textfile"]  # roles/rolling_upgrade/vars/main.yml
    assert health_options.health_options({}, gate) == {"settle_timeout": 300}
    assert health_options.health_options({"gpuops_health_settle_timeout": None}, gate) == {"settle_timeout": 300}
    assert health_options.health_options({"gpuops_health_settle_timeout": 45}, gate) == {"settle_timeout": 45}
    assert gpu_health.argument_spec()["settle_timeout"]["default"] == 0  # a direct module call judges at once
