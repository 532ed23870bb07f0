"""kernel_tuning: defaults/main.yml and meta/argument_specs.yml describe the same variables with the same defaults."""

from __future__ import annotations

from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "kernel_tuning"


def load():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    return defaults, spec


def test_every_default_is_documented_and_prefixed():
    defaults, spec = load()
    assert sorted(set(defaults) - set(spec)) == []
    assert all(name.startswith("kernel_tuning_") for name in spec)


def test_defaults_equal_argument_spec_defaults():
    defaults, spec = load()
    for name, option in spec.items():
        if "default" in option:
            assert defaults.get(name) == option["default"], name
        else:
            assert name not in defaults, f"{name} has a default in defaults/main.yml but not in argument_specs"


def test_every_area_has_a_switch_and_profiles_share_keys():
    defaults, spec = load()
    areas = ("sysctl", "thp", "hugepages", "numa", "irq", "cmdline", "memlock", "rdma", "peermem", "governor", "acs")
    for area in areas:
        assert spec[f"kernel_tuning_{area}_enabled"]["type"] == "bool"
    profiles = defaults["kernel_tuning_profiles"]
    assert set(profiles) == set(spec["kernel_tuning_profile"]["choices"])
    keys = {frozenset(p) for p in profiles.values()}
    assert len(keys) == 1
