"""module_parts: a part's options checked against its module's rules; its failures raised, not exited."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.module_parts import Part, PartFailed, validate

KWARGS = {
    "argument_spec": {"size": {"type": "int", "default": 4}, "mode": {"type": "str", "choices": ["a", "b"]}},
    "mutually_exclusive": [("size", "mode")],
    "supports_check_mode": True,
}


class Execution:
    """The one AnsibleModule of the execution, as a part sees it."""

    check_mode = True
    _diff = False

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        assert required is False, "a part never lets the execution's module fail on a missing binary"
        return "/usr/bin/" + arg if arg == "present" else None

    def fail_json(self, **kwargs):  # pragma: no cover - must not be reached
        raise AssertionError("the execution's fail_json was called")


def test_validate_applies_defaults_and_types():
    params, errors = validate(KWARGS, {"size": "8"})
    assert errors == []
    assert params == {"size": 8, "mode": None}


def test_validate_reports_every_problem_with_the_modules_rules():
    _params, errors = validate(KWARGS, {"size": 2, "mode": "c", "sise": 3})
    assert any("value of mode must be one of: a, b, got: c" in error for error in errors)
    assert any("mutually exclusive: size|mode" in error for error in errors)
    assert any(error.startswith("sise.") for error in errors)


def test_part_has_its_own_params_and_the_executions_modes():
    part = Part(Execution(), {"size": 8})
    assert part.params == {"size": 8}
    assert part.check_mode is True
    assert part._diff is False


def test_part_failures_are_raised_with_their_keys():
    with pytest.raises(PartFailed) as failure:
        Part(Execution(), {}).fail_json(msg="no disk", rc=2, cmd=["lsblk"])
    assert failure.value.msg == "no disk"
    assert failure.value.result == {"rc": 2, "cmd": ["lsblk"]}


def test_missing_required_binary_fails_the_part_only():
    part = Part(Execution(), {})
    assert part.get_bin_path("present", required=True) == "/usr/bin/present"
    assert part.get_bin_path("setpci") is None
    with pytest.raises(PartFailed, match="Failed to find required executable 'setpci' on the node"):
        part.get_bin_path("setpci", required=True)
