"""The one table of check thresholds: the evaluator's defaults, the module's spec and its documentation agree."""

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.health import node_command, thresholds
from ansible_collections.gpuops.cluster.plugins.modules import gpu_health as module


def test_the_module_spec_is_the_table():
    spec = module.argument_spec()["thresholds"]
    assert spec["options"] == thresholds.argument_spec()
    assert list(spec["options"]) == [name for name, _kind, _default in thresholds.TABLE]


def test_the_documentation_states_the_table():
    documented = yaml.safe_load(module.DOCUMENTATION)["options"]["thresholds"]["suboptions"]
    assert list(documented) == [name for name, _kind, _default in thresholds.TABLE]
    for name, kind, default in thresholds.TABLE:
        assert documented[name]["type"] == kind, name
        assert documented[name].get("default") == default, name


def test_limits_keep_the_defaults_an_operator_leaves_unset():
    merged = thresholds.limits({"temperature_warn": 80, "retired_pages": None})
    assert merged == dict(thresholds.DEFAULTS, temperature_warn=80)
    assert thresholds.limits(None) == thresholds.DEFAULTS


def test_the_node_command_accepts_the_table_keys_only(tmp_path):
    path = tmp_path / "gpu-health.json"
    path.write_text('{"thresholds": {"temperature_warn": 80}}')
    assert node_command.load_config(str(path))["thresholds"] == {"temperature_warn": 80}
    path.write_text('{"thresholds": {"temperature_warning": 80}}')
    with pytest.raises(node_command.ConfigError, match="temperature_warning"):
        node_command.load_config(str(path))


def test_nccl_busbw_minimum_by_model():
    assert thresholds.nccl_busbw_minimum([{"product_name": "NVIDIA H200"}]) == 431.0
    assert thresholds.nccl_busbw_minimum([{"product_name": "NVIDIA H100 80GB HBM3"}]) == 460.0
    assert thresholds.nccl_busbw_minimum([{"product_name": "NVIDIA L40S"}]) is None
    assert thresholds.nccl_busbw_minimum([{"product_name": "NVIDIA H100 80GB HBM3"}], 300.0) == 300.0
