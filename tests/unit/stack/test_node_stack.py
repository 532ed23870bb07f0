"""node_stack: the nouveau blacklist and the pins in one execution, each part with its module's own result."""

import os

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import node_stack, package_pin

from tests.unit.stack.test_package_pin_module import PACKAGES, PINS


@pytest.fixture
def options(tmp_path):
    for directory in ("preferences.d", "apt.conf.d"):
        (tmp_path / directory).mkdir()
    pin = {
        "packages": PACKAGES,
        "pins": PINS,
        "preferences_path": str(tmp_path / "preferences.d" / "gpuops-nvidia.pref"),
        "unattended_upgrades_path": str(tmp_path / "apt.conf.d" / "51gpuops-nvidia-blacklist"),
    }
    return {"modprobe_blacklist": {"root": str(tmp_path)}, "package_pin": pin}


def test_blacklist_then_pins_in_one_call_then_nothing_to_do(run_module, node, options, tmp_path):
    first = run_module(node_stack.main, options, diff=True)
    assert first["changed_parts"] == ["modprobe_blacklist", "package_pin"]
    assert (tmp_path / "etc/modprobe.d/gpuops-blacklist-nouveau.conf").read_text().endswith("modeset=0\n")
    assert first["results"]["package_pin"]["held"] == ["libnccl2", "nvidia-driver-550", "nvidia-fabricmanager-550"]
    assert first["diff"][0]["after_header"].endswith("gpuops-blacklist-nouveau.conf")
    assert len(first["diff"]) > 1
    node.calls.clear()
    again = run_module(node_stack.main, options)
    assert again["changed"] is False
    assert again["changed_parts"] == []
    assert node.calls == [["/usr/bin/apt-mark", "showhold"]]


def test_the_pin_part_returns_what_package_pin_returns(run_module, node, options):
    combined = run_module(node_stack.main, options)["results"]["package_pin"]
    node.held = set()
    for path in (options["package_pin"]["preferences_path"], options["package_pin"]["unattended_upgrades_path"]):
        os.remove(path)
    alone = run_module(package_pin.main, options["package_pin"])
    assert combined == alone


def test_check_mode_writes_nothing(run_module, node, options, tmp_path):
    result = run_module(node_stack.main, options, check=True)
    assert result["changed_parts"] == ["modprobe_blacklist", "package_pin"]
    assert not (tmp_path / "etc").exists()
    assert node.held == set()


def test_only_the_parts_asked_run(run_module, node, options, tmp_path):
    result = run_module(node_stack.main, {"modprobe_blacklist": options["modprobe_blacklist"]})
    assert list(result["results"]) == ["modprobe_blacklist"]
    assert node.calls == []


def test_a_bad_pin_option_changes_nothing(run_module, node, options, tmp_path):
    options["package_pin"]["priority"] = "high"
    with pytest.raises(run_module.Fail) as failed:
        run_module(node_stack.main, options)
    failure = failed.value.result
    assert "package_pin: argument 'priority' is of type" in failure["msg"]
    assert not (tmp_path / "etc").exists()


def test_a_failing_pin_is_named_after_the_blacklist_ran(run_module, node, options, tmp_path):
    node.fail["apt-mark hold"] = (100, "", "E: Unable to locate package nvidia-driver-550")
    with pytest.raises(run_module.Fail) as failed:
        run_module(node_stack.main, options)
    failure = failed.value.result
    assert failure["failed_part"] == "package_pin"
    assert failure["msg"].startswith("package_pin: could not run apt-mark hold")
    assert failure["changed_parts"] == ["modprobe_blacklist"]
    assert failure["rc"] == 100
